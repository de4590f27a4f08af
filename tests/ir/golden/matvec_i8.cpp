// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void matvec_i8(void* const* args, const LoomLaunchDims* dims) {
  int8_t* const v_w = *static_cast<int8_t* const*>(args[0]);
  int8_t* const v_x = *static_cast<int8_t* const*>(args[1]);
  float* const v_sw = *static_cast<float* const*>(args[2]);
  float const v_sx = *static_cast<float const*>(args[3]);
  float* const v_y = *static_cast<float* const*>(args[4]);
  int32_t const v_rows = *static_cast<int32_t const*>(args[5]);
  int32_t const v_k = *static_cast<int32_t const*>(args[6]);
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
      const int32_t v_r = static_cast<int32_t>(v_base + v_tid);
      const bool v_in = (v_r < v_rows);
      if (v_in) {
        const int32_t v_c0 = 0;
        const int32_t v_c1 = 1;
        const int32_t v_c2 = 2;
        const int32_t v_k4 = static_cast<int32_t>(v_k >> v_c2);
        int32_t* const v_w32 = reinterpret_cast<int32_t*>(v_w);
        int32_t* const v_x32 = reinterpret_cast<int32_t*>(v_x);
        const int32_t v_first = static_cast<int32_t>(v_r * v_k4);
        int32_t* const v_wr = v_w32 + v_first;
        int32_t v_s = v_c0;
        for (int32_t v_j = v_c0; v_j < v_k4; v_j += v_c1) {
          const int32_t v_a = v_wr[v_j];
          const int32_t v_b = v_x32[v_j];
          const int32_t v_s2 = loom_dot4(v_a, v_b, v_s);
          v_s = v_s2;
        }
        const float v_f = static_cast<float>(v_s);
        const float v_scale = v_sw[v_r];
        const float v_g = static_cast<float>(v_f * v_scale);
        const float v_o = static_cast<float>(v_g * v_sx);
        v_y[v_r] = v_o;
      }
    }
  }
}
