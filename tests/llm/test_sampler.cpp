// Unit tests of the sampler chain (each stage's effect, seeded determinism, the draw's
// distribution) and of the stop-string matcher used while streaming.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "loom/engine/sampler.h"
#include "loom/engine/session.h"

namespace loom::llm {
namespace {

std::vector<float> logits_of(std::vector<float> v) { return v; }

SamplerParams plain(float temp) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  return p;
}

TEST(Sampler, GreedyPicksTheFirstMaximum) {
  Sampler s(plain(0.0f), 5);
  auto l = logits_of({0.1f, 3.0f, -1.0f, 3.0f, 2.9f});
  EXPECT_EQ(s.sample(l.data()), 1);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
  auto l = logits_of({1.0f, 1.1f, 0.9f, 1.05f, 0.95f, 1.0f, 0.8f, 1.2f});
  auto draw = [&](uint64_t seed) {
    SamplerParams p = plain(1.0f);
    p.seed = seed;
    Sampler s(p, 8);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l.data()));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  SamplerParams p = plain(1.0f);
  p.seed = 42;
  Sampler s(p, 8);
  auto first = s.sample(l.data());
  s.reset();
  EXPECT_EQ(s.sample(l.data()), first);
}

TEST(Sampler, DrawFollowsTheSoftmax) {
  // Probabilities 0.5, 0.25, 0.25 from logits log(2), 0, 0.
  auto l = logits_of({std::log(2.0f), 0.0f, 0.0f});
  Sampler s(plain(1.0f), 3);
  std::map<int, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(l.data())];
  EXPECT_NEAR(count[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(count[1] / double(n), 0.25, 0.02);
  EXPECT_NEAR(count[2] / double(n), 0.25, 0.02);
}

TEST(Sampler, LowTemperatureConcentratesHighSpreads) {
  auto l = logits_of({1.0f, 0.5f, 0.0f});
  auto top_share = [&](float temp) {
    Sampler s(plain(temp), 3);
    int top = 0;
    for (int i = 0; i < 5000; ++i) top += s.sample(l.data()) == 0;
    return top / 5000.0;
  };
  EXPECT_GT(top_share(0.05f), 0.99);
  EXPECT_LT(top_share(5.0f), 0.45);
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  std::vector<Sampler::Candidate> c{{0, 1.0f, 0}, {1, 4.0f, 0}, {2, 3.0f, 0}, {3, -2.0f, 0}};
  Sampler::apply_top_k(c, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, 1);
  EXPECT_EQ(c[1].id, 2);
  SamplerParams p = plain(1.0f);
  p.top_k = 1;
  Sampler s(p, 4);
  auto l = logits_of({1.0f, 4.0f, 3.9f, -2.0f});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l.data()), 1);
}

TEST(Sampler, TopPKeepsTheSmallestSufficientPrefix) {
  // softmax of (log .6, log .3, log .1) = .6, .3, .1
  std::vector<Sampler::Candidate> c{{0, std::log(0.6f), 0}, {1, std::log(0.3f), 0}, {2, std::log(0.1f), 0}};
  auto c1 = c;
  Sampler::apply_top_k(c1, 0);  // sorts
  Sampler::apply_top_p(c1, 0.5f);
  ASSERT_EQ(c1.size(), 1u);
  auto c2 = c;
  Sampler::apply_top_k(c2, 0);
  Sampler::apply_top_p(c2, 0.85f);
  ASSERT_EQ(c2.size(), 2u);
  auto c3 = c;
  Sampler::apply_top_k(c3, 0);
  Sampler::apply_top_p(c3, 1.0f);
  EXPECT_EQ(c3.size(), 3u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  std::vector<Sampler::Candidate> c{{0, std::log(0.6f), 0}, {1, std::log(0.3f), 0}, {2, std::log(0.04f), 0}};
  Sampler::apply_min_p(c, 0.1f);  // keeps p >= 0.06
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id + c[1].id, 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 4;
  Sampler s(p, 3);
  s.accept(0);
  s.accept(1);
  std::vector<Sampler::Candidate> c{{0, 4.0f, 0}, {1, -1.0f, 0}, {2, 1.0f, 0}};
  s.apply_penalties(c);
  EXPECT_EQ(c[0].logit, 2.0f);
  EXPECT_EQ(c[1].logit, -2.0f);
  EXPECT_EQ(c[2].logit, 1.0f);
  // Only the last repeat_last_n tokens count.
  for (int i = 0; i < 4; ++i) s.accept(2);
  std::vector<Sampler::Candidate> d{{0, 4.0f, 0}, {2, 1.0f, 0}};
  s.apply_penalties(d);
  EXPECT_EQ(d[0].logit, 4.0f);
  EXPECT_EQ(d[1].logit, 0.5f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesSubtract) {
  SamplerParams p = plain(0.0f);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p, 3);
  s.accept(1);
  s.accept(1);
  s.accept(2);
  std::vector<Sampler::Candidate> c{{0, 1.0f, 0}, {1, 1.0f, 0}, {2, 1.0f, 0}};
  s.apply_penalties(c);
  EXPECT_EQ(c[0].logit, 1.0f);
  EXPECT_EQ(c[1].logit, 1.0f - 2 * 0.5f - 0.25f);
  EXPECT_EQ(c[2].logit, 1.0f - 0.5f - 0.25f);
  // Greedy sampling sees the penalized logits.
  auto l = logits_of({1.0f, 1.2f, 0.5f});
  EXPECT_EQ(s.sample(l.data()), 0);
}

TEST(Sampler, ValidatesParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_FALSE(p.validate().ok());
  p = SamplerParams();
  p.min_p = 1.5f;
  EXPECT_FALSE(p.validate().ok());
  p = SamplerParams();
  p.repeat_penalty = 0.0f;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_TRUE(SamplerParams().validate().ok());
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheStop) {
  StopMatcher m({"</end>", "STOP"});
  EXPECT_EQ(m.feed("Hello </"), "Hello ");
  EXPECT_EQ(m.feed("e"), "");
  EXPECT_EQ(m.feed("x"), "</ex");  // not a stop after all
  EXPECT_EQ(m.feed(" more ST"), " more ");
  EXPECT_EQ(m.feed("OP and the rest"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("ignored"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FlushReleasesHeldTextWhenNoStopCame) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abc ST"), "abc ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "ST");
  StopMatcher none({});
  EXPECT_EQ(none.feed("anything"), "anything");
}

TEST(StopMatcher, StopInsideOnePieceKeepsTheTextBefore) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.feed("line one\n\nline two"), "line one");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace loom::llm
