#include "tests/local_engine/json_schema_check.h"

#include <cmath>

namespace kvgate::engine::testing {
namespace {

using nlohmann::json;

bool Fail(std::string* why, const std::string& w) {
  if (why != nullptr) *why = w;
  return false;
}

bool HasType(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

}  // namespace

bool MatchesSchema(const json& v, const json& s, const json& root, std::string* why) {
  if (s.is_boolean()) return s.get<bool>() || Fail(why, "false schema");
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return MatchesSchema(v, root, root, why);
    for (const char* section : {"$defs", "definitions"}) {
      const std::string prefix = std::string("#/") + section + "/";
      if (r.rfind(prefix, 0) == 0) return MatchesSchema(v, root[section][r.substr(prefix.size())], root, why);
    }
    return Fail(why, "bad ref " + r);
  }
  if (s.contains("allOf")) {
    for (const json& sub : s["allOf"]) {
      if (!MatchesSchema(v, sub, root, why)) return false;
    }
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const json& sub : s["anyOf"]) any = any || MatchesSchema(v, sub, root, nullptr);
    if (!any) return Fail(why, "no anyOf alternative matches " + v.dump());
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const json& sub : s["oneOf"]) n += MatchesSchema(v, sub, root, nullptr);
    if (n != 1) return Fail(why, "oneOf: " + std::to_string(n) + " match " + v.dump());
  }
  if (s.contains("enum")) {
    bool found = false;
    for (const json& e : s["enum"]) found = found || e == v;
    if (!found) return Fail(why, v.dump() + " not in enum " + s["enum"].dump());
  }
  if (s.contains("const") && s["const"] != v) return Fail(why, v.dump() + " != const");
  if (s.contains("type")) {
    const json& t = s["type"];
    bool ok = false;
    if (t.is_string()) {
      ok = HasType(v, t);
    } else {
      for (const json& x : t) ok = ok || HasType(v, x);
    }
    if (!ok) return Fail(why, v.dump() + " is not of type " + t.dump());
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const auto& [k, sub] : props.items()) {
      if (v.contains(k) && !MatchesSchema(v[k], sub, root, why)) return false;
    }
    for (const json& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return Fail(why, "missing required " + r.dump());
    }
    if (s.contains("additionalProperties")) {
      for (const auto& [k, sub] : v.items()) {
        if (props.contains(k)) continue;
        if (!MatchesSchema(sub, s["additionalProperties"], root, why)) {
          return Fail(why, "additional property " + k + ": " + (why ? *why : ""));
        }
      }
    }
  }
  if (v.is_string()) {
    size_t code_points = 0;
    for (unsigned char c : v.get_ref<const std::string&>()) code_points += (c & 0xC0) != 0x80;
    if (s.contains("minLength") && code_points < s["minLength"].get<size_t>()) return Fail(why, "too short");
    if (s.contains("maxLength") && code_points > s["maxLength"].get<size_t>()) return Fail(why, "too long");
  }
  if (v.is_array()) {
    if (s.contains("items")) {
      for (const json& x : v) {
        if (!MatchesSchema(x, s["items"], root, why)) return false;
      }
    }
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return Fail(why, "too few items");
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return Fail(why, "too many items");
  }
  return true;
}

namespace {

class Gen {
 public:
  explicit Gen(std::mt19937_64& rng) : rng_(rng) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  std::string Name() {
    static const char* kNames[] = {"name", "names", "nam", "age", "a", "b", "ab", "id", "value",
                                   "é", "q\"uote", "back\\slash", "tab\t", "x y", "日本", "v1"};
    return kNames[Int(0, static_cast<int>(std::size(kNames)) - 1)];
  }

  json Scalar() {
    switch (Int(0, 6)) {
      case 0: return Name();
      case 1: return Int(-1000, 1000);
      case 2: return Int(-100, 100) / 8.0;
      case 3: return Coin();
      case 4: return nullptr;
      case 5: return json::object({{Name(), Int(0, 9)}});
      default: return json::array({Int(0, 3), Name()});
    }
  }

