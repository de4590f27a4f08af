// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void dynamic_shared(void* const* args, const LoomLaunchDims* dims) {
  float* const v_in = *static_cast<float* const*>(args[0]);
  float* const v_out = *static_cast<float* const*>(args[1]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  if (uint64_t{bdx} * bdy * bdz > 1024) return;
  alignas(64) static thread_local float v_sa_mem[16384];
  float* const v_sa = v_sa_mem;
  alignas(64) static thread_local int32_t v_sb_mem[8192];
  int32_t* const v_sb = v_sb_mem;
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    static thread_local int32_t v_base_spill[1024];
    // phase 1 of 2 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_tid = static_cast<int32_t>(tx);
      const int32_t v_bid = static_cast<int32_t>(bx);
      const int32_t v_c3 = 3;
      const int32_t v_c256 = 256;
      const int32_t v_c8191 = 8191;
      const int32_t v_c8192 = 8192;
      const int32_t v_c16383 = 16383;
      const int32_t v_c16384 = 16384;
      const int32_t v_base = static_cast<int32_t>(v_bid * v_c16384);
      v_base_spill[tlin] = v_base;
      for (int32_t v_j = v_tid; v_j < v_c16384; v_j += v_c256) {
        const int32_t v_src = static_cast<int32_t>(v_base + v_j);
        const float v_v = v_in[v_src];
        v_sa[v_j] = v_v;
      }
      for (int32_t v_t = v_tid; v_t < v_c8192; v_t += v_c256) {
        const int32_t v_t3 = static_cast<int32_t>(v_t * v_c3);
        v_sb[v_t] = v_t3;
      }
    }
    // phase 2 of 2 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_tid = static_cast<int32_t>(tx);
      const int32_t v_c256 = 256;
      const int32_t v_c8191 = 8191;
      const int32_t v_c8192 = 8192;
      const int32_t v_c16383 = 16383;
      const int32_t v_c16384 = 16384;
      const int32_t v_base = v_base_spill[tlin];
      for (int32_t v_i = v_tid; v_i < v_c16384; v_i += v_c256) {
        const int32_t v_r = static_cast<int32_t>(v_c16383 - v_i);
        const float v_a = v_sa[v_r];
        const int32_t v_im = static_cast<int32_t>(v_i % v_c8192);
        const int32_t v_ir = static_cast<int32_t>(v_c8191 - v_im);
        const int32_t v_n = v_sb[v_ir];
        const float v_nf = static_cast<float>(v_n);
        const float v_sum = static_cast<float>(v_a + v_nf);
        const int32_t v_dst = static_cast<int32_t>(v_base + v_i);
        v_out[v_dst] = v_sum;
      }
    }
  }
}
