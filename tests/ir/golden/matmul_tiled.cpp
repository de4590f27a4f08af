// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

typedef float loom_f32x4 __attribute__((vector_size(16)));

extern "C" void matmul_tiled(void* const* args, const LoomLaunchDims* dims) {
  float* const v_a = *static_cast<float* const*>(args[0]);
  float* const v_b = *static_cast<float* const*>(args[1]);
  float* const v_c = *static_cast<float* const*>(args[2]);
  int32_t const v_m = *static_cast<int32_t const*>(args[3]);
  int32_t const v_n = *static_cast<int32_t const*>(args[4]);
  int32_t const v_k = *static_cast<int32_t const*>(args[5]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      const int32_t v_tx = static_cast<int32_t>(tx);
      const int32_t v_bx = static_cast<int32_t>(bx);
      const int32_t v_dx = static_cast<int32_t>(bdx);
      const int32_t v_ty = static_cast<int32_t>(ty);
      const int32_t v_by = static_cast<int32_t>(by);
      const int32_t v_dy = static_cast<int32_t>(bdy);
      const int32_t v_c1 = 1;
      const int32_t v_c2 = 2;
      const int32_t v_c3 = 3;
      const int32_t v_c4 = 4;
      const int32_t v_gx = static_cast<int32_t>(v_bx * v_dx);
      const int32_t v_ix = static_cast<int32_t>(v_gx + v_tx);
      const int32_t v_col = static_cast<int32_t>(v_ix * v_c4);
      const int32_t v_gy = static_cast<int32_t>(v_by * v_dy);
      const int32_t v_iy = static_cast<int32_t>(v_gy + v_ty);
      const int32_t v_row = static_cast<int32_t>(v_iy * v_c4);
      const bool v_col_ok = (v_col < v_n);
      const bool v_row_ok = (v_row < v_m);
      const bool v_ok = (v_col_ok & v_row_ok);
      if (v_ok) {
        const int32_t v_row1 = static_cast<int32_t>(v_row + v_c1);
        const int32_t v_row2 = static_cast<int32_t>(v_row + v_c2);
        const int32_t v_row3 = static_cast<int32_t>(v_row + v_c3);
        const int32_t v_o0 = static_cast<int32_t>(v_row * v_k);
        const int32_t v_o1 = static_cast<int32_t>(v_row1 * v_k);
        const int32_t v_o2 = static_cast<int32_t>(v_row2 * v_k);
        const int32_t v_o3 = static_cast<int32_t>(v_row3 * v_k);
        float* const v_a0 = v_a + v_o0;
        float* const v_a1 = v_a + v_o1;
        float* const v_a2 = v_a + v_o2;
        float* const v_a3 = v_a + v_o3;
        const loom_f32x4 v_zero = {0.0f, 0.0f, 0.0f, 0.0f};
        const int32_t v_c0 = 0;
        loom_f32x4 v_s0 = v_zero;
        loom_f32x4 v_s1 = v_zero;
        loom_f32x4 v_s2 = v_zero;
        loom_f32x4 v_s3 = v_zero;
        for (int32_t v_kk = v_c0; v_kk < v_k; v_kk += v_c1) {
          const int32_t v_brow = static_cast<int32_t>(v_kk * v_n);
          const int32_t v_bi = static_cast<int32_t>(v_brow + v_col);
          const loom_f32x4 v_bv = loom_load<loom_f32x4>(v_b + v_bi);
          const float v_x0 = v_a0[v_kk];
          const float v_x1 = v_a1[v_kk];
          const float v_x2 = v_a2[v_kk];
          const float v_x3 = v_a3[v_kk];
          const loom_f32x4 v_v0 = {v_x0, v_x0, v_x0, v_x0};
          const loom_f32x4 v_v1 = {v_x1, v_x1, v_x1, v_x1};
          const loom_f32x4 v_v2 = {v_x2, v_x2, v_x2, v_x2};
          const loom_f32x4 v_v3 = {v_x3, v_x3, v_x3, v_x3};
          const loom_f32x4 v_n0 = loom_fma_v(v_v0, v_bv, v_s0);
          const loom_f32x4 v_n1 = loom_fma_v(v_v1, v_bv, v_s1);
          const loom_f32x4 v_n2 = loom_fma_v(v_v2, v_bv, v_s2);
          const loom_f32x4 v_n3 = loom_fma_v(v_v3, v_bv, v_s3);
          const loom_f32x4 next0 = v_n0;
          const loom_f32x4 next1 = v_n1;
          const loom_f32x4 next2 = v_n2;
          const loom_f32x4 next3 = v_n3;
          v_s0 = next0;
          v_s1 = next1;
          v_s2 = next2;
          v_s3 = next3;
        }
        const int32_t v_r0 = static_cast<int32_t>(v_row * v_n);
        const int32_t v_r1 = static_cast<int32_t>(v_row1 * v_n);
        const int32_t v_r2 = static_cast<int32_t>(v_row2 * v_n);
        const int32_t v_r3 = static_cast<int32_t>(v_row3 * v_n);
        const int32_t v_i0 = static_cast<int32_t>(v_r0 + v_col);
        const int32_t v_i1 = static_cast<int32_t>(v_r1 + v_col);
        const int32_t v_i2 = static_cast<int32_t>(v_r2 + v_col);
        const int32_t v_i3 = static_cast<int32_t>(v_r3 + v_col);
        loom_store(v_c + v_i0, v_s0);
        loom_store(v_c + v_i1, v_s1);
        loom_store(v_c + v_i2, v_s2);
        loom_store(v_c + v_i3, v_s3);
      }
    }
  }
}
