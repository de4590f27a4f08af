// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void int_div_pow2(void* const* args, const LoomLaunchDims* dims) {
  int32_t* const v_a = *static_cast<int32_t* const*>(args[0]);
  uint32_t* const v_u = *static_cast<uint32_t* const*>(args[1]);
  int32_t* const v_d = *static_cast<int32_t* const*>(args[2]);
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
      const int32_t v_i = static_cast<int32_t>(v_base + v_tid);
      const bool v_in = (v_i < v_n);
      if (v_in) {
        const int32_t v_x = v_a[v_i];
        const uint32_t v_y = v_u[v_i];
        const int32_t v_c1 = 1;
        const int32_t v_c2 = 2;
        const int32_t v_c8 = 8;
        const int32_t v_cb = 1073741824;
        const uint32_t v_c16 = 16u;
        const int64_t v_c4 = 4LL;
        const int32_t v_c12 = 12;
        const int32_t v_o = static_cast<int32_t>(v_i * v_c12);
        const int32_t v_v1 = static_cast<int32_t>(v_x % v_c1);
        const int32_t v_v2 = static_cast<int32_t>(v_x / v_c2);
        const int32_t v_v3 = static_cast<int32_t>(v_x % v_c2);
        const int32_t v_v4 = static_cast<int32_t>(v_x / v_c8);
        const int32_t v_v5 = static_cast<int32_t>(v_x % v_c8);
        const int32_t v_v6 = static_cast<int32_t>(v_x / v_cb);
        const int32_t v_v7 = static_cast<int32_t>(v_x % v_cb);
        const uint32_t v_yq = static_cast<uint32_t>(v_y / v_c16);
        const uint32_t v_yr = static_cast<uint32_t>(v_y % v_c16);
        const int32_t v_v8 = loom_bitcast<int32_t>(v_yq);
        const int32_t v_v9 = loom_bitcast<int32_t>(v_yr);
        const int64_t v_xl = static_cast<int64_t>(v_x);
        const int64_t v_lq = static_cast<int64_t>(v_xl / v_c4);
        const int64_t v_lr = static_cast<int64_t>(v_xl % v_c4);
        const int32_t v_v10 = static_cast<int32_t>(v_lq);
        const int32_t v_v11 = static_cast<int32_t>(v_lr);
        v_d[v_o] = v_x;
        const int32_t v_o1 = static_cast<int32_t>(v_o + v_c1);
        v_d[v_o1] = v_v1;
        const int32_t v_o2 = static_cast<int32_t>(v_o + v_c2);
        v_d[v_o2] = v_v2;
        const int32_t v_k3 = 3;
        const int32_t v_o3 = static_cast<int32_t>(v_o + v_k3);
        v_d[v_o3] = v_v3;
        const int32_t v_k4 = 4;
        const int32_t v_o4 = static_cast<int32_t>(v_o + v_k4);
        v_d[v_o4] = v_v4;
        const int32_t v_k5 = 5;
        const int32_t v_o5 = static_cast<int32_t>(v_o + v_k5);
        v_d[v_o5] = v_v5;
        const int32_t v_k6 = 6;
        const int32_t v_o6 = static_cast<int32_t>(v_o + v_k6);
        v_d[v_o6] = v_v6;
        const int32_t v_k7 = 7;
        const int32_t v_o7 = static_cast<int32_t>(v_o + v_k7);
        v_d[v_o7] = v_v7;
        const int32_t v_o8 = static_cast<int32_t>(v_o + v_c8);
        v_d[v_o8] = v_v8;
        const int32_t v_k9 = 9;
        const int32_t v_o9 = static_cast<int32_t>(v_o + v_k9);
        v_d[v_o9] = v_v9;
        const int32_t v_k10 = 10;
        const int32_t v_o10 = static_cast<int32_t>(v_o + v_k10);
        v_d[v_o10] = v_v10;
        const int32_t v_k11 = 11;
        const int32_t v_o11 = static_cast<int32_t>(v_o + v_k11);
        v_d[v_o11] = v_v11;
      }
    }
  }
}
