// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

typedef loom_f16 loom_f16x8 __attribute__((vector_size(16)));
typedef float loom_f32x8 __attribute__((vector_size(32)));
typedef int32_t loom_i32x4 __attribute__((vector_size(16)));
typedef int32_t loom_i32x8 __attribute__((vector_size(32)));

extern "C" void dot4_lanes(void* const* args, const LoomLaunchDims* dims) {
  int32_t* const v_a = *static_cast<int32_t* const*>(args[0]);
  int32_t* const v_x = *static_cast<int32_t* const*>(args[1]);
  loom_f16* const v_h = *static_cast<loom_f16* const*>(args[2]);
  int32_t* const v_lanes = *static_cast<int32_t* const*>(args[3]);
  float* const v_f = *static_cast<float* const*>(args[4]);
  loom_f16* const v_fh = *static_cast<loom_f16* const*>(args[5]);
  int32_t const v_rows = *static_cast<int32_t const*>(args[6]);
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
        const int32_t v_c4 = 4;
        const int32_t v_c8 = 8;
        const int32_t v_c16 = 16;
        const int32_t v_r8 = static_cast<int32_t>(v_r * v_c8);
        const loom_i32x4 v_lo = loom_load<loom_i32x4>(v_a + v_r8);
        const int32_t v_r84 = static_cast<int32_t>(v_r8 + v_c4);
        const loom_i32x4 v_hi = loom_load<loom_i32x4>(v_a + v_r84);
        const loom_i32x8 v_w = __builtin_shufflevector(v_lo, v_hi, 0, 1, 2, 3, 4, 5, 6, 7);
        const loom_i32x8 v_xv = loom_load<loom_i32x8>(v_x + v_c0);
        const loom_i32x8 v_zero = {0, 0, 0, 0, 0, 0, 0, 0};
        const loom_i32x8 v_s = loom_dot4_v(v_w, v_xv, v_zero);
        const loom_i32x8 v_m = {2139062143, 2139062143, 2139062143, 2139062143, 2139062143, 2139062143, 2139062143, 2139062143};
        const loom_i32x8 v_w7 = v_w & v_m;
        const loom_i32x8 v_u = loom_dot4_u7(v_w7, v_xv, v_s);
        const int32_t v_r16 = static_cast<int32_t>(v_r * v_c16);
        loom_store(v_lanes + v_r16, v_s);
        const int32_t v_r16b = static_cast<int32_t>(v_r16 + v_c8);
        loom_store(v_lanes + v_r16b, v_u);
        const loom_f16x8 v_hv = loom_load<loom_f16x8>(v_h + v_r8);
        const loom_f32x8 v_hf = loom_f16_to_f32_v<loom_f32x8>(v_hv);
        const loom_f32x8 v_uf = __builtin_convertvector(v_u, loom_f32x8);
        const loom_f32x8 v_g = loom_fma_v(v_hf, v_uf, v_hf);
        loom_store(v_f + v_r8, v_g);
        const loom_f16x8 v_gh = loom_f32_to_f16_v<loom_f16x8>(v_g);
        loom_store(v_fh + v_r8, v_gh);
      }
    }
  }
}
