// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void rms_norm(void* const* args, const LoomLaunchDims* dims) {
  float* const v_x = *static_cast<float* const*>(args[0]);
  const float* const v_w = *static_cast<const float* const*>(args[1]);
  float* const v_y = *static_cast<float* const*>(args[2]);
  int32_t const v_rows = *static_cast<int32_t const*>(args[3]);
  int32_t const v_n = *static_cast<int32_t const*>(args[4]);
  float const v_eps = *static_cast<float const*>(args[5]);
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
        const float v_zero = 0.0f;
        float v_acc = v_zero;
        for (int32_t v_j = v_c0; v_j < v_n; v_j += v_c1) {
          const float v_v = v_xr[v_j];
          const float v_acc2 = static_cast<float>(std::fma(v_v, v_v, v_acc));
          v_acc = v_acc2;
        }
        const float v_nf = static_cast<float>(v_n);
        const float v_mean = static_cast<float>(v_acc / v_nf);
        const float v_t = static_cast<float>(v_mean + v_eps);
        const float v_scale = static_cast<float>(1.0f / std::sqrt(v_t));
        for (int32_t v_j2 = v_c0; v_j2 < v_n; v_j2 += v_c1) {
          const float v_v2 = v_xr[v_j2];
          const float v_g = v_w[v_j2];
          const float v_u = static_cast<float>(v_v2 * v_scale);
          const float v_o = static_cast<float>(v_u * v_g);
          v_yr[v_j2] = v_o;
        }
      }
    }
  }
}
