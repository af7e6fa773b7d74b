#include "control/collective/schedule_io.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/fnv1a.h"
#include "common/status_macros.h"
#include "control/collective/verifier.h"

namespace heddle::collective {
namespace {
constexpr absl::string_view kFormatName(kScheduleFormatName.data(), kScheduleFormatName.size());
}  // namespace
}  // namespace heddle::collective

namespace heddle::collective {

namespace {

// ---------------------------------------------------------------------------------------------
// Writing.

void AppendString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void AppendDouble(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  out->append(buf, end);
}

const char* BufferName(BufRef::Buffer b) {
  return b == BufRef::Buffer::kScratch ? "scratch" : "data";
}

void AppendBuf(std::string* out, const char* key, const BufRef& b) {
  absl::StrAppend(out, ", \"", key, "\": {\"buffer\": \"", BufferName(b.buffer),
                  "\", \"slot\": ", b.slot, "}");
}

bool UsesPeer(OpKind k) {
  return k == OpKind::kSend || k == OpKind::kRecv || k == OpKind::kRecvReduce;
}
bool UsesSrc(OpKind k) { return k == OpKind::kSend || k == OpKind::kCopy || k == OpKind::kReduce; }
bool UsesDst(OpKind k) { return k != OpKind::kSend; }

void AppendOp(std::string* out, const Op& o) {
  absl::StrAppend(out, "{\"op\": \"", OpKindName(o.kind), "\"");
  if (UsesPeer(o.kind)) {
    absl::StrAppend(out, ", \"peer\": ", o.peer, ", \"channel\": ", o.channel,
                    ", \"chunk\": ", o.chunk);
  }
  absl::StrAppend(out, ", \"piece\": ", o.piece);
  if (UsesSrc(o.kind)) AppendBuf(out, "src", o.src);
  if (UsesDst(o.kind)) AppendBuf(out, "dst", o.dst);
  out->append(", \"deps\": [");
  for (size_t i = 0; i < o.deps.size(); ++i) {
    if (i > 0) out->append(", ");
    absl::StrAppend(out, o.deps[i]);
  }
  out->append("], \"start_s\": ");
  AppendDouble(out, o.start_s);
  out->append(", \"end_s\": ");
  AppendDouble(out, o.end_s);
  out->append("}");
}

// ---------------------------------------------------------------------------------------------
// Reading: a streaming recursive-descent JSON reader (RFC 8259) driven by the schema, so no
// document tree is built, and nothing is allocated per field: field paths for messages are
// linked on the stack and only spelled out when there is an error.

// Where a value sits: "per_rank[2].ops[17].peer".
struct Path {
  const Path* parent = nullptr;
  absl::string_view key;  // a field name; empty for an array element
  int64_t index = -1;     // an array element's index

  Path Field(absl::string_view k) const { return Path{this, k, -1}; }
  Path Item(int64_t i) const { return Path{this, {}, i}; }
  std::string ToString() const {
    std::string s = parent != nullptr ? parent->ToString() : "";
    if (!key.empty()) {
      if (!s.empty()) s += '.';
      s.append(key.data(), key.size());
    } else if (index >= 0) {
      absl::StrAppend(&s, "[", index, "]");
    }
    return s;
  }
};

class Reader {
 public:
  explicit Reader(absl::string_view text) : text_(text) {}

  absl::Status Error(const Path& path, absl::string_view msg) const {
    return ErrorAt(pos_, path, msg);
  }
  absl::Status ErrorAt(size_t at, const Path& path, absl::string_view msg) const {
    uint64_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    const std::string where = path.ToString();
    return absl::InvalidArgumentError(
        absl::StrCat("schedule:", line, ":", col, ": ", where, where.empty() ? "" : ": ", msg));
  }

  size_t pos() const { return pos_; }

  void SkipWs() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }

