#include "control/collective/dsl.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace heddle::collective {
namespace {

// ---------------------------------------------------------------------------------------------
// Lexer

enum class Tok : uint8_t {
  kEof,
  kNewline,
  kIdent,
  kName,  // the word after `intent` (may contain '-' and '.')
  kInt,
  kString,
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kComma,
  kSemicolon,
  kAssign,
  kDotDot,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kPercent,
  kCaret,
  kShl,
  kShr,
  kAmp,
  kPipe,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAndAnd,
  kOrOr,
  kBang,
};

struct Token {
  Tok kind = Tok::kEof;
  std::string text;  // identifier, name or string contents
  int64_t value = 0;
  uint32_t line = 0, column = 0;
};

struct Failure {
  uint32_t line = 0, column = 0;
  std::string code;
  std::string message;
};

std::string DescribeToken(const Token& t) {
  switch (t.kind) {
    case Tok::kEof:
      return "end of text";
    case Tok::kNewline:
      return "end of line";
    case Tok::kIdent:
    case Tok::kName:
      return absl::StrCat("'", t.text, "'");
    case Tok::kInt:
      return absl::StrCat("number ", t.value);
    case Tok::kString:
      return "a string";
    default:
      return absl::StrCat("'", t.text, "'");
  }
}

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || IsDigit(c); }
bool IsNameChar(char c) { return IsIdentChar(c) || c == '-' || c == '.'; }

// Tokenizes the whole text. Newlines inside parentheses are not tokens, so a long expression may
// be split over lines within ( ).
bool Lex(std::string_view text, std::vector<Token>* out, Failure* failure) {
  uint32_t line = 1, column = 1;
  size_t i = 0;
  int paren_depth = 0;
  bool after_intent = false;
  auto fail = [&](uint32_t l, uint32_t c, std::string code, std::string message) {
    *failure = {l, c, std::move(code), std::move(message)};
    return false;
  };
  auto push = [&](Tok kind, size_t length, uint32_t l, uint32_t c) {
    Token t;
    t.kind = kind;
    t.text = std::string(text.substr(i, length));
    t.line = l;
    t.column = c;
    out->push_back(std::move(t));
    i += length;
    column += static_cast<uint32_t>(length);
  };
  while (i < text.size()) {
    const char c = text[i];
    const uint32_t l = line, col = column;
    if (c == '\n') {
      if (paren_depth == 0) {
        Token t;
        t.kind = Tok::kNewline;
        t.line = l;
        t.column = col;
        out->push_back(std::move(t));
      }
      ++i;
      ++line;
      column = 1;
      after_intent = false;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      ++column;
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') {
        ++i;
        ++column;
      }
      continue;
    }
    if (after_intent) {
      after_intent = false;
      size_t n = 0;
      while (i + n < text.size() && IsNameChar(text[i + n])) ++n;
      if (n == 0) {
        return fail(l, col, "syntax",
                    "expected a name after 'intent' (letters, digits, '_', '-', '.')");
      }
      push(Tok::kName, n, l, col);
      continue;
    }
    if (IsIdentStart(c)) {
      size_t n = 0;
      while (i + n < text.size() && IsIdentChar(text[i + n])) ++n;
      push(Tok::kIdent, n, l, col);
      after_intent = out->back().text == "intent";
      continue;
    }
    if (IsDigit(c)) {
      size_t n = 0;
      uint64_t v = 0;
      bool hex = c == '0' && i + 1 < text.size() && (text[i + 1] == 'x' || text[i + 1] == 'X');
      if (hex) {
        n = 2;
        size_t digits = 0;
        while (i + n < text.size()) {
          const char d = text[i + n];
          int dv = IsDigit(d)               ? d - '0'
                   : (d >= 'a' && d <= 'f') ? d - 'a' + 10
                   : (d >= 'A' && d <= 'F') ? d - 'A' + 10
                                            : -1;
          if (dv < 0) break;
          if (v > (uint64_t{std::numeric_limits<int64_t>::max()} >> 4)) {
            return fail(l, col, "integer-too-large", "integer literal is larger than 2^63-1");
          }
          v = v * 16 + static_cast<uint64_t>(dv);
          ++n;
          ++digits;
        }
        if (digits == 0) return fail(l, col, "syntax", "expected hex digits after '0x'");
      } else {
        while (i + n < text.size() && IsDigit(text[i + n])) {
          const uint64_t d = static_cast<uint64_t>(text[i + n] - '0');
          if (v > (uint64_t{std::numeric_limits<int64_t>::max()} - d) / 10) {
            return fail(l, col, "integer-too-large", "integer literal is larger than 2^63-1");
          }
          v = v * 10 + d;
          ++n;
        }
      }
      if (i + n < text.size() && IsIdentChar(text[i + n])) {
        return fail(l, col + static_cast<uint32_t>(n), "syntax",
                    "a number must not run into a name; put a space or an operator between");
      }
      push(Tok::kInt, n, l, col);
      out->back().value = static_cast<int64_t>(v);
      continue;
    }
    if (c == '"') {
      std::string s;
      size_t j = i + 1;
      uint32_t cc = col + 1;
      for (;;) {
        if (j >= text.size() || text[j] == '\n') {
          return fail(l, col, "unterminated-string", "string is not closed on its line");
        }
        if (text[j] == '"') break;
        if (text[j] == '\\') {
          if (j + 1 >= text.size() || (text[j + 1] != '"' && text[j + 1] != '\\')) {
            return fail(l, cc, "syntax", "only \\\" and \\\\ are escapes in a string");
          }
          s.push_back(text[j + 1]);
          j += 2;
          cc += 2;
          continue;
        }
        s.push_back(text[j]);
        ++j;
        ++cc;
      }
      Token t;
      t.kind = Tok::kString;
      t.text = std::move(s);
      t.line = l;
      t.column = col;
      out->push_back(std::move(t));
      column += static_cast<uint32_t>(j + 1 - i);
      i = j + 1;
      continue;
    }
    // Operators: two characters before one, so "<=" is not "<" then "=".
    struct Punct {
      std::string_view chars;
      Tok kind;
    };
    static constexpr Punct kPunct[] = {
        {"..", Tok::kDotDot}, {"<<", Tok::kShl},   {">>", Tok::kShr},      {"<=", Tok::kLe},
        {">=", Tok::kGe},     {"==", Tok::kEq},    {"!=", Tok::kNe},       {"&&", Tok::kAndAnd},
        {"||", Tok::kOrOr},   {"(", Tok::kLParen}, {")", Tok::kRParen},    {"{", Tok::kLBrace},
        {"}", Tok::kRBrace},  {",", Tok::kComma},  {";", Tok::kSemicolon}, {"=", Tok::kAssign},
        {"+", Tok::kPlus},    {"-", Tok::kMinus},  {"*", Tok::kStar},      {"/", Tok::kSlash},
        {"%", Tok::kPercent}, {"^", Tok::kCaret},  {"&", Tok::kAmp},       {"|", Tok::kPipe},
        {"<", Tok::kLt},      {">", Tok::kGt},     {"!", Tok::kBang},
    };
    const Punct* punct = nullptr;
    for (const Punct& p : kPunct) {
      if (text.substr(i, p.chars.size()) == p.chars) {
        punct = &p;
        break;
      }
    }
    if (punct == nullptr) {
      const unsigned char u = static_cast<unsigned char>(c);
      std::string shown = (u >= 0x21 && u < 0x7f) ? absl::StrCat("'", std::string(1, c), "'")
                                                  : absl::StrFormat("byte 0x%02x", u);
      return fail(l, col, "bad-character", absl::StrCat("unexpected character ", shown));
    }
    if (punct->kind == Tok::kLParen) ++paren_depth;
    if (punct->kind == Tok::kRParen && paren_depth > 0) --paren_depth;
    push(punct->kind, punct->chars.size(), l, col);
  }
  Token eof;
  eof.kind = Tok::kEof;
  eof.line = line;
  eof.column = column;
  out->push_back(std::move(eof));
  return true;
}

