// libFuzzer target: the constrained decoder's schema compiler and JSON automaton
// (local_engine/json_grammar.h, json_matcher.h), which run on a client's response_format.
// Input: a JSON Schema text, a NUL byte, then bytes to feed the automaton (no NUL: the input is
// all bytes, fed under the json_object grammar). The compiler must return a grammar or an error
// with a path, never crash; the automaton must agree with itself (Allows(b) is what Advance(b)
// does, a rejected byte changes nothing, Rollback restores a Mark), and whatever it accepts as
// complete must be JSON nlohmann::json parses. A schema text that is a JSON array is the
// parameters of as many functions under the tool-call grammar (auto, 2 calls at most): then a
// complete value must also read back (ToolOutputParser) into calls whose arguments are JSON and
// that render back (RenderToolCalls) to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "local_engine/json_grammar.h"
#include "local_engine/json_matcher.h"
#include "local_engine/tool_format.h"

namespace {

using kvgate::engine::JsonMatcher;
using nlohmann::json;

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "json_schema_fuzz: %s\ninput (%zu bytes): %.*s\n", what, input.size(),
               static_cast<int>(input.size() > 512 ? 512 : input.size()), input.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::shared_ptr<const kvgate::engine::JsonGrammar> grammar;
  std::string_view feed = input;
  bool tools = false;
  std::vector<nlohmann::ordered_json> parameters;
  if (nul != std::string_view::npos) {
    const json schema = json::parse(input.substr(0, nul), nullptr, false);
    if (schema.is_discarded()) return 0;
    tools = schema.is_array() && !schema.empty() && schema.size() <= 8;
    std::vector<kvgate::engine::ToolFunctionSchema> functions;
    if (tools) {
      for (const json& p : schema) parameters.emplace_back(p);
      for (size_t i = 0; i < parameters.size(); ++i) {
        functions.push_back({"f" + std::to_string(i), &parameters[i], "schema"});
      }
    }
    auto compiled = tools ? kvgate::engine::CompileToolCallGrammar(
                                functions, {.allow_response = true, .max_calls = 2})
                          : kvgate::engine::CompileJsonSchema(schema, "schema");
    if (!compiled) {
      if (compiled.error().path.rfind("schema", 0) != 0) {
        Fail("an error path outside the schema", input);
      }
      if (compiled.error().message.empty()) Fail("an error without a message", input);
      return 0;
    }
    grammar = *compiled;
    feed = input.substr(nul + 1);
  } else {
    grammar = kvgate::engine::JsonObjectGrammar({.max_whitespace = 3});
  }
  JsonMatcher m(grammar);
  std::string accepted;
  for (size_t i = 0; i < feed.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(feed[i]);
    const bool complete = m.IsComplete();
    const int depth = m.depth();
    const size_t mark = m.Mark();
    const bool allowed = m.Allows(b);
    if (m.Mark() != mark || m.depth() != depth) Fail("Allows changed the state", input);
    const bool advanced = m.Advance(b);
    if (advanced != allowed) Fail("Allows and Advance disagree", input);
    if (!advanced) {
      if (m.depth() != depth || m.IsComplete() != complete || m.Mark() != mark) {
        Fail("a rejected byte changed the state", input);
      }
      continue;  // skip it, as a sampler never picks a masked token
    }
    accepted.push_back(static_cast<char>(b));
    if (i % 7 == 3) {  // try a detour and come back
      const size_t before = m.Mark();
      m.AdvanceBytes("{\"k\":[1,");
      m.Rollback(before);
      if (m.depth() < 1) Fail("rollback lost the root", input);
    }
    if (i % 16 == 15) m.Commit();
  }
  if (m.IsComplete()) {
    const json parsed = json::parse(accepted, nullptr, false);
    if (parsed.is_discarded()) Fail("a complete value nlohmann cannot parse", input);
    if (tools) {
      kvgate::engine::ToolOutputParser parser;
      std::vector<kvgate::engine::ToolOutputParser::Event> events;
      parser.Push(accepted, events);
      if (!parser.done()) Fail("a complete tool-call object the parser did not finish", input);
      std::vector<kvgate::engine::ToolCall> calls;
      for (const auto& e : events) {
        using Kind = kvgate::engine::ToolOutputParser::Event::Kind;
        if (e.kind == Kind::kCallStart) calls.push_back({e.text, ""});
        if (e.kind == Kind::kArguments && !calls.empty()) calls.back().arguments += e.text;
      }
      for (const auto& c : calls) {
        if (!json::accept(c.arguments)) Fail("call arguments that are not JSON", input);
      }
      if (!calls.empty() && kvgate::engine::RenderToolCalls(calls) != accepted) {
        Fail("calls that do not render back to the same bytes", input);
      }
    }
  }
  return 0;
}
