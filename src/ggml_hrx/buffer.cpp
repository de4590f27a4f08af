// The buffer type of an HRX device: each ggml buffer is one hrx::Buffer, tensors keep ggml's
// layout, and tensor->data is the HRX device address (a host pointer on the cpu driver).
#include <cstring>

#include "ggml-impl.h"
#include "ggml_hrx/context.h"

namespace loom::ggml_hrx {
namespace {

struct BufferContext {
  DeviceContext* dc = nullptr;
  hrx::Buffer buf;
};

BufferContext* ctx_of(ggml_backend_buffer_t b) { return static_cast<BufferContext*>(b->context); }

uint64_t offset_in(ggml_backend_buffer_t b, const ggml_tensor* t, size_t offset) {
  return reinterpret_cast<uint64_t>(t->data) - ctx_of(b)->buf.address() + offset;
}

// A failed copy leaves a tensor that the graph would read as garbage, and these entry points
// return nothing: abort with the reason, as ggml's own device backends do.
void check(const Status& s, const char* what) {
  if (!s.ok()) GGML_ABORT("ggml-hrx: %s: %s", what, s.to_string().c_str());
}

void free_buffer(ggml_backend_buffer_t b) { delete ctx_of(b); }

void* get_base(ggml_backend_buffer_t b) { return reinterpret_cast<void*>(ctx_of(b)->buf.address()); }

void memset_tensor(ggml_backend_buffer_t b, ggml_tensor* t, uint8_t value, size_t offset, size_t size) {
  BufferContext* c = ctx_of(b);
  std::lock_guard<std::mutex> lock(c->dc->copy_mu);
  Status s = c->dc->copy_stream.memset(c->buf, offset_in(b, t, offset), value, size);
  if (s.ok()) s = c->dc->copy_stream.synchronize();
  check(s, "memset_tensor");
}

void set_tensor(ggml_backend_buffer_t b, ggml_tensor* t, const void* data, size_t offset, size_t size) {
  BufferContext* c = ctx_of(b);
  std::lock_guard<std::mutex> lock(c->dc->copy_mu);
  Status s = c->dc->copy_stream.copy_h2d(c->buf, offset_in(b, t, offset), data, size);
  if (s.ok()) s = c->dc->copy_stream.synchronize();
  check(s, "set_tensor");
}

void get_tensor(ggml_backend_buffer_t b, const ggml_tensor* t, void* data, size_t offset, size_t size) {
  BufferContext* c = ctx_of(b);
  std::lock_guard<std::mutex> lock(c->dc->copy_mu);
  Status s = c->dc->copy_stream.copy_d2h(data, c->buf, offset_in(b, t, offset), size);
  if (s.ok()) s = c->dc->copy_stream.synchronize();
  check(s, "get_tensor");
}

// Between buffers of the same HRX device; anything else goes through the host (return false).
bool cpy_tensor(ggml_backend_buffer_t b, const ggml_tensor* src, ggml_tensor* dst) {
  if (!src->buffer || !is_hrx_buffer_type(src->buffer->buft)) return false;
  BufferContext* s = ctx_of(src->buffer);
  BufferContext* d = ctx_of(b);
  if (s->dc != d->dc) return false;
  std::lock_guard<std::mutex> lock(d->dc->copy_mu);
  Status st = d->dc->copy_stream.copy_d2d(d->buf, offset_in(b, dst, 0), s->buf, offset_in(src->buffer, src, 0),
                                          ggml_nbytes(src));
  if (st.ok()) st = d->dc->copy_stream.synchronize();
  check(st, "cpy_tensor");
  return true;
}

void clear(ggml_backend_buffer_t b, uint8_t value) {
  BufferContext* c = ctx_of(b);
  std::lock_guard<std::mutex> lock(c->dc->copy_mu);
  Status s = c->dc->copy_stream.memset(c->buf, 0, value, c->buf.size());
  if (s.ok()) s = c->dc->copy_stream.synchronize();
  check(s, "clear");
}

const ggml_backend_buffer_i kBufferInterface = {
    /* .free_buffer   = */ free_buffer,
    /* .get_base      = */ get_base,
    /* .init_tensor   = */ nullptr,
    /* .memset_tensor = */ memset_tensor,
    /* .set_tensor    = */ set_tensor,
    /* .get_tensor    = */ get_tensor,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ cpy_tensor,
    /* .clear         = */ clear,
    /* .reset         = */ nullptr,
};

DeviceContext* device_of(ggml_backend_buffer_type_t buft) { return static_cast<DeviceContext*>(buft->context); }

const char* buft_get_name(ggml_backend_buffer_type_t buft) { return device_of(buft)->buft_name.c_str(); }

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
  DeviceContext* dc = device_of(buft);
  auto buf = hrx::Buffer::alloc(dc->dev, size);
  if (!buf.ok()) {
    GGML_LOG_ERROR("ggml-hrx: %s: cannot allocate %zu bytes: %s\n", dc->name.c_str(), size,
                   buf.status().to_string().c_str());
    return nullptr;
  }
  auto* c = new BufferContext{dc, std::move(buf).value()};
  return ggml_backend_buffer_init(buft, kBufferInterface, c, size);
}

// Every tensor starts on a 64-byte boundary: vector loads of the kernels stay aligned, and it
// matches the cpu driver's allocation alignment (CUDA's is 256, a multiple).
size_t buft_get_alignment(ggml_backend_buffer_type_t) { return 64; }

// The cpu driver's memory is plain host memory in ggml's layout, so the CPU backend may read
// and write it in place (no copies at graph splits).
bool buft_is_host(ggml_backend_buffer_type_t buft) { return device_of(buft)->dev.driver() == hrx::DriverKind::kCpu; }

}  // namespace

const ggml_backend_buffer_type_i kBufferTypeInterface = {
    /* .get_name       = */ buft_get_name,
    /* .alloc_buffer   = */ buft_alloc_buffer,
    /* .get_alignment  = */ buft_get_alignment,
    /* .get_max_size   = */ nullptr,
    /* .get_alloc_size = */ nullptr,
    /* .is_host        = */ buft_is_host,
};

bool is_hrx_buffer_type(ggml_backend_buffer_type_t buft) {
  return buft && buft->iface.alloc_buffer == kBufferTypeInterface.alloc_buffer;
}

DeviceContext* tensor_device(const ggml_tensor* t) {
  ggml_backend_buffer_t b = t->view_src ? t->view_src->buffer : t->buffer;
  if (!b || !is_hrx_buffer_type(b->buft) || !b->context || !t->data) return nullptr;
  return ctx_of(b)->dc;
}

}  // namespace loom::ggml_hrx