// ---------------------------------------------------------------------------------------------
// Syntax tree

enum class Op : uint8_t {
  kConst,
  kVar,
  kN,
  kK,
  kRoot,
  kNeg,
  kNot,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kXor,
  kAnd,
  kOr,
  kShl,
  kShr,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kLogicalAnd,
  kLogicalOr,
  kLog2,
  kCeilLog2,
  kPow2,
  kMin,
  kMax,
  kChunk,
};

struct Expr {
  Op op = Op::kConst;
  int64_t value = 0;  // kConst: the value; kVar: the variable's index
  std::vector<std::unique_ptr<Expr>> args;
  uint32_t line = 0, column = 0;              // the operator, function or value
  uint32_t start_line = 0, start_column = 0;  // where the whole expression starts
  uint32_t depth = 1;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Range {
  ExprPtr lo, hi, step;  // hi null: the single value lo; step null: 1
};

enum class SlotForm : uint8_t { kAll, kOne, kChunks, kChunkPairs, kSlots };

struct SlotSet {
  SlotForm form = SlotForm::kOne;
  ExprPtr one;
  Range a, b;
};

enum class StmtKind : uint8_t { kParam, kLet, kRequire, kMove, kFor, kIf };

struct Stmt {
  StmtKind kind = StmtKind::kLet;
  uint32_t line = 0, column = 0;
  int var = -1;         // kParam, kLet, kFor
  std::string name;     // kParam
  ExprPtr e1, e2, e3;   // let/param value; require cond; move from, to; for lo, hi, step; if cond
  std::string message;  // kRequire
  MoveKind move = MoveKind::kCopy;
  SlotSet slots;
  std::vector<Stmt> body, else_body;
};

struct Program {
  std::string name;
  Kind kind = Kind::kAllGather;
  bool have_collective = false;
  uint32_t declared_chunks = 0;
  int vars = 0;
  std::vector<Stmt> body;
  std::vector<std::string> params;  // declared, in order
};

// ---------------------------------------------------------------------------------------------
// Parser

constexpr uint32_t kMaxExprDepth = 256;

bool IsKeyword(std::string_view s) {
  static constexpr std::string_view kWords[] = {
      "intent", "collective", "chunks", "param", "require", "let",  "copy", "reduce", "from",
      "to",     "into",       "for",    "in",    "step",    "if",   "else", "all",    "slots",
      "N",      "K",          "root",   "log2",  "clog2",   "pow2", "min",  "max",    "chunk"};
  return std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords);
}

