// `loom perplexity`: the perplexity of a model over a text, with llama-perplexity's definition,
// and the KL divergence of its token distributions from a saved base run, so that two devices,
// kernels or quantizations can be compared by a number.
//
// As llama-perplexity: the text is tokenized with the model's BOS; it is cut into chunks of n_ctx
// tokens (the rest dropped), each evaluated from an empty cache with its first token replaced by
// BOS when the model adds one; only the second half of each chunk is scored (positions n_ctx/2 ..
// n_ctx-2 predict the next token), so every scored token has at least n_ctx/2 tokens of context.
// PPL = exp(mean negative log-likelihood); its uncertainty is the standard error of that mean
// times PPL.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "gen_flags.h"
#include "loom/base/file.h"
#include "loom/engine/engine.h"
#include "loom/engine/model_path.h"
#include "loom/model/model.h"
#include "loom/text/tokenizer.h"

namespace loom::cli {
namespace {

struct PerplexityFlags {
  GenFlags gen;
  std::string text_file;
  int64_t n_chunks = -1;
  std::string base_file;  // --kl-divergence-base
  bool kl_divergence = false;
  bool json = false;
};

// Mean and standard error of the mean from a sum, a sum of squares and a count.
struct MeanErr {
  double mean = 0, err = 0;
};
MeanErr mean_err(double sum, double sum2, double n) {
  MeanErr m;
  if (n <= 0) return m;
  m.mean = sum / n;
  const double var = sum2 / n - m.mean * m.mean;
  m.err = n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0;
  return m;
}

// log-softmax of one row of logits (double accumulation).
void log_softmax(const float* logits, int64_t n, std::vector<float>& out) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(logits[i] - lse);
}

// The base run's file: "loomlp01", then u32 n_ctx, n_vocab, n_chunk, the chunks' tokens (i32),
// then per chunk per scored position the n_vocab f32 log-probabilities.
constexpr char kMagic[9] = "loomlp01";

struct BaseFile {
  std::ifstream in;
  std::ofstream out;
  uint32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
};

Status open_base_for_reading(const std::string& path, BaseFile& b, const std::vector<int32_t>& tokens, int64_t n_ctx,
                             int64_t n_vocab, int64_t n_chunk) {
  b.in.open(path, std::ios::binary);
  if (!b.in) return not_found("--kl-divergence-base {}: cannot open it (write it first with a run without --kl-divergence)", path);
  char magic[8];
  uint32_t hdr[3];
  b.in.read(magic, 8);
  b.in.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  if (!b.in || std::memcmp(magic, kMagic, 8) != 0)
    return invalid_argument("--kl-divergence-base {}: not a loom perplexity base file", path);
  b.n_ctx = hdr[0], b.n_vocab = hdr[1], b.n_chunk = hdr[2];
  if (b.n_ctx != n_ctx || b.n_vocab != n_vocab)
    return invalid_argument("--kl-divergence-base {}: written with n_ctx {} and {} vocabulary entries; this run has {} and {}",
                            path, b.n_ctx, b.n_vocab, n_ctx, n_vocab);
  if (b.n_chunk < n_chunk) return invalid_argument("--kl-divergence-base {}: holds {} chunks, this run wants {}", path, b.n_chunk, n_chunk);
  std::vector<int32_t> base_tokens(static_cast<size_t>(b.n_chunk) * b.n_ctx);
  b.in.read(reinterpret_cast<char*>(base_tokens.data()), static_cast<std::streamsize>(base_tokens.size() * 4));
  if (!b.in) return invalid_argument("--kl-divergence-base {}: truncated", path);
  if (!std::equal(tokens.begin(), tokens.begin() + n_chunk * n_ctx, base_tokens.begin()))
    return invalid_argument("--kl-divergence-base {}: its tokens differ from this text's (another text or tokenizer)", path);
  return Status();
}

Status open_base_for_writing(const std::string& path, BaseFile& b, const std::vector<int32_t>& tokens, int64_t n_ctx,
                             int64_t n_vocab, int64_t n_chunk) {
  b.out.open(path, std::ios::binary | std::ios::trunc);
  if (!b.out) return failed_precondition("--kl-divergence-base {}: cannot write it", path);
  const uint32_t hdr[3] = {static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(n_vocab), static_cast<uint32_t>(n_chunk)};
  b.out.write(kMagic, 8);
  b.out.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
  b.out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n_chunk * n_ctx * 4));
  return b.out ? Status() : failed_precondition("--kl-divergence-base {}: write failed", path);
}

