// Grammar construction and checks, the vocabulary trie and the pushdown matcher (see grammar.h).
#include "loom/engine/grammar.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace loom::llm {

// ---- builder ------------------------------------------------------------------------------

uint32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  defined_.push_back(false);
  return static_cast<uint32_t>(rules_.size() - 1);
}

void GrammarBuilder::define(uint32_t rule, std::vector<Seq> alternatives) {
  for (const auto& a : alternatives) n_items_ += a.size() + 1;
  rules_[rule] = std::move(alternatives);
  defined_[rule] = true;
}

uint32_t GrammarBuilder::add(std::string name, std::vector<Seq> alternatives) {
  const uint32_t r = declare(std::move(name));
  define(r, std::move(alternatives));
  return r;
}

GrammarBuilder::Item GrammarBuilder::ref(uint32_t rule) {
  Item i;
  i.is_rule = true;
  i.rule = rule;
  return i;
}
GrammarBuilder::Item GrammarBuilder::bytes(const ByteSet& set) {
  Item i;
  i.bytes = set;
  return i;
}
GrammarBuilder::Item GrammarBuilder::byte(uint8_t c) {
  Item i;
  i.bytes.set(c);
  return i;
}
GrammarBuilder::Item GrammarBuilder::range(uint8_t lo, uint8_t hi) {
  Item i;
  for (int c = lo; c <= hi; ++c) i.bytes.set(static_cast<size_t>(c));
  return i;
}
GrammarBuilder::Seq GrammarBuilder::literal(std::string_view text) {
  Seq s;
  for (char c : text) s.push_back(byte(static_cast<uint8_t>(c)));
  return s;
}

Result<std::shared_ptr<const Grammar>> GrammarBuilder::build(uint32_t root, const GrammarLimits& limits) const {
  const size_t n = rules_.size();
  if (root >= n) return invalid_argument("the grammar has no root rule");
  if (n > limits.max_rules)
    return invalid_argument("the grammar is too large ({} rules; at most {})", n, limits.max_rules);
  if (n_items_ > limits.max_elems)
    return invalid_argument("the grammar is too large ({} elements; at most {})", n_items_, limits.max_elems);
  for (size_t r = 0; r < n; ++r)
    if (!defined_[r]) return invalid_argument("the grammar rule '{}' is used but not defined", names_[r]);

  // Nullable (derives the empty string) and productive (derives some string), as fixed points.
  std::vector<bool> nullable(n, false), productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& a : rules_[r]) {
        bool nul = true, prod = true;
        for (const Item& it : a) {
          if (it.is_rule) {
            nul = nul && nullable[it.rule];
            prod = prod && productive[it.rule];
          } else {
            nul = false;
            prod = prod && it.bytes.any();
          }
        }
        if (nul && !nullable[r]) nullable[r] = changed = true;
        if (prod && !productive[r]) productive[r] = changed = true;
      }
    }
  }

  // Leftmost references (r can start with s without consuming a byte). A cycle among them is
  // left recursion, which a pushdown walk would follow forever; the longest chain bounds the
  // matcher's recursion.
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& a : rules_[r])
      for (const Item& it : a) {
        if (!it.is_rule) break;
        left[r].push_back(it.rule);
        if (!nullable[it.rule]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<uint32_t> depth(n, 0);
  constexpr uint32_t kMaxLeftDepth = 400;
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i < left[r].size()) {
        const uint32_t s = left[r][i++];
        if (color[s] == 1)
          return invalid_argument("the grammar is left-recursive: rule '{}' can reach itself without consuming input",
                                  names_[s]);
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
        continue;
      }
      uint32_t d = 0;
      for (uint32_t s : left[r]) d = std::max(d, depth[s] + 1);
      depth[r] = d;
      color[r] = 2;
      if (d > kMaxLeftDepth) return invalid_argument("the grammar nests too deeply (more than {} levels)", kMaxLeftDepth);
      path.pop_back();
    }
  }

  if (!productive[root]) return invalid_argument("the grammar (or schema) admits no value: its constraints contradict each other");

  auto g = std::make_shared<Grammar>();
  std::map<std::string, uint32_t> set_index;
  g->alts_.resize(n);
  g->names_ = names_;
  g->root_ = root;
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& a : rules_[r]) {
      g->alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
      for (const Item& it : a) {
        if (it.is_rule) {
          g->elems_.push_back({Grammar::Kind::kRule, it.rule});
          continue;
        }
        const std::string key = it.bytes.to_string();
        auto [pos, fresh] = set_index.emplace(key, static_cast<uint32_t>(g->sets_.size()));
        if (fresh) g->sets_.push_back(it.bytes);
        g->elems_.push_back({Grammar::Kind::kBytes, pos->second});
      }
      g->elems_.push_back({Grammar::Kind::kEnd, 0});
    }
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