bool IsRooted(Kind k) { return k == Kind::kBroadcast || k == Kind::kReduce; }
bool IsBlocked(Kind k) {
  return k == Kind::kAllGather || k == Kind::kReduceScatter || k == Kind::kAllReduce;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::vector<Diagnostic>* warnings)
      : tokens_(std::move(tokens)), warnings_(warnings) {}

  bool Parse(Program* program, Failure* failure) {
    program_ = program;
    failure_ = failure;
    scopes_.emplace_back();
    bool saw_statement = false;
    for (;;) {
      SkipSeparators();
      const Token& t = Peek();
      if (t.kind == Tok::kEof) break;
      if (IsWord(t, "intent")) {
        if (!program->name.empty()) return Fail(t, "duplicate-header", "a second 'intent' line");
        if (saw_statement || program->have_collective) {
          return Fail(t, "syntax", "'intent' comes first, before 'collective'");
        }
        Next();
        const Token& n = Peek();
        if (n.kind != Tok::kName) return Fail(n, "syntax", "expected the intent's name");
        program->name = n.text;
        Next();
      } else if (IsWord(t, "collective")) {
        if (program->name.empty()) {
          return Fail(t, "missing-header", "the program starts with 'intent <name>'");
        }
        if (program->have_collective) {
          return Fail(t, "duplicate-header", "a second 'collective' line");
        }
        if (saw_statement) {
          return Fail(t, "syntax", "'collective' comes before any param, let or move");
        }
        Next();
        const Token& k = Peek();
        std::optional<Kind> kind;
        if (k.kind == Tok::kIdent) kind = KindFromName(k.text);
        if (!kind) {
          return Fail(k, "unknown-collective",
                      absl::StrCat("unknown collective ", DescribeToken(k),
                                   "; use allgather, reducescatter, allreduce, broadcast, "
                                   "reduce or alltoall"));
        }
        Next();
        program->kind = *kind;
        program->have_collective = true;
        if (IsWord(Peek(), "chunks")) {
          Next();
          const Token& v = Peek();
          if (v.kind != Tok::kInt || v.value < 1 || v.value > int64_t{kMaxSlots}) {
            return Fail(v, "syntax", "expected the chunks per rank, an integer ≥ 1");
          }
          program->declared_chunks = static_cast<uint32_t>(v.value);
          Next();
        }
      } else {
        if (program->name.empty()) {
          return Fail(t, "missing-header", "the program starts with 'intent <name>'");
        }
        if (!program->have_collective) {
          return Fail(t, "missing-header",
                      "expected 'collective <kind>' before the first statement");
        }
        saw_statement = true;
        Stmt s;
        if (IsWord(t, "param")) {
          if (!ParseParam(&s)) return false;
        } else if (!ParseStatement(&s)) {
          return false;
        }
        program->body.push_back(std::move(s));
      }
      if (!ExpectEnd()) return false;
    }
    if (program->name.empty()) {
      return Fail(Peek(), "missing-header", "the program starts with 'intent <name>'");
    }
    if (!program->have_collective) {
      return Fail(Peek(), "missing-header", "no 'collective <kind>' line");
    }
    for (const ParamUse& p : param_uses_) {
      if (p.uses == 0) {
        warnings_->push_back({p.line, p.column, "unused-param",
                              absl::StrCat("parameter ", p.name, " is never used"), false});
      }
    }
    program->vars = next_var_;
    return true;
  }

 private:
  struct Binding {
    std::string name;
    int var;
    uint32_t line, column;
    int param = -1;  // index into param_uses_
  };
  struct ParamUse {
    std::string name;
    uint32_t line, column;
    int uses = 0;
  };

  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  static bool IsWord(const Token& t, std::string_view w) {
    return t.kind == Tok::kIdent && t.text == w;
  }
  bool Fail(const Token& t, std::string code, std::string message) {
    *failure_ = {t.line, t.column, std::move(code), std::move(message)};
    return false;
  }
  bool Fail(uint32_t line, uint32_t column, std::string code, std::string message) {
    *failure_ = {line, column, std::move(code), std::move(message)};
    return false;
  }
  void SkipSeparators() {
    while (Peek().kind == Tok::kNewline || Peek().kind == Tok::kSemicolon) Next();
  }
  // After a statement: the end of its line, a ';', a '}' (left for the block) or the end.
  bool ExpectEnd() {
    const Token& t = Peek();
    if (t.kind == Tok::kNewline || t.kind == Tok::kSemicolon) {
      Next();
      return true;
    }
    if (t.kind == Tok::kRBrace || t.kind == Tok::kEof) return true;
    return Fail(t, "syntax",
                absl::StrCat("expected the end of the statement, found ", DescribeToken(t)));
  }
  bool Expect(Tok kind, std::string_view what) {
    if (Peek().kind != kind) {
      return Fail(Peek(), "syntax",
                  absl::StrCat("expected ", std::string(what), ", found ", DescribeToken(Peek())));
    }
    Next();
    return true;
  }
  bool ExpectWord(std::string_view w) {
    if (!IsWord(Peek(), w)) {
      return Fail(Peek(), "syntax",
                  absl::StrCat("expected '", std::string(w), "', found ", DescribeToken(Peek())));
    }
    Next();
    return true;
  }

  const Binding* Lookup(std::string_view name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      for (const Binding& b : *s) {
        if (b.name == name) return &b;
      }
    }
    return nullptr;
  }

  // Declares a name in the innermost scope; names are never shadowed.
  bool Declare(const Token& t, int* var, int param = -1) {
    if (t.kind != Tok::kIdent) {
      return Fail(t, "syntax", absl::StrCat("expected a name, found ", DescribeToken(t)));
    }
    if (IsKeyword(t.text)) {
      return Fail(t, "redefined", absl::StrCat("'", t.text, "' is a built-in word"));
    }
    if (const Binding* b = Lookup(t.text)) {
      return Fail(t, "redefined",
                  absl::StrFormat("%s is already defined at %u:%u", t.text, b->line, b->column));
    }
    *var = next_var_++;
    scopes_.back().push_back({t.text, *var, t.line, t.column, param});
    return true;
  }

  bool ParseParam(Stmt* s) {
    const Token& kw = Next();
    s->kind = StmtKind::kParam;
    s->line = kw.line;
    s->column = kw.column;
    if (scopes_.size() != 1) return Fail(kw, "syntax", "'param' only at the top level");
    const Token name = Peek();
    if (IsRooted(program_->kind) && IsWord(name, "root")) {
      return Fail(name, "redefined",
                  "root is built in for broadcast and reduce; set it with the root parameter");
    }
    param_uses_.push_back({name.text, name.line, name.column, 0});
    if (!Declare(name, &s->var, static_cast<int>(param_uses_.size() - 1))) return false;
    Next();
    s->name = name.text;
    program_->params.push_back(name.text);
    if (!Expect(Tok::kAssign, "'=' and the default value")) return false;
    s->e1 = ParseExpr();
    return s->e1 != nullptr;
  }

  bool ParseBlock(std::vector<Stmt>* body) {
    const Token brace = Peek();
    if (!Expect(Tok::kLBrace, "'{'")) return false;
    if (++block_depth_ > kMaxIntentNesting) {
      return Fail(brace, "too-deep",
                  absl::StrFormat("blocks nested deeper than %u", kMaxIntentNesting));
    }
    scopes_.emplace_back();
    for (;;) {
      SkipSeparators();
      const Token& t = Peek();
      if (t.kind == Tok::kRBrace) {
        Next();
        break;
      }
      if (t.kind == Tok::kEof) return Fail(t, "syntax", "a '{' is not closed");
      if (IsWord(t, "param")) return Fail(t, "syntax", "'param' only at the top level");
      if (IsWord(t, "intent") || IsWord(t, "collective")) {
        return Fail(t, "syntax", absl::StrCat("'", t.text, "' only at the top of the program"));
      }
      Stmt s;
      if (!ParseStatement(&s)) return false;
      body->push_back(std::move(s));
      if (!ExpectEnd()) return false;
    }
    scopes_.pop_back();
    --block_depth_;
    return true;
  }

  bool ParseStatement(Stmt* s) {
    const Token t = Peek();
    s->line = t.line;
    s->column = t.column;
    if (IsWord(t, "let")) {
      Next();
      s->kind = StmtKind::kLet;
      const Token name = Peek();
      // The value is parsed before the name is visible: `let x = x + 1` is an error.
      if (name.kind != Tok::kIdent) {
        return Fail(name, "syntax", absl::StrCat("expected a name, found ", DescribeToken(name)));
      }
      Next();
      if (!Expect(Tok::kAssign, "'='")) return false;
      s->e1 = ParseExpr();
      if (!s->e1) return false;
      return Declare(name, &s->var);
    }
    if (IsWord(t, "require")) {
      Next();
      s->kind = StmtKind::kRequire;
      s->e1 = ParseExpr();
      if (!s->e1) return false;
      if (Peek().kind != Tok::kString) {
        return Fail(Peek(), "syntax", "expected the message of the require, a \"string\"");
      }
      s->message = Next().text;
      return true;
    }
    if (IsWord(t, "copy") || IsWord(t, "reduce")) {
      Next();
      s->kind = StmtKind::kMove;
      s->move = t.text == "copy" ? MoveKind::kCopy : MoveKind::kReduce;
      if (!ParseSlots(&s->slots)) return false;
      if (!ExpectWord("from")) return false;
      s->e1 = ParseExpr();
      if (!s->e1) return false;
      if (!ExpectWord(s->move == MoveKind::kCopy ? "to" : "into")) return false;
      s->e2 = ParseExpr();
      return s->e2 != nullptr;
    }
    if (IsWord(t, "for")) {
      Next();
      s->kind = StmtKind::kFor;
      const Token name = Peek();
      if (name.kind != Tok::kIdent) {
        return Fail(name, "syntax", absl::StrCat("expected a name, found ", DescribeToken(name)));
      }
      Next();
      if (!ExpectWord("in")) return false;
      s->e1 = ParseExpr();
      if (!s->e1) return false;
      if (!Expect(Tok::kDotDot, "'..'")) return false;
      s->e2 = ParseExpr();
      if (!s->e2) return false;
      if (IsWord(Peek(), "step")) {
        Next();
        s->e3 = ParseExpr();
        if (!s->e3) return false;
      }
      // The loop variable lives in a scope of its own around the body.
      scopes_.emplace_back();
      if (!Declare(name, &s->var)) return false;
      if (!ParseBlock(&s->body)) return false;
      scopes_.pop_back();
      return true;
    }
    if (IsWord(t, "if")) {
      Next();
      s->kind = StmtKind::kIf;
      s->e1 = ParseExpr();
      if (!s->e1) return false;
      if (!ParseBlock(&s->body)) return false;
      // `else` may sit on the line after the '}'.
      size_t save = pos_;
      while (Peek().kind == Tok::kNewline) Next();
      if (IsWord(Peek(), "else")) {
        Next();
        if (IsWord(Peek(), "if")) {
          if (++if_chain_ > kMaxIntentNesting) {
            return Fail(Peek(), "too-deep", "an else-if chain longer than the nesting limit");
          }
          Stmt nested;
          bool ok = ParseStatement(&nested);
          --if_chain_;
          if (!ok) return false;
          s->else_body.push_back(std::move(nested));
          return true;
        }
        return ParseBlock(&s->else_body);
      }
      pos_ = save;
      return true;
    }
    if (IsWord(t, "param")) return Fail(t, "syntax", "'param' only at the top level");
    if (t.kind == Tok::kIdent) {
      return Fail(t, "syntax",
                  absl::StrCat("unknown statement '", t.text,
                               "'; expected let, require, copy, reduce, for or if"));
    }
    return Fail(t, "syntax", absl::StrCat("expected a statement, found ", DescribeToken(t)));
  }

  bool ParseRange(Range* r) {
    r->lo = ParseExpr();
    if (!r->lo) return false;
    if (Peek().kind == Tok::kDotDot) {
      Next();
      r->hi = ParseExpr();
      if (!r->hi) return false;
      if (IsWord(Peek(), "step")) {
        Next();
        r->step = ParseExpr();
        if (!r->step) return false;
      }
    }
    return true;
  }

  bool ParseSlots(SlotSet* s) {
    const Token t = Peek();
    if (IsWord(t, "all")) {
      Next();
      s->form = SlotForm::kAll;
      return true;
    }
    if (IsWord(t, "chunks") || IsWord(t, "slots")) {
      Next();
      if (!Expect(Tok::kLParen, "'('")) return false;
      if (!ParseRange(&s->a)) return false;
      if (t.text == "slots") {
        s->form = SlotForm::kSlots;
      } else if (Peek().kind == Tok::kComma) {
        Next();
        if (program_->kind != Kind::kAllToAll) {
          return Fail(t, "wrong-collective", "chunks(s, d) names all-to-all slots only");
        }
        s->form = SlotForm::kChunkPairs;
        if (!ParseRange(&s->b)) return false;
      } else {
        if (!IsBlocked(program_->kind)) {
          return Fail(t, "wrong-collective",
                      absl::StrCat("chunks(v) names the chunks of a rank in allgather, "
                                   "reducescatter and allreduce, not in ",
                                   KindName(program_->kind),
                                   program_->kind == Kind::kAllToAll ? "; use chunks(s, d)"
                                                                     : "; use all or slots(a..b)"));
        }
        s->form = SlotForm::kChunks;
      }
      return Expect(Tok::kRParen, "')'");
    }
    s->form = SlotForm::kOne;
    s->one = ParseExpr();
    return s->one != nullptr;
  }

  // Expressions, loosest first: || && comparisons | ^ & shifts additive multiplicative unary.
  ExprPtr Make(Op op, const Token& at, std::vector<ExprPtr> args) {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = e->start_line = at.line;
    e->column = e->start_column = at.column;
    uint32_t depth = 0;
    for (const ExprPtr& a : args) depth = std::max(depth, a->depth);
    e->depth = depth + 1;
    e->args = std::move(args);
    if (e->depth > kMaxExprDepth) {
      Fail(at, "too-deep", absl::StrFormat("expression nested deeper than %u", kMaxExprDepth));
      return nullptr;
    }
    return e;
  }
  ExprPtr Binary(Op op, const Token& at, ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> args;
    const uint32_t start_line = a->start_line, start_column = a->start_column;
    args.push_back(std::move(a));
    args.push_back(std::move(b));
    ExprPtr e = Make(op, at, std::move(args));
    if (e) {
      e->start_line = start_line;
      e->start_column = start_column;
    }
    return e;
  }

  ExprPtr ParseExpr() { return ParseLevel(0); }

  ExprPtr ParseLevel(int level) {
    if (level == 9) return ParseUnary();
    ExprPtr lhs = ParseLevel(level + 1);
    if (!lhs) return nullptr;
    for (;;) {
      const Token t = Peek();
      std::optional<Op> op;
      switch (level) {
        case 0:
          if (t.kind == Tok::kOrOr) op = Op::kLogicalOr;
          break;
        case 1:
          if (t.kind == Tok::kAndAnd) op = Op::kLogicalAnd;
          break;
        case 2:
          if (t.kind == Tok::kLt) op = Op::kLt;
          if (t.kind == Tok::kLe) op = Op::kLe;
          if (t.kind == Tok::kGt) op = Op::kGt;
          if (t.kind == Tok::kGe) op = Op::kGe;
          if (t.kind == Tok::kEq) op = Op::kEq;
          if (t.kind == Tok::kNe) op = Op::kNe;
          break;
        case 3:
          if (t.kind == Tok::kPipe) op = Op::kOr;
          break;
        case 4:
          if (t.kind == Tok::kCaret) op = Op::kXor;
          break;
        case 5:
          if (t.kind == Tok::kAmp) op = Op::kAnd;
          break;
        case 6:
          if (t.kind == Tok::kShl) op = Op::kShl;
          if (t.kind == Tok::kShr) op = Op::kShr;
          break;
        case 7:
          if (t.kind == Tok::kPlus) op = Op::kAdd;
          if (t.kind == Tok::kMinus) op = Op::kSub;
          break;
        case 8:
          if (t.kind == Tok::kStar) op = Op::kMul;
          if (t.kind == Tok::kSlash) op = Op::kDiv;
          if (t.kind == Tok::kPercent) op = Op::kMod;
          break;
      }
      if (!op) return lhs;
      Next();
      ExprPtr rhs = ParseLevel(level + 1);
      if (!rhs) return nullptr;
      lhs = Binary(*op, t, std::move(lhs), std::move(rhs));
      if (!lhs) return nullptr;
      if (level == 2 &&
          (Peek().kind == Tok::kLt || Peek().kind == Tok::kLe || Peek().kind == Tok::kGt ||
           Peek().kind == Tok::kGe || Peek().kind == Tok::kEq || Peek().kind == Tok::kNe)) {
        Fail(Peek(), "syntax", "comparisons do not chain; use && (a < b && b < c)");
        return nullptr;
      }
    }
  }

  ExprPtr ParseUnary() {
    const Token t = Peek();
    if (t.kind == Tok::kMinus || t.kind == Tok::kBang) {
      Next();
      if (++unary_depth_ > kMaxExprDepth) {
        Fail(t, "too-deep", "too many unary operators in a row");
        return nullptr;
      }
      ExprPtr a = ParseUnary();
      --unary_depth_;
      if (!a) return nullptr;
      std::vector<ExprPtr> args;
      args.push_back(std::move(a));
      return Make(t.kind == Tok::kMinus ? Op::kNeg : Op::kNot, t, std::move(args));
    }
    return ParsePrimary();
  }

  ExprPtr ParsePrimary() {
    const Token t = Peek();
    if (t.kind == Tok::kInt) {
      Next();
      ExprPtr e = Make(Op::kConst, t, {});
      e->value = t.value;
      return e;
    }
    if (t.kind == Tok::kLParen) {
      Next();
      if (++paren_depth_ > kMaxIntentNesting) {
        Fail(t, "too-deep",
             absl::StrFormat("parentheses nested deeper than %u", kMaxIntentNesting));
        return nullptr;
      }
      ExprPtr e = ParseExpr();
      --paren_depth_;
      if (!e) return nullptr;
      if (!Expect(Tok::kRParen, "')'")) return nullptr;
      return e;
    }
    if (t.kind != Tok::kIdent) {
      Fail(t, "syntax", absl::StrCat("expected a value, found ", DescribeToken(t)));
      return nullptr;
    }
    Next();
    if (Peek().kind == Tok::kLParen) return ParseCall(t);
    if (t.text == "N") return Make(Op::kN, t, {});
    if (t.text == "K") return Make(Op::kK, t, {});
    if (t.text == "root") {
      if (!IsRooted(program_->kind)) {
        Fail(t, "wrong-collective",
             absl::StrCat("root exists for broadcast and reduce only, not for ",
                          KindName(program_->kind)));
        return nullptr;
      }
      return Make(Op::kRoot, t, {});
    }
    const Binding* b = Lookup(t.text);
    if (!b) {
      Fail(t, "unknown-name",
           absl::StrCat("unknown name '", t.text, "'",
                        IsKeyword(t.text) ? " (a keyword cannot be used as a value)" : ""));
      return nullptr;
    }
    if (b->param >= 0) ++param_uses_[b->param].uses;
    ExprPtr e = Make(Op::kVar, t, {});
    e->value = b->var;
    return e;
  }

  ExprPtr ParseCall(const Token& name) {
    struct Fn {
      std::string_view name;
      Op op;
      size_t min_args, max_args;
    };
    static constexpr Fn kFns[] = {
        {"log2", Op::kLog2, 1, 1}, {"clog2", Op::kCeilLog2, 1, 1}, {"pow2", Op::kPow2, 1, 1},
        {"min", Op::kMin, 2, 8},   {"max", Op::kMax, 2, 8},        {"chunk", Op::kChunk, 2, 3},
    };
    const Fn* fn = nullptr;
    for (const Fn& f : kFns) {
      if (f.name == name.text) fn = &f;
    }
    if (!fn) {
      Fail(name, "unknown-name",
           absl::StrCat("unknown function '", name.text,
                        "'; there are log2, clog2, pow2, min, max and chunk"));
      return nullptr;
    }
    Next();  // (
    if (++paren_depth_ > kMaxIntentNesting) {
      Fail(name, "too-deep",
           absl::StrFormat("parentheses nested deeper than %u", kMaxIntentNesting));
      return nullptr;
    }
    std::vector<ExprPtr> args;
    if (Peek().kind != Tok::kRParen) {
      for (;;) {
        ExprPtr a = ParseExpr();
        if (!a) return nullptr;
        args.push_back(std::move(a));
        if (args.size() > fn->max_args) break;
        if (Peek().kind != Tok::kComma) break;
        Next();
      }
    }
    --paren_depth_;
    if (args.size() < fn->min_args || args.size() > fn->max_args) {
      Fail(name, "syntax",
           fn->min_args == fn->max_args
               ? absl::StrFormat("%s takes %u argument%s", fn->name, fn->min_args,
                                 fn->min_args == 1 ? "" : "s")
               : absl::StrFormat("%s takes %u to %u arguments", fn->name, fn->min_args,
                                 fn->max_args));
      return nullptr;
    }
    if (!Expect(Tok::kRParen, "')'")) return nullptr;
    if (fn->op == Op::kChunk) {
      const bool pair = args.size() == 3;
      if (pair && program_->kind != Kind::kAllToAll) {
        Fail(name, "wrong-collective",
             absl::StrCat("chunk(s, d, j) names all-to-all slots, not ", KindName(program_->kind),
                          " ones"));
        return nullptr;
      }
      if (!pair && !IsBlocked(program_->kind)) {
        Fail(name, "wrong-collective",
             absl::StrCat("chunk(v, j) names a rank's chunk in allgather, reducescatter and "
                          "allreduce, not in ",
                          KindName(program_->kind),
                          program_->kind == Kind::kAllToAll ? "; use chunk(s, d, j)"
                                                            : "; its slots are 0..K-1"));
        return nullptr;
      }
    }
    return Make(fn->op, name, std::move(args));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::vector<Diagnostic>* warnings_;
  Program* program_ = nullptr;
  Failure* failure_ = nullptr;
  std::vector<std::vector<Binding>> scopes_;
  std::vector<ParamUse> param_uses_;
  int next_var_ = 0;
  uint32_t block_depth_ = 0;
  uint32_t paren_depth_ = 0;
  uint32_t unary_depth_ = 0;
  uint32_t if_chain_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Expansion

class Expander {
 public:
  Expander(const Program& program, const ExpandOptions& options, std::vector<Diagnostic>* warnings)
      : program_(program), options_(options), warnings_(warnings) {}

  bool Run(Intent* intent, Failure* failure) {
    failure_ = failure;
    intent_ = intent;
    n_ = options_.ranks;
    if (n_ == 0) return Fail(0, 0, "bad-options", "the rank count must be at least 1");
    k_ = options_.chunks_per_rank != 0   ? options_.chunks_per_rank
         : program_.declared_chunks != 0 ? program_.declared_chunks
                                         : 1;
    Collective c{program_.kind, n_, k_, 0};
    // Parameters: every override must name a declared one (or root, for rooted collectives).
    for (const auto& [name, value] : options_.params) {
      const bool declared =
          std::find(program_.params.begin(), program_.params.end(), name) != program_.params.end();
      if (name == "root" && IsRooted(program_.kind)) {
        if (value < 0 || value >= int64_t{n_}) {
          return Fail(0, 0, "bad-options",
                      absl::StrFormat("root %d is not one of the %u ranks", value, n_));
        }
        c.root = static_cast<uint32_t>(value);
      } else if (!declared) {
        return Fail(0, 0, "unknown-param",
                    absl::StrCat("no parameter '", name, "' in this program",
                                 program_.params.empty()
                                     ? std::string(" (it declares none)")
                                     : absl::StrCat("; it declares ",
                                                    absl::StrJoin(program_.params, ", "))));
      }
    }
    if (absl::Status s = Validate(c); !s.ok()) {
      return Fail(0, 0, "bad-options", std::string(s.message()));
    }
    slots_ = SlotCount(c);
    if (!options_.order.empty()) {
      if (options_.order.size() != n_) {
        return Fail(0, 0, "bad-order",
                    absl::StrFormat("the rank order has %u entries for %u ranks",
                                    options_.order.size(), n_));
      }
      std::vector<bool> seen(n_, false);
      for (uint32_t r : options_.order) {
        if (r >= n_ || seen[r]) {
          return Fail(0, 0, "bad-order",
                      absl::StrFormat("the rank order is not a permutation of 0..%u", n_ - 1));
        }
        seen[r] = true;
      }
      order_ = options_.order;
    } else {
      order_.resize(n_);
      for (uint32_t i = 0; i < n_; ++i) order_[i] = i;
    }
    root_virtual_ = 0;
    for (uint32_t v = 0; v < n_; ++v) {
      if (order_[v] == c.root) root_virtual_ = v;
    }
    max_steps_ = options_.max_steps;
    frame_.assign(static_cast<size_t>(program_.vars), 0);
    intent->name = program_.name;
    intent->collective = c;
    intent->moves.clear();
    return Exec(program_.body);
  }

 private:
  bool Fail(uint32_t line, uint32_t column, std::string code, std::string message) {
    *failure_ = {line, column, std::move(code), std::move(message)};
    return false;
  }
  // Arithmetic errors point at the operator; errors about a value at the expression's start.
  bool Fail(const Expr& e, std::string code, std::string message) {
    return Fail(e.line, e.column, std::move(code), std::move(message));
  }
  bool FailAt(const Expr& e, std::string code, std::string message) {
    return Fail(e.start_line, e.start_column, std::move(code), std::move(message));
  }
  bool Step(uint32_t line, uint32_t column) {
    if (++steps_ > max_steps_) {
      return Fail(line, column, "too-many-steps",
                  absl::StrFormat("the program runs more than %u statements and loop turns; "
                                  "is a loop bound wrong?",
                                  max_steps_));
    }
    return true;
  }

  bool Exec(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      if (!Step(s.line, s.column)) return false;
      switch (s.kind) {
        case StmtKind::kParam: {
          auto it = options_.params.find(s.name);
          if (it != options_.params.end()) {
            frame_[s.var] = it->second;
          } else if (!Eval(*s.e1, &frame_[s.var])) {
            return false;
          }
          break;
        }
        case StmtKind::kLet:
          if (!Eval(*s.e1, &frame_[s.var])) return false;
          break;
        case StmtKind::kRequire: {
          int64_t v;
          if (!Eval(*s.e1, &v)) return false;
          if (v == 0) {
            return Fail(s.line, s.column, "require-failed",
                        absl::StrFormat("%s (N = %u, K = %u)", s.message, n_, k_));
          }
          break;
        }
        case StmtKind::kMove:
          if (!ExecMove(s)) return false;
          break;
        case StmtKind::kFor: {
          int64_t lo, hi, step = 1;
          if (!Eval(*s.e1, &lo) || !Eval(*s.e2, &hi)) return false;
          if (s.e3 && !Eval(*s.e3, &step)) return false;
          if (step == 0) return FailAt(*s.e3, "zero-step", "a loop's step must not be 0");
          // Counted with 128-bit arithmetic so no bound overflows.
          for (__int128 v = lo; step > 0 ? v < hi : v > hi; v += step) {
            if (!Step(s.line, s.column)) return false;
            frame_[s.var] = static_cast<int64_t>(v);
            if (!Exec(s.body)) return false;
          }
          break;
        }
        case StmtKind::kIf: {
          int64_t v;
          if (!Eval(*s.e1, &v)) return false;
          if (!Exec(v != 0 ? s.body : s.else_body)) return false;
          break;
        }
      }
    }
    return true;
  }

  bool Rank(const Expr& e, uint32_t* physical) {
    int64_t v;
    if (!Eval(e, &v)) return false;
    if (v < 0 || v >= int64_t{n_}) {
      return FailAt(e, "rank-out-of-range",
                    absl::StrFormat("rank %d is not one of the %u ranks (0..%u)", v, n_, n_ - 1));
    }
    *physical = order_[static_cast<size_t>(v)];
    return true;
  }

  // The values of a range, visited in order; `visit` returns false to stop (an error).
  template <typename F>
  bool ForRange(const Range& r, F&& visit) {
    int64_t lo;
    if (!Eval(*r.lo, &lo)) return false;
    if (!r.hi) return visit(lo, *r.lo);
    int64_t hi, step = 1;
    if (!Eval(*r.hi, &hi)) return false;
    if (r.step && !Eval(*r.step, &step)) return false;
    if (step == 0) return FailAt(*r.step, "zero-step", "a range's step must not be 0");
    for (__int128 v = lo; step > 0 ? v < hi : v > hi; v += step) {
      if (!Step(r.lo->line, r.lo->column)) return false;
      if (!visit(static_cast<int64_t>(v), *r.lo)) return false;
    }
    return true;
  }

  bool CheckRank(int64_t v, const Expr& at) {
    if (v < 0 || v >= int64_t{n_}) {
      return FailAt(at, "rank-out-of-range",
                    absl::StrFormat("rank %d is not one of the %u ranks (0..%u)", v, n_, n_ - 1));
    }
    return true;
  }

  bool ExecMove(const Stmt& s) {
    uint32_t src, dst;
    if (!Rank(*s.e1, &src) || !Rank(*s.e2, &dst)) return false;
    const bool self = src == dst;
    if (self && warned_self_.insert(&s).second) {
      warnings_->push_back({s.line, s.column, "self-move",
                            absl::StrFormat("%s from rank %u to itself does nothing; dropped",
                                            s.move == MoveKind::kCopy ? "copy" : "reduce", src),
                            false});
    }
    auto emit = [&](uint64_t slot, const Expr& at) {
      if (slot >= slots_) {
        return FailAt(at, "slot-out-of-range",
                      absl::StrFormat("slot %u is not one of the %u slots of %s (N = %u, K = %u)",
                                      slot, slots_, KindName(program_.kind), n_, k_));
      }
      if (self) return Step(s.line, s.column);
      if (intent_->moves.size() >= options_.max_moves) {
        return Fail(s.line, s.column, "too-many-moves",
                    absl::StrFormat("the program makes more than %u moves", options_.max_moves));
      }
      intent_->moves.push_back({s.move, slot, src, dst, s.line, s.column});
      return true;
    };
    const SlotSet& set = s.slots;
    switch (set.form) {
      case SlotForm::kAll:
        for (uint64_t slot = 0; slot < slots_; ++slot) {
          if (!emit(slot, *s.e1)) return false;
        }
        return true;
      case SlotForm::kOne: {
        int64_t v;
        if (!Eval(*set.one, &v)) return false;
        if (v < 0) {
          return FailAt(*set.one, "slot-out-of-range", absl::StrFormat("slot %d is negative", v));
        }
        return emit(static_cast<uint64_t>(v), *set.one);
      }
      case SlotForm::kSlots:
        return ForRange(set.a, [&](int64_t v, const Expr& at) {
          if (v < 0)
            return FailAt(at, "slot-out-of-range", absl::StrFormat("slot %d is negative", v));
          return emit(static_cast<uint64_t>(v), at);
        });
      case SlotForm::kChunks:
        return ForRange(set.a, [&](int64_t v, const Expr& at) {
          if (!CheckRank(v, at)) return false;
          const uint64_t base = uint64_t{order_[static_cast<size_t>(v)]} * k_;
          for (uint32_t j = 0; j < k_; ++j) {
            if (!emit(base + j, at)) return false;
          }
          return true;
        });
      case SlotForm::kChunkPairs:
        return ForRange(set.a, [&](int64_t sv, const Expr& at_s) {
          if (!CheckRank(sv, at_s)) return false;
          return ForRange(set.b, [&](int64_t dv, const Expr& at_d) {
            if (!CheckRank(dv, at_d)) return false;
            const uint64_t base =
                (uint64_t{order_[static_cast<size_t>(sv)]} * n_ + order_[static_cast<size_t>(dv)]) *
                k_;
            for (uint32_t j = 0; j < k_; ++j) {
              if (!emit(base + j, at_d)) return false;
            }
            return true;
          });
        });
    }
    return true;
  }

  bool Overflow(const Expr& e) {
    return Fail(e, "overflow", "integer overflow (values are 64-bit signed)");
  }

  bool Eval(const Expr& e, int64_t* out) {
    switch (e.op) {
      case Op::kConst:
        *out = e.value;
        return true;
      case Op::kVar:
        *out = frame_[static_cast<size_t>(e.value)];
        return true;
      case Op::kN:
        *out = n_;
        return true;
      case Op::kK:
        *out = k_;
        return true;
      case Op::kRoot:
        *out = root_virtual_;
        return true;
      default:
        break;
    }
    // Short-circuit operators evaluate their right side only when needed.
    if (e.op == Op::kLogicalAnd || e.op == Op::kLogicalOr) {
      int64_t a;
      if (!Eval(*e.args[0], &a)) return false;
      if ((e.op == Op::kLogicalAnd) == (a == 0)) {
        *out = e.op == Op::kLogicalOr ? 1 : 0;
        return true;
      }
      int64_t b;
      if (!Eval(*e.args[1], &b)) return false;
      *out = b != 0;
      return true;
    }
    int64_t v[8] = {};
    const size_t argc = e.args.size();
    for (size_t i = 0; i < argc; ++i) {
      if (!Eval(*e.args[i], &v[i])) return false;
    }
    const int64_t a = argc > 0 ? v[0] : 0, b = argc > 1 ? v[1] : 0;
    switch (e.op) {
      case Op::kNeg:
        if (a == std::numeric_limits<int64_t>::min()) return Overflow(e);
        *out = -a;
        return true;
      case Op::kNot:
        *out = a == 0;
        return true;
      case Op::kAdd:
        if (__builtin_add_overflow(a, b, out)) return Overflow(e);
        return true;
      case Op::kSub:
        if (__builtin_sub_overflow(a, b, out)) return Overflow(e);
        return true;
      case Op::kMul:
        if (__builtin_mul_overflow(a, b, out)) return Overflow(e);
        return true;
      case Op::kDiv:
      case Op::kMod: {
        if (b == 0) {
          return Fail(e, "division-by-zero",
                      e.op == Op::kDiv ? "division by zero" : "modulo by zero");
        }
        if (e.op == Op::kDiv) {
          if (a == std::numeric_limits<int64_t>::min() && b == -1) return Overflow(e);
          int64_t q = a / b;
          if (a % b != 0 && ((a < 0) != (b < 0))) --q;  // floor
          *out = q;
        } else {
          // Always in [0, |b|), so (r - 1) % N is a rank for every rank r.
          const __int128 m = b < 0 ? -static_cast<__int128>(b) : static_cast<__int128>(b);
          __int128 r = static_cast<__int128>(a) % m;
          if (r < 0) r += m;
          *out = static_cast<int64_t>(r);
        }
        return true;
      }
      case Op::kXor:
        *out = a ^ b;
        return true;
      case Op::kAnd:
        *out = a & b;
        return true;
      case Op::kOr:
        *out = a | b;
        return true;
      case Op::kShl:
      case Op::kShr:
        if (b < 0 || b > 62) {
          return Fail(e, "bad-argument",
                      absl::StrFormat("shift by %d; shifts go by 0..62 bits", b));
        }
        if (e.op == Op::kShr) {
          *out = a >> b;  // arithmetic: floor(a / 2^b)
        } else if (__builtin_mul_overflow(a, int64_t{1} << b, out)) {
          return Overflow(e);
        }
        return true;
      case Op::kLt:
        *out = a < b;
        return true;
      case Op::kLe:
        *out = a <= b;
        return true;
      case Op::kGt:
        *out = a > b;
        return true;
      case Op::kGe:
        *out = a >= b;
        return true;
      case Op::kEq:
        *out = a == b;
        return true;
      case Op::kNe:
        *out = a != b;
        return true;
      case Op::kLog2:
      case Op::kCeilLog2: {
        if (a < 1) {
          return Fail(e, "bad-argument",
                      absl::StrFormat("%s(%d): the argument must be at least 1",
                                      e.op == Op::kLog2 ? "log2" : "clog2", a));
        }
        int64_t f = 63 - __builtin_clzll(static_cast<uint64_t>(a));
        if (e.op == Op::kCeilLog2 && (a & (a - 1)) != 0) ++f;
        *out = f;
        return true;
      }
      case Op::kPow2:
        if (a < 0 || a > 62) {
          return Fail(e, "bad-argument", absl::StrFormat("pow2(%d): use 0..62", a));
        }
        *out = int64_t{1} << a;
        return true;
      case Op::kMin:
      case Op::kMax: {
        int64_t r = v[0];
        for (size_t i = 1; i < argc; ++i)
          r = e.op == Op::kMin ? std::min(r, v[i]) : std::max(r, v[i]);
        *out = r;
        return true;
      }
      case Op::kChunk: {
        const int64_t j = v[argc - 1];
        for (size_t i = 0; i + 1 < argc; ++i) {
          if (!CheckRank(v[i], *e.args[i])) return false;
        }
        if (j < 0 || j >= int64_t{k_}) {
          return FailAt(*e.args[argc - 1], "slot-out-of-range",
                        absl::StrFormat("chunk index %d is not one of 0..K-1 (K = %u)", j, k_));
        }
        uint64_t base = order_[static_cast<size_t>(v[0])];
        if (argc == 3) base = base * n_ + order_[static_cast<size_t>(v[1])];
        *out = static_cast<int64_t>(base * k_ + static_cast<uint64_t>(j));
        return true;
      }
      default:
        return Fail(e, "internal", "unhandled operator");
    }
  }

  const Program& program_;
  const ExpandOptions& options_;
  std::vector<Diagnostic>* warnings_;
  Failure* failure_ = nullptr;
  Intent* intent_ = nullptr;
  uint32_t n_ = 0, k_ = 1;
  uint64_t slots_ = 0;
  std::vector<uint32_t> order_;
  uint32_t root_virtual_ = 0;
  std::vector<int64_t> frame_;
  uint64_t steps_ = 0, max_steps_ = 0;
  std::set<const Stmt*> warned_self_;
};

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      switch (c) {
        case '\n':
          out->append("\\n");
          break;
        case '\t':
          out->append("\\t");
          break;
        case '\r':
          out->append("\\r");
          break;
        default:
          absl::StrAppendFormat(out, "\\u%04x", c);
      }
      ++i;
    } else if (c < 0x80) {
      out->push_back(static_cast<char>(c));
      ++i;
    } else {
      // A valid UTF-8 sequence is kept; anything else becomes U+FFFD.
      size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      if (c >= 0xf5) len = 0;
      bool ok = len != 0 && i + len <= s.size();
      uint32_t cp = 0;
      if (ok) {
        cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
        for (size_t k = 1; k < len; ++k) {
          const unsigned char cc = static_cast<unsigned char>(s[i + k]);
          if ((cc & 0xc0) != 0x80) {
            ok = false;
            break;
          }
          cp = (cp << 6) | (cc & 0x3f);
        }
      }
      if (ok) {
        ok = !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) &&
             !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
      }
      if (ok) {
        out->append(s.substr(i, len));
        i += len;
      } else {
        out->append("\\ufffd");
        ++i;
      }
    }
  }
  out->push_back('"');
}

}  // namespace

