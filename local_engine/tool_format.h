// The built-in engine's generic tool-call format (docs/engine.md, "Tool calls"), for models whose
// chat template has no tool format of its own (SmolLM2's ChatML has none), after llama.cpp's
// generic tool handling:
//   - the functions are described, each with its JSON Schema, in the system message
//     (ToolSystemPrompt), which depends on the functions alone, not on tool_choice, so a
//     thread's prompt prefix stays the same from turn to turn;
//   - the model answers with one JSON object, constrained by CompileToolCallGrammar
//     (json_grammar.h):  {"tool_calls":[{"name":"NAME","arguments":{...}},...]}  to call
//     functions, or {"response":"TEXT"} to answer in words (tool_choice auto only);
//   - calls in the history are rendered back as the same bytes (RenderToolCalls), so the next
//     turn's prompt starts with what the model wrote.
// ToolOutputParser reads that object back as it streams: text of the response, and each call's
// name and arguments as they arrive.
//
// Thread safety: functions are pure; a ToolOutputParser belongs to one response.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgate::engine {

struct ToolFunction {
  std::string name;         // [A-Za-z0-9_-]{1,64}
  std::string description;  // may be empty
  nlohmann::ordered_json parameters;  // the JSON Schema of the arguments, in declared order
};

// What is added to the system message: the functions, and how to call them.
std::string ToolSystemPrompt(const std::vector<ToolFunction>& tools);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as the model wrote it
};

// {"tool_calls":[{"name":"N","arguments":ARGS},...]}: the bytes the tool-call grammar makes the
// model write. ARGS is `arguments` verbatim when it is JSON, else that text as a JSON string.
std::string RenderToolCalls(const std::vector<ToolCall>& calls);
// {"response":"TEXT"} (TEXT escaped as nlohmann::json::dump does).
std::string RenderToolResponse(std::string_view text);

// Reads the model's output in the format above, piece by piece.
class ToolOutputParser {
 public:
  struct Event {
    enum class Kind { kContent, kCallStart, kArguments };
    Kind kind = Kind::kContent;
    int index = 0;     // the call (kCallStart, kArguments)
    std::string text;  // the response's text (unescaped), the function's name, arguments bytes
  };
  // Appends what `piece` completes to `out`; consecutive content or arguments of one call are
  // merged into one event. Output that is not in the format (it cannot be under the grammar,
  // unless a stop string cut it) is passed on as content from where it departs.
  void Push(std::string_view piece, std::vector<Event>& out);

  bool done() const { return state_ == State::kDone; }  // the whole object was read
  int num_calls() const { return calls_; }

 private:
  enum class State {
    kExpect, kKey, kName, kArgs, kAfterCall, kResponse, kEscape, kHex, kDone, kRaw
  };
  void Byte(char c, std::vector<Event>& out);
  void Expect(std::string_view literal, State then);
  void Emit(Event::Kind kind, std::string_view text, std::vector<Event>& out);
  void Depart(char c, std::vector<Event>& out);

  State state_ = State::kExpect;
  std::string expect_ = "{\"";  // kExpect: the literal still to come
  size_t expect_pos_ = 0;
  State then_ = State::kKey;
  std::string token_;  // a key or a name being read
  int calls_ = 0;
  // kArgs: the value being copied.
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, started_ = false;
  // kHex: the \u escape's digits so far.
  uint32_t hex_ = 0;
  int hex_digits_ = 0;
  std::string seen_;  // every byte so far, for an output that departs before anything was emitted
  bool emitted_ = false;
};

}  // namespace kvgate::engine