struct Sums {
  double nll = 0, nll2 = 0, count = 0;                            // this run
  double base_nll = 0, base_nll2 = 0, cross = 0;                  // the base run's, and nll * base_nll
  double kld = 0, kld2 = 0, same_top = 0, dp = 0, dp2 = 0;        // against the base
  std::vector<float> klds;
};

Status run_perplexity(PerplexityFlags& f) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(f.text_file));
  LOOM_ASSIGN_OR_RETURN(std::string path, llm::resolve_model_path(f.gen.model));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Model> model, llm::Model::load(path, !f.json));
  LOOM_ASSIGN_OR_RETURN(llm::Tokenizer tok, llm::Tokenizer::from_gguf(model->gguf()));
  LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tok.encode(text, /*add_special=*/true, /*parse_special=*/true));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<llm::Engine> engine, llm::Engine::create(*model, f.gen.engine()));
  const int64_t n_ctx = f.gen.n_ctx > 0 ? f.gen.n_ctx : engine->n_ctx(), n_vocab = engine->n_vocab();
  if (n_ctx < 4) return invalid_argument("-c {}: perplexity needs chunks of at least 4 tokens", n_ctx);
  if (n_ctx > engine->n_ctx()) return invalid_argument("-c {}: the engine's context is {}", n_ctx, engine->n_ctx());
  if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx)
    return invalid_argument("{} tokenizes to {} tokens; perplexity with -c {} needs at least {}", f.text_file, tokens.size(),
                            n_ctx, 2 * n_ctx);
  const int64_t max_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  const int64_t n_chunk = f.n_chunks < 0 ? max_chunks : std::min(f.n_chunks, max_chunks);
  const int64_t first = n_ctx / 2;
  const bool add_bos = tok.add_bos() && tok.bos_id() >= 0;
  BaseFile base;
  const bool reading = f.kl_divergence, writing = !f.base_file.empty() && !f.kl_divergence;
  if (f.kl_divergence && f.base_file.empty()) return invalid_argument("--kl-divergence needs --kl-divergence-base FILE");
  if (reading) LOOM_RETURN_IF_ERROR(open_base_for_reading(f.base_file, base, tokens, n_ctx, n_vocab, n_chunk));
  if (writing) LOOM_RETURN_IF_ERROR(open_base_for_writing(f.base_file, base, tokens, n_ctx, n_vocab, n_chunk));
  std::fprintf(stderr, "loom perplexity: %zu tokens, %lld chunks of %lld on %s%s\n", tokens.size(),
               static_cast<long long>(n_chunk), static_cast<long long>(n_ctx), std::string(engine->backend_name()).c_str(),
               reading ? ", against the base run" : writing ? ", saving the base run" : "");
  Sums s;
  std::vector<float> lp, blp;
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (add_bos) chunk[0] = tok.bos_id();
    engine->truncate(0);
    LOOM_RETURN_IF_ERROR(engine->decode(chunk, /*all_logits=*/true));
    const std::vector<float>& logits = engine->all_logits();
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      log_softmax(logits.data() + j * n_vocab, n_vocab, lp);
      const int32_t next = chunk[static_cast<size_t>(j + 1)];
      const double nll = -lp[static_cast<size_t>(next)];
      s.nll += nll, s.nll2 += nll * nll, s.count += 1;
      if (writing) base.out.write(reinterpret_cast<const char*>(lp.data()), static_cast<std::streamsize>(n_vocab * 4));
      if (!reading) continue;
      blp.resize(static_cast<size_t>(n_vocab));
      base.in.read(reinterpret_cast<char*>(blp.data()), static_cast<std::streamsize>(n_vocab * 4));
      if (!base.in) return invalid_argument("--kl-divergence-base {}: truncated", f.base_file);
      double kld = 0;
      size_t top = 0, btop = 0;
      for (size_t i = 0; i < lp.size(); ++i) {
        const double pb = std::exp(static_cast<double>(blp[i]));
        kld += pb * (static_cast<double>(blp[i]) - lp[i]);
        if (lp[i] > lp[top]) top = i;
        if (blp[i] > blp[btop]) btop = i;
      }
      const double bnll = -blp[static_cast<size_t>(next)];
      const double dp = std::exp(-nll) - std::exp(-bnll);
      s.base_nll += bnll, s.base_nll2 += bnll * bnll, s.cross += nll * bnll;
      s.kld += kld, s.kld2 += kld * kld, s.same_top += top == btop, s.dp += dp, s.dp2 += dp * dp;
      s.klds.push_back(static_cast<float>(kld));
    }
    if (writing && !base.out) return failed_precondition("--kl-divergence-base {}: write failed", f.base_file);
    std::fprintf(stderr, "loom perplexity: chunk %lld/%lld: PPL %.4f\n", static_cast<long long>(c + 1),
                 static_cast<long long>(n_chunk), std::exp(s.nll / s.count));
  }
  const MeanErr m = mean_err(s.nll, s.nll2, s.count);
  const double ppl = std::exp(m.mean);
  nlohmann::json j = {{"model", path}, {"text", f.text_file}, {"device", std::string(engine->backend_name())},
                      {"n_ctx", n_ctx}, {"chunks", n_chunk}, {"tokens_scored", s.count}, {"ppl", ppl},
                      {"ppl_err", m.err * ppl}, {"command", command_line()}};
  if (reading) {
    const MeanErr k = mean_err(s.kld, s.kld2, s.count), d = mean_err(s.dp, s.dp2, s.count);
    const double top = s.same_top / s.count;
    std::sort(s.klds.begin(), s.klds.end());
    auto pct = [&](double p) { return s.klds[static_cast<size_t>(p * static_cast<double>(s.klds.size() - 1))]; };
    const double base_ppl = std::exp(s.base_nll / s.count);
    j["base_ppl"] = base_ppl;
    j["kld_mean"] = k.mean, j["kld_err"] = k.err, j["kld_median"] = pct(0.5), j["kld_99"] = pct(0.99),
    j["kld_max"] = s.klds.back();
    j["same_top"] = top, j["same_top_err"] = s.count > 1 ? std::sqrt(top * (1 - top) / (s.count - 1)) : 0.0;
    j["delta_p_mean"] = d.mean, j["delta_p_err"] = d.err;
  }
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return Status();
  }
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, m.err * ppl);
  if (reading) {
    std::printf("PPL(base)   : %.4f\n", j["base_ppl"].get<double>());
    std::printf("Mean    KLD : %.6f +/- %.6f\n", j["kld_mean"].get<double>(), j["kld_err"].get<double>());
    std::printf("Median  KLD : %.6f\n99.0%%   KLD : %.6f\nMaximum KLD : %.6f\n", j["kld_median"].get<double>(),
                j["kld_99"].get<double>(), j["kld_max"].get<double>());
    std::printf("Mean    dp  : %.3f +/- %.3f %%\n", 100 * j["delta_p_mean"].get<double>(), 100 * j["delta_p_err"].get<double>());
    std::printf("Same top p  : %.3f +/- %.3f %%\n", 100 * j["same_top"].get<double>(), 100 * j["same_top_err"].get<double>());
  }
  return Status();
}

LOOM_COMMAND(kPerplexity, "perplexity",
             "Perplexity of a model over a text (llama-perplexity's chunks and scoring), and the KL divergence of its "
             "token distributions from a saved base run",
             [](CLI::App& sub) -> Action {
               auto f = std::make_shared<PerplexityFlags>();
               f->gen.n_ctx = 512;
               add_gen_flags(sub, f->gen, /*sampling=*/false);
               sub.add_option("-f,--file", f->text_file, "the text (UTF-8)")->required();
               sub.add_option("--chunks", f->n_chunks, "at most this many chunks (-1: all)")->check(int_at_least(-1));
               sub.add_option("--kl-divergence-base", f->base_file,
                              "without --kl-divergence: save this run's log-probabilities here; with it: read the base run from here");
               sub.add_flag("--kl-divergence", f->kl_divergence, "compare with the base run saved by --kl-divergence-base");
               sub.add_flag("--json", f->json, "one JSON object on stdout");
               return [f] {
                 f->gen.resolve_device();
                 Status st = run_perplexity(*f);
                 return st.ok() ? 0 : report(st);
               };
             });

}  // namespace
}  // namespace loom::cli
