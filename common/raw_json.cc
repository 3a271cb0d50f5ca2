#include "common/raw_json.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/find_bytes.h"
#include "common/str_cat.h"
#include "common/utf8.h"

namespace kvgate::raw_json {
namespace {

// Byte classes inside a string literal.
enum : uint8_t { kPlain = 0, kQuote, kBackslash, kControl, kNonAscii };

constexpr std::array<uint8_t, 256> MakeStringClasses() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = c < 0x20 ? kControl : c >= 0x80 ? kNonAscii : kPlain;
  }
  t['"'] = kQuote;
  t['\\'] = kBackslash;
  return t;
}
constexpr std::array<uint8_t, 256> kStringClass = MakeStringClasses();

using internal::IsSpace;
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }

// Advances p over plain string bytes (none of < 0x20, '"', '\\', >= 0x80), sixteen at a time where
// 16 bytes remain, and returns the first byte that is not plain, or where fewer than 16 remain (the
// caller finishes byte by byte). Request bodies are mostly string bytes (prompts), so this loop is
// the validator's hot path.
const unsigned char* SkipPlainStringBytes(const unsigned char* p, const unsigned char* end) {
#if defined(__SSE2__)
  const __m128i space = _mm_set1_epi8(0x20);
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  while (end - p >= 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // Signed compare: bytes >= 0x80 are negative, so one compare catches them and controls.
    const __m128i special =
        _mm_or_si128(_mm_cmplt_epi8(bytes, space),
                     _mm_or_si128(_mm_cmpeq_epi8(bytes, quote), _mm_cmpeq_epi8(bytes, backslash)));
    const int mask = _mm_movemask_epi8(special);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#else
  (void)end;  // no vector unit assumed: the caller's byte loop does it all
#endif
  return p;
}

int HexValue(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads 4 hex digits at p (p + 4 <= end checked by the caller); -1 when any is not hex.
int32_t Hex4(const unsigned char* p) {
  int32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const int h = HexValue(p[i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

class Validator {
 public:
  explicit Validator(std::string_view text)
      : begin_(reinterpret_cast<const unsigned char*>(text.data())),
        p_(begin_),
        end_(begin_ + text.size()) {}

  Result<Value> Run() {
    if (end_ - p_ >= 3 && p_[0] == 0xEF && p_[1] == 0xBB && p_[2] == 0xBF) p_ += 3;
    SkipSpace();
    const unsigned char* root_begin = p_;
    Kind root_kind = Kind::kNull;
    // stack_[d] is '{' or '[' for each open container.
    std::array<char, kMaxDepth> stack{};
    int depth = 0;
    bool first_value = true;

    for (;;) {
      // Expecting a value.
      SkipSpace();
      if (p_ == end_) return Fail(first_value ? "empty input" : "unexpected end of input");
      const unsigned char c = *p_;
      Kind kind;
      bool opened = false;
      switch (c) {
        case '{':
        case '[':
          if (depth == kMaxDepth) return Fail(StrCat("nesting deeper than ", kMaxDepth));
          stack[depth++] = static_cast<char>(c);
          ++p_;
          kind = c == '{' ? Kind::kObject : Kind::kArray;
          opened = true;
          break;
        case '"':
          if (!String()) return Error();
          kind = Kind::kString;
          break;
        case 't':
          if (!Literal("true")) return Error();
          kind = Kind::kBool;
          break;
        case 'f':
          if (!Literal("false")) return Error();
          kind = Kind::kBool;
          break;
        case 'n':
          if (!Literal("null")) return Error();
          kind = Kind::kNull;
          break;
        default:
          if (c == '-' || IsDigit(c)) {
            if (!Number()) return Error();
            kind = Kind::kNumber;
            break;
          }
          return Fail("unexpected character, expected a value");
      }
      if (first_value) root_kind = kind;
      first_value = false;

      if (opened) {
        SkipSpace();
        if (p_ == end_) return Fail("unexpected end of input");
        const char close = stack[depth - 1] == '{' ? '}' : ']';
        if (*p_ == close) {
          ++p_;
          --depth;
        } else if (close == '}') {
          if (!KeyAndColon()) return Error();
          continue;
        } else {
          continue;
        }
      }

      // After a value: close containers, or move on to the next member / element.
      for (;;) {
        SkipSpace();
        if (depth == 0) {
          if (p_ != end_) return Fail("unexpected content after the JSON value");
          return Value{root_kind, std::string_view(reinterpret_cast<const char*>(root_begin),
                                                   static_cast<size_t>(LastNonSpace() - root_begin))};
        }
        if (p_ == end_) return Fail("unexpected end of input");
        const bool in_object = stack[depth - 1] == '{';
        if (*p_ == ',') {
          ++p_;
          if (in_object) {
            SkipSpace();
            if (!KeyAndColon()) return Error();
          }
          break;  // the next value
        }
        if (*p_ == (in_object ? '}' : ']')) {
          ++p_;
          --depth;
          continue;
        }
        return Fail(in_object ? "expected ',' or '}' after an object member"
                              : "expected ',' or ']' after an array element");
      }
    }
  }

 private:
  void SkipSpace() {
    while (p_ != end_ && IsSpace(*p_)) ++p_;
  }

  // End of the root value: p_ is at end_, trailing whitespace already skipped.
  const unsigned char* LastNonSpace() const {
    const unsigned char* q = end_;
    while (q != begin_ && IsSpace(q[-1])) --q;
    return q;
  }

  bool KeyAndColon() {
    if (p_ == end_) return SetError("unexpected end of input");
    if (*p_ != '"') return SetError("expected a string key");
    if (!String()) return false;
    SkipSpace();
    if (p_ == end_) return SetError("unexpected end of input");
    if (*p_ != ':') return SetError("expected ':' after an object key");
    ++p_;
    return true;
  }

  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() ||
        std::string_view(reinterpret_cast<const char*>(p_), word.size()) != word) {
      return SetError("invalid literal");
    }
    p_ += word.size();
    return true;
  }

  bool Number() {
    const unsigned char* start = p_;
    bool is_float = false;
    if (*p_ == '-') ++p_;
    if (p_ == end_ || !IsDigit(*p_)) return SetError("invalid number: expected a digit");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (p_ != end_ && *p_ == '.') {
      is_float = true;
      ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return SetError("invalid number: expected a digit after '.'");
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      is_float = true;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !IsDigit(*p_)) return SetError("invalid number: expected an exponent digit");
      while (p_ != end_ && IsDigit(*p_)) ++p_;
    }
    // A number that fits no 64-bit integer is read as a double; one that overflows it is an error
    // (as in nlohmann::json). Only long integers and floats need the check.
    const size_t length = static_cast<size_t>(p_ - start);
    if (is_float || length > 19) {
      const std::string copy(reinterpret_cast<const char*>(start), length);
      if (!std::isfinite(std::strtod(copy.c_str(), nullptr))) {
        p_ = start;
        return SetError("number overflows a double");
      }
    }
    return true;
  }

  // p_ at the opening quote; on success p_ is past the closing quote.
  bool String() {
    ++p_;
    for (;;) {
      p_ = SkipPlainStringBytes(p_, end_);
      while (p_ != end_ && kStringClass[*p_] == kPlain) ++p_;
      if (p_ == end_) return SetError("unterminated string");
      switch (kStringClass[*p_]) {
        case kQuote:
          ++p_;
          return true;
        case kBackslash:
          if (!Escape()) return false;
          break;
        case kControl:
          return SetError("control character in a string (escape it)");
        default:
          if (!Utf8()) return false;
          break;
      }
    }
  }

  bool Escape() {
    ++p_;  // the backslash
    if (p_ == end_) return SetError("unterminated string");
    switch (*p_) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        ++p_;
        return true;
      case 'u':
        break;
      default:
        return SetError("invalid escape in a string");
    }
    ++p_;
    if (end_ - p_ < 4) return SetError("invalid \\u escape: expected 4 hex digits");
    const int32_t unit = Hex4(p_);
    if (unit < 0) return SetError("invalid \\u escape: expected 4 hex digits");
    p_ += 4;
    if (unit >= 0xDC00 && unit <= 0xDFFF) return SetError("unpaired UTF-16 low surrogate escape");
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') {
        return SetError("UTF-16 high surrogate escape not followed by a low surrogate");
      }
      const int32_t low = Hex4(p_ + 2);
      if (low < 0xDC00 || low > 0xDFFF) {
        return SetError("UTF-16 high surrogate escape not followed by a low surrogate");
      }
      p_ += 6;
    }
    return true;
  }

  // One multi-byte UTF-8 sequence at p_ (RFC 3629 table 3-7: no overlongs, no surrogates, at most
  // U+10FFFF).
  bool Utf8() {
    const unsigned char lead = *p_;
    int extra;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      extra = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      extra = 2;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      extra = 3;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      return SetError("invalid UTF-8 in a string");
    }
    if (end_ - p_ <= extra) return SetError("invalid UTF-8 in a string");
    if (p_[1] < lo || p_[1] > hi) {
      ++p_;
      return SetError("invalid UTF-8 in a string");
    }
    for (int i = 2; i <= extra; ++i) {
      if (p_[i] < 0x80 || p_[i] > 0xBF) {
        p_ += i;
        return SetError("invalid UTF-8 in a string");
      }
    }
    p_ += extra + 1;
    return true;
  }

  bool SetError(std::string_view what) {
    error_ = StrCat("invalid JSON at byte ", static_cast<int64_t>(p_ - begin_), ": ", what);
    return false;
  }
  Result<Value> Fail(std::string_view what) {
    SetError(what);
    return Error();
  }
  Result<Value> Error() { return MakeError(ErrorCode::kInvalidArgument, error_); }

  const unsigned char* const begin_;
  const unsigned char* p_;
  const unsigned char* const end_;
  std::string error_;
};

}  // namespace