// ---- vocabulary trie ----------------------------------------------------------------------

TokenTrie::TokenTrie(const Tokenizer& tok) : n_vocab_(tok.vocab_size()) {
  std::vector<std::pair<std::string_view, int32_t>> pieces;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_eog(id)) {
      eog_.push_back(id);
      continue;
    }
    if (tok.is_control(id)) continue;
    std::string_view p = tok.token_to_piece(id, /*render_special=*/false);
    if (!p.empty()) pieces.emplace_back(p, id);
  }
  std::sort(pieces.begin(), pieces.end());
  nodes_.emplace_back();
  // Depth-first over the sorted pieces: [lo, hi) share the node's prefix of length `depth`;
  // those exactly that long end at the node (they sort first), the rest group by next byte.
  struct Work {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Work> stack{{0, 0, pieces.size(), 0}};
  while (!stack.empty()) {
    Work w = stack.back();
    stack.pop_back();
    size_t i = w.lo;
    nodes_[w.node].first_token = static_cast<uint32_t>(token_ids_.size());
    while (i < w.hi && pieces[i].first.size() == w.depth) token_ids_.push_back(pieces[i++].second);
    nodes_[w.node].n_tokens = static_cast<uint32_t>(token_ids_.size()) - nodes_[w.node].first_token;
    std::vector<Work> kids;
    nodes_[w.node].first_edge = static_cast<uint32_t>(edges_.size());
    while (i < w.hi) {
      const uint8_t b = static_cast<uint8_t>(pieces[i].first[w.depth]);
      size_t j = i;
      while (j < w.hi && static_cast<uint8_t>(pieces[j].first[w.depth]) == b) ++j;
      const uint32_t child = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      edges_.push_back({b, child});
      kids.push_back({child, i, j, w.depth + 1});
      i = j;
    }
    nodes_[w.node].n_edges = static_cast<uint32_t>(edges_.size()) - nodes_[w.node].first_edge;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back(*it);
  }
}

// ---- matcher ------------------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, const Tokenizer& tok,
                               std::shared_ptr<const TokenTrie> trie)
    : g_(std::move(grammar)), tok_(&tok), trie_(std::move(trie)) {
  for (uint32_t a : g_->alternatives(g_->root())) expand(push(a, -1), &stacks_, 0);
  dedupe(&stacks_);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)), tok_(nullptr) {
  for (uint32_t a : g_->alternatives(g_->root())) expand(push(a, -1), &stacks_, 0);
  dedupe(&stacks_);
}

int32_t GrammarMatcher::push(uint32_t pos, int32_t parent) {
  nodes_.push_back({pos, parent});
  return static_cast<int32_t>(nodes_.size() - 1);
}

// Normalizes a stack: pops finished alternatives and expands rule references until the top is
// a byte set (or the stack is empty: the whole string is complete).
void GrammarMatcher::expand(int32_t s, std::vector<int32_t>* out, int depth) {
  const auto& elems = g_->elems();
  while (true) {
    if (s < 0) {
      out->push_back(-1);
      return;
    }
    const Node n = nodes_[static_cast<size_t>(s)];
    const Grammar::Elem e = elems[n.pos];
    if (e.kind == Grammar::Kind::kEnd) {
      s = n.parent;
      continue;
    }
    if (e.kind == Grammar::Kind::kBytes) {
      out->push_back(s);
      return;
    }
    // The continuation is pushed only when something follows the reference (a tail call
    // otherwise), so right recursion does not grow the stack.
    const int32_t cont = elems[n.pos + 1].kind == Grammar::Kind::kEnd ? n.parent : push(n.pos + 1, n.parent);
    for (uint32_t a : g_->alternatives(e.arg)) expand(push(a, cont), out, depth + 1);
    return;
  }
}

