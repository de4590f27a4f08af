// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

typedef float loom_f32x2 __attribute__((vector_size(8)));
typedef float loom_f32x4 __attribute__((vector_size(16)));

extern "C" void async_copy_tile(void* const* args, const LoomLaunchDims* dims) {
  float* const v_a = *static_cast<float* const*>(args[0]);
  float* const v_b = *static_cast<float* const*>(args[1]);
  float* const v_c = *static_cast<float* const*>(args[2]);
  float* const v_d = *static_cast<float* const*>(args[3]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  if (uint64_t{bdx} * bdy * bdz > 1024) return;
  alignas(64) static thread_local float v_sa_mem[256];
  float* const v_sa = v_sa_mem;
  alignas(64) static thread_local float v_sb_mem[128];
  float* const v_sb = v_sb_mem;
  alignas(64) static thread_local float v_sc_mem[64];
  float* const v_sc = v_sc_mem;
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    static thread_local int32_t v_i4_spill[1024];
    static thread_local int32_t v_i2_spill[1024];
    static thread_local int32_t v_j_spill[1024];
    static thread_local int32_t v_j4_spill[1024];
    static thread_local int32_t v_j2_spill[1024];
    static thread_local int32_t v_td_spill[1024];
    // phase 1 of 3 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_i = static_cast<int32_t>(tx);
      const int32_t v_t = static_cast<int32_t>(bx);
      const int32_t v_c2 = 2;
      const int32_t v_c4 = 4;
      const int32_t v_c63 = 63;
      const int32_t v_c64 = 64;
      const int32_t v_c128 = 128;
      const int32_t v_c256 = 256;
      const int32_t v_c384 = 384;
      const int32_t v_c448 = 448;
      const int32_t v_i4 = static_cast<int32_t>(v_i * v_c4);
      v_i4_spill[tlin] = v_i4;
      const int32_t v_i2 = static_cast<int32_t>(v_i * v_c2);
      v_i2_spill[tlin] = v_i2;
      const int32_t v_ta = static_cast<int32_t>(v_t * v_c256);
      const int32_t v_ga = static_cast<int32_t>(v_ta + v_i4);
      const loom_f32x4 v_0 = loom_load<loom_f32x4>(v_a + v_ga);
      loom_store(v_sa + v_i4, v_0);
      const int32_t v_tb = static_cast<int32_t>(v_t * v_c128);
      const int32_t v_gb = static_cast<int32_t>(v_tb + v_i2);
      const loom_f32x2 v_1 = loom_load<loom_f32x2>(v_b + v_gb);
      loom_store(v_sb + v_i2, v_1);
      const int32_t v_tc = static_cast<int32_t>(v_t * v_c64);
      const int32_t v_gc = static_cast<int32_t>(v_tc + v_i);
      const float v_2 = v_c[v_gc];
      v_sc[v_i] = v_2;
      const int32_t v_j = static_cast<int32_t>(v_c63 - v_i);
      v_j_spill[tlin] = v_j;
      const int32_t v_j4 = static_cast<int32_t>(v_j * v_c4);
      v_j4_spill[tlin] = v_j4;
      const int32_t v_j2 = static_cast<int32_t>(v_j * v_c2);
      v_j2_spill[tlin] = v_j2;
      const int32_t v_td = static_cast<int32_t>(v_t * v_c448);
      v_td_spill[tlin] = v_td;
    }
    // phase 2 of 3 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_i4 = v_i4_spill[tlin];
      const int32_t v_j4 = v_j4_spill[tlin];
      const int32_t v_td = v_td_spill[tlin];
      const loom_f32x4 v_va = loom_load<loom_f32x4>(v_sa + v_j4);
      const loom_f32x4 v_two = {2.0f, 2.0f, 2.0f, 2.0f};
      const loom_f32x4 v_wa = v_va * v_two;
      const int32_t v_da = static_cast<int32_t>(v_td + v_i4);
      loom_store(v_d + v_da, v_wa);
    }
    // phase 3 of 3 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_i = static_cast<int32_t>(tx);
      const int32_t v_c256 = 256;
      const int32_t v_c384 = 384;
      const int32_t v_i2 = v_i2_spill[tlin];
      const int32_t v_j = v_j_spill[tlin];
      const int32_t v_j2 = v_j2_spill[tlin];
      const int32_t v_td = v_td_spill[tlin];
      const loom_f32x2 v_vb = loom_load<loom_f32x2>(v_sb + v_j2);
      const int32_t v_db0 = static_cast<int32_t>(v_td + v_c256);
      const int32_t v_db = static_cast<int32_t>(v_db0 + v_i2);
      loom_store(v_d + v_db, v_vb);
      const float v_vc = v_sc[v_j];
      const int32_t v_dc0 = static_cast<int32_t>(v_td + v_c384);
      const int32_t v_dc = static_cast<int32_t>(v_dc0 + v_i);
      v_d[v_dc] = v_vc;
    }
  }
}
