#include "local_engine/json_grammar.h"

#include <algorithm>
#include <map>
#include <set>

namespace kvgate::engine {
namespace {

// Ordered: object keys iterate in the schema's declared order, which is the order generated.
using json = nlohmann::ordered_json;
using Kind = JsonGrammar::Kind;
using Unexpected = std::unexpected<SchemaError>;

constexpr size_t kMaxNodes = 1 << 16;
constexpr int kMaxSchemaDepth = 64;

// Keywords that only describe: they never change what is valid.
const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items",
    "minItems", "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref"};

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string ByteName(int b) {
  if (b >= 0x21 && b < 0x7f) return "'" + std::string(1, static_cast<char>(b)) + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

class Compiler {
 public:
  Compiler(const json& root, GrammarOptions options) : root_(&root) {
    g_ = std::make_shared<JsonGrammar>();
    g_->options = options;
  }

  std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> Run(std::string_view path) {
    if (g_->options.max_whitespace < 0) return Fail(std::string(path), "max_whitespace < 0");
    auto root = Compile(*root_, std::string(path), 0);
    if (!root) return Unexpected(root.error());
    g_->root = *root;
    if (auto s = Finalize(); !s) return Unexpected(s.error());
    if (auto s = CheckDepth(*root, std::string(path), kMaxJsonDepth); !s)
      return Unexpected(s.error());
    return std::shared_ptr<const JsonGrammar>(std::move(g_));
  }

  // The node of any JSON value (a union of every kind), made once.
  uint32_t Any() {
    if (any_ != JsonGrammar::kNoNode) return any_;
    any_ = NewNode(Kind::kUnion);
    const uint32_t map = NewNode(Kind::kMap);
    g_->nodes[map].value_node = any_;
    const uint32_t arr = NewNode(Kind::kArray);
    g_->nodes[arr].value_node = any_;
    const uint32_t lits = NewNode(Kind::kLiterals);
    g_->nodes[lits].literals = {"false", "null", "true"};
    unions_.push_back({any_, "", {map, arr, NewNode(Kind::kString), NewNode(Kind::kNumber), lits}});
    return any_;
  }

  // The grammar for json_object.
  std::shared_ptr<const JsonGrammar> ObjectOfAny() {
    const uint32_t map = NewNode(Kind::kMap);
    g_->nodes[map].value_node = Any();
    g_->root = map;
    (void)Finalize();  // cannot fail: every union here is the any node
    return std::move(g_);
  }

 private:
  struct Union {
    uint32_t node;
    std::string path;
    std::vector<uint32_t> alts;
  };

  static Unexpected Fail(std::string path, std::string message) {
    return Unexpected(SchemaError{std::move(path), std::move(message)});
  }

  uint32_t NewNode(Kind kind) {
    g_->nodes.push_back(JsonGrammar::Node{.kind = kind});
    return static_cast<uint32_t>(g_->nodes.size() - 1);
  }

  // Compiles `s`; the node remembers the first path it was compiled at (for depth errors).
  std::expected<uint32_t, SchemaError> Compile(const json& s, const std::string& path, int depth) {
    auto node = CompileNode(s, path, depth);
    if (node) paths_.try_emplace(*node, path);
    return node;
  }

  std::expected<uint32_t, SchemaError> CompileNode(const json& s, const std::string& path,
                                                   int depth) {
    if (depth > kMaxSchemaDepth) return Fail(path, "schema nested too deeply");
    if (g_->nodes.size() > kMaxNodes) return Fail(path, "schema too large");
    if (s.is_boolean()) {
      if (s.get<bool>()) return Any();
      return Fail(path, "the schema false accepts nothing");
    }
    if (!s.is_object()) return Fail(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (!kKeywords.contains(key) && !kAnnotations.contains(key)) {
        return Fail(path + "." + key, "unsupported keyword " + Quote(key));
      }
    }
    auto constraint_siblings = [&](std::string_view self) -> std::optional<std::string> {
      for (const auto& [key, value] : s.items()) {
        if (key != self && kKeywords.contains(key)) return key;
      }
      return std::nullopt;
    };
    if (auto ref = s.find("$ref"); ref != s.end()) {
      if (auto other = constraint_siblings("$ref")) {
        return Fail(path + "." + *other, Quote(*other) + " beside $ref is not supported");
      }
      return Ref(*ref, path + ".$ref", depth);
    }
    if (auto all = s.find("allOf"); all != s.end()) {
      if (!all->is_array() || all->size() != 1) {
        return Fail(path + ".allOf", "only an allOf of exactly one schema is supported");
      }
      if (auto other = constraint_siblings("allOf")) {
        return Fail(path + "." + *other, Quote(*other) + " beside allOf is not supported");
      }
      return Compile((*all)[0], path + ".allOf[0]", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (auto other = constraint_siblings(key)) {
        return Fail(path + "." + *other, Quote(*other) + " beside " + key + " is not supported");
      }
      const std::string p = path + "." + key;
      if (!it->is_array() || it->empty()) return Fail(p, "must be a non-empty array of schemas");
      Union u{NewNode(Kind::kUnion), p, {}};
      for (size_t i = 0; i < it->size(); ++i) {
        auto alt = Compile((*it)[i], p + "[" + std::to_string(i) + "]", depth + 1);
        if (!alt) return Unexpected(alt.error());
        u.alts.push_back(*alt);
      }
      const uint32_t node = u.node;
      unions_.push_back(std::move(u));
      return node;
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      const std::string p = path + ".type";
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (size_t i = 0; i < t->size(); ++i) {
          if (!(*t)[i].is_string()) return Fail(p + "[" + std::to_string(i) + "]", "must be a string");
          types.push_back((*t)[i].get<std::string>());
        }
      } else {
        return Fail(p, "must be a type name or a non-empty array of them");
      }
      for (size_t i = 0; i < types.size(); ++i) {
        static const std::set<std::string, std::less<>> kTypes = {
            "object", "array", "string", "number", "integer", "boolean", "null"};
        const std::string tp = t->is_array() ? p + "[" + std::to_string(i) + "]" : p;
        if (!kTypes.contains(types[i])) return Fail(tp, "unsupported type " + Quote(types[i]));
        if (std::count(types.begin(), types.end(), types[i]) > 1) {
          return Fail(tp, "type " + Quote(types[i]) + " repeated");
        }
      }
    }
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return Fail(path + ".enum", "must be a non-empty array");
      if (s.contains("const")) return Fail(path + ".const", "const beside enum is not supported");
      for (size_t i = 0; i < e->size(); ++i) {
        if (!types.empty() && !HasType((*e)[i], types)) {
          return Fail(path + ".enum[" + std::to_string(i) + "]", "value does not match the type");
        }
      }
      return Literals(*e);
    }
    if (auto c = s.find("const"); c != s.end()) {
      if (!types.empty() && !HasType(*c, types)) return Fail(path + ".const", "value does not match the type");
      return Literals(json::array({*c}));
    }
    if (types.empty()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
        types.push_back("array");
      } else {
        return Any();
      }
    }
    if (types.size() == 1) return Typed(s, types[0], path, depth);
    Union u{NewNode(Kind::kUnion), path + ".type", {}};
    for (const std::string& t : types) {
      auto alt = Typed(s, t, path, depth);
      if (!alt) return Unexpected(alt.error());
      u.alts.push_back(*alt);
    }
    const uint32_t node = u.node;
    unions_.push_back(std::move(u));
    return node;
  }

