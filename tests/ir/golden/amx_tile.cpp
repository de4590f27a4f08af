// (the cpp emitter's prelude, codegen::cpp_prelude(), comes first)

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AMX_BF16__)
#error "these kernels use Intel AMX tiles: compile with -march=native on a CPU with AMX-TILE, AMX-INT8 and AMX-BF16"
#endif
namespace {
struct alignas(64) LoomAmxConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
}  // namespace

extern "C" void amx_tile(void* const* args, const LoomLaunchDims* dims) {
  int8_t* const v_a = *static_cast<int8_t* const*>(args[0]);
  int8_t* const v_b = *static_cast<int8_t* const*>(args[1]);
  int32_t* const v_c = *static_cast<int32_t* const*>(args[2]);
  loom_bf16* const v_fa = *static_cast<loom_bf16* const*>(args[3]);
  loom_bf16* const v_fb = *static_cast<loom_bf16* const*>(args[4]);
  float* const v_fc = *static_cast<float* const*>(args[5]);
  [[maybe_unused]] const uint32_t gdx = dims->grid[0], gdy = dims->grid[1], gdz = dims->grid[2];
  [[maybe_unused]] const uint32_t bdx = dims->block[0], bdy = dims->block[1], bdz = dims->block[2];
  LoomAmxConfig loom_amx_cfg = {};
  loom_amx_cfg.palette = 1;
  loom_amx_cfg.rows[0] = 16; loom_amx_cfg.colsb[0] = 64;
  loom_amx_cfg.rows[1] = 16; loom_amx_cfg.colsb[1] = 64;
  loom_amx_cfg.rows[2] = 16; loom_amx_cfg.colsb[2] = 64;
  loom_amx_cfg.rows[3] = 16; loom_amx_cfg.colsb[3] = 64;
  loom_amx_cfg.rows[4] = 16; loom_amx_cfg.colsb[4] = 64;
  loom_amx_cfg.rows[5] = 16; loom_amx_cfg.colsb[5] = 64;
  _tile_loadconfig(&loom_amx_cfg);
  for (uint64_t b = dims->block_begin; b < dims->block_end; ++b) {
    [[maybe_unused]] const uint32_t bx = static_cast<uint32_t>(b % gdx);
    [[maybe_unused]] const uint32_t by = static_cast<uint32_t>(b / gdx % gdy);
    [[maybe_unused]] const uint32_t bz = static_cast<uint32_t>(b / (uint64_t{gdx} * gdy));
    for (uint32_t tz = 0; tz < bdz; ++tz)
    for (uint32_t ty = 0; ty < bdy; ++ty)
    for (uint32_t tx = 0; tx < bdx; ++tx) {
      const int32_t v_t = static_cast<int32_t>(bx);
      const int32_t v_c64 = 64;
      const int32_t v_c256 = 256;
      const int32_t v_c512 = 512;
      const int32_t v_c1024 = 1024;
      const int32_t v_c2048 = 2048;
      const int32_t v_a0 = static_cast<int32_t>(v_t * v_c2048);
      const int32_t v_a1 = static_cast<int32_t>(v_a0 + v_c1024);
      _tile_zero(0);
      _tile_loadd(1, v_a + v_a0, static_cast<long>(v_c64));
      _tile_loadd(2, v_b + v_a0, static_cast<long>(v_c64));
      _tile_dpbssd(0, 1, 2);
      _tile_loadd(1, v_a + v_a1, static_cast<long>(v_c64));
      _tile_loadd(2, v_b + v_a1, static_cast<long>(v_c64));
      _tile_dpbssd(0, 1, 2);
      const int32_t v_ci = static_cast<int32_t>(v_t * v_c256);
      _tile_stored(0, v_c + v_ci, static_cast<long>(v_c64));
      const int32_t v_f0 = static_cast<int32_t>(v_t * v_c512);
      _tile_zero(3);
      _tile_loadd(4, v_fa + v_f0, static_cast<long>(v_c64));
      _tile_loadd(5, v_fb + v_f0, static_cast<long>(v_c64));
      _tile_dpbf16ps(3, 4, 5);
      _tile_stored(3, v_fc + v_ci, static_cast<long>(v_c64));
    }
  }
  _tile_release();
}
