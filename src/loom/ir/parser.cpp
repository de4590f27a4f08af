// Lexer and recursive-descent parser for Loom IR text. Statements end at a newline; regions
// are `{ NEWLINE ... }`. Every error carries line:column; nesting depth is bounded.
#include "loom/ir/parser.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "loom/base/file.h"
#include "loom/ir/type_rules.h"
#include "loom/ir/verifier.h"

namespace loom::ir {
namespace {

constexpr int kMaxDepth = 64;
constexpr size_t kMaxTextBytes = 64u << 20;

enum class Tok : uint8_t {
  kEof, kNewline, kIdent, kLocal, kGlobal, kInt, kFloat,
  kLParen, kRParen, kLBrace, kRBrace, kLBracket, kRBracket, kLess, kGreater, kComma, kColon, kEqual, kError,
};

std::string_view tok_text(Tok t) {
  switch (t) {
    case Tok::kEof: return "end of input";
    case Tok::kNewline: return "end of line";
    case Tok::kIdent: return "a word";
    case Tok::kLocal: return "a %value";
    case Tok::kGlobal: return "an @name";
    case Tok::kInt: return "an integer";
    case Tok::kFloat: return "a number";
    case Tok::kLParen: return "'('";
    case Tok::kRParen: return "')'";
    case Tok::kLBrace: return "'{'";
    case Tok::kRBrace: return "'}'";
    case Tok::kLBracket: return "'['";
    case Tok::kRBracket: return "']'";
    case Tok::kLess: return "'<'";
    case Tok::kGreater: return "'>'";
    case Tok::kComma: return "','";
    case Tok::kColon: return "':'";
    case Tok::kEqual: return "'='";
    case Tok::kError: return "an invalid character";
  }
  return "?";
}

struct Token {
  Tok kind = Tok::kEof;
  std::string_view text;  // identifiers without the sigil; numbers as written
  SourceLoc loc;
  // Numbers: integers as magnitude + sign (so u64 max and i64 min both fit); floats as double.
  uint64_t magnitude = 0;
  bool negative = false;
  bool int_overflow = false;
  double number = 0;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {}

  Token next() {
    skip_space_and_comments();
    Token t;
    t.loc = {line_, col_};
    if (pos_ >= s_.size()) return t;
    char c = s_[pos_];
    size_t start = pos_;
    auto single = [&](Tok k) {
      advance();
      t.kind = k;
      t.text = s_.substr(start, 1);
      return t;
    };
    switch (c) {
      case '\n': return single(Tok::kNewline);
      case '(': return single(Tok::kLParen);
      case ')': return single(Tok::kRParen);
      case '{': return single(Tok::kLBrace);
      case '}': return single(Tok::kRBrace);
      case '[': return single(Tok::kLBracket);
      case ']': return single(Tok::kRBracket);
      case '<': return single(Tok::kLess);
      case '>': return single(Tok::kGreater);
      case ',': return single(Tok::kComma);
      case ':': return single(Tok::kColon);
      case '=': return single(Tok::kEqual);
      default: break;
    }
    if (c == '%' || c == '@') {
      advance();
      size_t b = pos_;
      while (pos_ < s_.size() && is_name_char(s_[pos_])) advance();
      if (pos_ == b) {
        t.kind = Tok::kError;
        t.text = s_.substr(start, 1);
        return t;
      }
      t.kind = c == '%' ? Tok::kLocal : Tok::kGlobal;
      t.text = s_.substr(b, pos_ - b);
      return t;
    }
    if (is_digit(c) || ((c == '-' || c == '+') && pos_ + 1 < s_.size() &&
                        (is_digit(s_[pos_ + 1]) || s_.substr(pos_ + 1, 3) == "inf"))) {
      return number(t);
    }
    if (is_name_char(c) && !is_digit(c) && c != '.') {
      while (pos_ < s_.size() && is_name_char(s_[pos_])) advance();
      t.kind = Tok::kIdent;
      t.text = s_.substr(start, pos_ - start);
      return t;
    }
    advance();
    t.kind = Tok::kError;
    t.text = s_.substr(start, 1);
    return t;
  }

 private:
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }

