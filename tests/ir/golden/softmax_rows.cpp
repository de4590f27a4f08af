// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void softmax_rows(void* const* args, const LoomLaunchDims* dims) {
  float* const v_x = *static_cast<float* const*>(args[0]);
  float* const v_y = *static_cast<float* const*>(args[1]);
  int32_t const v_rows = *static_cast<int32_t const*>(args[2]);
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
      const int32_t v_r = static_cast<int32_t>(v_base + v_tid);
      const bool v_in = (v_r < v_rows);
      if (v_in) {
        const int32_t v_start = static_cast<int32_t>(v_r * v_n);
        float* const v_xr = v_x + v_start;
        float* const v_yr = v_y + v_start;
        const int32_t v_c0 = 0;
        const int32_t v_c1 = 1;
        const float v_ninf = -INFINITY;
        float v_mx = v_ninf;
        for (int32_t v_j = v_c0; v_j < v_n; v_j += v_c1) {
          const float v_v = v_xr[v_j];
          const float v_mx2 = static_cast<float>(loom_fmax(v_mx, v_v));
          v_mx = v_mx2;
        }
        const float v_zero = 0.0f;
        float v_acc = v_zero;
        for (int32_t v_j2 = v_c0; v_j2 < v_n; v_j2 += v_c1) {
          const float v_v2 = v_xr[v_j2];
          const float v_d = static_cast<float>(v_v2 - v_mx);
          const float v_e = static_cast<float>(std::exp(v_d));
          v_yr[v_j2] = v_e;
          const float v_acc2 = static_cast<float>(v_acc + v_e);
          v_acc = v_acc2;
        }
        const float v_one = 1.0f;
        const float v_inv = static_cast<float>(v_one / v_acc);
        for (int32_t v_j3 = v_c0; v_j3 < v_n; v_j3 += v_c1) {
          const float v_e3 = v_yr[v_j3];
          const float v_p = static_cast<float>(v_e3 * v_inv);
          v_yr[v_j3] = v_p;
        }
      }
    }
  }
}
