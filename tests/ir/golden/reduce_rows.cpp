// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

typedef float loom_f32x4 __attribute__((vector_size(16)));

extern "C" void reduce_rows(void* const* args, const LoomLaunchDims* dims) {
  float* const v_x = *static_cast<float* const*>(args[0]);
  float* const v_out = *static_cast<float* const*>(args[1]);
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
        float* const v_row = v_x + v_start;
        const loom_f32x4 v_zero = {0.0f, 0.0f, 0.0f, 0.0f};
        const int32_t v_c0 = 0;
        const int32_t v_c4 = 4;
        loom_f32x4 v_a = v_zero;
        for (int32_t v_j = v_c0; v_j < v_n; v_j += v_c4) {
          const loom_f32x4 v_v = loom_load<loom_f32x4>(v_row + v_j);
          const loom_f32x4 v_a2 = v_a + v_v;
          v_a = v_a2;
        }
        const float v_e0 = v_a[0];
        const float v_e1 = v_a[1];
        const float v_e2 = v_a[2];
        const float v_e3 = v_a[3];
        const float v_s01 = static_cast<float>(v_e0 + v_e1);
        const float v_s23 = static_cast<float>(v_e2 + v_e3);
        const float v_s = static_cast<float>(v_s01 + v_s23);
        v_out[v_r] = v_s;
      }
    }
  }
}
