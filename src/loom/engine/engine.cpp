// Engine: batching of tokens into step Programs (one sequence, or several per step), context
// limits, prefix reuse.
#include "loom/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::llm {

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, const EngineOptions& options) {
  if (options.n_ctx < 0) return invalid_argument("context size must be >= 0 (got {})", options.n_ctx);
  if (options.n_batch <= 0) return invalid_argument("batch size must be > 0 (got {})", options.n_batch);
  if (options.n_seq <= 0 || options.n_seq > 4096)
    return invalid_argument("sequence slots must be in 1..4096 (got {})", options.n_seq);
  std::unique_ptr<Engine> e(new Engine(model));
  const int64_t train = model.config().n_ctx_train > 0 ? model.config().n_ctx_train : options.n_ctx;
  e->n_ctx_ = options.n_ctx == 0 ? train : std::min(options.n_ctx, train);
  e->n_batch_ = options.n_batch;
  if (options.make_backend) {
    LOOM_ASSIGN_OR_RETURN(e->backend_, options.make_backend());
  } else {
    e->backend_ = make_ref_backend(options.n_threads);
  }
  LOOM_RETURN_IF_ERROR(e->backend_->init(model, e->n_ctx_, options.n_seq));
  e->seqs_.resize(static_cast<size_t>(options.n_seq));
  e->last_logits_.assign(static_cast<size_t>(model.config().n_vocab), 0.0f);
  return e;
}

const Program& Engine::program(int64_t n_tokens, int64_t n_outputs) {
  auto key = std::make_pair(n_tokens, n_outputs);
  auto it = programs_.find(key);
  if (it == programs_.end()) {
    // Batched steps come in many shapes; a bounded cache keeps the common ones without growing
    // forever (building a Program is cheap next to running it).
    if (programs_.size() >= 256) programs_.clear();
    it = programs_.emplace(key, model_.build_program(n_tokens, n_outputs)).first;
  }
  return it->second;
}

Status Engine::run_step(int64_t n, int64_t n_out, const StepInputs& in) {
  const StepShape shape = backend_->step_shape(n, n_out);
  const size_t n_vocab = static_cast<size_t>(this->n_vocab());
  if (shape.n_tokens == n && shape.n_outputs == n_out) {
    step_logits_.resize(static_cast<size_t>(n_out) * n_vocab);
    return backend_->execute(program(n, n_out), in, step_logits_.data());
  }
  if (shape.n_tokens < n || shape.n_outputs < n_out || shape.n_outputs > shape.n_tokens)
    return internal_error("backend {} asked for a step of {} tokens, {} outputs for {}, {}", backend_->name(),
                          shape.n_tokens, shape.n_outputs, n, n_out);
  const size_t T = static_cast<size_t>(shape.n_tokens);
  pad_tokens_.assign(in.tokens, in.tokens + n);
  pad_positions_.assign(in.positions, in.positions + n);
  if (in.seq_ids) pad_seqs_.assign(in.seq_ids, in.seq_ids + n);
  else pad_seqs_.assign(static_cast<size_t>(n), 0);
  pad_tokens_.resize(T, 0);
  pad_seqs_.resize(T, n_seq());  // the scratch slot (Backend::step_shape)
  for (size_t t = static_cast<size_t>(n); t < T; ++t) pad_positions_.push_back(static_cast<int32_t>(t - n));
  pad_rows_.assign(in.output_rows, in.output_rows + n_out);
  pad_rows_.resize(static_cast<size_t>(shape.n_outputs), in.output_rows[n_out - 1]);
  StepInputs pin = in;
  pin.tokens = pad_tokens_.data();
  pin.positions = pad_positions_.data();
  pin.seq_ids = pad_seqs_.data();
  pin.output_rows = pad_rows_.data();
  pin.n_kv = std::max<int64_t>(in.n_kv, shape.n_tokens - n);
  step_logits_.resize(static_cast<size_t>(shape.n_outputs) * n_vocab);
  LOOM_RETURN_IF_ERROR(backend_->execute(program(shape.n_tokens, shape.n_outputs), pin, step_logits_.data()));
  step_logits_.resize(static_cast<size_t>(n_out) * n_vocab);
  return Status();
}

