// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void histogram(void* const* args, const LoomLaunchDims* dims) {
  uint8_t* const v_x = *static_cast<uint8_t* const*>(args[0]);
  int32_t* const v_counts = *static_cast<int32_t* const*>(args[1]);
  int32_t const v_n = *static_cast<int32_t const*>(args[2]);
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
        const uint8_t v_v = v_x[v_i];
        const int32_t v_bin = static_cast<int32_t>(v_v);
        const int32_t v_one = 1;
        const int32_t v_old = loom_atomic_add(v_counts + v_bin, v_one);
      }
    }
  }
}