namespace {

absl::Status Failed(const Failure& f, std::vector<Diagnostic>* diags) {
  diags->push_back({f.line, f.column, f.code, f.message, true});
  return absl::InvalidArgumentError(
      absl::StrFormat("intent:%u:%u: %s", f.line, f.column, f.message));
}

absl::Status ParseProgram(std::string_view text, Program* program, std::vector<Diagnostic>* diags) {
  if (text.size() > kMaxIntentTextBytes) {
    return Failed({1, 1, "too-large",
                   absl::StrFormat("the intent is %u bytes; at most %u are accepted", text.size(),
                                   kMaxIntentTextBytes)},
                  diags);
  }
  Failure failure;
  std::vector<Token> tokens;
  if (!Lex(text, &tokens, &failure)) return Failed(failure, diags);
  Parser parser(std::move(tokens), diags);
  if (!parser.Parse(program, &failure)) return Failed(failure, diags);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Intent> ParseIntent(std::string_view text, const ExpandOptions& options,
                                   std::vector<Diagnostic>* diagnostics) {
  std::vector<Diagnostic> local;
  std::vector<Diagnostic>* diags = diagnostics != nullptr ? diagnostics : &local;
  Program program;
  if (absl::Status s = ParseProgram(text, &program, diags); !s.ok()) return s;
  Intent intent;
  Failure failure;
  Expander expander(program, options, diags);
  if (!expander.Run(&intent, &failure)) return Failed(failure, diags);
  return intent;
}

absl::StatusOr<IntentInfo> InspectIntent(std::string_view text,
                                         std::vector<Diagnostic>* diagnostics) {
  std::vector<Diagnostic> local;
  std::vector<Diagnostic>* diags = diagnostics != nullptr ? diagnostics : &local;
  Program program;
  if (absl::Status s = ParseProgram(text, &program, diags); !s.ok()) return s;
  return IntentInfo{program.name, program.kind, program.declared_chunks, program.params};
}

std::string DiagnosticsJson(const std::vector<Diagnostic>& diagnostics) {
  std::string out = "[";
  for (size_t i = 0; i < diagnostics.size(); ++i) {
    const Diagnostic& d = diagnostics[i];
    if (i > 0) out.append(",");
    out.append("\n  {\"severity\": ");
    AppendJsonString(&out, d.error ? "error" : "warning");
    absl::StrAppendFormat(&out, ", \"line\": %u, \"column\": %u, \"code\": ", d.line, d.column);
    AppendJsonString(&out, d.code);
    out.append(", \"message\": ");
    AppendJsonString(&out, d.message);
    out.append("}");
  }
  out.append(diagnostics.empty() ? "]" : "\n]");
  return out;
}

}  // namespace heddle::collective