  void skip_space_and_comments() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  Token number(Token& t) {
    size_t start = pos_;
    if (s_[pos_] == '-' || s_[pos_] == '+') {
      t.negative = s_[pos_] == '-';
      advance();
    }
    if (s_.substr(pos_, 3) == "inf") {
      for (int i = 0; i < 3; ++i) advance();
      t.kind = Tok::kFloat;
      t.number = t.negative ? -INFINITY : INFINITY;
      t.text = s_.substr(start, pos_ - start);
      return t;
    }
    size_t digits = pos_;
    bool hex = s_.substr(pos_, 2) == "0x" || s_.substr(pos_, 2) == "0X";
    if (hex) {
      advance();
      advance();
      digits = pos_;
      while (pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_]))) advance();
    } else {
      while (pos_ < s_.size() && is_digit(s_[pos_])) advance();
    }
    bool is_float = false;
    if (!hex && pos_ < s_.size() && s_[pos_] == '.') {
      is_float = true;
      advance();
      while (pos_ < s_.size() && is_digit(s_[pos_])) advance();
    }
    if (!hex && pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t save = pos_;
      uint32_t save_col = col_;
      advance();
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) advance();
      if (pos_ < s_.size() && is_digit(s_[pos_])) {
        is_float = true;
        while (pos_ < s_.size() && is_digit(s_[pos_])) advance();
      } else {
        pos_ = save;  // not an exponent; the 'e' starts the next token (an error later)
        col_ = save_col;
      }
    }
    t.text = s_.substr(start, pos_ - start);
    // A number glued to letters ("12abc") is one bad token, not two.
    if (pos_ < s_.size() && is_name_char(s_[pos_])) {
      while (pos_ < s_.size() && is_name_char(s_[pos_])) advance();
      t.kind = Tok::kError;
      t.text = s_.substr(start, pos_ - start);
      return t;
    }
    if (is_float) {
      t.kind = Tok::kFloat;
      std::string_view body = s_.substr(digits, pos_ - digits);
      double v = 0;
      auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
      if (ec == std::errc::result_out_of_range) v = INFINITY;
      else if (ec != std::errc() || end != body.data() + body.size()) t.kind = Tok::kError;
      t.number = t.negative ? -v : v;
      return t;
    }
    std::string_view body = s_.substr(digits, pos_ - digits);
    if (body.empty()) {
      t.kind = Tok::kError;
      return t;
    }
    auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), t.magnitude, hex ? 16 : 10);
    t.int_overflow = ec != std::errc();
    t.kind = Tok::kInt;
    t.number = t.negative ? -static_cast<double>(t.magnitude) : static_cast<double>(t.magnitude);
    return t;
  }

  std::string_view s_;
  size_t pos_ = 0;
  uint32_t line_ = 1, col_ = 1;
};

class Parser {
 public:
  Parser(std::string_view text, std::string source) : lex_(text), source_(std::move(source)) { tok_ = lex_.next(); }

  Result<Module> run() {
    Module m;
    m.source_name = source_;
    skip_newlines();
    while (tok_.kind != Tok::kEof) {
      LOOM_RETURN_IF_ERROR(kernel(m));
      skip_newlines();
    }
    return m;
  }

 private:
  // --- token helpers ---
  Status error_at(SourceLoc loc, std::string msg) const {
    return invalid_argument("{}:{}:{}: {}", source_, loc.line, loc.col, msg);
  }
  Status error(std::string msg) const { return error_at(tok_.loc, std::move(msg)); }
  Status unexpected(std::string_view wanted) const {
    if (tok_.kind == Tok::kError) return error(fmt::format("unexpected '{}'", tok_.text));
    std::string got(tok_text(tok_.kind));
    if (tok_.kind == Tok::kIdent || tok_.kind == Tok::kInt || tok_.kind == Tok::kFloat)
      got = fmt::format("'{}'", tok_.text);
    else if (tok_.kind == Tok::kLocal)
      got = fmt::format("'%{}'", tok_.text);
    else if (tok_.kind == Tok::kGlobal)
      got = fmt::format("'@{}'", tok_.text);
    return error(fmt::format("expected {}, got {}", wanted, got));
  }
  void advance() { tok_ = lex_.next(); }
  bool accept(Tok k) {
    if (tok_.kind != k) return false;
    advance();
    return true;
  }
  Status expect(Tok k, std::string_view what = {}) {
    if (tok_.kind != k) return unexpected(what.empty() ? tok_text(k) : what);
    advance();
    return Status();
  }
  bool at_word(std::string_view w) const { return tok_.kind == Tok::kIdent && tok_.text == w; }
  Status expect_word(std::string_view w) {
    if (!at_word(w)) return unexpected(fmt::format("'{}'", w));
    advance();
    return Status();
  }
  void skip_newlines() {
    while (tok_.kind == Tok::kNewline) advance();
  }
  Status end_of_statement() {
    if (tok_.kind == Tok::kNewline) {
      advance();
      return Status();
    }
    if (tok_.kind == Tok::kRBrace || tok_.kind == Tok::kEof) return Status();
    return unexpected("end of line");
  }