// Navigation over validated text: skip whole values by their delimiters.
namespace internal {
enum : uint8_t { kOther = 0, kOpen, kClose, kStringStart };
constexpr std::array<uint8_t, 256> MakeStructural() {
  std::array<uint8_t, 256> t{};
  t['{'] = t['['] = kOpen;
  t['}'] = t[']'] = kClose;
  t['"'] = kStringStart;
  return t;
}
constexpr std::array<uint8_t, 256> kStructural = MakeStructural();

// p at an opening quote; returns past the closing quote (or end, for an unterminated string).
// Long message contents make this the navigation's hot loop; a backslash skips the byte it escapes.
const char* SkipString(const char* p, const char* end) {
  ++p;
  for (;;) {
    p = FindEitherByte(p, end, '"', '\\');
    if (p == end) return end;
    if (*p == '"') return p + 1;
    if (end - p < 2) return end;  // a backslash as the last byte
    p += 2;                       // the backslash and the byte it escapes
  }
}

Kind KindAt(char c) {
  switch (c) {
    case '{':
      return Kind::kObject;
    case '[':
      return Kind::kArray;
    case '"':
      return Kind::kString;
    case 't':
    case 'f':
      return Kind::kBool;
    case 'n':
      return Kind::kNull;
    default:
      return Kind::kNumber;
  }
}

// p at the start of a value; returns its end.
const char* SkipValue(const char* p, const char* end) {
  switch (*p) {
    case '"':
      return SkipString(p, end);
    case '{':
    case '[': {
      int depth = 0;
      while (p != end) {
        switch (kStructural[static_cast<unsigned char>(*p)]) {
          case kOpen:
            ++depth;
            break;
          case kClose:
            if (--depth == 0) return p + 1;
            break;
          case kStringStart:
            p = SkipString(p, end);
            continue;
          default:
            break;
        }
        ++p;
      }
      return end;
    }
    default:  // number or literal: up to the next delimiter
      while (p != end && *p != ',' && *p != '}' && *p != ']' &&
             !IsSpace(static_cast<unsigned char>(*p))) {
        ++p;
      }
      return p;
  }
}

Value ValueAt(const char*& p, const char* end) {
  const char* value_end = SkipValue(p, end);
  Value v{KindAt(*p), std::string_view(p, static_cast<size_t>(value_end - p))};
  p = value_end;
  return v;
}

}  // namespace internal