  static bool HasType(const json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
          (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
          (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
          (t == "null" && v.is_null())) {
        return true;
      }
    }
    return false;
  }

  uint32_t Literals(const json& values) {
    const uint32_t n = NewNode(Kind::kLiterals);
    std::vector<std::string> lits;
    for (const json& v : values) lits.push_back(v.dump(-1, ' ', false, json::error_handler_t::replace));
    std::sort(lits.begin(), lits.end());
    lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
    g_->nodes[n].literals = std::move(lits);
    return n;
  }

  std::expected<uint32_t, SchemaError> Typed(const json& s, const std::string& type,
                                             const std::string& path, int depth) {
    if (type == "string") {
      auto bounds = Bounds(s, path, "minLength", "maxLength");
      if (!bounds) return Unexpected(bounds.error());
      const uint32_t n = NewNode(Kind::kString);
      g_->nodes[n].min_items = bounds->first;
      g_->nodes[n].max_items = bounds->second;
      return n;
    }
    if (type == "number") return NewNode(Kind::kNumber);
    if (type == "integer") return NewNode(Kind::kInteger);
    if (type == "boolean") return Literals(json::array({false, true}));
    if (type == "null") return Literals(json::array({nullptr}));
    if (type == "array") return Array(s, path, depth);
    return Object(s, path, depth);
  }