  bool Peek(char c) {
    SkipWs();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  absl::Status Expect(char c, const Path& path, absl::string_view what) {
    SkipWs();
    if (pos_ >= text_.size() || text_[pos_] != c) {
      return Error(path, absl::StrCat("expected ", what, ", found ", Found()));
    }
    ++pos_;
    return absl::OkStatus();
  }

  // Object iteration: call with *first = true, then repeatedly; false at the closing brace.
  // *key_at is where the field name starts.
  absl::StatusOr<bool> NextKey(const Path& path, bool* first, std::string* key, size_t* key_at) {
    if (Peek('}')) {
      ++pos_;
      return false;
    }
    if (!*first) HEDDLE_RETURN_IF_ERROR(Expect(',', path, "',' or '}'"));
    *first = false;
    if (!Peek('"')) return Error(path, absl::StrCat("expected a field name, found ", Found()));
    *key_at = pos_;
    HEDDLE_RETURN_IF_ERROR(String(path, key));
    HEDDLE_RETURN_IF_ERROR(Expect(':', path, "':'"));
    return true;
  }

  // Array iteration: call with *first = true, then repeatedly; false at the closing bracket.
  absl::StatusOr<bool> NextItem(const Path& path, bool* first) {
    if (Peek(']')) {
      ++pos_;
      return false;
    }
    if (!*first) HEDDLE_RETURN_IF_ERROR(Expect(',', path, "',' or ']'"));
    *first = false;
    return true;
  }

  absl::Status String(const Path& path, std::string* out) {
    HEDDLE_RETURN_IF_ERROR(Expect('"', path, "a string"));
    out->clear();
    while (true) {
      // The run up to the next quote, backslash or control character in one piece.
      size_t end = pos_;
      while (end < text_.size() && text_[end] != '"' && text_[end] != '\\' &&
             static_cast<unsigned char>(text_[end]) >= 0x20) {
        ++end;
      }
      out->append(text_.data() + pos_, end - pos_);
      pos_ = end;
      if (pos_ >= text_.size()) return Error(path, "unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c != '\\') return Error(path, "control character in a string (escape it)");
      if (++pos_ >= text_.size()) return Error(path, "unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          HEDDLE_ASSIGN_OR_RETURN(uint32_t cp, Hex4(path));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") {
              return Error(path, "unpaired surrogate in \\u escape");
            }
            pos_ += 2;
            HEDDLE_ASSIGN_OR_RETURN(uint32_t lo, Hex4(path));
            if (lo < 0xDC00 || lo > 0xDFFF) return Error(path, "unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error(path, "unpaired surrogate in \\u escape");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          --pos_;
          return Error(path, absl::StrFormat("invalid escape '\\%c'", e));
      }
    }
  }

  // A JSON number token, checked against the grammar; `pos_` after it.
  absl::StatusOr<absl::string_view> NumberToken(const Path& path) {
    SkipWs();
    const size_t start = pos_;
    size_t i = pos_;
    auto digit = [&](size_t at) {
      return at < text_.size() && text_[at] >= '0' && text_[at] <= '9';
    };
    if (i < text_.size() && text_[i] == '-') ++i;
    if (!digit(i)) return Error(path, absl::StrCat("expected a number, found ", Found()));
    if (text_[i] == '0') {
      ++i;
      if (digit(i)) return ErrorAt(i, path, "leading zeros are not allowed in JSON numbers");
    } else {
      while (digit(i)) ++i;
    }
    if (i < text_.size() && text_[i] == '.') {
      ++i;
      if (!digit(i)) return ErrorAt(i, path, "expected a digit after the decimal point");
      while (digit(i)) ++i;
    }
    if (i < text_.size() && (text_[i] == 'e' || text_[i] == 'E')) {
      ++i;
      if (i < text_.size() && (text_[i] == '+' || text_[i] == '-')) ++i;
      if (!digit(i)) return ErrorAt(i, path, "expected a digit in the exponent");
      while (digit(i)) ++i;
    }
    pos_ = i;
    return text_.substr(start, i - start);
  }

  absl::StatusOr<uint64_t> Uint(const Path& path, uint64_t max) {
    SkipWs();
    const size_t start = pos_;
    HEDDLE_ASSIGN_OR_RETURN(absl::string_view tok, NumberToken(path));
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || end != tok.data() + tok.size() || v > max) {
      return ErrorAt(start, path, absl::StrCat("expected an integer in 0..", max, ", found ", tok));
    }
    return v;
  }

  // A number, or null for a non-finite value (as the writer writes one).
  absl::StatusOr<double> Double(const Path& path) {
    SkipWs();
    if (text_.substr(pos_, 4) == "null") {
      pos_ += 4;
      return std::numeric_limits<double>::quiet_NaN();
    }
    const size_t start = pos_;
    HEDDLE_ASSIGN_OR_RETURN(absl::string_view tok, NumberToken(path));
    double v = 0;
    auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
    if (ec != std::errc() || end != tok.data() + tok.size()) {
      return ErrorAt(start, path, absl::StrCat("number out of range: ", tok));
    }
    return v;
  }

  absl::Status End() {
    SkipWs();
    if (pos_ != text_.size()) {
      return Error(Path{},
                   absl::StrCat("unexpected ", Found(), " after the schedule's closing brace"));
    }
    return absl::OkStatus();
  }

  // What is at the current position, for messages.
  std::string Found() const {
    if (pos_ >= text_.size()) return "the end";
    const char c = text_[pos_];
    if (c == '"') return "a string";
    if (c == '{') return "an object";
    if (c == '[') return "an array";
    if (c == '-' || (c >= '0' && c <= '9')) return "a number";
    if (text_.substr(pos_, 4) == "true" || text_.substr(pos_, 5) == "false") return "a boolean";
    if (text_.substr(pos_, 4) == "null") return "null";
    if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f) {
      return absl::StrFormat("'%c'", c);
    }
    return absl::StrFormat("byte 0x%02x", static_cast<unsigned char>(c));
  }

