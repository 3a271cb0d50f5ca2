// libFuzzer target: the config loader (gateway/config.cc), ${ENV} interpolation included.
//
// Input: byte 0 picks the mode; the rest is
//  - byte 0 < 64: a whole config file, given to ParseConfig with a fixed fake environment: any
//    text must load or be rejected with a message, never crash or throw (yaml-cpp throws; the
//    loader must catch);
//  - byte 0 >= 64: the value of an environment variable V, referenced from one of the YAML
//    contexts below. gateway/config.h promises that values "always read back as themselves":
//    YAML-loading the interpolated text must give exactly V (with the template's own text around
//    it), or, for a value with YAML syntax inside a longer unquoted scalar, an error.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "gateway/config.h"

namespace {

using kvgate::gateway::EnvLookup;

[[noreturn]] void Fail(const char* what, std::string_view value, std::string_view text) {
  std::fprintf(stderr, "config_fuzz: %s\nvalue: %.*s\ninterpolated: %.*s\n", what,
               static_cast<int>(value.size()), value.data(), static_cast<int>(text.size()),
               text.data());
  std::abort();
}

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

struct Template {
  const char* before;  // the YAML text, with the reference
  const char* after;   // and what ends its line
  bool whole_scalar;   // the reference is the whole (unquoted or quoted) scalar
  bool single_quoted;  // inside '...', which cannot hold a line break: such a value is an error
  // What the scalar reads back as, around the value (the template's own text).
  const char* prefix;
  const char* suffix;
};
constexpr Template kTemplates[] = {
    {"k: ${V}", "\n", true, false, "", ""},
    {"k: \"${V}\"", "\n", true, false, "", ""},
    {"k: '${V}'", "\n", true, true, "", ""},
    {"k: \"a ${V} b\"", "\n", true, false, "a ", " b"},
    {"k: 'a ${V} b'", "\n", true, true, "a ", " b"},
    {"k: x${V}y", "\n", false, false, "x", "y"},
    {"k: ${V} # comment", "\n", true, false, "", ""},
    {"l:\n  - ${V}", "\n", true, false, "", ""},
};

// Plain scalars that YAML resolves to null: by design a value is written "as typed" where it fits
// a plain scalar (numbers stay numbers), so these read back as null, not as their text.
bool IsYamlNull(std::string_view s) { return s == "~" || s == "null" || s == "Null" || s == "NULL"; }

void CheckRoundTrip(const Template& t, std::string value) {
  for (char& c : value) {
    if (c == '\0') c = ' ';  // an environment variable cannot hold a NUL
  }
  if (value.empty()) return;  // empty counts as unset (documented); nothing to read back
  const std::string text = std::string(t.before) + t.after;
  const auto interpolated = kvgate::gateway::InterpolateEnv(text, FakeEnv({{"V", value}}));
  if (!interpolated) {
    const bool line_break = value.find_first_of("\r\n") != std::string::npos;
    if (t.whole_scalar && !(t.single_quoted && line_break)) Fail(("whole-scalar reference rejected: " +
                              interpolated.error().message).c_str(), value, text);
    return;  // a longer unquoted value may refuse YAML syntax (documented)
  }
  YAML::Node root;
  try {
    root = YAML::Load(*interpolated);
  } catch (const std::exception& e) {
    Fail(("the interpolated text is not YAML: " + std::string(e.what())).c_str(), value,
         *interpolated);
  }
  YAML::Node node = root.IsMap() && root["k"] ? root["k"] : root.IsMap() && root["l"] ? root["l"][0]
                                                                                       : YAML::Node();
  const std::string expected = t.prefix + value + t.suffix;
  if (node.IsNull() && IsYamlNull(expected)) return;
  if (!node.IsScalar() || node.Scalar() != expected) {
    Fail("the value does not read back as itself", value, *interpolated);
  }
}

void CheckParse(std::string_view yaml) {
  static const EnvLookup env = FakeEnv({{"OPENAI_API_KEY", "sk-o"},
                                        {"HOST", "127.0.0.1"},
                                        {"PORT", "8080"},
                                        {"SECRET", "p\"a\\s's}, x: #y"},
                                        {"NESTED", "${HOST}"},
                                        {"EMPTY", ""}});
  const auto config = kvgate::gateway::ParseConfig(std::string(yaml), env, "fuzz.yaml");
  if (!config && config.error().message.empty()) Fail("rejected without a message", "", yaml);
  if (config && !kvgate::gateway::ValidateConfig(*config)) {
    Fail("ParseConfig returned a config ValidateConfig rejects", "", yaml);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] < 64) {
    CheckParse(rest);
  } else {
    CheckRoundTrip(kTemplates[data[0] % std::size(kTemplates)], std::string(rest));
  }
  return 0;
}