  // --- types and values ---
  Result<Type> type() {
    if (tok_.kind != Tok::kIdent) return unexpected("a type");
    if (tok_.text == "ptr") {
      advance();
      LOOM_RETURN_IF_ERROR(expect(Tok::kLess, "'<' after 'ptr'"));
      if (tok_.kind != Tok::kIdent) return unexpected("an address space (global, shared, local, constant)");
      auto space = parse_addr_space(tok_.text);
      if (!space) return error(fmt::format("unknown address space '{}' (global, shared, local, constant)", tok_.text));
      advance();
      LOOM_RETURN_IF_ERROR(expect(Tok::kComma));
      if (tok_.kind != Tok::kIdent) return unexpected("a scalar type");
      auto elem = parse_scalar(tok_.text);
      if (!elem) return error(fmt::format("'{}' is not a scalar type", tok_.text));
      if (*elem == Scalar::kI1) return error("pointers to i1 are not allowed");
      advance();
      LOOM_RETURN_IF_ERROR(expect(Tok::kGreater));
      return Type::pointer(*space, *elem);
    }
    auto t = parse_value_type(tok_.text);
    if (!t) return error(fmt::format("unknown type '{}'", tok_.text));
    advance();
    return *t;
  }

  Result<std::vector<Type>> type_list() {
    std::vector<Type> ts;
    do {
      LOOM_ASSIGN_OR_RETURN(Type t, type());
      ts.push_back(t);
    } while (accept(Tok::kComma));
    return ts;
  }

  Result<Value*> use() {
    if (tok_.kind != Tok::kLocal) return unexpected("a %value");
    auto it = names_.find(tok_.text);
    if (it == names_.end()) return error(fmt::format("use of undefined value %{}", tok_.text));
    if (!it->second.visible)
      return error(fmt::format("%{} is not visible here: it is defined inside a region that has ended (at {}:{})",
                               tok_.text, it->second.loc.line, it->second.loc.col));
    Value* v = it->second.value;
    advance();
    return v;
  }

  Status define(Value* v, std::string_view name, SourceLoc loc) {
    auto [it, fresh] = names_.try_emplace(name, Binding{v, loc, true});
    if (!fresh)
      return error_at(loc, fmt::format("%{} is already defined at {}:{}", name, it->second.loc.line, it->second.loc.col));
    scope_.push_back(name);
    return Status();
  }

  Result<int64_t> small_int(std::string_view what) {
    if (tok_.kind != Tok::kInt || tok_.negative || tok_.int_overflow || tok_.magnitude > (1u << 30))
      return unexpected(what);
    int64_t v = static_cast<int64_t>(tok_.magnitude);
    advance();
    return v;
  }