 private:
  absl::StatusOr<uint32_t> Hex4(const Path& path) {
    if (pos_ + 4 > text_.size()) return Error(path, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = text_[pos_ + k];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return Error(path, "invalid hex digit in \\u escape");
      }
    }
    pos_ += 4;
    return v;
  }

  static void AppendUtf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// The fields of one object kind: which exist, which were seen (a bitmask, so duplicates and
// missing required fields are errors without allocating).
class Fields {
 public:
  // `names` outlives the Fields (a static array).
  template <size_t N>
  Fields(Reader* r, const Path* path, const absl::string_view (&names)[N])
      : r_(r), path_(path), names_(names), count_(N) {
    static_assert(N <= 32);
  }

  // The index of `key` among the names, after checking it is known and new.
  absl::StatusOr<int> See(absl::string_view key, size_t at) {
    for (size_t i = 0; i < count_; ++i) {
      if (names_[i] != key) continue;
      if (seen_ & (1u << i)) return r_->ErrorAt(at, path_->Field(key), "duplicate field");
      seen_ |= 1u << i;
      return static_cast<int>(i);
    }
    std::string allowed;
    for (size_t i = 0; i < count_; ++i) {
      absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", names_[i]);
    }
    return r_->ErrorAt(at, path_->Field(key),
                       absl::StrCat("unknown field (expected one of: ", allowed, ")"));
  }
  bool Has(absl::string_view key) const {
    for (size_t i = 0; i < count_; ++i) {
      if (names_[i] == key) return (seen_ >> i) & 1;
    }
    return false;
  }
  absl::Status Require(std::initializer_list<absl::string_view> keys) const {
    for (absl::string_view k : keys) {
      if (!Has(k)) {
        return r_->ErrorAt(r_->pos() == 0 ? 0 : r_->pos() - 1, *path_,
                           absl::StrCat("missing field \"", k, "\""));
      }
    }
    return absl::OkStatus();
  }