  // A schema whose JSON values all start with a byte of `category`:
  // 0 object, 1 array, 2 string, 3 number, 4 boolean, 5 null.
  json OfCategory(int category, int depth) {
    switch (category) {
      case 0: return Object(depth);
      case 1: return Array(depth);
      case 2:
        if (Coin(0.3)) return {{"enum", {Name(), Name(), "other"}}};
        return {{"type", "string"}};
      case 3: return {{"type", Coin() ? "integer" : "number"}};
      case 4: return {{"type", "boolean"}};
      default: return {{"type", "null"}};
    }
  }

  json Object(int depth) {
    json s = {{"type", "object"}};
    if (Coin(0.15)) {  // a map
      s["additionalProperties"] = depth < 3 && Coin() ? Schema(depth + 1) : json(true);
      return s;
    }
    json props = json::object();
    const int n = depth < 3 ? Int(0, 4) : Int(0, 1);
    for (int i = 0; i < n; ++i) props[Name()] = Schema(depth + 1);
    s["properties"] = props;
    json required = json::array();
    for (const auto& [k, _] : props.items()) {
      if (Coin(0.7)) required.push_back(k);
    }
    s["required"] = required;
    if (Coin(0.8)) s["additionalProperties"] = false;
    return s;
  }

  json Array(int depth) {
    json s = {{"type", "array"}, {"items", depth < 3 ? Schema(depth + 1) : json{{"type", "string"}}}};
    if (Coin(0.3)) s["minItems"] = Int(0, 2);
    if (Coin(0.3)) s["maxItems"] = s.value("minItems", 0) + Int(0, 3);
    return s;
  }

  json Schema(int depth) {
    const int pick = Int(0, depth >= 3 ? 6 : 12);
    switch (pick) {
      case 0:
        if (Coin(0.3)) return {{"type", "string"}, {"minLength", Int(0, 2)}, {"maxLength", Int(2, 5)}};
        return {{"type", "string"}};
      case 1: return {{"type", "integer"}};
      case 2: return {{"type", "number"}};
      case 3: return {{"type", "boolean"}};
      case 4: {
        json values = json::array();
        for (int i = Int(1, 4); i > 0; --i) values.push_back(Scalar());
        return {{"enum", values}};
      }
      case 5: return {{"const", Scalar()}};
      case 6: {
        static const char* kPairs[][2] = {{"string", "null"}, {"integer", "null"}, {"number", "string"},
                                          {"integer", "number"}, {"boolean", "null"}, {"string", "boolean"}};
        const auto& p = kPairs[Int(0, 5)];
        return {{"type", {p[0], p[1]}}};
      }
      case 7:
      case 8: return Object(depth);
      case 9: return Array(depth);
      case 10: {  // anyOf of different categories
        std::vector<int> cats = {0, 1, 2, 3, 4, 5};
        std::shuffle(cats.begin(), cats.end(), rng_);
        json alts = json::array();
        for (int i = Int(2, 3) - 1; i >= 0; --i) alts.push_back(OfCategory(cats[i], depth + 1));
        return {{"anyOf", alts}};
      }
      case 11: return json::object();  // any value
      default: return {{"type", "null"}, {"description", "annotations are ignored"}};
    }
  }

 private:
  std::mt19937_64& rng_;
};

}  // namespace

json RandomSchema(std::mt19937_64& rng) {
  Gen g(rng);
  if (g.Coin(0.15)) {  // definitions and references, one of them recursive
    json item = g.Object(1);
    item["properties"]["children"] = {{"type", "array"}, {"items", {{"$ref", "#/$defs/Item"}}},
                                      {"maxItems", 2}};
    return {{"type", "object"},
            {"$defs", {{"Item", item}}},
            {"properties", {{"root", {{"$ref", "#/$defs/Item"}}}, {"n", {{"type", "integer"}}}}},
            {"required", {"root"}},
            {"additionalProperties", false}};
  }
  return g.Coin(0.7) ? g.Object(0) : g.Schema(0);
}

}  // namespace kvgate::engine::testing