  std::expected<uint32_t, SchemaError> Array(const json& s, const std::string& path, int depth) {
    uint32_t items = 0;
    if (auto it = s.find("items"); it != s.end()) {
      auto node = Compile(*it, path + ".items", depth + 1);
      if (!node) return Unexpected(node.error());
      items = *node;
    } else {
      items = Any();
    }
    auto bounds = Bounds(s, path, "minItems", "maxItems");
    if (!bounds) return Unexpected(bounds.error());
    const uint32_t n = NewNode(Kind::kArray);
    g_->nodes[n].value_node = items;
    g_->nodes[n].min_items = bounds->first;
    g_->nodes[n].max_items = bounds->second;
    return n;
  }

  // minItems/maxItems or minLength/maxLength: [0, UINT32_MAX) when absent.
  static std::expected<std::pair<uint32_t, uint32_t>, SchemaError> Bounds(
      const json& s, const std::string& path, const char* min_name, const char* max_name) {
    uint32_t bounds[2] = {0, UINT32_MAX};
    const char* names[2] = {min_name, max_name};
    for (int i = 0; i < 2; ++i) {
      auto it = s.find(names[i]);
      if (it == s.end()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100000) {
        return Fail(path + "." + names[i], "must be an integer from 0 to 100000");
      }
      bounds[i] = static_cast<uint32_t>(it->get<int64_t>());
    }
    if (bounds[0] > bounds[1]) {
      return Fail(path + "." + min_name, std::string(min_name) + " is above " + max_name);
    }
    return std::pair{bounds[0], bounds[1]};
  }

