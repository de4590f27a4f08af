// Search strategies and the mutate synthesizer. A job's history (every evaluated candidate, in
// order, with its parent) is the whole search state: strategies rebuild their tree or
// populations from it on every step, and every random choice of step `seq` comes from a
// generator seeded with (job seed, seq). So a job resumed after SIGKILL proposes exactly what
// the uninterrupted job would have, given the same evaluation results.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "loom/store/candidate.h"
#include "loom/evolve/store_names.h"

namespace loom::evolve {

// One evaluated candidate as the search sees it.
struct Node {
  int64_t id = 0;      // candidates.id
  int seq = 0;         // 0 = the baseline (the op's default schedule)
  int64_t parent = 0;  // candidates.id of the parent, 0 for none
  std::string synth;
  Candidate cand;
  std::string hash;
  bool ok = false;
  double speedup = 0;  // baseline median / this median (ok only)
  int island = 0;
};

struct History {
  std::vector<Node> nodes;
  std::map<std::string, size_t> by_hash;
  void add(Node n);
  const Node* find(int64_t id) const;
  const Node* best() const;  // highest speedup among ok nodes
};

uint64_t step_seed(uint64_t job_seed, int seq);

// Which node to build on next (nullopt: none, draw a fresh point) and on which island.
struct Pick {
  std::optional<int64_t> parent;
  int island = 0;
};
enum class StrategyKind { kMcts, kEvolution, kRandom };
Result<StrategyKind> parse_strategy(std::string_view s);
std::string_view strategy_name(StrategyKind s);
Pick pick_parent(StrategyKind s, const History& h, int seq, std::mt19937_64& rng);

// Skills: the mean log speed-up gained by moving knob -> value, as weights for mutations.
struct SkillTable {
  std::map<std::pair<std::string, int64_t>, double> score;  // mean log gain
  std::map<std::pair<std::string, int64_t>, int> uses;
};

// The mutate synthesizer: one or two knobs of the parent moved (to a neighbouring or a random
// value of the space), biased by skills when given; without a parent, a random point. Returns
// a candidate whose hash is not in `h`, or nullopt when none was found (space exhausted).
struct Mutation {
  Candidate cand;
  std::string diff;  // "row_tile 4->2, ev_fma 0->1"
};
std::optional<Mutation> mutate(const std::vector<kernels::Knob>& space, const Candidate* parent, const History& h,
                               const SkillTable* skills, std::mt19937_64& rng,
                               const std::function<void(Candidate&)>& normalize = {});

// The opening move, tried before the strategy's moves: the baseline with its vector width (a
// knob named "vw", as user ops' templates call it) at the widest value of the space, then the
// next narrower one while the wider ones failed. Scalar code is where a plain kernel loses most
// on a CPU and a GPU alike, and a slow baseline leaves a short budget few evaluations, so
// vectorizing is not left to the draw. Depends on the history only (not on a generator), so a
// resumed job proposes the same. nullopt: no vw knob, the baseline is already at the widest
// value, or an opening candidate is evaluated ok or pending in `seen` (the strategy goes on).
std::optional<Mutation> opening_move(const std::vector<kernels::Knob>& space, const History& base, const History& seen,
                                     const std::function<void(Candidate&)>& normalize = {});

// Text of the knob changes from a to b.
std::string knob_diff(const kernels::Schedule& a, const kernels::Schedule& b);

}  // namespace loom::evolve