Result<bool> Engine::prepare(int64_t n_tokens, int64_t n_outputs) {
  if (n_tokens < 1 || n_outputs < 0 || n_outputs > n_tokens || n_tokens > n_ctx_)
    return invalid_argument("cannot prepare a step of {} tokens with {} outputs (context {})", n_tokens, n_outputs, n_ctx_);
  const StepShape shape = backend_->step_shape(n_tokens, n_outputs);
  return backend_->prepare(program(shape.n_tokens, shape.n_outputs));
}

Status Engine::decode(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) return invalid_argument("nothing to decode (empty token list)");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n_past() + n > n_ctx_)
    return resource_exhausted("{} tokens do not fit in the context: {} cached + {} new > {} (raise -c, up to the "
                              "model's {})", n_past() + n, n_past(), n, n_ctx_, model_.config().n_ctx_train);
  const int64_t n_vocab = this->n_vocab();
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) return invalid_argument("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
  if (all_logits) all_logits_.assign(static_cast<size_t>(n * n_vocab), 0.0f);
  std::vector<int32_t> positions, rows;
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(n_batch_, n - done);
    const int64_t n_out = all_logits ? m : 1;
    positions.resize(static_cast<size_t>(m));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(n_past()));
    rows.resize(static_cast<size_t>(n_out));
    if (all_logits) std::iota(rows.begin(), rows.end(), 0);
    else rows[0] = static_cast<int32_t>(m - 1);
    StepInputs in;
    in.tokens = tokens.data() + done;
    in.positions = positions.data();
    in.output_rows = rows.data();
    in.n_kv = n_past() + m;
    Status s = run_step(m, n_out, in);
    if (!s.ok()) return s;
    seqs_[0].insert(seqs_[0].end(), tokens.begin() + done, tokens.begin() + done + m);
    if (all_logits) std::copy(step_logits_.begin(), step_logits_.end(), all_logits_.begin() + done * n_vocab);
    std::copy(step_logits_.end() - n_vocab, step_logits_.end(), last_logits_.begin());
    done += m;
  }
  return Status();
}

Status Engine::copy_prefix(int src, int dst, int64_t n) {
  if (src < 0 || dst < 0 || src >= n_seq() || dst >= n_seq() || src == dst)
    return out_of_range("cannot copy sequence {} to {} ({} sequences)", src, dst, n_seq());
  if (n < 0 || n > n_past(src)) return out_of_range("sequence {} holds {} tokens, not {}", src, n_past(src), n);
  LOOM_RETURN_IF_ERROR(backend_->copy_cells(src, dst, n));
  const auto& from = seqs_[static_cast<size_t>(src)];
  seqs_[static_cast<size_t>(dst)].assign(from.begin(), from.begin() + n);
  return Status();
}

void Engine::truncate(int seq, int64_t n) {
  if (seq < 0 || seq >= n_seq()) return;
  auto& t = seqs_[static_cast<size_t>(seq)];
  if (n < static_cast<int64_t>(t.size())) t.resize(static_cast<size_t>(std::max<int64_t>(0, n)));
}

