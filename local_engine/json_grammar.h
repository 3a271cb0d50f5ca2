// What constrained decoding accepts: a JSON Schema (OpenAI's strict subset) or "any JSON object",
// compiled into an immutable graph of nodes that JsonMatcher (json_matcher.h) walks byte by byte.
//
//   auto g = CompileJsonSchema(schema, "response_format.json_schema.schema");
//   if (!g) return Http400(g.error().path, g.error().message);
//   JsonMatcher m(*g);
//
// Supported keywords: type (object, array, string, number, integer, boolean, null, or an array of
// them), properties, required, additionalProperties (false, true or a schema), enum, const,
// items, minItems, maxItems, minLength, maxLength (in code points), anyOf / oneOf, allOf with one
// member, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed), and the
// annotations title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly (ignored). Anything else (pattern, format, minimum, minLength, ...) is an
// error naming its path: the output could not be guaranteed to match it.
//
// The language the grammar generates is a subset of what the schema accepts, chosen so that every
// output is valid JSON that matches the schema:
//   - an object with `properties` has its keys in the schema's declared order (the order of the
//     ordered_json the caller parsed; OpenAI's Structured Outputs writes them so), each at most
//     once; a key not in `required` may be left out; no other keys (whatever additionalProperties
//     says: leaving extra keys out is valid either way). `properties: {}` therefore means only {},
//     unless additionalProperties is true or a schema. An object without `properties` takes any
//     keys, its values matching additionalProperties (any value when absent or true; only {} when
//     false).
//   - enum and const values are written compactly, as nlohmann::json::dump() writes them.
//   - integers have at most 18 digits (they fit int64); numbers at most 18 integer and 18
//     fraction digits and a 2-digit exponent.
//   - strings are valid UTF-8; \u escapes of UTF-16 surrogates (\uD800-\uDFFF) are not produced
//     (characters outside the BMP are written as raw UTF-8).
//   - whitespace: at most GrammarOptions::max_whitespace consecutive bytes (space, \n, \t, \r)
//     where JSON allows whitespace, none after the top-level value, so a model cannot loop on
//     whitespace forever.
//   - nesting is at most kMaxJsonDepth containers deep. A schema whose shallowest value nests
//     deeper (or that has no finite value at all: a required property that refers back to its
//     own object) is an error, and the matcher never opens a value, key or item whose shallowest
//     completion would not fit under the bound (Node::min_depth), so every output it starts can
//     be finished.
// anyOf alternatives (and the members of a type array) must be told apart by their first byte
// (an object and a null, a string and a number); integer and number together become number. Two
// alternatives that could start alike (two object schemas) are an error.
//
// Thread safety: a JsonGrammar is immutable; share it freely between threads and matchers.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgate::engine {

inline constexpr int kMaxJsonDepth = 48;  // open containers at once

struct GrammarOptions {
  int max_whitespace = 2;  // consecutive whitespace bytes allowed, >= 0
};

// A schema that cannot be compiled: `path` is the JSON path of the offending field, prefixed with
// the path the caller gave (e.g. "response_format.json_schema.schema.properties.age.type").
struct SchemaError {
  std::string path;
  std::string message;
};

struct JsonGrammar {
  enum class Kind : uint8_t {
    kObject,    // declared properties, in order
    kMap,       // any keys; values of value_node
    kArray,     // items of value_node
    kString,    // any string
    kNumber,
    kInteger,
    kLiterals,  // one of `literals` (enum, const, true/false/null)
    kUnion,     // dispatch on the first byte (anyOf, type arrays, any value)
    kTagged,    // objects told apart by the value of their first key (tool calls: "name")
  };
  struct Property {
    std::string key;  // the key's JSON text without the quotes (escaped as dump() does)
    uint32_t node = 0;
    bool required = false;
  };
  struct Node {
    Kind kind = Kind::kString;
    std::vector<Property> props;          // kObject
    std::vector<uint32_t> next_required;  // kObject: first required index >= i (props.size(): none)
    uint32_t value_node = 0;              // kMap values, kArray items
    uint32_t min_items = 0, max_items = UINT32_MAX;  // kArray items, kString code points
    std::vector<std::string> literals;    // kLiterals: sorted, unique, non-empty
    uint32_t dispatch = 0;                // kUnion: index into `dispatch_tables`
    // kObject: how many keys the object has at least / at most (the tool-call envelope's
    // "exactly one of tool_calls and response"; not reachable from a schema).
    uint32_t min_props = 0, max_props = UINT32_MAX;
    // kTagged: `{"<tag_key>":<literals[i]>` starts the kObject tag_alts[i], whose first property
    // is that tag; the literals are JSON strings, sorted.
    std::string tag_key;
    std::vector<uint32_t> tag_alts;
    // No whitespace between this container's own tokens (its values may have theirs).
    bool compact = false;
    // Containers that the shallowest value of this node opens, itself included (0 for scalars
    // and literals, whose frame is not a container); kNoFiniteValue when every value is
    // infinitely deep.
    uint32_t min_depth = 0;
  };
  static constexpr uint32_t kNoNode = UINT32_MAX;
  static constexpr uint32_t kNoFiniteValue = UINT32_MAX;

  std::vector<Node> nodes;
  // Per union: the node each first byte starts (kNoNode: none).
  std::vector<std::array<uint32_t, 256>> dispatch_tables;
  uint32_t root = 0;
  bool compact_root = false;  // no whitespace before the top-level value
  GrammarOptions options;
};

// Compiles a JSON Schema; `path` names the schema in errors. Object keys are generated in the
// order `schema` iterates them: parse schemas as nlohmann::ordered_json to keep the declared
// order (a nlohmann::json has sorted them already).
std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileJsonSchema(
    const nlohmann::ordered_json& schema, std::string_view path, GrammarOptions options = {});
std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileJsonSchema(
    const nlohmann::json& schema, std::string_view path, GrammarOptions options = {});

// Tool calls (chat `tools`, docs/engine.md "Tool calls"): the output is
//   {"tool_calls":[CALL,CALL,...]}   1 to max_calls calls, or, with allow_response, also
//   {"response":"<text>"}
// where CALL is {"name":"<a function's name>","arguments":<a value of its parameters schema>}.
// Everything outside the arguments and the response string is written without whitespace, so
// that the same calls rendered back into a prompt (tool_format.h) are the same bytes.
struct ToolFunctionSchema {
  std::string name;  // REQUIRES: [A-Za-z0-9_-]+, unique
  const nlohmann::ordered_json* parameters = nullptr;  // REQUIRES: not null
  std::string path;  // names the parameters in errors, e.g. "tools[0].function.parameters"
};
struct ToolCallGrammarOptions {
  bool allow_response = false;
  uint32_t max_calls = 1;  // >= 1
};
std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileToolCallGrammar(
    const std::vector<ToolFunctionSchema>& functions, ToolCallGrammarOptions tool_options,
    GrammarOptions options = {});

// Any JSON object (response_format json_object).
std::shared_ptr<const JsonGrammar> JsonObjectGrammar(GrammarOptions options = {});

}  // namespace kvgate::engine
