// Continuous batching in the engine: a step that carries tokens of several sequences (prompt
// chunks and single decode tokens, staggered starts) gives every sequence bit for bit the logits
// it gets when run alone; sequences never see each other's cache cells; bad steps change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "loom/engine/engine.h"
#include "loom/gguf/gguf_writer.h"
#include "loom/gguf/quant.h"
#include "loom/model/model.h"
#include "loom/ref/ops_ref.h"
#include "tiny_model.h"

namespace loom::llm {
namespace {

// A tiny random model of the given architecture (gemma3 gets a sliding window of 4, so windowed
// attention inside a sequence slot is covered too).
using tiny::kVocab;

std::string write_tiny(const std::string& arch, GgmlType matrix_type) {
  tiny::TinySpec s;
  s.arch = arch;
  s.matrix_type = matrix_type;
  s.n_ctx_train = 256;
  s.seed = 11;
  s.matrix_scale = 0.3f;
  s.random_norms = true;
  return tiny::write_tiny(s, "test_batch_" + arch + "_" + std::string(ggml_type_name(matrix_type)));
}

std::unique_ptr<Model> load(const std::string& path) {
  auto m = Model::load(path, /*show_progress=*/false);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<Engine> make_engine(const Model& m, int n_seq, int64_t ctx, int threads = 2) {
  EngineOptions o;
  o.n_threads = threads;
  o.n_ctx = ctx;
  o.n_seq = n_seq;
  auto e = Engine::create(m, o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// What one sequence does alone: its prompt (logits of every prompt token), then `n_gen` greedy
// tokens one at a time. rows[p] = logits after the token at position p.
struct Solo {
  std::vector<int32_t> prompt, generated;
  std::vector<std::vector<float>> rows;
};

Solo run_solo(const Model& m, std::vector<int32_t> prompt, int n_gen, int64_t ctx) {
  Solo s;
  s.prompt = prompt;
  auto e = make_engine(m, 1, ctx, /*threads=*/1);
  EXPECT_TRUE(e->decode(prompt, /*all_logits=*/true).ok());
  const int64_t nv = e->n_vocab();
  for (size_t i = 0; i < prompt.size(); ++i)
    s.rows.emplace_back(e->all_logits().begin() + static_cast<int64_t>(i) * nv,
                        e->all_logits().begin() + static_cast<int64_t>(i + 1) * nv);
  for (int g = 0; g < n_gen; ++g) {
    const int32_t id = static_cast<int32_t>(ref::argmax(e->logits(), nv));
    s.generated.push_back(id);
    const int32_t one[1] = {id};
    EXPECT_TRUE(e->decode(one).ok());
    s.rows.emplace_back(e->logits(), e->logits() + nv);
  }
  return s;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = d(rng);
  return p;
}

// Drives a multi-sequence engine like a server scheduler: sequences start at different steps,
// prompts go in chunks of `chunk` tokens next to other sequences' single decode tokens, slots
// are reused. Every logits row is compared with the solo run, byte for byte.
void check_batched_equals_solo(const Model& m, int n_seq, int n_req, int chunk, int n_gen, uint32_t seed) {
  const int64_t ctx = 64;
  std::mt19937 rng(seed);
  std::vector<Solo> solo;
  std::vector<int> start_step;
  for (int r = 0; r < n_req; ++r) {
    solo.push_back(run_solo(m, random_prompt(rng, 1 + static_cast<int>(rng() % 20)), n_gen, ctx));
    start_step.push_back(static_cast<int>(rng() % 6));
  }
  auto e = make_engine(m, n_seq, ctx);
  ASSERT_TRUE(e);
  struct Active { int req; int64_t fed; std::vector<int32_t> seq_tokens; };
  std::vector<int> slot_req(static_cast<size_t>(n_seq), -1);
  std::vector<Active> act(static_cast<size_t>(n_seq));
  int next_req = 0, done = 0, step_no = 0, compared = 0, max_parts = 0;
  while (done < n_req) {
    ASSERT_LT(step_no, 1000);
    for (int s = 0; s < n_seq && next_req < n_req; ++s) {
      if (slot_req[static_cast<size_t>(s)] >= 0 || start_step[static_cast<size_t>(next_req)] > step_no) continue;
      e->truncate(s, 0);  // a reused slot starts empty
      slot_req[static_cast<size_t>(s)] = next_req;
      act[static_cast<size_t>(s)] = Active{next_req, 0, solo[static_cast<size_t>(next_req)].prompt};
      ++next_req;
    }
    std::vector<SeqTokens> parts;
    std::vector<int> part_slot;
    std::vector<int64_t> part_last_pos;
    for (int s = 0; s < n_seq; ++s) {
      if (slot_req[static_cast<size_t>(s)] < 0) continue;
      Active& a = act[static_cast<size_t>(s)];
      const int64_t left = static_cast<int64_t>(a.seq_tokens.size()) - a.fed;
      if (left <= 0) continue;
      const int64_t take = std::min<int64_t>(left, chunk);
      parts.push_back(SeqTokens{s, std::span<const int32_t>(a.seq_tokens.data() + a.fed, static_cast<size_t>(take)),
                                /*logits=*/true});
      part_slot.push_back(s);
      part_last_pos.push_back(a.fed + take - 1);
    }
    ++step_no;
    if (parts.empty()) continue;
    max_parts = std::max(max_parts, static_cast<int>(parts.size()));
    ASSERT_TRUE(e->step(parts).ok());
    for (size_t i = 0; i < parts.size(); ++i) {
      const int s = part_slot[i];
      Active& a = act[static_cast<size_t>(s)];
      const Solo& want = solo[static_cast<size_t>(a.req)];
      a.fed += static_cast<int64_t>(parts[i].tokens.size());
      const int64_t pos = part_last_pos[i];
      ASSERT_EQ(e->n_past(s), pos + 1);
      ASSERT_NE(e->step_logits(i), nullptr);
      ASSERT_EQ(0, std::memcmp(e->step_logits(i), want.rows[static_cast<size_t>(pos)].data(), kVocab * sizeof(float)))
          << "request " << a.req << " at position " << pos << " (slot " << s << ", step " << step_no << ")";
      ++compared;
      const int64_t n_generated = pos + 1 - static_cast<int64_t>(want.prompt.size());
      if (n_generated < 0) continue;  // still inside the prompt
      if (n_generated >= n_gen) {
        slot_req[static_cast<size_t>(s)] = -1;
        ++done;
        continue;
      }
      const int32_t id = static_cast<int32_t>(ref::argmax(e->step_logits(i), kVocab));
      ASSERT_EQ(id, want.generated[static_cast<size_t>(n_generated)]);
      a.seq_tokens.push_back(id);
    }
  }
  EXPECT_GT(compared, n_req * n_gen);
  EXPECT_GE(max_parts, std::min(n_seq, 3));  // the test really batched sequences together
}

struct Case {
  std::string arch;
  GgmlType type;
};

class BatchModels : public ::testing::TestWithParam<Case> {};

TEST_P(BatchModels, BatchedStepsGiveEverySequenceItsSoloLogits) {
  auto m = load(write_tiny(GetParam().arch, GetParam().type));
  ASSERT_TRUE(m);
  check_batched_equals_solo(*m, /*n_seq=*/4, /*n_req=*/9, /*chunk=*/5, /*n_gen=*/8, /*seed=*/7);
  check_batched_equals_solo(*m, /*n_seq=*/3, /*n_req=*/5, /*chunk=*/64, /*n_gen=*/5, /*seed=*/8);
}

INSTANTIATE_TEST_SUITE_P(Archs, BatchModels,
                         ::testing::Values(Case{"llama", GgmlType::Q8_0}, Case{"llama", GgmlType::Q4_1},
                                           Case{"gemma3", GgmlType::Q8_0}, Case{"gemma3", GgmlType::Q4_0}),
                         [](const auto& info) { return info.param.arch + "_" + std::string(ggml_type_name(info.param.type)); });

TEST(Batch, SequencesDoNotSeeEachOthersCells) {
  auto m = load(write_tiny("llama", GgmlType::Q8_0));
  ASSERT_TRUE(m);
  auto e = make_engine(*m, 3, 32);
  const std::vector<int32_t> a{1, 2, 3, 4, 5}, b{9, 8, 7, 6, 50};
  // Slot 0 holds a, slot 1 holds b; the same prompt a in slot 2 must give slot 0's logits.
  SeqTokens p0{0, a, true}, p1{1, b, true};
  ASSERT_TRUE(e->step(std::vector<SeqTokens>{p0, p1}).ok());
  std::vector<float> la(e->step_logits(0), e->step_logits(0) + kVocab);
  std::vector<float> lb(e->step_logits(1), e->step_logits(1) + kVocab);
  EXPECT_NE(la, lb);
  ASSERT_TRUE(e->step(std::vector<SeqTokens>{SeqTokens{2, a, true}}).ok());
  EXPECT_EQ(0, std::memcmp(e->step_logits(0), la.data(), kVocab * sizeof(float)));
  EXPECT_EQ(e->tokens(0), a);
  EXPECT_EQ(e->tokens(1), b);
  EXPECT_EQ(e->tokens(2), a);
  // Slot 1 rewritten from its second token: slot 0's next step is not affected.
  e->truncate(1, 1);
  const int32_t x[1] = {33};
  ASSERT_TRUE(e->step(std::vector<SeqTokens>{SeqTokens{1, std::span<const int32_t>(b.data() + 2, 3), false},
                                             SeqTokens{0, x, true}}).ok());
  EXPECT_EQ(e->step_logits(0), nullptr);
  std::vector<float> after(e->step_logits(1), e->step_logits(1) + kVocab);
  auto solo = make_engine(*m, 1, 32);
  std::vector<int32_t> ax = a;
  ax.push_back(33);
  ASSERT_TRUE(solo->decode(ax).ok());
  EXPECT_EQ(0, std::memcmp(after.data(), solo->logits(), kVocab * sizeof(float)));
}

TEST(Batch, BadStepsAreCleanErrorsAndChangeNothing) {
  auto m = load(write_tiny("llama", GgmlType::Q8_0));
  ASSERT_TRUE(m);
  auto e = make_engine(*m, 2, 8);
  const std::vector<int32_t> four{1, 2, 3, 4}, five{1, 2, 3, 4, 5}, bad{1, 500};
  ASSERT_TRUE(e->step(std::vector<SeqTokens>{SeqTokens{0, four, true}}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{SeqTokens{2, four, true}}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{SeqTokens{-1, four, true}}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{SeqTokens{1, four, true}, SeqTokens{1, four, true}}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{SeqTokens{1, bad, true}}).ok());
  EXPECT_FALSE(e->step(std::vector<SeqTokens>{SeqTokens{1, {}, true}}).ok());
  auto s = e->step(std::vector<SeqTokens>{SeqTokens{1, four, true}, SeqTokens{0, five, true}});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
  EXPECT_EQ(e->n_past(0), 4);
  EXPECT_EQ(e->n_past(1), 0);
  EXPECT_TRUE(e->step(std::vector<SeqTokens>{SeqTokens{1, four, true}, SeqTokens{0, four, true}}).ok());
  EXPECT_EQ(e->n_past(0), 8);
  EXPECT_EQ(e->n_past(1), 4);
  EngineOptions o;
  o.n_seq = 0;
  EXPECT_FALSE(Engine::create(*m, o).ok());
}

// The real SmolLM2 (Q4_1, 30 layers) when it is fetched: 6 staggered sequences, chunked prompts.
TEST(Batch, RealModelBatchedEqualsSolo) {
  const char* home = std::getenv("HOME");
  const std::string path = std::string(home ? home : "") + "/.cache/loom/models/SmolLM2-135M-Instruct-Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "model not fetched: " << path;
  auto m = load(path);
  ASSERT_TRUE(m);
  const int64_t nv = m->config().n_vocab;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(nv - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 6; ++r) {
    std::vector<int32_t> p(static_cast<size_t>(3 + 4 * r));
    for (auto& t : p) t = d(rng);
    prompts.push_back(p);
  }
  std::vector<std::vector<float>> want;
  for (const auto& p : prompts) {
    auto e = make_engine(*m, 1, 64, 2);
    ASSERT_TRUE(e->decode(p).ok());
    const int32_t next = static_cast<int32_t>(ref::argmax(e->logits(), nv));
    const int32_t one[1] = {next};
    ASSERT_TRUE(e->decode(one).ok());
    want.emplace_back(e->logits(), e->logits() + nv);
  }
  auto e = make_engine(*m, 6, 64, 2);
  std::vector<SeqTokens> parts;
  for (int r = 0; r < 6; ++r) parts.push_back(SeqTokens{r, prompts[static_cast<size_t>(r)], true});
  ASSERT_TRUE(e->step(parts).ok());
  std::vector<int32_t> next(6);
  for (int r = 0; r < 6; ++r) next[static_cast<size_t>(r)] = static_cast<int32_t>(ref::argmax(e->step_logits(static_cast<size_t>(r)), nv));
  parts.clear();
  for (int r = 0; r < 6; ++r) parts.push_back(SeqTokens{r, std::span<const int32_t>(&next[static_cast<size_t>(r)], 1), true});
  ASSERT_TRUE(e->step(parts).ok());
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(0, std::memcmp(e->step_logits(static_cast<size_t>(r)), want[static_cast<size_t>(r)].data(), nv * sizeof(float)))
        << "sequence " << r;
}

}  // namespace
}  // namespace loom::llm