  // --- structure ---
  Status kernel(Module& m) {
    SourceLoc kloc = tok_.loc;
    LOOM_RETURN_IF_ERROR(expect_word("kernel"));
    if (tok_.kind != Tok::kGlobal) return unexpected("a kernel name like @my_kernel");
    k_ = m.add_kernel(std::string(tok_.text));
    k_->loc = kloc;
    names_.clear();
    scope_.clear();
    advance();
    LOOM_RETURN_IF_ERROR(expect(Tok::kLParen));
    skip_newlines();
    if (tok_.kind != Tok::kRParen) {
      while (true) {
        skip_newlines();
        if (tok_.kind != Tok::kLocal) return unexpected("a parameter like %name: type");
        std::string_view name = tok_.text;
        SourceLoc loc = tok_.loc;
        advance();
        LOOM_RETURN_IF_ERROR(expect(Tok::kColon));
        LOOM_ASSIGN_OR_RETURN(Type t, type());
        if (!valid_param_type(t))
          return error_at(loc, fmt::format("parameter %{} has type {}; parameters are scalars or pointers to global "
                                           "or constant memory", name, t.str()));
        Value* v = k_->new_value(t, std::string(name));
        k_->params.push_back(v);
        LOOM_RETURN_IF_ERROR(define(v, name, loc));
        skip_newlines();
        if (!accept(Tok::kComma)) break;
      }
    }
    LOOM_RETURN_IF_ERROR(expect(Tok::kRParen, "',' or ')'"));
    if (at_word("bounds")) {  // bounds(max threads per block, min blocks per SM)
      advance();
      LOOM_RETURN_IF_ERROR(expect(Tok::kLParen));
      LOOM_ASSIGN_OR_RETURN(int64_t threads, small_int("the most threads per block (1..1024)"));
      LOOM_RETURN_IF_ERROR(expect(Tok::kComma));
      LOOM_ASSIGN_OR_RETURN(int64_t blocks, small_int("the fewest blocks per multiprocessor (0..32)"));
      LOOM_RETURN_IF_ERROR(expect(Tok::kRParen));
      if (threads < 1 || threads > 1024 || blocks > 32)
        return error_at(kloc, fmt::format("bounds({}, {}): threads must be 1..1024 and blocks 0..32", threads, blocks));
      k_->max_threads = static_cast<int>(threads);
      k_->min_blocks = static_cast<int>(blocks);
    }
    return region(k_->body, 0);
  }

  // `{` NEWLINE statements `}`; the caller has declared the region's arguments.
  Status region(Block& block, int depth) {
    if (depth > kMaxDepth) return error(fmt::format("regions nest deeper than {} levels", kMaxDepth));
    SourceLoc open = tok_.loc;
    LOOM_RETURN_IF_ERROR(expect(Tok::kLBrace));
    if (tok_.kind != Tok::kRBrace) LOOM_RETURN_IF_ERROR(expect(Tok::kNewline, "end of line after '{'"));
    size_t mark = scope_.size();
    while (true) {
      skip_newlines();
      if (tok_.kind == Tok::kRBrace) break;
      if (tok_.kind == Tok::kEof)
        return error(fmt::format("unterminated region: expected '}}' to close the '{{' at {}:{}", open.line, open.col));
      LOOM_RETURN_IF_ERROR(statement(block, depth));
    }
    advance();  // '}'
    while (scope_.size() > mark) {
      names_[scope_.back()].visible = false;
      scope_.pop_back();
    }
    return Status();
  }

