// `loom tensor`: the reference quantization formats from the command line. dequant/quant convert
// raw block files to and from little-endian float32; dump writes a model's tensors as float32.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "loom/base/file.h"
#include "loom/gguf/gguf.h"
#include "loom/gguf/quant.h"

namespace loom::cli {
namespace {

using llm::GgmlType;

struct TensorOptions {
  std::string type;
  std::string in, out;
  std::string model, name, out_path;
  bool all = false;
};

Result<GgmlType> parse_type(const std::string& name) {
  auto type = llm::ggml_type_from_name(name);
  if (!type) return invalid_argument("unknown tensor type '{}' (try q4_0, q8_0, q4_K, f16 ...)", name);
  return *type;
}

std::string_view as_bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

Status run_dequant(const TensorOptions& o) {
  LOOM_ASSIGN_OR_RETURN(GgmlType type, parse_type(o.type));
  auto info = llm::ggml_type_info(static_cast<uint32_t>(type));
  LOOM_ASSIGN_OR_RETURN(std::string in, read_file(o.in));
  if (in.size() % info->block_bytes != 0)
    return invalid_argument("{}: {} bytes is not a whole number of {} blocks ({} bytes each)", o.in,
                            in.size(), info->name, info->block_bytes);
  const int64_t n = static_cast<int64_t>(in.size() / info->block_bytes) * info->block_elems;
  std::vector<float> out(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(llm::dequantize(type, in.data(), out.data(), n).with_context(o.in));
  return write_file(o.out, as_bytes(out));
}

Status run_quant(const TensorOptions& o) {
  LOOM_ASSIGN_OR_RETURN(GgmlType type, parse_type(o.type));
  if (!llm::can_quantize(type)) return unimplemented("no reference quantizer for type {}", o.type);
  LOOM_ASSIGN_OR_RETURN(std::string in, read_file(o.in));
  if (in.size() % sizeof(float) != 0)
    return invalid_argument("{}: {} bytes is not a whole number of float32 values", o.in, in.size());
  std::vector<float> src(in.size() / sizeof(float));
  std::memcpy(src.data(), in.data(), in.size());
  const int64_t n = static_cast<int64_t>(src.size());
  std::string out(llm::row_bytes(type, n), '\0');
  LOOM_RETURN_IF_ERROR(llm::quantize(type, src.data(), out.data(), n).with_context(o.in));
  return write_file(o.out, out);
}

// Dequantizes row by row: a row is the unit whose length must be a whole number of blocks.
Result<std::vector<float>> dequantize_tensor(const llm::GgufTensor& t) {
  const int64_t n = t.n_elements(), row = t.row_elems(), rows = t.n_rows();
  const size_t row_size = llm::row_bytes(t.type, row);
  if (row_size * static_cast<size_t>(rows) != t.n_bytes || (n > 0 && row_size == 0))
    return data_loss("tensor {}: {} bytes do not hold {} x {} {} values", t.name, t.n_bytes, rows, row,
                     llm::ggml_type_name(t.type));
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    Status s = llm::dequantize(t.type, t.data + r * row_size, out.data() + r * row, row);
    if (!s.ok()) return std::move(s).with_context(fmt::format("tensor {}", t.name));
  }
  return out;
}

// File name for a tensor in --all mode: names are dotted paths; '/' would escape the directory.
std::string dump_file_name(std::string name) {
  for (char& c : name)
    if (c == '/' || c == '\\') c = '_';
  return name + ".f32";
}

Status run_dump(const TensorOptions& o) {
  if (o.all == !o.name.empty())
    return invalid_argument("give either a tensor NAME or --all");
  LOOM_ASSIGN_OR_RETURN(llm::GgufFile file, llm::GgufFile::open(o.model));
  if (!o.all) {
    const llm::GgufTensor* t = file.tensor(o.name);
    if (!t) return not_found("no tensor named '{}' in {}", o.name, o.model);
    LOOM_ASSIGN_OR_RETURN(std::vector<float> v, dequantize_tensor(*t));
    return write_file(o.out_path, as_bytes(v));
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out_path, ec);
  if (ec) return invalid_argument("cannot create directory {}: {}", o.out_path, ec.message());
  for (const auto& t : file.tensors()) {
    LOOM_ASSIGN_OR_RETURN(std::vector<float> v, dequantize_tensor(t));
    const std::string path = (std::filesystem::path(o.out_path) / dump_file_name(t.name)).string();
    LOOM_RETURN_IF_ERROR(write_file(path, as_bytes(v)));
  }
  std::fprintf(stderr, "wrote %zu tensors to %s\n", file.tensors().size(), o.out_path.c_str());
  return Status();
}

LOOM_COMMAND(kTensorCommand, "tensor", "convert tensors between float32 and ggml block formats",
             [](CLI::App& sub) -> Action {
               auto o = std::make_shared<TensorOptions>();
               sub.require_subcommand(1);
               CLI::App* deq = sub.add_subcommand("dequant", "raw blocks file -> little-endian float32 file");
               deq->add_option("--type", o->type, "block type of IN (q4_0, q4_K, f16 ...)")->required();
               deq->add_option("IN", o->in, "raw blocks")->required();
               deq->add_option("OUT", o->out, "float32 output")->required();
               CLI::App* q = sub.add_subcommand("quant", "little-endian float32 file -> raw blocks file");
               q->add_option("--type", o->type, "block type to write")->required();
               q->add_option("IN", o->in, "float32 input")->required();
               q->add_option("OUT", o->out, "raw blocks output")->required();
               CLI::App* dump = sub.add_subcommand("dump", "a model's tensor(s), dequantized to float32");
               dump->add_option("-m,--model", o->model, "GGUF file")->required();
               dump->add_option("NAME", o->name, "tensor name");
               dump->add_flag("--all", o->all, "every tensor, as DIR/NAME.f32");
               dump->add_option("-o,--out", o->out_path, "output file (or directory with --all)")->required();
               return [o, deq, q, dump]() {
                 Status s = deq->parsed() ? run_dequant(*o)
                            : q->parsed() ? run_quant(*o)
                            : dump->parsed() ? run_dump(*o)
                                             : invalid_argument("missing tensor subcommand");
                 return s.ok() ? 0 : report(s);
               };
             });

}  // namespace
}  // namespace loom::cli
