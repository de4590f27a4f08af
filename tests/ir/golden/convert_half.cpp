// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void convert_half(void* const* args, const LoomLaunchDims* dims) {
  uint16_t* const v_bits = *static_cast<uint16_t* const*>(args[0]);
  float* const v_x = *static_cast<float* const*>(args[1]);
  float* const v_h2f = *static_cast<float* const*>(args[2]);
  uint16_t* const v_f2h = *static_cast<uint16_t* const*>(args[3]);
  uint16_t* const v_f2b = *static_cast<uint16_t* const*>(args[4]);
  int32_t const v_n = *static_cast<int32_t const*>(args[5]);
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
        const uint16_t v_b = v_bits[v_i];
        const loom_f16 v_h = loom_bitcast<loom_f16>(v_b);
        const float v_f = static_cast<float>(loom_f16_to_f32(v_h));
        v_h2f[v_i] = v_f;
        const float v_v = v_x[v_i];
        const loom_f16 v_vh = loom_f32_to_f16(static_cast<float>(v_v));
        const uint16_t v_vhb = loom_bitcast<uint16_t>(v_vh);
        v_f2h[v_i] = v_vhb;
        const loom_bf16 v_vb = loom_f32_to_bf16(static_cast<float>(v_v));
        const uint16_t v_vbb = loom_bitcast<uint16_t>(v_vb);
        v_f2b[v_i] = v_vbb;
      }
    }
  }
}