Status Engine::step(std::span<const SeqTokens> parts) {
  if (parts.empty()) return invalid_argument("nothing to decode (empty step)");
  const int64_t n_vocab = this->n_vocab();
  std::vector<bool> seen(static_cast<size_t>(n_seq()), false);
  int64_t n = 0, n_out = 0, n_kv = 0;
  for (const SeqTokens& p : parts) {
    if (p.seq < 0 || p.seq >= n_seq()) return out_of_range("sequence {} outside 0..{}", p.seq, n_seq() - 1);
    if (seen[static_cast<size_t>(p.seq)]) return invalid_argument("sequence {} appears twice in one step", p.seq);
    seen[static_cast<size_t>(p.seq)] = true;
    if (p.tokens.empty()) return invalid_argument("sequence {}: nothing to decode (empty token list)", p.seq);
    const int64_t m = static_cast<int64_t>(p.tokens.size());
    if (n_past(p.seq) + m > n_ctx_)
      return resource_exhausted("sequence {}: {} cached + {} new tokens do not fit in its context of {}", p.seq,
                                n_past(p.seq), m, n_ctx_);
    for (int32_t t : p.tokens)
      if (t < 0 || t >= n_vocab) return invalid_argument("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
    n += m;
    n_out += p.logits ? 1 : 0;
    n_kv = std::max(n_kv, n_past(p.seq) + m);
  }
  b_tokens_.clear();
  b_positions_.clear();
  b_seqs_.clear();
  b_rows_.clear();
  part_row_.assign(parts.size(), -1);
  for (size_t i = 0; i < parts.size(); ++i) {
    const SeqTokens& p = parts[i];
    const int32_t base = static_cast<int32_t>(n_past(p.seq));
    for (size_t j = 0; j < p.tokens.size(); ++j) {
      b_tokens_.push_back(p.tokens[j]);
      b_positions_.push_back(base + static_cast<int32_t>(j));
      b_seqs_.push_back(p.seq);
    }
    if (p.logits) {
      part_row_[i] = static_cast<int64_t>(b_rows_.size());
      b_rows_.push_back(static_cast<int32_t>(b_tokens_.size() - 1));
    }
  }
  // A step without outputs still needs one logits row from the Program; it is dropped.
  const bool dummy = n_out == 0;
  if (dummy) {
    b_rows_.push_back(static_cast<int32_t>(n - 1));
    n_out = 1;
  }
  StepInputs in;
  in.tokens = b_tokens_.data();
  in.positions = b_positions_.data();
  in.seq_ids = b_seqs_.data();
  in.output_rows = b_rows_.data();
  in.n_kv = n_kv;
  Status s = run_step(n, n_out, in);
  if (!s.ok()) {
    part_row_.assign(parts.size(), -1);
    return s;
  }
  for (const SeqTokens& p : parts) {
    auto& t = seqs_[static_cast<size_t>(p.seq)];
    t.insert(t.end(), p.tokens.begin(), p.tokens.end());
  }
  return Status();
}

Result<const Program*> Engine::hidden_program(int64_t n_tokens) {
  auto it = hidden_programs_.find(n_tokens);
  if (it != hidden_programs_.end()) return &it->second;
  // Every recipe ends with the output norm ("result_norm") and then the output matrix (and
  // Gemma's soft-cap); the launches after the norm are dropped and the norm's value becomes
  // the Program's result. The slots stay valid: the norm's value was live until its reader.
  Program p = model_.build_program(n_tokens, n_tokens);
  int32_t norm = -1;
  for (size_t v = 0; v < p.values.size(); ++v)
    if (p.values[v].name == "result_norm") norm = static_cast<int32_t>(v);
  size_t last = p.launches.size();
  for (size_t i = 0; i < p.launches.size(); ++i)
    if (p.launches[i].out == norm) last = i;
  if (norm < 0 || last == p.launches.size())
    return internal_error("the {} recipe has no 'result_norm' value to take hidden states from",
                          model_.config().arch_name);
  p.launches.resize(last + 1);
  p.logits = norm;
  if (hidden_programs_.size() >= 64) hidden_programs_.clear();
  return &hidden_programs_.emplace(n_tokens, std::move(p)).first->second;
}

Status Engine::hidden_states(std::span<const int32_t> tokens, std::vector<float>* hidden) {
  if (backend_->name() != "cpu-ref")
    return failed_precondition("hidden states need the reference backend (this engine runs on {})", backend_->name());
  if (tokens.empty()) return invalid_argument("nothing to decode (empty token list)");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > n_ctx_) return resource_exhausted("{} tokens do not fit in the context of {}", n, n_ctx_);
  const int64_t n_vocab = this->n_vocab(), n_embd = model_.config().n_embd;
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) return invalid_argument("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1);
  truncate(0, 0);
  hidden->assign(static_cast<size_t>(n * n_embd), 0.0f);
  std::vector<int32_t> positions, rows;
  Status s;
  for (int64_t done = 0; done < n && s.ok();) {
    const int64_t m = std::min(n_batch_, n - done);
    auto prog = hidden_program(m);
    if (!prog.ok()) {
      s = prog.status();
      break;
    }
    positions.resize(static_cast<size_t>(m));
    std::iota(positions.begin(), positions.end(), static_cast<int32_t>(done));
    rows.resize(static_cast<size_t>(m));
    std::iota(rows.begin(), rows.end(), 0);
    StepInputs in;
    in.tokens = tokens.data() + done;
    in.positions = positions.data();
    in.output_rows = rows.data();
    in.n_kv = done + m;
    s = backend_->execute(**prog, in, hidden->data() + done * n_embd);
    done += m;
  }
  // The cells hold this text now; nobody may take them for a cached prefix.
  truncate(0, 0);
  return s;
}

