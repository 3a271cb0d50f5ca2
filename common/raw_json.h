// Reading JSON without building a document: one validating pass, then navigation over the
// document's own bytes.
//
// Why: the gateway forwards most request and response bodies unchanged apart from a field or two.
// Parsing them into an nlohmann::json tree and serializing them again cost several times more CPU
// than everything else on the proxy path (profiled: ~300k instructions per 1.2 KB request, against
// ~10k for a validating scan). With this module a body is checked once, the few fields the gateway
// reads are decoded on demand, and the upstream body is assembled from spans of the client's bytes.
// Adapters that really rewrite a body (Anthropic, the built-in engine) still build a tree.
//
// Validation is as strict as nlohmann::json::parse (the tests compare the two on mutated inputs):
// RFC 8259 grammar, well-formed UTF-8 (RFC 3629), no control characters in strings, paired UTF-16
// surrogate escapes, no numbers that overflow a double, one optional leading UTF-8 BOM. Two
// deliberate differences: nesting deeper than kMaxDepth is rejected (nlohmann has no limit; a
// gateway must not let one request build an unbounded stack anywhere), and so is a NUL byte after
// the value (nlohmann's lexer takes it for the end of the input and ignores what follows).
//
// Thread safety: free functions, no state. Values are views: the text they came from must outlive
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kvgate::raw_json {

inline constexpr int kMaxDepth = 512;

enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

// One JSON value: its kind and its exact bytes (no surrounding whitespace).
struct Value {
  Kind kind = Kind::kNull;
  std::string_view text;

  bool is_object() const { return kind == Kind::kObject; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_null() const { return kind == Kind::kNull; }
  bool is_true() const { return kind == Kind::kBool && text == "true"; }
};

namespace internal {
bool EscapedKeyIs(std::string_view raw_key, std::string_view name);
}  // namespace internal

// `raw_key` (a key's bytes between its quotes, escapes not decoded) equals `name` once its
// escapes are decoded. Inline: translators test every member of every stream chunk against a few
// names, and almost every test is decided by the sizes or the first byte.
inline bool KeyIs(std::string_view raw_key, std::string_view name) {
  if (raw_key.size() <= name.size()) return raw_key == name;
  // Longer, so equal only through escapes: at most 6 raw bytes (\u00XX) per decoded byte, and a
  // first byte that is the name's or starts an escape.
  if (name.empty() || raw_key.size() > 6 * name.size() ||
      (raw_key[0] != name[0] && raw_key[0] != '\\')) {
    return false;
  }
  return internal::EscapedKeyIs(raw_key, name);
}

struct Member {
  std::string_view key;  // the key's bytes between its quotes, escapes not decoded
  Value value;
  bool KeyIs(std::string_view name) const { return raw_json::KeyIs(key, name); }
};

// Validates `text` as exactly one JSON value and returns it. Errors are kInvalidArgument with the
// byte offset and what was wrong there, e.g. "invalid JSON at byte 17: unterminated string".
Result<Value> Parse(std::string_view text);

// Navigation. These take values that came out of Parse (directly or through these functions):
// their bytes are known to be valid, so nothing is checked again. Given another kind of value
// they return empty results.
std::vector<Member> Members(Value object);  // document order, duplicate keys kept
std::vector<Value> Elements(Value array);
// The last member named `name` (nlohmann keeps the last of duplicate keys), or nullopt.
std::optional<Value> Find(Value object, std::string_view name);
// Calls fn(const Member&) for each member in document order, allocating nothing (nothing for a
// value that is not an object).
template <class Fn>
void ForEachMember(Value object, Fn&& fn);
// Calls fn(Value) for each element in order, allocating nothing (nothing for a non-array).
template <class Fn>
void ForEachElement(Value array, Fn&& fn);

// An object's members read once, for repeated lookups: a request body is consulted a dozen times,
// and each Find(Value, ...) walks the whole object. Empty for a value that is not an object.
class Object {
 public:
  Object() = default;
  explicit Object(Value object) : value_(object), members_(Members(object)) {}

  Value value() const { return value_; }
  bool is_object() const { return value_.is_object(); }
  const std::vector<Member>& members() const { return members_; }
  // The last member named `name`, or nullopt.
  std::optional<Value> Find(std::string_view name) const;

 private:
  Value value_;
  std::vector<Member> members_;
};

// A string value's decoded content (escapes resolved, UTF-8); nullopt when `value` is not a
// string.
std::optional<std::string> DecodeString(Value value);

// Appends `value` with the insignificant whitespace removed.
void AppendMinified(Value value, std::string& out);
// Appends `text` (UTF-8) as a JSON string literal, quotes included.
void AppendQuoted(std::string_view text, std::string& out);

namespace internal {
// Advances `p` past whitespace / one whole value; `end` bounds the scan (text known valid).
// SkipSpace is inline: navigation calls it around every key and value, and compact JSON (what
// providers send) has nothing to skip, so the first test decides.
inline bool IsSpace(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline const char* SkipSpace(const char* p, const char* end) {
  while (p != end && IsSpace(static_cast<unsigned char>(*p))) ++p;
  return p;
}
Value ValueAt(const char*& p, const char* end);
const char* SkipValue(const char* p, const char* end);
const char* SkipString(const char* p, const char* end);
}  // namespace internal

// Single-pass walking, for hot paths that read a few members deep inside a value (a stream
// chunk's choices[].delta). ForEachMember hands each value out whole, so it finds the value's end
// before the callback runs, and a callback that then walks into the value scans those bytes again,
// once more per level. Here the callback consumes each value itself: it walks into it (WalkMembers
// / WalkElements at `p`) or passes over it (SkipMember / ReadMember), and leaves `p` just past it;
// every byte is scanned once.
//
// `p` is at the value's '{' / '['; `end` bounds the validated text the value lies in. A value of
// another kind is passed over without a call. Returns the position just past the value.
//   WalkMembers: fn(std::string_view raw_key, const char*& p), p at the member's value.
//   WalkElements: fn(const char*& p), p at the element.
template <class Fn>
const char* WalkMembers(const char* p, const char* end, Fn&& fn);
template <class Fn>
const char* WalkElements(const char* p, const char* end, Fn&& fn);
// For walk callbacks: the value at `p` whole (p moves past it), or just moving past it.
inline Value ReadMember(const char*& p, const char* end) { return internal::ValueAt(p, end); }
inline void SkipMember(const char*& p, const char* end) { p = internal::SkipValue(p, end); }

template <class Fn>
const char* WalkMembers(const char* p, const char* end, Fn&& fn) {
  if (p == end || *p != '{') return p == end ? end : internal::SkipValue(p, end);
  ++p;
  for (;;) {
    p = internal::SkipSpace(p, end);
    if (p == end) return end;
    if (*p == '}') return p + 1;
    const char* key_end = internal::SkipString(p, end);
    const std::string_view key(p + 1, static_cast<size_t>(key_end - p - 2));
    p = internal::SkipSpace(key_end, end);
    p = internal::SkipSpace(p + 1, end);  // the colon
    fn(key, p);
    p = internal::SkipSpace(p, end);
    if (p != end && *p == ',') ++p;
  }
}

template <class Fn>
const char* WalkElements(const char* p, const char* end, Fn&& fn) {
  if (p == end || *p != '[') return p == end ? end : internal::SkipValue(p, end);
  ++p;
  for (;;) {
    p = internal::SkipSpace(p, end);
    if (p == end) return end;
    if (*p == ']') return p + 1;
    fn(p);
    p = internal::SkipSpace(p, end);
    if (p != end && *p == ',') ++p;
  }
}

template <class Fn>
void ForEachMember(Value object, Fn&& fn) {
  if (!object.is_object()) return;
  const char* end = object.text.data() + object.text.size();
  WalkMembers(object.text.data(), end, [&](std::string_view key, const char*& p) {
    const Member m{key, internal::ValueAt(p, end)};
    fn(m);
  });
}

template <class Fn>
void ForEachElement(Value array, Fn&& fn) {
  if (!array.is_array()) return;
  const char* end = array.text.data() + array.text.size();
  WalkElements(array.text.data(), end, [&](const char*& p) { fn(internal::ValueAt(p, end)); });
}

}  // namespace kvgate::raw_json
