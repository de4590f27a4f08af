// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void vector_add(void* const* args, const LoomLaunchDims* dims) {
  float* const v_a = *static_cast<float* const*>(args[0]);
  float* const v_b = *static_cast<float* const*>(args[1]);
  float* const v_c = *static_cast<float* const*>(args[2]);
  int32_t const v_n = *static_cast<int32_t const*>(args[3]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      const int32_t v_tid = static_cast<int32_t>(tx);
      const int32_t v_bid = static_cast<int32_t>(bx);
      const int32_t v_bdim = static_cast<int32_t>(bdx);
      const int32_t v_base = static_cast<int32_t>(v_bid * v_bdim);
      const int32_t v_i = static_cast<int32_t>(v_base + v_tid);
      const bool v_in = (v_i < v_n);
      if (v_in) {
        const float v_x = v_a[v_i];
        const float v_y = v_b[v_i];
        const float v_s = static_cast<float>(v_x + v_y);
        v_c[v_i] = v_s;
      }
    }
  }
}
