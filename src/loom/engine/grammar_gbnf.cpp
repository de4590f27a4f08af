// GBNF text to a Grammar (see grammar.h): a recursive-descent reader of rules, alternatives,
// literals, byte classes, groups and repetition suffixes.
#include <map>

#include <fmt/format.h>

#include "loom/engine/grammar.h"

namespace loom::llm {
namespace {

using Seq = GrammarBuilder::Seq;

class GbnfReader {
 public:
  GbnfReader(std::string_view text, GrammarBuilder* b) : t_(text), b_(b) {}

  Status read() {
    while (true) {
      skip(true);
      if (at_end()) break;
      std::string name = word();
      if (name.empty()) return error("expected a rule name");
      skip(false);
      if (t_.substr(i_, 3) != "::=") return error(fmt::format("expected '::=' after '{}'", name));
      i_ += 3;
      const uint32_t r = rule(name);
      if (defined_.count(name)) return error(fmt::format("rule '{}' is defined twice", name));
      defined_.insert({name, true});
      std::vector<Seq> alts;
      LOOM_RETURN_IF_ERROR(alternatives(&alts, 0));
      b_->define(r, std::move(alts));
      if (b_->n_rules() > 20000 || b_->n_items() > 400000) return error("the grammar is too large");
    }
    if (!rules_.count("root")) return invalid_argument("the grammar has no 'root' rule");
    for (const auto& [name, id] : rules_)
      if (!defined_.count(name)) return invalid_argument("grammar rule '{}' is used but not defined", name);
    return Status();
  }
  uint32_t root() { return rules_.at("root"); }

 private:
  bool at_end() const { return i_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[i_]; }
  Status error(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    return invalid_argument("grammar line {}: {}", line, what);
  }
  // Spaces and comments; newlines only when `newlines`.
  void skip(bool newlines) {
    while (!at_end()) {
      const char c = t_[i_];
      if (c == '#') {
        while (!at_end() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }
  std::string word() {
    size_t s = i_;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '-' || t_[i_] == '_')) ++i_;
    return std::string(t_.substr(s, i_ - s));
  }
  uint32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    const uint32_t r = b_->declare(name);
    rules_.emplace(name, r);
    return r;
  }
  // A newline ends the rule at the outermost level, unless the next line goes on with '|'.
  Status alternatives(std::vector<Seq>* alts, int depth) {
    if (depth > 64) return error("groups nest too deeply");
    alts->emplace_back();
    while (true) {
      skip(depth > 0);
      if (at_end()) break;
      char c = peek();
      if (c == '\n') {
        size_t save = i_;
        skip(true);
        if (peek() == '|') continue;
        i_ = save;
        break;
      }
      if (c == '|') {
        ++i_;
        skip(true);
        alts->emplace_back();
        continue;
      }
      if (c == ')') {
        if (depth == 0) return error("unbalanced ')'");
        break;
      }
      LOOM_RETURN_IF_ERROR(term(&alts->back(), depth));
    }
    return Status();
  }
  Status escape(uint32_t* cp) {
    if (at_end()) return error("unfinished escape");
    const char c = t_[i_++];
    auto hex = [&](int n) -> Status {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        if (at_end() || !std::isxdigit(static_cast<unsigned char>(t_[i_]))) return error("bad hex escape");
        const char h = t_[i_++];
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      *cp = v;
      return Status();
    };
    switch (c) {
      case 'n': *cp = '\n'; return Status();
      case 't': *cp = '\t'; return Status();
      case 'r': *cp = '\r'; return Status();
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      default: *cp = static_cast<unsigned char>(c); return Status();
    }
  }
  // One character of a literal or class: a byte, an escape, or (returned whole) a UTF-8 sequence.
  Status character(std::string* bytes) {
    bytes->clear();
    if (t_[i_] == '\\') {
      ++i_;
      uint32_t cp = 0;
      LOOM_RETURN_IF_ERROR(escape(&cp));
      if (cp > 0x10FFFF) return error("escape beyond Unicode");
      if (cp < 0x80) *bytes += static_cast<char>(cp);
      else if (cp < 0x800) *bytes += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      else if (cp < 0x10000)
        *bytes += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
                   static_cast<char>(0x80 | (cp & 0x3F))};
      else
        *bytes += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
                   static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
      return Status();
    }
    const unsigned char c = static_cast<unsigned char>(t_[i_]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    *bytes = std::string(t_.substr(i_, len));
    i_ += std::min(len, t_.size() - i_);
    return Status();
  }
  Status term(Seq* seq, int depth) {
    Seq item;
    const char c = peek();
    if (c == '"') {
      ++i_;
      while (!at_end() && t_[i_] != '"') {
        std::string bytes;
        LOOM_RETURN_IF_ERROR(character(&bytes));
        for (char b : bytes) item.push_back(GrammarBuilder::byte(static_cast<uint8_t>(b)));
      }
      if (at_end()) return error("unterminated literal");
      ++i_;
    } else if (c == '[') {
      ++i_;
      bool negate = false;
      if (peek() == '^') {
        negate = true;
        ++i_;
      }
      ByteSet set;
      while (!at_end() && t_[i_] != ']') {
        std::string lo, hi;
        LOOM_RETURN_IF_ERROR(character(&lo));
        hi = lo;
        if (peek() == '-' && i_ + 1 < t_.size() && t_[i_ + 1] != ']') {
          ++i_;
          LOOM_RETURN_IF_ERROR(character(&hi));
        }
        if (lo.size() != 1 || hi.size() != 1)
          return error("character classes hold single-byte (ASCII) characters only; write other characters as literals");
        if (static_cast<uint8_t>(lo[0]) > static_cast<uint8_t>(hi[0])) return error("empty range in a character class");
        for (int b = static_cast<uint8_t>(lo[0]); b <= static_cast<uint8_t>(hi[0]); ++b) set.set(static_cast<size_t>(b));
      }
      if (at_end()) return error("unterminated character class");
      ++i_;
      if (negate) set.flip();
      item.push_back(GrammarBuilder::bytes(set));
    } else if (c == '.') {
      ++i_;
      item.push_back(GrammarBuilder::bytes(ByteSet().set()));
    } else if (c == '(') {
      ++i_;
      std::vector<Seq> alts;
      LOOM_RETURN_IF_ERROR(alternatives(&alts, depth + 1));
      if (peek() != ')') return error("missing ')'");
      ++i_;
      item.push_back(GrammarBuilder::ref(b_->add(fmt::format("group-{}", b_->n_rules()), std::move(alts))));
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      item.push_back(GrammarBuilder::ref(rule(word())));
    } else {
      return error(fmt::format("unexpected character '{}'", c));
    }
    // Repetition applies to the last term; wrap a multi-byte literal in a rule first.
    const char r = peek();
    if (r != '*' && r != '+' && r != '?' && r != '{') {
      seq->insert(seq->end(), item.begin(), item.end());
      return Status();
    }
    int lo = 0, hi = -1;
    ++i_;
    if (r == '+') lo = 1;
    else if (r == '?') hi = 1;
    else if (r == '{') {
      auto num = [&](int* out) -> bool {
        size_t s = i_;
        while (!at_end() && std::isdigit(static_cast<unsigned char>(t_[i_])) && i_ - s < 5) ++i_;
        if (s == i_) return false;
        *out = std::stoi(std::string(t_.substr(s, i_ - s)));
        return true;
      };
      skip(false);
      if (!num(&lo)) return error("expected a count in {}");
      skip(false);
      hi = lo;
      if (peek() == ',') {
        ++i_;
        skip(false);
        hi = -1;
        num(&hi);
        skip(false);
      }
      if (peek() != '}') return error("expected '}'");
      ++i_;
      if (hi >= 0 && hi < lo) return error("a repetition {m,n} needs m <= n");
      if (lo > 1000 || hi > 1000) return error("repetition counts above 1000 are not supported");
    }
    Seq rep = repeat(*b_, item, lo, hi);
    seq->insert(seq->end(), rep.begin(), rep.end());
    return Status();
  }

