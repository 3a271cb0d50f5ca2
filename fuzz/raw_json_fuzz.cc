// libFuzzer target: raw_json against nlohmann::json, the parser it replaced on the proxy path.
// common/raw_json.h promises that both accept and reject the same texts (except nesting deeper than
// kMaxDepth, which only raw_json rejects) and that navigation sees the tree nlohmann builds. Any
// disagreement, crash or sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/raw_json.h"

namespace {

using kvgate::raw_json::Kind;
using kvgate::raw_json::Value;
using nlohmann::json;
namespace rj = kvgate::raw_json;

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "raw_json_fuzz: %s\ninput (%zu bytes): %.*s\n", what, input.size(),
               static_cast<int>(input.size() > 512 ? 512 : input.size()), input.data());
  std::abort();
}

// Deepest nesting of arrays and objects, counted outside strings (text known valid to nlohmann).
int NestingDepth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string DecodedKey(std::string_view raw_key) {
  const std::string quoted = "\"" + std::string(raw_key) + "\"";
  return *rj::DecodeString(Value{Kind::kString, quoted});
}

bool KindMatches(Kind kind, const json& j) {
  switch (kind) {
    case Kind::kNull: return j.is_null();
    case Kind::kBool: return j.is_boolean();
    case Kind::kNumber: return j.is_number();
    case Kind::kString: return j.is_string();
    case Kind::kArray: return j.is_array();
    case Kind::kObject: return j.is_object();
  }
  return false;
}

// The tree nlohmann would build, from raw_json's navigation alone. Checks the navigation functions
// against each other on the way (Members vs ForEachMember vs the single-pass walk, Find and Object
// vs the last duplicate, KeyIs vs the decoded key).
json Rebuild(Value v, std::string_view input) {
  switch (v.kind) {
    case Kind::kObject: {
      json out = json::object();
      const auto members = rj::Members(v);
      size_t visited = 0;
      rj::ForEachMember(v, [&](const rj::Member& m) {
        if (visited >= members.size() || m.key != members[visited].key ||
            m.value.text != members[visited].value.text) {
          Fail("ForEachMember disagrees with Members", input);
        }
        ++visited;
      });
      if (visited != members.size()) Fail("ForEachMember saw fewer members", input);
      size_t walked = 0;
      const char* end = v.text.data() + v.text.size();
      const char* after = rj::WalkMembers(v.text.data(), end, [&](std::string_view key,
                                                                   const char*& p) {
        const Value value = rj::ReadMember(p, end);
        if (walked >= members.size() || key != members[walked].key ||
            value.text != members[walked].value.text) {
          Fail("WalkMembers disagrees with Members", input);
        }
        ++walked;
      });
      if (walked != members.size() || after != end) Fail("WalkMembers ended elsewhere", input);
      const rj::Object object(v);
      for (const rj::Member& m : members) {
        const std::string key = DecodedKey(m.key);
        if (!m.KeyIs(key)) Fail("KeyIs(raw key, decoded key) is false", input);
        out[key] = Rebuild(m.value, input);
        // Find returns the last member with this key: the one that is in `out` at the end.
        const auto found = rj::Find(v, key);
        const auto found_in_object = object.Find(key);
        if (!found || !found_in_object || found->text != found_in_object->text) {
          Fail("Find / Object::Find missed a member", input);
        }
      }
      // The last duplicate wins, in raw_json's Find as in nlohmann's tree.
      for (size_t i = members.size(); i-- > 0;) {
        const std::string key = DecodedKey(members[i].key);
        bool later = false;
        for (size_t k = i + 1; k < members.size() && !later; ++k) {
          later = members[k].KeyIs(key);
        }
        if (!later && rj::Find(v, key)->text.data() != members[i].value.text.data()) {
          Fail("Find returned another duplicate than the last", input);
        }
      }
      return out;
    }
    case Kind::kArray: {
      json out = json::array();
      const auto elements = rj::Elements(v);
      size_t i = 0;
      rj::ForEachElement(v, [&](Value e) {
        if (i >= elements.size() || e.text != elements[i].text) {
          Fail("ForEachElement disagrees with Elements", input);
        }
        ++i;
      });
      if (i != elements.size()) Fail("ForEachElement saw fewer elements", input);
      for (Value e : elements) out.push_back(Rebuild(e, input));
      return out;
    }
    case Kind::kString: {
      const std::string decoded = *rj::DecodeString(v);
      // AppendQuoted must write a literal that decodes to the same text, for both parsers.
      std::string quoted;
      rj::AppendQuoted(decoded, quoted);
      const json back = json::parse(quoted, nullptr, false);
      if (back.is_discarded() || back.get_ref<const std::string&>() != decoded) {
        Fail("AppendQuoted wrote a literal that does not read back", input);
      }
      return decoded;
    }
    default: {
      const json scalar = json::parse(v.text, nullptr, false);
      if (scalar.is_discarded()) Fail("a scalar's text is not a JSON value", input);
      return scalar;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = rj::Parse(text);
  const json tree = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (text.find('\0') != std::string_view::npos) {
    // nlohmann's lexer takes a NUL byte outside a string for the end of the input ("1\0x" is
    // accepted as 1); raw_json rejects the NUL, as it must: the bytes after it are not JSON.
    if (parsed) Fail("raw_json accepts a NUL byte", text);
    return 0;
  }
  if (!parsed) {
    if (parsed.error().message.empty()) Fail("rejected without a message", text);
    if (!tree.is_discarded() && NestingDepth(text) <= rj::kMaxDepth) {
      Fail("raw_json rejects what nlohmann accepts", text);
    }
    return 0;
  }
  if (tree.is_discarded()) Fail("raw_json accepts what nlohmann rejects", text);
  const Value v = *parsed;
  if (!KindMatches(v.kind, tree)) Fail("kind differs from nlohmann's", text);
  if (Rebuild(v, text) != tree) Fail("navigation rebuilt another tree than nlohmann's", text);
  std::string minified;
  rj::AppendMinified(v, minified);
  if (json::parse(minified, nullptr, false) != tree) Fail("AppendMinified changed the value", text);
  // Minified text is valid JSON without whitespace: raw_json must accept it as is.
  const auto again = rj::Parse(minified);
  if (!again || again->text.size() != minified.size()) Fail("minified text does not re-parse", text);
  return 0;
}
