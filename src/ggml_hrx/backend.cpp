// ggml-hrx: a dynamic ggml backend (GGML_BACKEND_DL) that runs ggml graphs on HRX with Loom's
// kernels. One ggml device per HRX device, GPUs first (HRX0 is the first GPU where there is
// one) and the cpu driver last; the registry, the devices and the backend (stream) objects.
// See docs/ggml_hrx.md.
#include <unistd.h>

#include <memory>
#include <vector>

#include <fmt/format.h>

#include "ggml-impl.h"
#include "ggml_hrx/context.h"
#include "ggml_hrx/graph.h"
#include "ggml_hrx/lower.h"

namespace loom::ggml_hrx {
namespace {

DeviceContext* dev_ctx(ggml_backend_dev_t d) { return static_cast<DeviceContext*>(d->context); }

// ---- backend (stream) ---------------------------------------------------------------------

struct BackendContext {
  DeviceContext* dc = nullptr;
  std::unique_ptr<GraphRunner> runner;
};

const char* backend_get_name(ggml_backend_t b) { return static_cast<BackendContext*>(b->context)->dc->name.c_str(); }

void backend_free(ggml_backend_t b) {
  delete static_cast<BackendContext*>(b->context);
  delete b;
}

ggml_status backend_graph_compute(ggml_backend_t b, ggml_cgraph* g) {
  auto* c = static_cast<BackendContext*>(b->context);
  Status s = c->runner->compute(g);
  if (!s.ok()) {
    GGML_LOG_ERROR("ggml-hrx: %s: graph_compute: %s\n", c->dc->name.c_str(), s.to_string().c_str());
    return GGML_STATUS_FAILED;
  }
  return GGML_STATUS_SUCCESS;
}

const ggml_backend_i kBackendInterface = {
    /* .get_name            = */ backend_get_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ backend_graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

ggml_guid_t backend_guid() {
  static ggml_guid guid = {0x6c, 0x6f, 0x6f, 0x6d, 0x2d, 0x68, 0x72, 0x78, 0x9a, 0x41, 0x0e, 0x57, 0x3d, 0xc2, 0x18, 0x65};
  return &guid;
}

// ---- device --------------------------------------------------------------------------------

const char* dev_get_name(ggml_backend_dev_t d) { return dev_ctx(d)->name.c_str(); }
const char* dev_get_description(ggml_backend_dev_t d) { return dev_ctx(d)->description.c_str(); }

void dev_get_memory(ggml_backend_dev_t d, size_t* free, size_t* total) {
  const hrx::DeviceProps& p = dev_ctx(d)->dev.props();
  if (p.driver == hrx::DriverKind::kCpu) {
    const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    *total = static_cast<size_t>(pages) * static_cast<size_t>(page);
    *free = static_cast<size_t>(avail) * static_cast<size_t>(page);
    return;
  }
  // HRX reports the device's size, not its free memory: ggml's fitting then sees all of it.
  *total = p.memory_bytes;
  *free = p.memory_bytes;
}

// The cpu driver is an integrated device (host memory): llama.cpp takes it by default only
// where no discrete GPU is present, and `--device HRX<n>` names it explicitly either way.
enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t d) {
  return dev_ctx(d)->dev.driver() == hrx::DriverKind::kCpu ? GGML_BACKEND_DEVICE_TYPE_IGPU : GGML_BACKEND_DEVICE_TYPE_GPU;
}

void dev_get_props(ggml_backend_dev_t d, ggml_backend_dev_props* props) {
  props->name = dev_get_name(d);
  props->description = dev_get_description(d);
  props->type = dev_get_type(d);
  props->device_id = dev_ctx(d)->id.c_str();
  dev_get_memory(d, &props->memory_free, &props->memory_total);
  props->caps = {
      /* .async                = */ false,
      /* .host_buffer          = */ false,
      /* .buffer_from_host_ptr = */ false,
      /* .events               = */ false,
      /* .mmap_support         = */ true,  // the loader maps the file and uploads with set_tensor
  };
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t d, const char*) {
  DeviceContext* dc = dev_ctx(d);
  auto runner = GraphRunner::create(*dc);
  if (!runner.ok()) {
    GGML_LOG_ERROR("ggml-hrx: %s: %s\n", dc->name.c_str(), runner.status().to_string().c_str());
    return nullptr;
  }
  auto* ctx = new BackendContext{dc, std::move(runner).value()};
  return new ggml_backend{backend_guid(), kBackendInterface, d, ctx};
}

ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t d) { return &dev_ctx(d)->buft; }

bool dev_supports_op(ggml_backend_dev_t d, const ggml_tensor* op) {
  return check_node(op, dev_ctx(d)->dev.target()).ok();
}

bool dev_supports_buft(ggml_backend_dev_t d, ggml_backend_buffer_type_t buft) { return buft == &dev_ctx(d)->buft; }

const ggml_backend_device_i kDeviceInterface = {
    /* .get_name             = */ dev_get_name,
    /* .get_description      = */ dev_get_description,
    /* .get_memory           = */ dev_get_memory,
    /* .get_type             = */ dev_get_type,
    /* .get_props            = */ dev_get_props,
    /* .init_backend         = */ dev_init_backend,
    /* .get_buffer_type      = */ dev_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ dev_supports_op,
    /* .supports_buft        = */ dev_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// ---- registry ------------------------------------------------------------------------------

struct Registry {
  ggml_backend_reg reg{};
  std::vector<std::unique_ptr<DeviceContext>> devices;
};

const char* reg_get_name(ggml_backend_reg_t) { return "HRX"; }

Registry& registry();

size_t reg_get_device_count(ggml_backend_reg_t) { return registry().devices.size(); }

ggml_backend_dev_t reg_get_device(ggml_backend_reg_t, size_t i) {
  Registry& r = registry();
  return i < r.devices.size() ? &r.devices[i]->gdev : nullptr;
}

const ggml_backend_reg_i kRegInterface = {
    /* .get_name         = */ reg_get_name,
    /* .get_device_count = */ reg_get_device_count,
    /* .get_device       = */ reg_get_device,
    /* .get_proc_address = */ nullptr,
};

std::unique_ptr<DeviceContext> make_device(const hrx::Device& dev, size_t index, ggml_backend_reg_t reg) {
  auto dc = std::make_unique<DeviceContext>();
  dc->dev = dev;
  const hrx::DeviceProps& p = dev.props();
  dc->name = fmt::format("HRX{}", index);
  dc->description = fmt::format("HRX {} ({})", p.spec, p.name);
  dc->id = "hrx:" + p.spec;
  dc->buft_name = dc->name;
  auto stream = hrx::Stream::create(dev);
  if (!stream.ok()) {
    GGML_LOG_ERROR("ggml-hrx: %s: %s; device skipped\n", p.spec.c_str(), stream.status().to_string().c_str());
    return nullptr;
  }
  dc->copy_stream = std::move(stream).value();
  dc->gdev = ggml_backend_device{kDeviceInterface, reg, dc.get()};
  dc->buft = ggml_backend_buffer_type{kBufferTypeInterface, &dc->gdev, dc.get()};
  return dc;
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // lives as long as the process: ggml keeps pointers into it
    reg->reg = ggml_backend_reg{GGML_BACKEND_API_VERSION, kRegInterface, reg};
    std::vector<hrx::Device> gpus, cpus;
    for (const hrx::Device& d : hrx::Device::enumerate())
      (d.driver() == hrx::DriverKind::kCpu ? cpus : gpus).push_back(d);
    for (const std::vector<hrx::Device>* group : {&gpus, &cpus})
      for (const hrx::Device& d : *group)
        if (auto dc = make_device(d, reg->devices.size(), &reg->reg)) reg->devices.push_back(std::move(dc));
    return reg;
  }();
  return *r;
}

ggml_backend_reg_t hrx_reg() { return &registry().reg; }

// Any machine has the cpu driver.
int hrx_score() { return 1; }

}  // namespace
}  // namespace loom::ggml_hrx

GGML_BACKEND_DL_IMPL(loom::ggml_hrx::hrx_reg)
GGML_BACKEND_DL_SCORE_IMPL(loom::ggml_hrx::hrx_score)