namespace {
using internal::SkipSpace;
using internal::SkipString;
using internal::ValueAt;


// Decodes the inside of a validated string literal.
std::string DecodeInner(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const auto* end = p + in.size();
  while (p != end) {
    if (*p != '\\') {
      out += static_cast<char>(*p++);
      continue;
    }
    ++p;
    switch (*p) {
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = static_cast<uint32_t>(Hex4(p + 1));
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // validated: a low surrogate escape follows
          const uint32_t low = static_cast<uint32_t>(Hex4(p + 3));
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          p += 6;
        }
        AppendUtf8(cp, out);
        break;
      }
      default:  // " \ /
        out += static_cast<char>(*p);
        break;
    }
    ++p;
  }
  return out;
}

}  // namespace

// (An escape makes the raw key longer than its decoded form, so KeyIs settles keys no longer than
// the name byte for byte and sends only longer ones here.)
namespace internal {
bool EscapedKeyIs(std::string_view raw_key, std::string_view name) {
  return raw_key.find('\\') != std::string_view::npos && DecodeInner(raw_key) == name;
}
}  // namespace internal

Result<Value> Parse(std::string_view text) { return Validator(text).Run(); }

std::vector<Member> Members(Value object) {
  std::vector<Member> out;
  // Request bodies, responses and usage objects have a handful of members: one allocation
  // instead of the four or five of growing from empty.
  if (object.is_object()) out.reserve(16);
  ForEachMember(object, [&](const Member& m) { out.push_back(m); });
  return out;
}

std::vector<Value> Elements(Value array) {
  std::vector<Value> out;
  ForEachElement(array, [&](Value element) { out.push_back(element); });
  return out;
}

std::optional<Value> Find(Value object, std::string_view name) {
  std::optional<Value> found;
  ForEachMember(object, [&](const Member& m) {
    if (m.KeyIs(name)) found = m.value;
  });
  return found;
}

std::optional<Value> Object::Find(std::string_view name) const {
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    if (it->KeyIs(name)) return it->value;
  }
  return std::nullopt;
}

std::optional<std::string> DecodeString(Value value) {
  if (!value.is_string()) return std::nullopt;
  return DecodeInner(value.text.substr(1, value.text.size() - 2));
}

void AppendMinified(Value value, std::string& out) {
  const char* p = value.text.data();
  const char* end = p + value.text.size();
  out.reserve(out.size() + value.text.size());
  // Bytes are copied in runs that end only at whitespace between tokens: compact JSON (what
  // providers and SDKs send) is one append, not one per string and per punctuation run.
  const char* run = p;
  while (p != end) {
    if (*p == '"') {
      p = SkipString(p, end);
    } else if (IsSpace(static_cast<unsigned char>(*p))) {
      out.append(run, p);
      while (p != end && IsSpace(static_cast<unsigned char>(*p))) ++p;
      run = p;
    } else {
      ++p;
    }
  }
  out.append(run, p);
}

void AppendQuoted(std::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace kvgate::raw_json