  Status statement(Block& block, int depth) {
    SourceLoc loc = tok_.loc;
    std::vector<std::pair<std::string_view, SourceLoc>> result_names;
    if (tok_.kind == Tok::kLocal) {
      do {
        if (tok_.kind != Tok::kLocal) return unexpected("a %value");
        result_names.emplace_back(tok_.text, tok_.loc);
        advance();
      } while (accept(Tok::kComma));
      LOOM_RETURN_IF_ERROR(expect(Tok::kEqual, "'=' or ','"));
    }
    if (tok_.kind != Tok::kIdent) return unexpected("an operation");
    SourceLoc op_loc = tok_.loc;
    std::string_view word = tok_.text;
    std::string_view base = word.substr(0, word.find('.'));
    auto op = parse_op(base);
    if (!op) return error(fmt::format("unknown operation '{}'", word));
    Mode mode = Mode::kNone;
    const OpInfo& info = op_info(*op);
    if (base.size() < word.size()) {
      std::string_view suffix = word.substr(base.size() + 1);
      auto m = parse_mode(suffix, info.modes);
      if (!m) return error(fmt::format("'{}' does not take the modifier '.{}'", base, suffix));
      mode = *m;
    } else if (info.modes != ModeSet::kNone) {
      return error(fmt::format("'{}' needs a modifier, e.g. '{}.{}'", base, base,
                               info.modes == ModeSet::kCmp ? "lt" : info.modes == ModeSet::kDim ? "x"
                               : info.modes == ModeSet::kShuffle ? "xor" : "add"));
    }
    advance();
    Inst* inst = k_->new_inst(*op, result_names.empty() ? op_loc : loc);
    inst->mode = mode;
    std::vector<Type> types;  // explicit result types
    bool has_types = false;
    auto maybe_types = [&]() -> Status {
      if (!accept(Tok::kColon)) return Status();
      has_types = true;
      LOOM_ASSIGN_OR_RETURN(types, type_list());
      return Status();
    };
    auto operand = [&]() -> Status {
      LOOM_ASSIGN_OR_RETURN(Value* v, use());
      inst->operands.push_back(v);
      return Status();
    };
    auto ptr_index = [&]() -> Status {
      LOOM_RETURN_IF_ERROR(operand());
      LOOM_RETURN_IF_ERROR(expect(Tok::kLBracket, "'[' after the pointer"));
      LOOM_RETURN_IF_ERROR(operand());
      return expect(Tok::kRBracket);
    };
    auto align = [&]() -> Status {
      if (!accept(Tok::kComma)) return Status();
      LOOM_RETURN_IF_ERROR(expect_word("align"));
      LOOM_ASSIGN_OR_RETURN(inst->imm, small_int("an alignment in bytes"));
      if (inst->imm == 0) return error("alignment must be positive");
      return Status();
    };

    switch (*op) {
      case Op::kConst: {
        Token lit = tok_;
        if (lit.kind != Tok::kInt && lit.kind != Tok::kFloat &&
            !(lit.kind == Tok::kIdent && (lit.text == "inf" || lit.text == "nan" || lit.text == "true" || lit.text == "false")))
          return unexpected("a literal");
        advance();
        LOOM_RETURN_IF_ERROR(maybe_types());
        if (!has_types || types.size() != 1) return error_at(op_loc, "'const' needs one type, as in 'const 1.0 : f32'");
        LOOM_RETURN_IF_ERROR(literal(lit, types[0], inst->lit));
        break;
      }
      case Op::kLoad: {
        LOOM_RETURN_IF_ERROR(ptr_index());
        LOOM_RETURN_IF_ERROR(align());
        LOOM_RETURN_IF_ERROR(maybe_types());
        break;
      }
      case Op::kPrefetch: {  // prefetch %p[%i]
        LOOM_RETURN_IF_ERROR(ptr_index());
        break;
      }
      case Op::kStore:
      case Op::kAtomic: {
        LOOM_RETURN_IF_ERROR(ptr_index());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the value"));
        LOOM_RETURN_IF_ERROR(operand());
        if (*op == Op::kStore) LOOM_RETURN_IF_ERROR(align());
        LOOM_RETURN_IF_ERROR(maybe_types());
        break;
      }
      case Op::kCpAsync: {  // cp_async %dst[%i], %src[%j], BYTES
        LOOM_RETURN_IF_ERROR(ptr_index());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the source"));
        LOOM_RETURN_IF_ERROR(ptr_index());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the byte count (4, 8 or 16)"));
        LOOM_ASSIGN_OR_RETURN(inst->imm, small_int("a byte count (4, 8 or 16)"));
        break;
      }
      case Op::kCpAsyncWait:
      case Op::kWgmmaWait: {  // cp_async_wait N, wgmma_wait N
        LOOM_ASSIGN_OR_RETURN(inst->imm, small_int("the number of groups left pending (0 to 8)"));
        break;
      }
      case Op::kWgmma:      // wgmma %a[%i], %b[%j], %c, lbo L, sbo S
      case Op::kWgmmaRs: {  // wgmma_rs %a, %b[%j], %c, lbo L, sbo S
        LOOM_RETURN_IF_ERROR(*op == Op::kWgmmaRs ? operand() : ptr_index());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the B tile"));
        LOOM_RETURN_IF_ERROR(ptr_index());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the accumulators"));
        LOOM_RETURN_IF_ERROR(operand());
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and 'lbo BYTES'"));
        LOOM_RETURN_IF_ERROR(expect_word("lbo"));
        LOOM_ASSIGN_OR_RETURN(int64_t lbo, small_int("the byte stride of core matrices along k"));
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and 'sbo BYTES'"));
        LOOM_RETURN_IF_ERROR(expect_word("sbo"));
        LOOM_ASSIGN_OR_RETURN(int64_t sbo, small_int("the byte stride of core matrices along the rows"));
        inst->imm = lbo | (sbo << 32);
        LOOM_RETURN_IF_ERROR(maybe_types());
        break;
      }
      case Op::kAmxZero:
      case Op::kAmxLoad:
      case Op::kAmxStore: {  // amx_zero T, rows R, bytes B; amx_load/amx_store T, rows R, bytes B, %p[%i], %stride
        LOOM_ASSIGN_OR_RETURN(int64_t tile, small_int("a tile number (0 to 7)"));
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and 'rows R'"));
        LOOM_RETURN_IF_ERROR(expect_word("rows"));
        LOOM_ASSIGN_OR_RETURN(int64_t rows, small_int("the tile's rows (1 to 16)"));
        LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and 'bytes B'"));
        LOOM_RETURN_IF_ERROR(expect_word("bytes"));
        LOOM_ASSIGN_OR_RETURN(int64_t bytes, small_int("the tile's bytes per row (4 to 64)"));
        inst->imm = (tile & 0xFF) | ((rows & 0xFF) << 8) | ((bytes & 0xFF) << 16);
        if (tile > 255 || rows > 255 || bytes > 255) inst->imm = int64_t{1} << 40;  // refused by the verifier
        if (*op != Op::kAmxZero) {
          LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the memory operand"));
          LOOM_RETURN_IF_ERROR(ptr_index());
          LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the stride in bytes"));
          LOOM_RETURN_IF_ERROR(operand());
        }
        break;
      }
      case Op::kAmxDpI8:
      case Op::kAmxDpBf16: {  // amx_dp_i8 C, A, B
        int64_t t[3];
        for (int j = 0; j < 3; ++j) {
          if (j > 0) LOOM_RETURN_IF_ERROR(expect(Tok::kComma, "',' and the next tile"));
          LOOM_ASSIGN_OR_RETURN(t[j], small_int("a tile number (0 to 7)"));
        }
        inst->imm = (t[0] & 0xFF) | ((t[1] & 0xFF) << 8) | ((t[2] & 0xFF) << 16);
        if (t[0] > 255 || t[1] > 255 || t[2] > 255) inst->imm = int64_t{1} << 40;
        break;
      }
      case Op::kExtract: {
        LOOM_RETURN_IF_ERROR(operand());
        LOOM_RETURN_IF_ERROR(expect(Tok::kLBracket, "'[' and a lane number"));
        LOOM_ASSIGN_OR_RETURN(inst->imm, small_int("a lane number"));
        LOOM_RETURN_IF_ERROR(expect(Tok::kRBracket));
        LOOM_RETURN_IF_ERROR(maybe_types());
        break;
      }
      case Op::kAllocShared:
      case Op::kAllocLocal: {
        LOOM_ASSIGN_OR_RETURN(inst->imm, small_int("an element count"));
        LOOM_RETURN_IF_ERROR(maybe_types());
        if (!has_types) return error_at(op_loc, fmt::format("'{}' needs its pointer type, as in ': ptr<{}, f32>'",
                                                           base, *op == Op::kAllocShared ? "shared" : "local"));
        break;
      }
      case Op::kFor: return for_stmt(block, inst, result_names, depth);
      case Op::kIf: return if_stmt(block, inst, result_names, depth);
      default: {
        if (info.num_operands != 0 && tok_.kind == Tok::kLocal) {
          do LOOM_RETURN_IF_ERROR(operand());
          while (accept(Tok::kComma));
        }
        LOOM_RETURN_IF_ERROR(maybe_types());
        if (info.num_operands >= 0 && inst->operands.size() != static_cast<size_t>(info.num_operands))
          return error_at(op_loc, fmt::format("'{}' takes {} operand(s), got {}", base, info.num_operands,
                                              inst->operands.size()));
        break;
      }
    }
    // Results of ordinary (single-result or no-result) ops.
    const bool no_result = rule_has_no_result(info.rule);
    if (no_result && !result_names.empty()) return error_at(loc, fmt::format("'{}' has no result to name", base));
    if (no_result && has_types) return error_at(op_loc, fmt::format("'{}' has no result type", base));
    if (!no_result) {
      if (result_names.size() != 1)
        return error_at(loc, fmt::format("'{}' has one result: write '%name = {} ...'", base, base));
      Type t;
      if (has_types) {
        if (types.size() != 1) return error_at(op_loc, fmt::format("'{}' has one result type", base));
        t = types[0];
      } else {
        std::vector<Type> ots;
        for (const Value* v : inst->operands) ots.push_back(v->type);
        t = infer_result_type(*op, ots);
        if (!t.valid()) {
          std::string why = check_inst_types(*inst, /*check_results=*/false);
          if (!why.empty()) return error_at(inst->loc, why);
          std::string list;
          for (size_t i = 0; i < ots.size(); ++i) list += (i ? ", " : "") + ots[i].str();
          return error_at(op_loc, fmt::format("cannot infer the result type of '{}' from ({}); write ': TYPE'",
                                              base, list));
        }
      }
      Value* r = k_->new_value(t, std::string(result_names[0].first));
      r->def = inst;
      inst->results.push_back(r);
      LOOM_RETURN_IF_ERROR(define(r, result_names[0].first, result_names[0].second));
    }
    if (*op == Op::kYield && depth == 0) return error_at(op_loc, "'yield' outside a region");
    block.insts.push_back(inst);
    return end_of_statement();
  }