void GrammarMatcher::dedupe(std::vector<int32_t>* v) {
  // Stacks are equal when their tops are the same position over the same rest; -1 sorts first.
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

void GrammarMatcher::step(const std::vector<int32_t>& in, uint8_t byte, std::vector<int32_t>* out) {
  out->clear();
  const auto& elems = g_->elems();
  for (int32_t s : in) {
    if (s < 0) continue;
    const Node n = nodes_[static_cast<size_t>(s)];
    if (!g_->set(elems[n.pos].arg).test(byte)) continue;
    expand(push(n.pos + 1, n.parent), out, 0);
  }
  if (out->size() > 1) {
    // Equal stacks made along different paths: compare by (top, rest) instead of node id.
    std::sort(out->begin(), out->end(), [&](int32_t a, int32_t b) {
      if (a < 0 || b < 0) return a < b;
      const Node& x = nodes_[static_cast<size_t>(a)];
      const Node& y = nodes_[static_cast<size_t>(b)];
      return x.pos != y.pos ? x.pos < y.pos : x.parent < y.parent;
    });
    out->erase(std::unique(out->begin(), out->end(),
                           [&](int32_t a, int32_t b) {
                             if (a < 0 || b < 0) return a == b;
                             const Node& x = nodes_[static_cast<size_t>(a)];
                             const Node& y = nodes_[static_cast<size_t>(b)];
                             return x.pos == y.pos && x.parent == y.parent;
                           }),
               out->end());
    if (out->size() > kMaxStacks) out->resize(kMaxStacks);
  }
}

bool GrammarMatcher::can_end() const { return !stacks_.empty() && stacks_.front() < 0; }
bool GrammarMatcher::must_end() const { return stacks_.size() == 1 && stacks_.front() < 0; }

bool GrammarMatcher::accepts(int32_t token) {
  if (!tok_) return false;
  if (tok_->is_eog(token)) return can_end();
  if (tok_->is_control(token)) return false;
  const std::string_view bytes = tok_->token_to_piece(token, false);
  if (bytes.empty()) return false;
  const size_t mark = nodes_.size();
  a_ = stacks_;
  bool ok = true;
  for (char c : bytes) {
    step(a_, static_cast<uint8_t>(c), &b_);
    a_.swap(b_);
    if (a_.empty()) {
      ok = false;
      break;
    }
  }
  nodes_.resize(mark);  // the walk's nodes are garbage; the state's are older
  return ok;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const size_t mark = nodes_.size();
  a_ = stacks_;
  for (char c : bytes) {
    step(a_, static_cast<uint8_t>(c), &b_);
    a_.swap(b_);
    if (a_.empty()) {
      nodes_.resize(mark);
      return false;
    }
  }
  stacks_ = a_;
  if (nodes_.size() > 4096) compact();
  return true;
}

bool GrammarMatcher::accept(int32_t token) {
  if (!tok_) return false;
  if (tok_->is_eog(token)) return can_end();
  if (tok_->is_control(token)) return false;
  const std::string_view bytes = tok_->token_to_piece(token, false);
  if (bytes.empty()) return false;
  return accept_bytes(bytes);
}

// Copies the nodes the current stacks use into a fresh arena.
void GrammarMatcher::compact() {
  std::vector<Node> fresh;
  std::unordered_map<int32_t, int32_t> moved;
  auto copy = [&](int32_t s) {
    // Iterative: the chain below s, bottom first.
    std::vector<int32_t> chain;
    for (int32_t t = s; t >= 0 && !moved.count(t); t = nodes_[static_cast<size_t>(t)].parent) chain.push_back(t);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node n = nodes_[static_cast<size_t>(*it)];
      const int32_t parent = n.parent < 0 ? -1 : moved.at(n.parent);
      fresh.push_back({n.pos, parent});
      moved[*it] = static_cast<int32_t>(fresh.size() - 1);
    }
    return s < 0 ? -1 : moved.at(s);
  };
  for (int32_t& s : stacks_) s = copy(s);
  nodes_.swap(fresh);
}

void GrammarMatcher::walk(uint32_t trie_node, const std::vector<int32_t>& stacks, size_t depth,
                          std::vector<uint8_t>* mask) {
  if (scratch_.size() <= depth) return;  // sized in allowed()
  ByteSet can;
  for (int32_t s : stacks)
    if (s >= 0) can |= g_->set(g_->elems()[nodes_[static_cast<size_t>(s)].pos].arg);
  if (can.none()) return;
  const auto& node = trie_->nodes()[trie_node];
  for (uint32_t e = node.first_edge; e < node.first_edge + node.n_edges; ++e) {
    const auto& edge = trie_->edges()[e];
    if (!can.test(edge.byte)) continue;
    const size_t mark = nodes_.size();
    std::vector<int32_t>& next = scratch_[depth];
    step(stacks, edge.byte, &next);
    if (!next.empty()) {
      const auto& child = trie_->nodes()[edge.child];
      for (uint32_t t = child.first_token; t < child.first_token + child.n_tokens; ++t)
        (*mask)[static_cast<size_t>(trie_->token_ids()[t])] = 1;
      if (child.n_edges) walk(edge.child, next, depth + 1, mask);
    }
    nodes_.resize(mark);
  }
}

void GrammarMatcher::allowed(std::vector<uint8_t>* mask) {
  if (!trie_) return;
  mask->assign(static_cast<size_t>(trie_->n_vocab()), 0);
  // One scratch set per trie level (sized once: walk() holds references into it).
  if (scratch_.empty()) scratch_.resize(512);
  walk(0, stacks_, 0, mask);
  if (can_end())
    for (int32_t id : trie_->eog_ids()) (*mask)[static_cast<size_t>(id)] = 1;
}

}  // namespace loom::llm