std::string_view Engine::pooling() const {
  // llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last, 4 rank. A decoder without the key (or with
  // none/rank) is pooled by the mean.
  auto type = model_.gguf().get_u64_or(model_.config().arch_name + ".pooling_type", 1);
  if (type.ok() && *type == 2) return "cls";
  if (type.ok() && *type == 3) return "last";
  return "mean";
}

Status Engine::embed(std::span<const int32_t> tokens, std::vector<float>* embedding) {
  std::vector<float> hidden;
  LOOM_RETURN_IF_ERROR(hidden_states(tokens, &hidden));
  const int64_t n = static_cast<int64_t>(tokens.size()), n_embd = model_.config().n_embd;
  const std::string_view pool = pooling();
  std::vector<double> sum(static_cast<size_t>(n_embd), 0.0);
  const int64_t first = pool == "last" ? n - 1 : 0, end = pool == "cls" ? 1 : n;
  for (int64_t t = first; t < end; ++t)
    for (int64_t i = 0; i < n_embd; ++i) sum[static_cast<size_t>(i)] += hidden[static_cast<size_t>(t * n_embd + i)];
  double norm = 0.0;
  for (double v : sum) norm += v * v;
  norm = std::sqrt(norm);
  embedding->resize(static_cast<size_t>(n_embd));
  // The mean's 1/n cancels in the normalization; a zero vector stays zero.
  for (int64_t i = 0; i < n_embd; ++i)
    (*embedding)[static_cast<size_t>(i)] = norm > 0 ? static_cast<float>(sum[static_cast<size_t>(i)] / norm) : 0.0f;
  return Status();
}

Result<int64_t> Engine::sync(std::span<const int32_t> tokens) {
  if (tokens.empty()) return invalid_argument("nothing to decode (empty token list)");
  size_t common = 0;
  const auto& cached = seqs_[0];
  while (common < tokens.size() && common < cached.size() && tokens[common] == cached[common]) ++common;
  // At least the last token is decoded again so that logits() belongs to it.
  if (common == tokens.size()) --common;
  if (static_cast<int64_t>(tokens.size()) > n_ctx_)
    return resource_exhausted("{} tokens do not fit in the context of {} (raise -c, up to the model's {})",
                              tokens.size(), n_ctx_, model_.config().n_ctx_train);
  truncate(static_cast<int64_t>(common));
  LOOM_RETURN_IF_ERROR(decode(tokens.subspan(common)));
  return static_cast<int64_t>(common);
}

}  // namespace loom::llm
