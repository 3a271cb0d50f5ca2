// Tool calls on the built-in engine, OpenAI side (docs/api.md, "Tool calls on the built-in
// engine"): reading `tools` / `tool_choice` / `parallel_tool_calls` and the chat history into the
// engine's generic tool format (local_engine/tool_format.h), and the model's output back into
// OpenAI `tool_calls`, whole or as streamed deltas.
//
// Thread safety: functions are pure; a ToolCallAssembler belongs to one response.
#pragma once

#include <expected>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "local_engine/chat_template.h"
#include "local_engine/json_grammar.h"
#include "local_engine/tool_format.h"

namespace kvgate::gateway {

// A request field the engine cannot take: a 400 with `param` (and OpenAI's `code`).
struct FieldError {
  std::string param;
  std::string message;
  std::string code = "invalid_request";
};

enum class ToolChoice {
  kNone,      // no tools in the prompt, plain text (also: no tools at all)
  kAuto,      // a call or a {"response": ...} answer, the model's choice
  kRequired,  // at least one call
  kNamed,     // one call of `named`
};

struct ToolRequest {
  std::vector<engine::ToolFunction> tools;
  ToolChoice choice = ToolChoice::kNone;
  std::string named;     // kNamed
  bool parallel = true;  // parallel_tool_calls: up to kMaxParallelCalls calls, else one
  bool active() const { return choice != ToolChoice::kNone; }
};

// Calls one answer may hold with parallel_tool_calls (OpenAI's default).
inline constexpr uint32_t kMaxParallelCalls = 4;

// Reads tools, tool_choice and parallel_tool_calls of a chat body (parsed as ordered_json, so
// that each function's parameters keep their declared order). Errors name the field
// ("tools[1].function.name", "tool_choice.function.name", ...); a parameters schema the
// constrained decoder cannot serve is code invalid_function_parameters, param its JSON path.
std::expected<ToolRequest, FieldError> ParseToolRequest(const nlohmann::ordered_json& body);

// The constraint for an active request: the calls (required, named) or calls or a response (auto).
std::expected<std::shared_ptr<const engine::JsonGrammar>, FieldError> ToolGrammar(
    const ToolRequest& request);

// The chat template's messages for an OpenAI `messages` array: text content, developer as system;
// when tools are active, the tool prompt appended to the system message (or to the template's
// default one), assistant text as {"response": ...}; in every case assistant tool_calls rendered
// as the model writes them and tool messages as the tool role. Errors name the field.
std::expected<std::vector<engine::ChatMessage>, FieldError> ChatMessagesFor(
    const nlohmann::json& messages, const ToolRequest& tools, const std::string& default_system);

// Turns the model's output into OpenAI's message fields, streamed or whole.
class ToolCallAssembler {
 public:
  // Feeds generated text; returns the chat-chunk deltas it completes ({"content": ...} or
  // {"tool_calls": [...]} in OpenAI's chunk shape: a call's first delta carries index, id, type,
  // function.name and arguments "", later ones arguments fragments).
  std::vector<nlohmann::json> Push(std::string_view text);
  // The whole message: {"role": "assistant", "content": text or null, "refusal": null,
  // "tool_calls": [...]}.
  nlohmann::json Message() const;
  bool has_calls() const { return !calls_.empty(); }

 private:
  struct Call {
    std::string id, name, arguments;
  };
  engine::ToolOutputParser parser_;
  std::string content_;
  std::vector<Call> calls_;
  std::vector<engine::ToolOutputParser::Event> events_;  // scratch
};

}  // namespace kvgate::gateway