  std::expected<uint32_t, SchemaError> Object(const json& s, const std::string& path, int depth) {
    const json* props = nullptr;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return Fail(path + ".properties", "must be an object");
      props = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Fail(path + ".required", "must be an array of property names");
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string p = path + ".required[" + std::to_string(i) + "]";
        const json& name = (*it)[i];
        if (!name.is_string()) return Fail(p, "must be a string");
        if (props == nullptr || !props->contains(name.get<std::string>())) {
          return Fail(p, Quote(name.get<std::string>()) + " is not in properties");
        }
        if (!required.insert(name.get<std::string>()).second) return Fail(p, "repeated");
      }
    }
    const json* additional = nullptr;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!it->is_boolean() && !it->is_object()) {
        return Fail(path + ".additionalProperties", "must be a boolean or a schema");
      }
      additional = &*it;
    }
    if (props == nullptr || props->empty()) {
      // `properties: {}` declares that there are no keys (a tool without arguments), unless
      // additionalProperties asks for some; without `properties`, any keys.
      const bool none_declared = props != nullptr && additional == nullptr;
      if (none_declared ||
          (additional != nullptr && additional->is_boolean() && !additional->get<bool>())) {
        const uint32_t n = NewNode(Kind::kObject);  // only {}
        g_->nodes[n].next_required = {0};
        return n;
      }
      uint32_t value = 0;
      if (additional != nullptr && additional->is_object()) {
        auto node = Compile(*additional, path + ".additionalProperties", depth + 1);
        if (!node) return Unexpected(node.error());
        value = *node;
      } else {
        value = Any();
      }
      const uint32_t n = NewNode(Kind::kMap);
      g_->nodes[n].value_node = value;
      return n;
    }
    if (additional != nullptr && additional->is_object()) {  // checked, though never generated
      auto node = Compile(*additional, path + ".additionalProperties", depth + 1);
      if (!node) return Unexpected(node.error());
    }
    const uint32_t n = NewNode(Kind::kObject);
    std::vector<JsonGrammar::Property> out;
    // Declared order (ordered_json), as OpenAI's Structured Outputs writes them.
    for (const auto& [name, schema] : props->items()) {
      auto node = Compile(schema, path + ".properties." + name, depth + 1);
      if (!node) return Unexpected(node.error());
      std::string key = json(name).dump(-1, ' ', false, json::error_handler_t::replace);
      out.push_back({key.substr(1, key.size() - 2), *node, required.contains(name)});
    }
    SetProps(n, std::move(out));
    return n;
  }

  void SetProps(uint32_t n, std::vector<JsonGrammar::Property> props) {
    auto& node = g_->nodes[n];
    node.props = std::move(props);
    node.next_required.assign(node.props.size() + 1, static_cast<uint32_t>(node.props.size()));
    for (size_t i = node.props.size(); i-- > 0;) {
      node.next_required[i] = node.props[i].required ? static_cast<uint32_t>(i) : node.next_required[i + 1];
    }
  }

 public:
  // The tool-call envelope (json_grammar.h), every function's parameters compiled against itself
  // as the root of its $refs.
  std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> ToolCalls(
      const std::vector<ToolFunctionSchema>& functions, ToolCallGrammarOptions opt) {
    if (functions.empty() || opt.max_calls == 0) return Fail("tools", "no function to call");
    std::vector<std::pair<std::string, uint32_t>> calls;  // (name as JSON text, call object)
    std::vector<std::pair<uint32_t, std::string>> arguments;  // (node, path) per function
    for (const ToolFunctionSchema& f : functions) {
      root_ = f.parameters;
      refs_.clear();
      auto args = Compile(*f.parameters, f.path, 0);
      if (!args) return Unexpected(args.error());
      arguments.emplace_back(*args, f.path);
      const std::string literal = json(f.name).dump(-1, ' ', false, json::error_handler_t::replace);
      const uint32_t tag = NewNode(Kind::kLiterals);
      g_->nodes[tag].literals = {literal};
      const uint32_t call = NewNode(Kind::kObject);
      SetProps(call, {{"name", tag, true}, {"arguments", *args, true}});
      g_->nodes[call].compact = true;
      calls.emplace_back(literal, call);
    }
    std::sort(calls.begin(), calls.end());
    for (size_t i = 1; i < calls.size(); ++i) {
      if (calls[i].first == calls[i - 1].first) {
        return Fail("tools", "two functions named " + calls[i].first);
      }
    }
    uint32_t call = calls[0].second;
    if (calls.size() > 1) {
      call = NewNode(Kind::kTagged);
      JsonGrammar::Node& t = g_->nodes[call];
      t.tag_key = "name";
      t.compact = true;
      for (const auto& [literal, node] : calls) {
        t.literals.push_back(literal);
        t.tag_alts.push_back(node);
      }
    }
    const uint32_t array = NewNode(Kind::kArray);
    g_->nodes[array].value_node = call;
    g_->nodes[array].min_items = 1;
    g_->nodes[array].max_items = opt.max_calls;
    g_->nodes[array].compact = true;
    const uint32_t root = NewNode(Kind::kObject);
    std::vector<JsonGrammar::Property> props = {{"tool_calls", array, !opt.allow_response}};
    if (opt.allow_response) {
      props.push_back({"response", NewNode(Kind::kString), false});
      g_->nodes[root].min_props = 1;
      g_->nodes[root].max_props = 1;
    }
    SetProps(root, std::move(props));
    g_->nodes[root].compact = true;
    g_->root = root;
    g_->compact_root = true;
    if (auto s = Finalize(); !s) return Unexpected(s.error());
    // Every function must be callable, not only the envelope finishable (a "response" is): the
    // arguments sit inside the envelope object, its tool_calls array and the call object.
    for (const auto& [node, path] : arguments) {
      if (auto s = CheckDepth(node, path, kMaxJsonDepth - 3); !s) return Unexpected(s.error());
    }
    return std::shared_ptr<const JsonGrammar>(std::move(g_));
  }

 private:

  std::expected<uint32_t, SchemaError> Ref(const json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Fail(path, "must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const json* target = nullptr;
    if (r == "#") {
      target = root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string_view p(prefix);
        if (r.rfind(p, 0) != 0) continue;
        const std::string name = r.substr(p.size());
        const std::string section(p.substr(2, p.size() - 3));
        if (root_->is_object() && root_->contains(section) && (*root_)[section].is_object() &&
            (*root_)[section].contains(name)) {
          target = &(*root_)[section][name];
        }
      }
    }
    if (target == nullptr) {
      return Fail(path, "unsupported or unresolved $ref " + Quote(r) +
                            " (only #, #/$defs/NAME and #/definitions/NAME)");
    }
    // A placeholder first, so a recursive reference finds it; filled with a copy of the target's
    // node once compiled (its children are shared).
    const uint32_t placeholder = NewNode(Kind::kUnion);
    refs_[r] = placeholder;
    placeholders_.push_back({placeholder, path});
    auto node = Compile(*target, path, depth + 1);
    if (!node) return Unexpected(node.error());
    alias_[placeholder] = *node;
    return placeholder;
  }

  // Follows placeholders to the node they stand for.
  std::expected<uint32_t, SchemaError> Resolve(uint32_t n, const std::string& path) const {
    for (size_t hops = 0; alias_.contains(n); ++hops) {
      if (hops > alias_.size()) return Fail(path, "$ref refers to itself");
      n = alias_.at(n);
    }
    return n;
  }

  std::expected<std::vector<uint32_t>, SchemaError> Flatten(uint32_t n, const std::string& path,
                                                           int depth) const {
    auto r = Resolve(n, path);
    if (!r) return Unexpected(r.error());
    if (depth > kMaxSchemaDepth) return Fail(path, "anyOf nested or referenced in a cycle");
    const JsonGrammar::Node& node = g_->nodes[*r];
    if (node.kind != Kind::kUnion) return std::vector<uint32_t>{*r};
    auto u = std::find_if(unions_.begin(), unions_.end(), [&](const Union& x) { return x.node == *r; });
    std::vector<uint32_t> out;
    for (uint32_t alt : u->alts) {
      auto sub = Flatten(alt, path, depth + 1);
      if (!sub) return Unexpected(sub.error());
      out.insert(out.end(), sub->begin(), sub->end());
    }
    return out;
  }

  bool Starts(uint32_t n, int b) const {
    const JsonGrammar::Node& node = g_->nodes[n];
    switch (node.kind) {
      case Kind::kObject:
      case Kind::kMap:
      case Kind::kTagged: return b == '{';
      case Kind::kArray: return b == '[';
      case Kind::kString: return b == '"';
      case Kind::kNumber:
      case Kind::kInteger: return b == '-' || (b >= '0' && b <= '9');
      case Kind::kLiterals:
        return std::any_of(node.literals.begin(), node.literals.end(),
                           [b](const std::string& l) { return static_cast<uint8_t>(l[0]) == b; });
      case Kind::kUnion: return false;  // flattened before
    }
    return false;
  }

  // One of several alternatives that can all start with byte b, when one of them accepts
  // everything the others do; kNoNode otherwise.
  uint32_t Widest(const std::vector<uint32_t>& cands, int b) {
    for (uint32_t c : cands) {
      const JsonGrammar::Node& n = g_->nodes[c];
      if (n.kind == Kind::kString || n.kind == Kind::kNumber) return c;
      if (n.kind == Kind::kMap && n.value_node == any_ && any_ != JsonGrammar::kNoNode) return c;
      if (n.kind == Kind::kArray && n.value_node == any_ && any_ != JsonGrammar::kNoNode &&
          n.min_items == 0 && n.max_items == UINT32_MAX) {
        return c;
      }
    }
    if (std::all_of(cands.begin(), cands.end(),
                    [&](uint32_t c) { return g_->nodes[c].kind == Kind::kInteger; })) {
      return cands[0];
    }
    if (std::all_of(cands.begin(), cands.end(),
                    [&](uint32_t c) { return g_->nodes[c].kind == Kind::kLiterals; })) {
      std::vector<std::string> all;
      for (uint32_t c : cands) {
        for (const std::string& l : g_->nodes[c].literals) {
          if (static_cast<uint8_t>(l[0]) == b) all.push_back(l);
        }
      }
      std::sort(all.begin(), all.end());
      all.erase(std::unique(all.begin(), all.end()), all.end());
      const uint32_t merged = NewNode(Kind::kLiterals);
      g_->nodes[merged].literals = std::move(all);
      return merged;
    }
    return JsonGrammar::kNoNode;
  }

  std::expected<void, SchemaError> Finalize() {
    for (size_t ui = 0; ui < unions_.size(); ++ui) {
      const Union u = unions_[ui];
      std::vector<uint32_t> alts;
      for (size_t i = 0; i < u.alts.size(); ++i) {
        auto flat = Flatten(u.alts[i], u.path, 0);
        if (!flat) return Unexpected(flat.error());
        alts.insert(alts.end(), flat->begin(), flat->end());
      }
      std::sort(alts.begin(), alts.end());
      alts.erase(std::unique(alts.begin(), alts.end()), alts.end());
      std::array<uint32_t, 256> table;
      table.fill(JsonGrammar::kNoNode);
      for (int b = 0; b < 256; ++b) {
        std::vector<uint32_t> cands;
        for (uint32_t a : alts) {
          if (Starts(a, b)) cands.push_back(a);
        }
        if (cands.empty()) continue;
        if (cands.size() == 1) {
          table[b] = cands[0];
          continue;
        }
        table[b] = Widest(cands, b);
        if (table[b] == JsonGrammar::kNoNode) {
          return Fail(u.path, "alternatives that can both start with " + ByteName(b) +
                                  " (two objects, two arrays, ...) are not supported: the "
                                  "constrained decoder tells alternatives apart by their first byte");
        }
      }
      g_->nodes[u.node].dispatch = static_cast<uint32_t>(g_->dispatch_tables.size());
      g_->dispatch_tables.push_back(table);
    }
    // Placeholders become copies of what they stand for (a union's copy shares its table).
    for (const auto& [p, path] : placeholders_) {
      auto r = Resolve(p, path);
      if (!r) return Unexpected(r.error());
      g_->nodes[p] = g_->nodes[*r];
    }
    ComputeMinDepths();
    return {};
  }

  // The nodes whose min_depth node n's depends on.
  std::vector<uint32_t> Children(uint32_t n) const {
    const JsonGrammar::Node& node = g_->nodes[n];
    std::vector<uint32_t> out;
    switch (node.kind) {
      case Kind::kObject:
        for (const auto& p : node.props) out.push_back(p.node);
        break;
      case Kind::kArray:
        out.push_back(node.value_node);
        break;
      case Kind::kUnion:
        for (uint32_t c : g_->dispatch_tables[node.dispatch]) {
          if (c != JsonGrammar::kNoNode) out.push_back(c);
        }
        break;
      case Kind::kTagged:
        out = node.tag_alts;
        break;
      default:
        break;  // a map may be empty; scalars have no children
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // Node n's min_depth from its children's current ones. Depths past the bound are all alike
  // (kMaxJsonDepth + 1), which keeps the iteration short.
  uint32_t EvalMinDepth(uint32_t n) const {
    constexpr uint32_t kNone = JsonGrammar::kNoFiniteValue;
    constexpr uint32_t kTooDeep = kMaxJsonDepth + 1;
    auto md = [&](uint32_t c) { return g_->nodes[c].min_depth; };
    auto container = [&](uint32_t inner) {
      return inner == kNone ? kNone : std::min(inner + 1, kTooDeep);
    };
    const JsonGrammar::Node& node = g_->nodes[n];
    switch (node.kind) {
      case Kind::kMap:
        return 1;
      case Kind::kArray:
        return container(node.min_items == 0 ? 0 : md(node.value_node));
      case Kind::kObject: {
        uint32_t need = 0, required = 0, optional = kNone;
        for (const auto& p : node.props) {
          if (p.required) {
            need = std::max(need, md(p.node));
            ++required;
          } else {
            optional = std::min(optional, md(p.node));
          }
        }
        // min_props (the tool-call envelope's one key) above the required ones: one optional
        // key more at least.
        if (node.min_props > required) need = std::max(need, optional);
        return container(need);
      }
      case Kind::kUnion:
      case Kind::kTagged: {
        uint32_t least = kNone;
        for (uint32_t c : Children(n)) least = std::min(least, md(c));
        return least;
      }
      default:
        return 0;  // scalars and literals open no container
    }
  }

  // min_depth of every node: iterated from "no finite value" down to the least values that the
  // rules of EvalMinDepth allow (a recursion that must go on forever stays kNoFiniteValue).
  void ComputeMinDepths() {
    const size_t count = g_->nodes.size();
    std::vector<std::vector<uint32_t>> users(count);
    std::vector<uint32_t> work;
    for (uint32_t n = 0; n < count; ++n) {
      for (uint32_t c : Children(n)) users[c].push_back(n);
      const Kind k = g_->nodes[n].kind;
      const bool scalar = k != Kind::kObject && k != Kind::kMap && k != Kind::kArray &&
                          k != Kind::kUnion && k != Kind::kTagged;
      g_->nodes[n].min_depth = scalar ? 0 : JsonGrammar::kNoFiniteValue;
      work.push_back(n);
    }
    // Each node's value only goes down, and only through kMaxJsonDepth + 2 values.
    while (!work.empty()) {
      const uint32_t n = work.back();
      work.pop_back();
      const uint32_t v = EvalMinDepth(n);
      if (v >= g_->nodes[n].min_depth) continue;
      g_->nodes[n].min_depth = v;
      work.insert(work.end(), users[n].begin(), users[n].end());
    }
  }

  // An error when node n's shallowest value needs more than `room` containers, naming where: the
  // container that goes past the bound, or the property (item) that starts a recursion that never
  // ends. Follows, from n, the child that sets each node's min_depth.
  std::expected<void, SchemaError> CheckDepth(uint32_t n, const std::string& path, int room) const {
    if (g_->nodes[n].min_depth <= static_cast<uint32_t>(room)) return {};
    const bool endless = g_->nodes[n].min_depth == JsonGrammar::kNoFiniteValue;
    std::map<uint32_t, std::string> seen;  // node -> the path it was first reached at
    std::string at = path;
    for (int open = 0;;) {
      if (auto it = seen.find(n); it != seen.end()) {
        return Fail(it->second,
                    "no finite value matches: the value here must contain "
                    "another of its own kind (through required properties or "
                    "minItems), so every value would be infinitely deep");
      }
      seen.emplace(n, at);
      const JsonGrammar::Node& node = g_->nodes[n];
      const bool container =
          node.kind == Kind::kObject || node.kind == Kind::kMap || node.kind == Kind::kArray;
      if (container && ++open > room && !endless) {
        return Fail(at, "the shallowest value this schema accepts nests more than " +
                            std::to_string(room) +
                            " objects and arrays here (the built-in "
                            "engine writes at most " +
                            std::to_string(kMaxJsonDepth) + " levels)");
      }
      // The child with the deepest requirement (the one with the least for unions).
      uint32_t next = JsonGrammar::kNoNode;
      std::string next_at;
      if (node.kind == Kind::kObject) {
        for (const auto& p : node.props) {
          if (!p.required) continue;
          if (next == JsonGrammar::kNoNode ||
              g_->nodes[p.node].min_depth > g_->nodes[next].min_depth) {
            next = p.node;
            next_at = at + ".properties." + p.key;
          }
        }
        const bool any_required = next != JsonGrammar::kNoNode;
        for (const auto& p : node.props) {  // min_props without required keys: the least optional
          if (any_required || node.min_props == 0) break;
          if (next == JsonGrammar::kNoNode ||
              g_->nodes[p.node].min_depth < g_->nodes[next].min_depth) {
            next = p.node;
            next_at = at + ".properties." + p.key;
          }
        }
      } else if (node.kind == Kind::kArray) {
        next = node.value_node;
        next_at = at + ".items";
      } else if (node.kind == Kind::kUnion || node.kind == Kind::kTagged) {
        for (uint32_t c : Children(n)) {
          if (next == JsonGrammar::kNoNode || g_->nodes[c].min_depth < g_->nodes[next].min_depth)
            next = c;
        }
        auto p = paths_.find(next);
        next_at = p != paths_.end() ? p->second : at;
      }
      if (next == JsonGrammar::kNoNode) return Fail(at, "schema nested too deeply");  // not reached
      n = next;
      at = std::move(next_at);
    }
  }

  const json* root_;  // what "#" refers to
  std::shared_ptr<JsonGrammar> g_;
  uint32_t any_ = JsonGrammar::kNoNode;
  std::vector<Union> unions_;
  std::map<std::string, uint32_t> refs_;
  std::map<uint32_t, uint32_t> alias_;  // placeholder -> compiled target
  std::vector<std::pair<uint32_t, std::string>> placeholders_;  // and the $ref's path
  std::map<uint32_t, std::string> paths_;  // node -> the first path it was compiled at
};

}  // namespace

std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileJsonSchema(
    const nlohmann::ordered_json& schema, std::string_view path, GrammarOptions options) {
  return Compiler(schema, options).Run(path);
}

std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileJsonSchema(
    const nlohmann::json& schema, std::string_view path, GrammarOptions options) {
  const nlohmann::ordered_json ordered(schema);
  return Compiler(ordered, options).Run(path);
}

std::expected<std::shared_ptr<const JsonGrammar>, SchemaError> CompileToolCallGrammar(
    const std::vector<ToolFunctionSchema>& functions, ToolCallGrammarOptions tool_options,
    GrammarOptions options) {
  const nlohmann::ordered_json none;
  return Compiler(none, options).ToolCalls(functions, tool_options);
}

std::shared_ptr<const JsonGrammar> JsonObjectGrammar(GrammarOptions options) {
  const nlohmann::ordered_json none;
  return Compiler(none, options).ObjectOfAny();
}

}  // namespace kvgate::engine
