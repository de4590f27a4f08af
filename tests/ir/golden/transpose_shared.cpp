// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

extern "C" void transpose_shared(void* const* args, const LoomLaunchDims* dims) {
  float* const v_in = *static_cast<float* const*>(args[0]);
  float* const v_out = *static_cast<float* const*>(args[1]);
  int32_t const v_rows = *static_cast<int32_t const*>(args[2]);
  int32_t const v_cols = *static_cast<int32_t const*>(args[3]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  if (uint64_t{bdx} * bdy * bdz > 1024) return;
  alignas(64) static thread_local float v_tile_mem[1056];
  float* const v_tile = v_tile_mem;
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    static thread_local int32_t v_bx32_spill[1024];
    static thread_local int32_t v_by32_spill[1024];
    // phase 1 of 2 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_tx = static_cast<int32_t>(tx);
      const int32_t v_ty = static_cast<int32_t>(ty);
      const int32_t v_bx = static_cast<int32_t>(bx);
      const int32_t v_by = static_cast<int32_t>(by);
      const int32_t v_c8 = 8;
      const int32_t v_c32 = 32;
      const int32_t v_c33 = 33;
      const int32_t v_bx32 = static_cast<int32_t>(v_bx * v_c32);
      v_bx32_spill[tlin] = v_bx32;
      const int32_t v_by32 = static_cast<int32_t>(v_by * v_c32);
      v_by32_spill[tlin] = v_by32;
      const int32_t v_x = static_cast<int32_t>(v_bx32 + v_tx);
      const int32_t v_y0 = static_cast<int32_t>(v_by32 + v_ty);
      const bool v_x_ok = (v_x < v_cols);
      const bool v_y_ok = (v_y0 < v_rows);
      const bool v_ok = (v_x_ok & v_y_ok);
      if (v_ok) {
        const int32_t v_yc = static_cast<int32_t>(v_y0 * v_cols);
        const int32_t v_src = static_cast<int32_t>(v_yc + v_x);
        const float v_v = v_in[v_src];
        const int32_t v_trow = static_cast<int32_t>(v_ty * v_c33);
        const int32_t v_dst = static_cast<int32_t>(v_trow + v_tx);
        v_tile[v_dst] = v_v;
      }
      const int32_t v_y = static_cast<int32_t>(v_y0 + v_c8);
      const bool v_y_ok_1 = (v_y < v_rows);
      const bool v_ok_1 = (v_x_ok & v_y_ok_1);
      if (v_ok_1) {
        const int32_t v_yc_1 = static_cast<int32_t>(v_y * v_cols);
        const int32_t v_src_1 = static_cast<int32_t>(v_yc_1 + v_x);
        const float v_v_1 = v_in[v_src_1];
        const int32_t v_ty_j = static_cast<int32_t>(v_ty + v_c8);
        const int32_t v_trow_1 = static_cast<int32_t>(v_ty_j * v_c33);
        const int32_t v_dst_1 = static_cast<int32_t>(v_trow_1 + v_tx);
        v_tile[v_dst_1] = v_v_1;
      }
      const int32_t v_j = 16;
      const int32_t v_y_1 = static_cast<int32_t>(v_y0 + v_j);
      const bool v_y_ok_2 = (v_y_1 < v_rows);
      const bool v_ok_2 = (v_x_ok & v_y_ok_2);
      if (v_ok_2) {
        const int32_t v_yc_2 = static_cast<int32_t>(v_y_1 * v_cols);
        const int32_t v_src_2 = static_cast<int32_t>(v_yc_2 + v_x);
        const float v_v_2 = v_in[v_src_2];
        const int32_t v_ty_j_1 = static_cast<int32_t>(v_ty + v_j);
        const int32_t v_trow_2 = static_cast<int32_t>(v_ty_j_1 * v_c33);
        const int32_t v_dst_2 = static_cast<int32_t>(v_trow_2 + v_tx);
        v_tile[v_dst_2] = v_v_2;
      }
      const int32_t v_j_1 = 24;
      const int32_t v_y_2 = static_cast<int32_t>(v_y0 + v_j_1);
      const bool v_y_ok_3 = (v_y_2 < v_rows);
      const bool v_ok_3 = (v_x_ok & v_y_ok_3);
      if (v_ok_3) {
        const int32_t v_yc_3 = static_cast<int32_t>(v_y_2 * v_cols);
        const int32_t v_src_3 = static_cast<int32_t>(v_yc_3 + v_x);
        const float v_v_3 = v_in[v_src_3];
        const int32_t v_ty_j_2 = static_cast<int32_t>(v_ty + v_j_1);
        const int32_t v_trow_3 = static_cast<int32_t>(v_ty_j_2 * v_c33);
        const int32_t v_dst_3 = static_cast<int32_t>(v_trow_3 + v_tx);
        v_tile[v_dst_3] = v_v_3;
      }
    }
    // phase 2 of 2 (barriers between phases)
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      [[maybe_unused]] const uint32_t tlin = (tz * bdy + ty) * bdx + tx;
      const int32_t v_tx = static_cast<int32_t>(tx);
      const int32_t v_ty = static_cast<int32_t>(ty);
      const int32_t v_c8 = 8;
      const int32_t v_c33 = 33;
      const int32_t v_bx32 = v_bx32_spill[tlin];
      const int32_t v_by32 = v_by32_spill[tlin];
      const int32_t v_j = 16;
      const int32_t v_j_1 = 24;
      const int32_t v_ox = static_cast<int32_t>(v_by32 + v_tx);
      const int32_t v_oy0 = static_cast<int32_t>(v_bx32 + v_ty);
      const bool v_ox_ok = (v_ox < v_rows);
      const bool v_oy_ok = (v_oy0 < v_cols);
      const bool v_ok2 = (v_ox_ok & v_oy_ok);
      if (v_ok2) {
        const int32_t v_trow2 = static_cast<int32_t>(v_tx * v_c33);
        const int32_t v_tsrc = static_cast<int32_t>(v_trow2 + v_ty);
        const float v_v2 = v_tile[v_tsrc];
        const int32_t v_oyr = static_cast<int32_t>(v_oy0 * v_rows);
        const int32_t v_odst = static_cast<int32_t>(v_oyr + v_ox);
        v_out[v_odst] = v_v2;
      }
      const int32_t v_oy = static_cast<int32_t>(v_oy0 + v_c8);
      const bool v_oy_ok_1 = (v_oy < v_cols);
      const bool v_ok2_1 = (v_ox_ok & v_oy_ok_1);
      if (v_ok2_1) {
        const int32_t v_trow2_1 = static_cast<int32_t>(v_tx * v_c33);
        const int32_t v_tcol = static_cast<int32_t>(v_ty + v_c8);
        const int32_t v_tsrc_1 = static_cast<int32_t>(v_trow2_1 + v_tcol);
        const float v_v2_1 = v_tile[v_tsrc_1];
        const int32_t v_oyr_1 = static_cast<int32_t>(v_oy * v_rows);
        const int32_t v_odst_1 = static_cast<int32_t>(v_oyr_1 + v_ox);
        v_out[v_odst_1] = v_v2_1;
      }
      const int32_t v_oy_1 = static_cast<int32_t>(v_oy0 + v_j);
      const bool v_oy_ok_2 = (v_oy_1 < v_cols);
      const bool v_ok2_2 = (v_ox_ok & v_oy_ok_2);
      if (v_ok2_2) {
        const int32_t v_trow2_2 = static_cast<int32_t>(v_tx * v_c33);
        const int32_t v_tcol_1 = static_cast<int32_t>(v_ty + v_j);
        const int32_t v_tsrc_2 = static_cast<int32_t>(v_trow2_2 + v_tcol_1);
        const float v_v2_2 = v_tile[v_tsrc_2];
        const int32_t v_oyr_2 = static_cast<int32_t>(v_oy_1 * v_rows);
        const int32_t v_odst_2 = static_cast<int32_t>(v_oyr_2 + v_ox);
        v_out[v_odst_2] = v_v2_2;
      }
      const int32_t v_oy_2 = static_cast<int32_t>(v_oy0 + v_j_1);
      const bool v_oy_ok_3 = (v_oy_2 < v_cols);
      const bool v_ok2_3 = (v_ox_ok & v_oy_ok_3);
      if (v_ok2_3) {
        const int32_t v_trow2_3 = static_cast<int32_t>(v_tx * v_c33);
        const int32_t v_tcol_2 = static_cast<int32_t>(v_ty + v_j_1);
        const int32_t v_tsrc_3 = static_cast<int32_t>(v_trow2_3 + v_tcol_2);
        const float v_v2_3 = v_tile[v_tsrc_3];
        const int32_t v_oyr_3 = static_cast<int32_t>(v_oy_2 * v_rows);
        const int32_t v_odst_3 = static_cast<int32_t>(v_oyr_3 + v_ox);
        v_out[v_odst_3] = v_v2_3;
      }
    }
  }
}
