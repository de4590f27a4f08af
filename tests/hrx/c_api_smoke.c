/* HRX from plain C: compiled as C11 by test_c_api.cpp and linked against the HRX libraries.
 * Usage: c_api_smoke SPEC [MODULE_FILE]. With a module file (a cpp shared object for "cpu", PTX
 * text for cuda, a code object for amdgpu), runs its vector_add kernel on 1000 floats. Prints "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/hrx/hrx.h"

#define CHECK(call)                                                                       \
  do {                                                                                    \
    hrx_status s_ = (call);                                                               \
    if (s_ != HRX_OK) {                                                                   \
      fprintf(stderr, "%s: %s: %s\n", #call, hrx_status_name(s_), hrx_last_error());     \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

static char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  long n;
  char* text;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = (char*)malloc((size_t)n + 1);
  if (text && fread(text, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (text) text[n] = '\0';
  if (size) *size = (size_t)n;
  fclose(f);
  return text;
}

int main(int argc, char** argv) {
  hrx_device* dev = NULL;
  hrx_device_props props;
  hrx_stream* stream = NULL;
  hrx_buffer *a = NULL, *b = NULL, *c = NULL;
  hrx_event *e0 = NULL, *e1 = NULL;
  float ha[1000], hb[1000], hc[1000], ms = -1.0f;
  unsigned char bytes[64];
  int i, n = 1000;
  if (argc < 2) return 2;

  /* Errors: a status code and a message. */
  if (hrx_device_open("no-such-device", &dev) != HRX_INVALID_ARGUMENT || strlen(hrx_last_error()) == 0) {
    fprintf(stderr, "bad spec accepted or no message\n");
    return 1;
  }
  CHECK(hrx_device_open(argv[1], &dev));
  CHECK(hrx_device_get_props(dev, &props));
  if (props.name[0] == '\0' || props.max_threads_per_block == 0) return 1;
  printf("device %s (%s, %s)\n", props.spec, props.name, props.arch);

  CHECK(hrx_stream_create(dev, &stream));
  CHECK(hrx_buffer_alloc(dev, n * sizeof(float), HRX_MEMORY_DEVICE, &a));
  CHECK(hrx_buffer_alloc(dev, n * sizeof(float), HRX_MEMORY_DEVICE, &b));
  CHECK(hrx_buffer_alloc(dev, n * sizeof(float), HRX_MEMORY_HOST_PINNED, &c));
  for (i = 0; i < n; ++i) {
    ha[i] = (float)i;
    hb[i] = (float)(3 * i);
  }
  CHECK(hrx_copy_h2d(stream, a, 0, ha, sizeof ha));
  CHECK(hrx_copy_h2d(stream, b, 0, hb, sizeof hb));
  CHECK(hrx_memset(stream, c, 0, 0x7F, 64));
  CHECK(hrx_copy_d2h(stream, bytes, c, 0, 64));
  CHECK(hrx_stream_synchronize(stream));
  for (i = 0; i < 64; ++i)
    if (bytes[i] != 0x7F) return 1;
  if (hrx_copy_d2h(stream, bytes, c, n * sizeof(float), 1) != HRX_OUT_OF_RANGE) return 1;

  if (argc >= 3) {
    hrx_module* mod = NULL;
    hrx_kernel* add = NULL;
    hrx_kernel* missing = NULL;
    hrx_launch_config cfg;
    uint64_t pa = hrx_buffer_device_address(a), pb = hrx_buffer_device_address(b), pc = hrx_buffer_device_address(c);
    int32_t count = n;
    void* args[4];
    uint32_t sizes[4] = {8, 8, 8, 4};
    args[0] = &pa;
    args[1] = &pb;
    args[2] = &pc;
    args[3] = &count;
    if (props.driver == HRX_DRIVER_CPU) {
      CHECK(hrx_module_load_shared_object(dev, argv[2], &mod));
    } else if (props.driver == HRX_DRIVER_AMDGPU) {
      size_t size = 0;
      char* elf = read_file(argv[2], &size);
      if (!elf) return 1;
      CHECK(hrx_module_load_code_object(dev, elf, size, &mod));
      free(elf);
    } else {
      char* ptx = read_file(argv[2], NULL);
      if (!ptx) return 1;
      CHECK(hrx_module_load_ptx(dev, ptx, &mod));
      free(ptx);
    }
    CHECK(hrx_kernel_get(mod, "vector_add", &add));
    if (hrx_kernel_get(mod, "nope", &missing) != HRX_NOT_FOUND) return 1;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (uint32_t)(n + 127) / 128;
    cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = 128;
    cfg.block[1] = cfg.block[2] = 1;
    CHECK(hrx_event_create(dev, &e0));
    CHECK(hrx_event_create(dev, &e1));
    CHECK(hrx_event_record(e0, stream));
    CHECK(hrx_launch(stream, add, &cfg, args, 4, sizes));
    CHECK(hrx_event_record(e1, stream));
    CHECK(hrx_copy_d2h(stream, hc, c, 0, sizeof hc));
    CHECK(hrx_stream_synchronize(stream));
    CHECK(hrx_event_elapsed_ms(e0, e1, &ms));
    for (i = 0; i < n; ++i)
      if (hc[i] != (float)(4 * i)) {
        fprintf(stderr, "c[%d] = %g, want %d\n", i, hc[i], 4 * i);
        return 1;
      }
    cfg.block[0] = 2048;
    if (hrx_launch(stream, add, &cfg, args, 4, sizes) != HRX_INVALID_ARGUMENT) return 1;
    hrx_event_destroy(e0);
    hrx_event_destroy(e1);
    hrx_module_release(mod);
    printf("vector_add ok (%.3f ms)\n", ms);
  }
  hrx_buffer_free(a);
  hrx_buffer_free(b);
  hrx_buffer_free(c);
  hrx_stream_destroy(stream);
  if (hrx_live_handles(HRX_HANDLE_BUFFER) != 0 || hrx_live_handles(HRX_HANDLE_MODULE) != 0) return 1;
  printf("ok\n");
  return 0;
}