  Status literal(const Token& lit, Type t, Literal& out) {
    if (!t.is_value()) return error_at(lit.loc, fmt::format("'const' makes a scalar or vector, not {}", t.str()));
    Scalar s = t.elem();
    if (lit.kind == Tok::kIdent && (lit.text == "true" || lit.text == "false")) {
      if (s != Scalar::kI1) return error_at(lit.loc, fmt::format("'{}' is an i1 literal, not {}", lit.text, t.str()));
      out = make_literal(s, 0, lit.text == "true");
      return Status();
    }
    if (is_float(s)) {
      double v = lit.number;
      if (lit.kind == Tok::kIdent) v = lit.text == "nan" ? NAN : INFINITY;
      if (lit.kind == Tok::kInt && lit.int_overflow) return error_at(lit.loc, "integer literal out of range");
      out = make_literal(s, v, 0);
      return Status();
    }
    if (lit.kind != Tok::kInt) return error_at(lit.loc, fmt::format("'{}' is not an integer literal for {}", lit.text, t.str()));
    int bits = scalar_bits(s);
    // Accept anything that fits the width as signed or unsigned ("0xFFFFFFFF : i32" is -1).
    uint64_t max_pos = bits >= 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
    uint64_t max_neg = bits >= 64 ? (uint64_t{1} << 63) : (uint64_t{1} << (bits - 1));
    if (s == Scalar::kI1) max_neg = 1;
    if (lit.int_overflow || (!lit.negative && lit.magnitude > max_pos) || (lit.negative && lit.magnitude > max_neg))
      return error_at(lit.loc, fmt::format("{} does not fit in {}", lit.text, scalar_name(s)));
    int64_t v = lit.negative ? static_cast<int64_t>(0 - lit.magnitude) : static_cast<int64_t>(lit.magnitude);
    out = make_literal(s, 0, v);
    return Status();
  }

