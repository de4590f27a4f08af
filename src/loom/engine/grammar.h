// Byte-level context-free grammars that constrain sampling: a Grammar (rules of alternatives
// over byte sets and rule references, built by GrammarBuilder, by the JSON-schema compiler or
// parsed from GBNF text) and a GrammarMatcher, a pushdown recognizer walked over each candidate
// token's bytes, that tells the sampler which tokens may come next. See docs/server.md
// ("Structured output").
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/base/status.h"
#include "loom/engine/sampler.h"
#include "loom/text/tokenizer.h"

namespace loom::llm {

using ByteSet = std::bitset<256>;

// An immutable, checked grammar. Every alternative of every rule is a sequence of byte sets and
// rule references; the language is that of the root rule. Safe to share between threads.
class Grammar {
 public:
  enum class Kind : uint8_t { kEnd, kBytes, kRule };
  struct Elem {
    Kind kind;
    uint32_t arg;  // kBytes: index into sets(); kRule: rule id; kEnd: unused
  };
  uint32_t root() const { return root_; }
  size_t n_rules() const { return alts_.size(); }
  // Positions in elems() of the first element of each alternative of `rule`.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alts_[rule]; }
  const std::vector<Elem>& elems() const { return elems_; }
  const ByteSet& set(uint32_t i) const { return sets_[i]; }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class GrammarBuilder;
  std::vector<Elem> elems_;                // alternatives, each ended by a kEnd element
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<ByteSet> sets_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

// Limits of what a grammar may hold (requests carry them): build() refuses larger ones.
struct GrammarLimits {
  size_t max_rules = 20000;
  size_t max_elems = 400000;
};

// Builds a Grammar. Rules are declared first (so they may refer to each other, recursion
// included) and given their alternatives later. Not thread-safe.
class GrammarBuilder {
 public:
  struct Item {
    bool is_rule = false;
    uint32_t rule = 0;
    ByteSet bytes;
  };
  using Seq = std::vector<Item>;

  uint32_t declare(std::string name);  // a new rule without alternatives yet
  void define(uint32_t rule, std::vector<Seq> alternatives);
  uint32_t add(std::string name, std::vector<Seq> alternatives);  // declare + define
  size_t n_rules() const { return rules_.size(); }
  size_t n_items() const { return n_items_; }

  static Item ref(uint32_t rule);
  static Item bytes(const ByteSet& set);
  static Item byte(uint8_t c);
  static Item range(uint8_t lo, uint8_t hi);
  static Seq literal(std::string_view text);

  // Checks and freezes: every rule defined, the grammar within `limits`, no left recursion
  // (a rule that can reach itself without consuming a byte), and the root able to produce at
  // least one string. Errors are kInvalidArgument with a message for the request's author.
  Result<std::shared_ptr<const Grammar>> build(uint32_t root, const GrammarLimits& limits = {}) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> rules_;
  std::vector<bool> defined_;
  size_t n_items_ = 0;
};

// item{lo,hi} (hi < 0: unbounded) as a sequence for `b`: lo copies of item, then a chain of
// optional copies or a right-recursive star.
GrammarBuilder::Seq grammar_repeat(GrammarBuilder& b, const GrammarBuilder::Seq& item, int lo, int hi);

// GBNF (llama.cpp's grammar notation: `name ::= alternatives`, "literals", [byte classes],
// (groups), ?, *, +, {m,n}, comments with #). The root rule is `root`. Character classes and
// literals are matched as UTF-8 bytes; a class with multi-byte characters is refused.
Result<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text, const GrammarLimits& limits = {});

// The vocabulary as a byte trie (each token's text as the detokenizer outputs it). Build one per
// tokenizer and share it (immutable; about 0.3 s for Gemma 3's 262,144 tokens). Control tokens,
// end-of-generation tokens and tokens without text are left out: a grammar never accepts them
// (end of generation is handled apart).
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tok);

  struct Node {
    uint32_t first_edge = 0, n_edges = 0;
    uint32_t first_token = 0, n_tokens = 0;  // tokens whose text ends here
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  int64_t n_vocab() const { return n_vocab_; }

 private:
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> eog_;
  int64_t n_vocab_ = 0;
};

// The state of one sequence's walk through a grammar: the set of pushdown stacks that the
// bytes accepted so far leave. Not thread-safe; the grammar, tokenizer and trie must outlive it.
class GrammarMatcher final : public TokenConstraint {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, const Tokenizer& tok,
                 std::shared_ptr<const TokenTrie> trie);
  // Bytes only (accept_bytes, can_end, must_end): no tokenizer, no token questions.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // TokenConstraint: whether the token may come next; the mask of all tokens that may.
  // End-of-generation tokens may come exactly when the text so far is a complete string.
  bool accepts(int32_t token) override;
  void allowed(std::vector<uint8_t>* mask) override;

  // Advances over the token's bytes; false (and no change) when the grammar refuses them.
  bool accept(int32_t token);
  bool accept_bytes(std::string_view bytes);
  bool can_end() const;   // the text so far is a complete string of the language
  bool must_end() const;  // ... and no byte can follow it
  size_t n_stacks() const { return stacks_.size(); }

  static constexpr size_t kMaxStacks = 256;  // ambiguity past this keeps the first ones

 private:
  struct Node {
    uint32_t pos;
    int32_t parent;
  };
  int32_t push(uint32_t pos, int32_t parent);
  void expand(int32_t stack, std::vector<int32_t>* out, int depth);
  void step(const std::vector<int32_t>& in, uint8_t byte, std::vector<int32_t>* out);
  static void dedupe(std::vector<int32_t>* v);
  void walk(uint32_t trie_node, const std::vector<int32_t>& stacks, size_t depth, std::vector<uint8_t>* mask);
  void compact();

  std::shared_ptr<const Grammar> g_;
  const Tokenizer* tok_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> intern_;
  std::vector<int32_t> stacks_;  // tops are byte sets; -1 is the empty (finished) stack
  std::vector<std::vector<int32_t>> scratch_;  // per trie depth
  std::vector<int32_t> a_, b_;
};

}  // namespace loom::llm
