// MCTS, evolution and random strategies over a job's history, and the mutate synthesizer (see
// search.h).
#include "loom/evolve/search.h"

#include <algorithm>
#include <cmath>

namespace loom::evolve {
namespace {

constexpr double kFailReward = -0.7;  // log-speed-up credited to a rejected/failed candidate
constexpr double kUctC = 0.4;
constexpr int kIslands = 2;
constexpr int kPopulation = 6;
constexpr int kTournament = 3;
constexpr int kMigrateEvery = 8;

double reward(const Node& n) { return n.ok && n.speedup > 0 ? std::log(n.speedup) : kFailReward; }

}  // namespace

void History::add(Node n) {
  by_hash[n.hash] = nodes.size();
  nodes.push_back(std::move(n));
}

const Node* History::find(int64_t id) const {
  for (const Node& n : nodes)
    if (n.id == id) return &n;
  return nullptr;
}

const Node* History::best() const {
  const Node* b = nullptr;
  for (const Node& n : nodes)
    if (n.ok && (!b || n.speedup > b->speedup)) b = &n;
  return b;
}

uint64_t step_seed(uint64_t job_seed, int seq) {
  uint64_t x = job_seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(seq) * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return x;
}

Result<StrategyKind> parse_strategy(std::string_view s) {
  if (s == "mcts") return StrategyKind::kMcts;
  if (s == "evolution") return StrategyKind::kEvolution;
  if (s == "random") return StrategyKind::kRandom;
  return invalid_argument("unknown strategy '{}' (mcts, evolution, random)", s);
}

std::string_view strategy_name(StrategyKind s) {
  switch (s) {
    case StrategyKind::kMcts: return "mcts";
    case StrategyKind::kEvolution: return "evolution";
    case StrategyKind::kRandom: return "random";
  }
  return "?";
}

Pick pick_parent(StrategyKind s, const History& h, int seq, std::mt19937_64& rng) {
  Pick p;
  if (h.nodes.empty() || s == StrategyKind::kRandom) return p;
  if (s == StrategyKind::kMcts) {
    // Subtree statistics: visits and summed rewards, children lists.
    std::map<int64_t, std::vector<size_t>> kids;
    std::vector<double> sum(h.nodes.size(), 0);
    std::vector<int> visits(h.nodes.size(), 0);
    std::map<int64_t, size_t> index;
    for (size_t i = 0; i < h.nodes.size(); ++i) index[h.nodes[i].id] = i;
    const size_t root = 0;
    for (size_t i = 1; i < h.nodes.size(); ++i) {
      auto it = index.find(h.nodes[i].parent);
      kids[h.nodes[it == index.end() ? root : it->second].id].push_back(i);
    }
    for (size_t i = h.nodes.size(); i-- > 0;) {  // children come after parents: one backward pass
      sum[i] += reward(h.nodes[i]);
      visits[i] += 1;
      if (i == root) continue;
      auto it = index.find(h.nodes[i].parent);
      size_t par = it == index.end() ? root : it->second;
      sum[par] += sum[i];
      visits[par] += visits[i];
    }
    size_t cur = root;
    while (true) {
      const std::vector<size_t>& ch = kids[h.nodes[cur].id];
      // Progressive widening: expand while children < 1.5 * sqrt(visits); failed nodes are leaves.
      if (!h.nodes[cur].ok) break;
      if (static_cast<double>(ch.size()) < 1.5 * std::sqrt(static_cast<double>(visits[cur]))) break;
      double best = -1e300;
      size_t pick = cur;
      for (size_t c : ch) {
        if (!h.nodes[c].ok) continue;
        double q = sum[c] / visits[c];
        double u = q + kUctC * std::sqrt(std::log(static_cast<double>(visits[cur])) / visits[c]);
        u += 1e-9 * std::uniform_real_distribution<double>(0, 1)(rng);  // seeded tie-break
        if (u > best) {
          best = u;
          pick = c;
        }
      }
      if (pick == cur) break;
      cur = pick;
    }
    p.parent = h.nodes[cur].id;
    return p;
  }
  // Evolution: steady-state islands, tournament selection, periodic migration of the best.
  p.island = seq % kIslands;
  std::vector<const Node*> pop;
  for (const Node& n : h.nodes)
    if (n.ok && (n.island == p.island || n.seq == 0)) pop.push_back(&n);
  std::sort(pop.begin(), pop.end(), [](const Node* a, const Node* b) { return a->speedup > b->speedup; });
  if (pop.size() > kPopulation) pop.resize(kPopulation);
  if (seq % kMigrateEvery == 0)
    if (const Node* b = h.best()) pop.push_back(b);
  if (pop.empty()) return p;
  const Node* win = nullptr;
  for (int t = 0; t < kTournament; ++t) {
    const Node* c = pop[std::uniform_int_distribution<size_t>(0, pop.size() - 1)(rng)];
    if (!win || c->speedup > win->speedup) win = c;
  }
  p.parent = win->id;
  return p;
}

std::string knob_diff(const kernels::Schedule& a, const kernels::Schedule& b) {
  std::string out;
  for (const auto& [k, v] : b) {
    auto it = a.find(k);
    if (it != a.end() && it->second == v) continue;
    out += fmt::format("{}{} {}->{}", out.empty() ? "" : ", ", k, it == a.end() ? std::string("-") : std::to_string(it->second), v);
  }
  return out;
}

std::optional<Mutation> opening_move(const std::vector<kernels::Knob>& space, const History& base, const History& seen,
                                     const std::function<void(Candidate&)>& normalize) {
  if (base.nodes.empty() || base.nodes[0].cand.kind != CandKind::kSchedule) return std::nullopt;
  auto k = std::find_if(space.begin(), space.end(), [](const kernels::Knob& x) { return x.name == "vw"; });
  if (k == space.end()) return std::nullopt;
  const Candidate& root = base.nodes[0].cand;
  auto it = root.knobs.find("vw");
  const int64_t cur = it != root.knobs.end() ? it->second : k->choices[0];
  std::vector<int64_t> wider;
  for (int64_t v : k->choices)
    if (v > cur) wider.push_back(v);
  std::sort(wider.rbegin(), wider.rend());
  for (int64_t v : wider) {
    Candidate c = root;
    for (const kernels::Knob& x : space)
      if (!c.knobs.count(x.name)) c.knobs[x.name] = x.choices[0];
    c.knobs["vw"] = v;
    if (normalize) normalize(c);
    const std::string hash = c.hash();
    if (!seen.by_hash.count(hash)) {
      Mutation mu;
      mu.diff = knob_diff(root.knobs, c.knobs) + " (opening)";
      mu.cand = std::move(c);
      return mu;
    }
    auto b = base.by_hash.find(hash);
    if (b == base.by_hash.end() || base.nodes[b->second].ok) return std::nullopt;  // pending, or it worked
  }
  return std::nullopt;
}

std::optional<Mutation> mutate(const std::vector<kernels::Knob>& space, const Candidate* parent, const History& h,
                               const SkillTable* skills, std::mt19937_64& rng,
                               const std::function<void(Candidate&)>& normalize) {
  std::uniform_real_distribution<double> u01(0, 1);
  auto random_point = [&] {
    Candidate c;
    for (const kernels::Knob& k : space)
      c.knobs[k.name] = k.choices[std::uniform_int_distribution<size_t>(0, k.choices.size() - 1)(rng)];
    return c;
  };
  for (int attempt = 0; attempt < 64; ++attempt) {
    Candidate c;
    if (!parent || parent->kind != CandKind::kSchedule || attempt >= 48) {
      c = random_point();
    } else {
      c = *parent;
      for (const kernels::Knob& k : space)  // knobs the parent lacks take the space's first value
        if (!c.knobs.count(k.name)) c.knobs[k.name] = k.choices[0];
      const int changes = u01(rng) < 0.7 ? 1 : 2;
      for (int ch = 0; ch < changes; ++ch) {
        // Every single-knob move, weighted by its skill score (exp(4 * mean log gain)).
        struct Move {
          size_t knob;
          int64_t value;
          double w;
        };
        std::vector<Move> moves;
        double total = 0;
        for (size_t ki = 0; ki < space.size(); ++ki) {
          const kernels::Knob& k = space[ki];
          const int64_t cur = c.knobs[k.name];
          auto pos = std::find(k.choices.begin(), k.choices.end(), cur);
          for (size_t vi = 0; vi < k.choices.size(); ++vi) {
            const int64_t v = k.choices[vi];
            if (v == cur) continue;
            double w = 1.0;
            if (pos != k.choices.end()) {  // neighbours a little more likely
              size_t d = vi > static_cast<size_t>(pos - k.choices.begin()) ? vi - static_cast<size_t>(pos - k.choices.begin())
                                                                           : static_cast<size_t>(pos - k.choices.begin()) - vi;
              if (d == 1) w = 1.5;
            }
            if (skills) {
              auto it = skills->score.find({k.name, v});
              if (it != skills->score.end()) w *= std::exp(4.0 * std::clamp(it->second, -0.5, 0.5));
            }
            moves.push_back({ki, v, w});
            total += w;
          }
        }
        if (moves.empty()) break;
        double r = u01(rng) * total;
        size_t m = 0;
        while (m + 1 < moves.size() && r > moves[m].w) r -= moves[m++].w;
        c.knobs[space[moves[m].knob].name] = moves[m].value;
      }
    }
    if (normalize) normalize(c);
    if (!h.by_hash.count(c.hash())) {
      Mutation mu;
      mu.diff = parent && parent->kind == CandKind::kSchedule ? knob_diff(parent->knobs, c.knobs) : "random point";
      mu.cand = std::move(c);
      return mu;
    }
  }
  return std::nullopt;
}

}  // namespace loom::evolve