  using Names = std::vector<std::pair<std::string_view, SourceLoc>>;

  Status bind_results(Inst* inst, const Names& names, const std::vector<Type>& types, SourceLoc loc) {
    if (names.size() != types.size())
      return error_at(loc, fmt::format("'{}' has {} result(s) but {} name(s)", inst->info().name, types.size(), names.size()));
    for (size_t i = 0; i < names.size(); ++i) {
      Value* r = k_->new_value(types[i], std::string(names[i].first));
      r->def = inst;
      inst->results.push_back(r);
      LOOM_RETURN_IF_ERROR(define(r, names[i].first, names[i].second));
    }
    return Status();
  }

  // for %i = %lo to %hi step %s [iter(%a = %x, ...)] [: types] { ... }
  Status for_stmt(Block& block, Inst* inst, const Names& result_names, int depth) {
    if (tok_.kind != Tok::kLocal) return unexpected("the induction variable, as in 'for %i = %lo to %hi step %s'");
    std::string_view iv_name = tok_.text;
    SourceLoc iv_loc = tok_.loc;
    advance();
    LOOM_RETURN_IF_ERROR(expect(Tok::kEqual));
    LOOM_ASSIGN_OR_RETURN(Value* lo, use());
    LOOM_RETURN_IF_ERROR(expect_word("to"));
    LOOM_ASSIGN_OR_RETURN(Value* hi, use());
    LOOM_RETURN_IF_ERROR(expect_word("step"));
    LOOM_ASSIGN_OR_RETURN(Value* step, use());
    inst->operands = {lo, hi, step};
    Names iter_names;
    if (at_word("iter")) {
      advance();
      LOOM_RETURN_IF_ERROR(expect(Tok::kLParen));
      do {
        if (tok_.kind != Tok::kLocal) return unexpected("a loop-carried value like %acc = %init");
        iter_names.emplace_back(tok_.text, tok_.loc);
        advance();
        LOOM_RETURN_IF_ERROR(expect(Tok::kEqual));
        LOOM_ASSIGN_OR_RETURN(Value* init, use());
        inst->operands.push_back(init);
      } while (accept(Tok::kComma));
      LOOM_RETURN_IF_ERROR(expect(Tok::kRParen, "',' or ')'"));
    }
    std::vector<Type> types;
    if (accept(Tok::kColon)) {
      LOOM_ASSIGN_OR_RETURN(types, type_list());
    } else {
      for (size_t i = 3; i < inst->operands.size(); ++i) types.push_back(inst->operands[i]->type);
    }
    if (types.size() != iter_names.size())
      return error_at(inst->loc, fmt::format("'for' carries {} value(s) but lists {} type(s)", iter_names.size(), types.size()));
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != inst->operands[i + 3]->type)
        return error_at(iter_names[i].second, fmt::format("%{} is declared {} but starts as {}", iter_names[i].first,
                                                          types[i].str(), inst->operands[i + 3]->type.str()));
    inst->regions.resize(1);
    Block& body = inst->regions[0];
    size_t mark = scope_.size();
    Value* iv = k_->new_value(lo->type, std::string(iv_name));
    body.args.push_back(iv);
    LOOM_RETURN_IF_ERROR(define(iv, iv_name, iv_loc));
    for (size_t i = 0; i < iter_names.size(); ++i) {
      Value* a = k_->new_value(types[i], std::string(iter_names[i].first));
      body.args.push_back(a);
      LOOM_RETURN_IF_ERROR(define(a, iter_names[i].first, iter_names[i].second));
    }
    LOOM_RETURN_IF_ERROR(region(body, depth + 1));
    while (scope_.size() > mark) {  // the induction variable and iter args end with the body
      names_[scope_.back()].visible = false;
      scope_.pop_back();
    }
    LOOM_RETURN_IF_ERROR(bind_results(inst, result_names, types, inst->loc));
    block.insts.push_back(inst);
    return end_of_statement();
  }

  // if %c [: types] { ... } [else { ... }]
  Status if_stmt(Block& block, Inst* inst, const Names& result_names, int depth) {
    LOOM_ASSIGN_OR_RETURN(Value* cond, use());
    inst->operands = {cond};
    std::vector<Type> types;
    if (accept(Tok::kColon)) {
      LOOM_ASSIGN_OR_RETURN(types, type_list());
    }
    inst->regions.resize(2);
    LOOM_RETURN_IF_ERROR(region(inst->regions[0], depth + 1));
    if (at_word("else")) {
      advance();
      LOOM_RETURN_IF_ERROR(region(inst->regions[1], depth + 1));
    } else if (!types.empty()) {
      return error_at(inst->loc, "an 'if' with results needs an 'else' region that yields them");
    }
    LOOM_RETURN_IF_ERROR(bind_results(inst, result_names, types, inst->loc));
    block.insts.push_back(inst);
    return end_of_statement();
  }

  struct Binding {
    Value* value;
    SourceLoc loc;
    bool visible;
  };

  Lexer lex_;
  Token tok_;
  std::string source_;
  Kernel* k_ = nullptr;
  std::unordered_map<std::string_view, Binding> names_;
  std::vector<std::string_view> scope_;
};

}  // namespace

Result<Module> parse_module(std::string_view text, std::string source_name) {
  if (text.size() > kMaxTextBytes) return invalid_argument("{}: input is larger than 64 MiB", source_name);
  Parser parser(text, source_name);
  LOOM_ASSIGN_OR_RETURN(Module m, parser.run());
  LOOM_RETURN_IF_ERROR(verify(m));
  return m;
}

Result<Module> parse_file(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_module(text, path);
}

}  // namespace loom::ir