 private:
  Reader* r_;
  const Path* path_;
  const absl::string_view* names_;
  size_t count_;
  uint32_t seen_ = 0;
};

std::optional<OpKind> OpKindFromName(absl::string_view name) {
  for (OpKind k :
       {OpKind::kSend, OpKind::kRecv, OpKind::kRecvReduce, OpKind::kCopy, OpKind::kReduce}) {
    if (name == OpKindName(k)) return k;
  }
  return std::nullopt;
}

// Reads one object: `field(index, path of the field)` reads each field's value.
template <typename F>
absl::Status ReadObject(Reader& r, const Path& path, absl::string_view what, Fields& f, F field) {
  HEDDLE_RETURN_IF_ERROR(r.Expect('{', path, what));
  bool first = true;
  std::string key;
  size_t at = 0;
  while (true) {
    HEDDLE_ASSIGN_OR_RETURN(bool more, r.NextKey(path, &first, &key, &at));
    if (!more) return absl::OkStatus();
    HEDDLE_ASSIGN_OR_RETURN(int index, f.See(key, at));
    HEDDLE_RETURN_IF_ERROR(field(index, path.Field(key)));
  }
}

// Reads one array: `item(path of the element)` reads each element.
template <typename F>
absl::Status ReadArray(Reader& r, const Path& path, absl::string_view what, F item) {
  HEDDLE_RETURN_IF_ERROR(r.Expect('[', path, what));
  bool first = true;
  for (int64_t i = 0;; ++i) {
    HEDDLE_ASSIGN_OR_RETURN(bool more, r.NextItem(path, &first));
    if (!more) return absl::OkStatus();
    HEDDLE_RETURN_IF_ERROR(item(path.Item(i)));
  }
}

template <typename T>
absl::Status ReadUint(Reader& r, const Path& p, T* out) {
  HEDDLE_ASSIGN_OR_RETURN(uint64_t v, r.Uint(p, std::numeric_limits<T>::max()));
  *out = static_cast<T>(v);
  return absl::OkStatus();
}

absl::Status ReadBuf(Reader& r, const Path& path, std::string* scratch, BufRef* out) {
  static constexpr absl::string_view kNames[] = {"buffer", "slot"};
  Fields f(&r, &path, kNames);
  HEDDLE_RETURN_IF_ERROR(ReadObject(
      r, path, "an object {\"buffer\", \"slot\"}", f, [&](int i, const Path& p) -> absl::Status {
        if (i == 1) return ReadUint(r, p, &out->slot);
        r.SkipWs();
        const size_t at = r.pos();
        HEDDLE_RETURN_IF_ERROR(r.String(p, scratch));
        if (*scratch == "data") {
          out->buffer = BufRef::Buffer::kData;
        } else if (*scratch == "scratch") {
          out->buffer = BufRef::Buffer::kScratch;
        } else {
          return r.ErrorAt(
              at, p, absl::StrCat("\"", *scratch, "\" is not a buffer (\"data\" or \"scratch\")"));
        }
        return absl::OkStatus();
      }));
  return f.Require({"buffer", "slot"});
}

absl::Status ReadOp(Reader& r, const Path& path, std::string* scratch, Op* o) {
  static constexpr absl::string_view kNames[] = {"op",  "peer", "channel", "chunk",   "piece",
                                                 "src", "dst",  "deps",    "start_s", "end_s"};
  Fields f(&r, &path, kNames);
  size_t kind_at = 0;
  HEDDLE_RETURN_IF_ERROR(
      ReadObject(r, path, "an op object", f, [&](int i, const Path& p) -> absl::Status {
        switch (i) {
          case 0: {
            r.SkipWs();
            kind_at = r.pos();
            HEDDLE_RETURN_IF_ERROR(r.String(p, scratch));
            std::optional<OpKind> kind = OpKindFromName(*scratch);
            if (!kind.has_value()) {
              return r.ErrorAt(kind_at, p,
                               absl::StrCat("\"", *scratch,
                                            "\" is not an op (send, recv, recv-reduce, copy, "
                                            "reduce)"));
            }
            o->kind = *kind;
            return absl::OkStatus();
          }
          case 1:
            return ReadUint(r, p, &o->peer);
          case 2:
            return ReadUint(r, p, &o->channel);
          case 3:
            return ReadUint(r, p, &o->chunk);
          case 4:
            return ReadUint(r, p, &o->piece);
          case 5:
            return ReadBuf(r, p, scratch, &o->src);
          case 6:
            return ReadBuf(r, p, scratch, &o->dst);
          case 7:
            return ReadArray(r, p, "an array of op indices", [&](const Path& e) -> absl::Status {
              HEDDLE_ASSIGN_OR_RETURN(uint64_t d, r.Uint(e, UINT32_MAX));
              o->deps.push_back(static_cast<uint32_t>(d));
              return absl::OkStatus();
            });
          case 8: {
            HEDDLE_ASSIGN_OR_RETURN(o->start_s, r.Double(p));
            return absl::OkStatus();
          }
          default: {
            HEDDLE_ASSIGN_OR_RETURN(o->end_s, r.Double(p));
            return absl::OkStatus();
          }
        }
      }));
  HEDDLE_RETURN_IF_ERROR(f.Require({"op", "piece", "deps"}));
  if (UsesPeer(o->kind)) HEDDLE_RETURN_IF_ERROR(f.Require({"peer", "channel", "chunk"}));
  if (UsesSrc(o->kind)) HEDDLE_RETURN_IF_ERROR(f.Require({"src"}));
  if (UsesDst(o->kind)) HEDDLE_RETURN_IF_ERROR(f.Require({"dst"}));
  // Fields a kind does not use would be silently dropped: refuse them.
  auto refuse = [&](absl::string_view field) -> absl::Status {
    if (!f.Has(field)) return absl::OkStatus();
    return r.ErrorAt(kind_at, path.Field(field),
                     absl::StrCat("a ", OpKindName(o->kind), " op has no \"", field, "\""));
  };
  if (!UsesPeer(o->kind)) {
    HEDDLE_RETURN_IF_ERROR(refuse("peer"));
    HEDDLE_RETURN_IF_ERROR(refuse("channel"));
    HEDDLE_RETURN_IF_ERROR(refuse("chunk"));
  }
  if (!UsesSrc(o->kind)) HEDDLE_RETURN_IF_ERROR(refuse("src"));
  if (!UsesDst(o->kind)) HEDDLE_RETURN_IF_ERROR(refuse("dst"));
  return absl::OkStatus();
}

absl::Status ReadRank(Reader& r, const Path& path, std::string* scratch, RankSchedule* rs) {
  static constexpr absl::string_view kNames[] = {"scratch_slots", "ops"};
  Fields f(&r, &path, kNames);
  HEDDLE_RETURN_IF_ERROR(
      ReadObject(r, path, "an object {\"scratch_slots\", \"ops\"}", f,
                 [&](int i, const Path& p) -> absl::Status {
                   if (i == 0) return ReadUint(r, p, &rs->scratch_slots);
                   return ReadArray(r, p, "an array of ops", [&](const Path& e) -> absl::Status {
                     rs->ops.emplace_back();
                     return ReadOp(r, e, scratch, &rs->ops.back());
                   });
                 }));
  return f.Require({"scratch_slots", "ops"});
}

absl::Status ReadCollective(Reader& r, const Path& path, std::string* scratch, Collective* c) {
  static constexpr absl::string_view kNames[] = {"kind", "ranks", "chunks_per_rank", "root"};
  Fields f(&r, &path, kNames);
  HEDDLE_RETURN_IF_ERROR(
      ReadObject(r, path, "an object", f, [&](int i, const Path& p) -> absl::Status {
        switch (i) {
          case 0: {
            r.SkipWs();
            const size_t at = r.pos();
            HEDDLE_RETURN_IF_ERROR(r.String(p, scratch));
            std::optional<Kind> k = KindFromName(*scratch);
            if (!k.has_value()) {
              return r.ErrorAt(at, p,
                               absl::StrCat("\"", *scratch,
                                            "\" is not a collective (allgather, reducescatter, "
                                            "allreduce, broadcast, reduce, alltoall)"));
            }
            c->kind = *k;
            return absl::OkStatus();
          }
          case 1:
            return ReadUint(r, p, &c->ranks);
          case 2:
            return ReadUint(r, p, &c->chunks_per_rank);
          default:
            return ReadUint(r, p, &c->root);
        }
      }));
  return f.Require({"kind", "ranks", "chunks_per_rank", "root"});
}

absl::StatusOr<Schedule> Read(absl::string_view json) {
  Reader r(json);
  Schedule s;
  const Path root;
  std::string scratch;
  static constexpr absl::string_view kNames[] = {
      "format", "format_version",  "collective", "pieces",      "intent",
      "ranks",  "topology_digest", "slot_bytes", "predicted_s", "per_rank"};
  Fields f(&r, &root, kNames);
  HEDDLE_RETURN_IF_ERROR(ReadObject(
      r, root, "a JSON object (a heddle schedule)", f, [&](int i, const Path& p) -> absl::Status {
        r.SkipWs();
        const size_t at = r.pos();
        switch (i) {
          case 0:
            HEDDLE_RETURN_IF_ERROR(r.String(p, &scratch));
            if (scratch != kFormatName) {
              return r.ErrorAt(
                  at, p,
                  absl::StrCat("\"", scratch, "\" is not a heddle schedule (expected \"",
                               kFormatName, "\")"));
            }
            return absl::OkStatus();
          case 1: {
            HEDDLE_ASSIGN_OR_RETURN(uint64_t v, r.Uint(p, UINT32_MAX));
            if (v != kScheduleFormatVersion) {
              return r.ErrorAt(
                  at, p,
                  absl::StrCat("format_version ", v, " is not supported; this build reads ",
                               kScheduleFormatVersion));
            }
            s.version = static_cast<uint32_t>(v);
            return absl::OkStatus();
          }
          case 2:
            return ReadCollective(r, p, &scratch, &s.collective);
          case 3:
            return ReadUint(r, p, &s.pieces);
          case 4:
            return r.String(p, &s.intent);
          case 5:
            return ReadArray(r, p, "an array of rank names", [&](const Path& e) {
              s.ranks.emplace_back();
              return r.String(e, &s.ranks.back());
            });
          case 6: {
            HEDDLE_RETURN_IF_ERROR(r.String(p, &scratch));
            uint64_t v = 0;
            auto [end, ec] =
                std::from_chars(scratch.data(), scratch.data() + scratch.size(), v, 16);
            if (scratch.empty() || scratch.size() > 16 || ec != std::errc() ||
                end != scratch.data() + scratch.size()) {
              return r.ErrorAt(
                  at, p,
                  absl::StrCat("\"", scratch, "\" is not a 64-bit hex digest (1-16 hex digits)"));
            }
            s.topology_digest = v;
            return absl::OkStatus();
          }
          case 7:
            return ReadUint(r, p, &s.slot_bytes);
          case 8: {
            HEDDLE_ASSIGN_OR_RETURN(s.predicted_s, r.Double(p));
            return absl::OkStatus();
          }
          default:
            return ReadArray(r, p, "an array with one object per rank", [&](const Path& e) {
              s.per_rank.emplace_back();
              return ReadRank(r, e, &scratch, &s.per_rank.back());
            });
        }
      }));
  HEDDLE_RETURN_IF_ERROR(f.Require({"format", "format_version", "collective", "pieces", "intent",
                                    "ranks", "topology_digest", "slot_bytes", "per_rank"}));
  HEDDLE_RETURN_IF_ERROR(r.End());
  return s;
}

// A file of another format_version may differ anywhere; say so rather than name the first field
// this build does not know.
std::optional<uint64_t> SniffVersion(absl::string_view json) {
  const size_t at = json.find("\"format_version\"");
  if (at == absl::string_view::npos) return std::nullopt;
  size_t i = at + 16;
  while (i < json.size() && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' ||
                             json[i] == '\r' || json[i] == ':')) {
    ++i;
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(json.data() + i, json.data() + json.size(), v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

}  // namespace

std::string ScheduleToJson(const Schedule& s) {
  std::string out;
  absl::StrAppend(&out, "{\"format\": \"", kFormatName, "\", \"format_version\": ", s.version,
                  ",\n");
  absl::StrAppend(&out, " \"collective\": {\"kind\": \"", KindName(s.collective.kind),
                  "\", \"ranks\": ", s.collective.ranks,
                  ", \"chunks_per_rank\": ", s.collective.chunks_per_rank,
                  ", \"root\": ", s.collective.root, "},\n");
  absl::StrAppend(&out, " \"pieces\": ", s.pieces, ", \"intent\": ");
  AppendString(&out, s.intent);
  out.append(",\n \"ranks\": [");
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    if (i > 0) out.append(", ");
    AppendString(&out, s.ranks[i]);
  }
  absl::StrAppendFormat(&out, "],\n \"topology_digest\": \"%016x\", \"slot_bytes\": %u, ",
                        s.topology_digest, s.slot_bytes);
  out.append("\"predicted_s\": ");
  AppendDouble(&out, s.predicted_s);
  out.append(",\n \"per_rank\": [");
  for (size_t r = 0; r < s.per_rank.size(); ++r) {
    const RankSchedule& rs = s.per_rank[r];
    absl::StrAppend(&out, r == 0 ? "\n" : ",\n", "  {\"scratch_slots\": ", rs.scratch_slots,
                    ", \"ops\": [");
    for (size_t i = 0; i < rs.ops.size(); ++i) {
      out.append(i == 0 ? "\n   " : ",\n   ");
      AppendOp(&out, rs.ops[i]);
    }
    out.append(rs.ops.empty() ? "]}" : "\n  ]}");
  }
  out.append(s.per_rank.empty() ? "]\n}\n" : "\n ]\n}\n");
  return out;
}

absl::StatusOr<Schedule> ScheduleFromJson(std::string_view json_in) {
  const absl::string_view json(json_in.data(), json_in.size());
  if (json.size() > kMaxScheduleFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule: ", json.size(), " bytes; at most ", kMaxScheduleFileBytes));
  }
  absl::StatusOr<Schedule> s = Read(json);
  if (!s.ok()) {
    std::optional<uint64_t> v = SniffVersion(json);
    if (v.has_value() && *v != kScheduleFormatVersion &&
        !absl::StrContains(s.status().message(), "is not supported; this build reads")) {
      return absl::InvalidArgumentError(
          absl::StrCat("schedule: format_version ", *v, " is not supported; this build reads ",
                       kScheduleFormatVersion, " (", s.status().message(), ")"));
    }
  }
  return s;
}

uint64_t ScheduleDigest(const Schedule& s) {
  Fnv1a h;  // FNV-1a 64 over little-endian fixed-width fields
  h.Str(kScheduleFormatName);
  h.U64(s.version);
  h.U64(static_cast<uint64_t>(s.collective.kind));
  h.U64(s.collective.ranks);
  h.U64(s.collective.chunks_per_rank);
  h.U64(s.collective.root);
  h.U64(s.pieces);
  h.Str(s.intent);
  h.U64(s.ranks.size());
  for (const std::string& n : s.ranks) h.Str(n);
  h.U64(s.topology_digest);
  h.U64(s.slot_bytes);
  h.U64(s.per_rank.size());
  for (const RankSchedule& rs : s.per_rank) {
    h.U64(rs.scratch_slots);
    h.U64(rs.ops.size());
    for (const Op& o : rs.ops) {
      h.U64(static_cast<uint64_t>(o.kind));
      if (UsesPeer(o.kind)) {
        h.U64(o.peer);
        h.U64(o.channel);
        h.U64(o.chunk);
      }
      h.U64(o.piece);
      if (UsesSrc(o.kind)) {
        h.U64(static_cast<uint64_t>(o.src.buffer));
        h.U64(o.src.slot);
      }
      if (UsesDst(o.kind)) {
        h.U64(static_cast<uint64_t>(o.dst.buffer));
        h.U64(o.dst.slot);
      }
      h.U64(o.deps.size());
      for (uint32_t d : o.deps) h.U64(d);
    }
  }
  return h.value();
}

absl::StatusOr<Schedule> ReadScheduleFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open the schedule file"));
  // One read into a string of the file's size (a stringstream would hold the text twice).
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::DataLossError(absl::StrCat(path, ": cannot size the schedule file"));
  if (static_cast<uint64_t>(size) > kMaxScheduleFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes; at most ", kMaxScheduleFileBytes));
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), size);
  if (!in) return absl::DataLossError(absl::StrCat(path, ": reading the schedule file failed"));
  absl::StatusOr<Schedule> s = ScheduleFromJson(text);
  if (!s.ok()) {
    // "schedule:LINE:COL: ..." becomes "PATH:LINE:COL: ...".
    absl::string_view msg = s.status().message();
    if (absl::ConsumePrefix(&msg, "schedule:")) {
      return absl::Status(s.status().code(), absl::StrCat(path, ":", msg));
    }
    return absl::Status(s.status().code(), absl::StrCat(path, ": ", msg));
  }
  return s;
}

absl::Status WriteScheduleFile(const std::string& path, const Schedule& s) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write the schedule"));
  out << ScheduleToJson(s);
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": writing the schedule failed"));
  return absl::OkStatus();
}

}  // namespace heddle::collective