 public:
  // item{lo,hi} (hi -1: unbounded) as a sequence: lo copies, then a chain of optional ones or a
  // right-recursive star.
  static Seq repeat(GrammarBuilder& b, const Seq& item_in, int lo, int hi) {
    Seq item = item_in;
    if (item.size() > 1) item = {GrammarBuilder::ref(b.add(fmt::format("rep-{}", b.n_rules()), {item_in}))};
    Seq out;
    for (int k = 0; k < lo; ++k) out.insert(out.end(), item.begin(), item.end());
    if (hi < 0) {
      const uint32_t star = b.declare(fmt::format("star-{}", b.n_rules()));
      Seq more = item;
      more.push_back(GrammarBuilder::ref(star));
      b.define(star, {more, {}});
      out.push_back(GrammarBuilder::ref(star));
    } else if (hi > lo) {
      uint32_t tail = b.add(fmt::format("opt-{}", b.n_rules()), {item, {}});
      for (int k = lo + 1; k < hi; ++k) {
        Seq more = item;
        more.push_back(GrammarBuilder::ref(tail));
        tail = b.add(fmt::format("opt-{}", b.n_rules()), {more, {}});
      }
      out.push_back(GrammarBuilder::ref(tail));
    }
    return out;
  }

 private:
  std::string_view t_;
  size_t i_ = 0;
  GrammarBuilder* b_;
  std::map<std::string, uint32_t> rules_;
  std::map<std::string, bool> defined_;
};

}  // namespace

GrammarBuilder::Seq grammar_repeat(GrammarBuilder& b, const GrammarBuilder::Seq& item, int lo, int hi) {
  return GbnfReader::repeat(b, item, lo, hi);
}

Result<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text, const GrammarLimits& limits) {
  if (text.size() > 256 * 1024) return invalid_argument("the grammar is too long ({} bytes; at most 256 KiB)", text.size());
  GrammarBuilder b;
  GbnfReader reader(text, &b);
  LOOM_RETURN_IF_ERROR(reader.read());
  return b.build(reader.root(), limits);
}

}  // namespace loom::llm
