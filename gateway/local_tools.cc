#include "gateway/local_tools.h"

#include <set>

#include "common/ids.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::unexpected<FieldError> Fail(std::string param, std::string message,
                                 std::string code = "invalid_request") {
  return std::unexpected(FieldError{std::move(param), std::move(message), std::move(code)});
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The text of an OpenAI message content: a string, or text parts joined.
std::expected<std::string, FieldError> ContentText(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) return Fail(param, "message content must be a string or an array");
  std::string text;
  for (const auto& part : content) {
    // (json::value("type", "") would throw on a type that is not a string.)
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      return Fail(param, "the built-in engine accepts only text content parts");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

std::expected<std::vector<engine::ToolCall>, FieldError> CallsOf(const json& calls,
                                                                 const std::string& param) {
  if (!calls.is_array()) return Fail(param, param + " must be an array");
  std::vector<engine::ToolCall> out;
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string p = param + "[" + std::to_string(j) + "]";
    const json& c = calls[j];
    if (!c.is_object()) return Fail(p, p + " must be an object");
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) return Fail(p + ".function", p + ".function must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return Fail(p + ".function.name", p + ".function.name must be a string");
    }
    auto args = fn->find("arguments");
    if (args != fn->end() && !args->is_string()) {
      return Fail(p + ".function.arguments", p + ".function.arguments must be a string");
    }
    out.push_back({name->get<std::string>(),
                   args == fn->end() ? std::string("{}") : args->get<std::string>()});
  }
  return out;
}

}  // namespace

std::expected<ToolRequest, FieldError> ParseToolRequest(const ordered_json& body) {
  ToolRequest r;
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) return Fail("tools", "tools must be an array");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      const ordered_json& t = (*tools)[i];
      if (!t.is_object()) return Fail(p, p + " must be an object");
      auto type = t.find("type");
      if (type == t.end() || !type->is_string() || *type != "function") {
        return Fail(p + ".type", p + ".type must be 'function'");
      }
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object()) return Fail(p + ".function", p + ".function must be an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
        return Fail(p + ".function.name", p + ".function.name must be a string of 1 to 64 letters, "
                                          "digits, '_' or '-'");
      }
      if (!names.insert(name->get<std::string>()).second) {
        return Fail(p + ".function.name", "two tools are named '" + name->get<std::string>() + "'");
      }
      engine::ToolFunction f{.name = name->get<std::string>()};
      if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
        if (!d->is_string()) return Fail(p + ".function.description", p + ".function.description must be a string");
        f.description = d->get<std::string>();
      }
      if (auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean()) {
        return Fail(p + ".function.strict", p + ".function.strict must be a boolean");
      }
      auto params = fn->find("parameters");
      if (params == fn->end() || params->is_null()) {
        // OpenAI: no parameters is a function without arguments.
        f.parameters = {{"type", "object"}, {"properties", ordered_json::object()},
                        {"additionalProperties", false}};
      } else if (!params->is_object()) {
        return Fail(p + ".function.parameters", p + ".function.parameters must be a JSON Schema object",
                    "invalid_function_parameters");
      } else {
        f.parameters = *params;
      }
      r.tools.push_back(std::move(f));
    }
  }
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean()) return Fail("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    r.parallel = parallel->get<bool>();
  }
  r.choice = r.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return r;
  if (choice->is_string()) {
    const std::string& c = choice->get_ref<const std::string&>();
    if (c == "none") {
      r.choice = ToolChoice::kNone;
      return r;
    }
    if (c != "auto" && c != "required") {
      return Fail("tool_choice", "tool_choice must be none, auto, required or a function, not '" + c + "'");
    }
    if (r.tools.empty()) return Fail("tool_choice", "tool_choice '" + c + "' needs tools");
    r.choice = c == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
    return r;
  }
  if (!choice->is_object()) return Fail("tool_choice", "tool_choice must be a string or an object");
  auto type = choice->find("type");
  if (type == choice->end() || !type->is_string() || *type != "function") {
    return Fail("tool_choice.type", "tool_choice.type must be 'function'");
  }
  auto fn = choice->find("function");
  const ordered_json* name = nullptr;
  if (fn != choice->end() && fn->is_object()) {
    if (auto it = fn->find("name"); it != fn->end()) name = &*it;
  }
  if (name == nullptr || !name->is_string()) {
    return Fail("tool_choice.function.name", "tool_choice.function.name must be a string");
  }
  r.named = name->get<std::string>();
  bool known = false;
  for (const auto& t : r.tools) known = known || t.name == r.named;
  if (!known) {
    return Fail("tool_choice.function.name", "tool_choice names the function '" + r.named +
                                                 "', which is not in tools");
  }
  r.choice = ToolChoice::kNamed;
  return r;
}

std::expected<std::shared_ptr<const engine::JsonGrammar>, FieldError> ToolGrammar(
    const ToolRequest& request) {
  std::vector<engine::ToolFunctionSchema> functions;
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const engine::ToolFunction& t = request.tools[i];
    functions.push_back({t.name, &t.parameters, "tools[" + std::to_string(i) + "].function.parameters"});
  }
  if (request.choice == ToolChoice::kNamed) {
    // Every function's schema is checked, also those the named choice leaves out.
    auto all = engine::CompileToolCallGrammar(functions, {});
    if (!all) {
      return Fail(all.error().path, all.error().path + ": " + all.error().message,
                  "invalid_function_parameters");
    }
    std::erase_if(functions, [&](const auto& f) { return f.name != request.named; });
  }
  const uint32_t calls = request.choice == ToolChoice::kNamed || !request.parallel ? 1 : kMaxParallelCalls;
  auto grammar = engine::CompileToolCallGrammar(
      functions, {.allow_response = request.choice == ToolChoice::kAuto, .max_calls = calls});
  if (!grammar) {
    return Fail(grammar.error().path, grammar.error().path + ": " + grammar.error().message,
                "invalid_function_parameters");
  }
  return *grammar;
}

std::expected<std::vector<engine::ChatMessage>, FieldError> ChatMessagesFor(
    const json& messages, const ToolRequest& tools, const std::string& default_system) {
  if (!messages.is_array() || messages.empty()) {
    return Fail("messages", "messages must be a non-empty array");
  }
  std::vector<engine::ChatMessage> chat;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return Fail(p + ".role", "each message needs a string role");
    }
    auto text = ContentText(m.value("content", json()), p + ".content");
    if (!text) return std::unexpected(text.error());
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role == "assistant") {
      auto calls_it = m.find("tool_calls");
      if (calls_it != m.end() && !calls_it->is_null() && !calls_it->empty()) {
        auto calls = CallsOf(*calls_it, p + ".tool_calls");
        if (!calls) return std::unexpected(calls.error());
        // Text beside calls (the model never writes both) goes first, on its own line.
        std::string rendered = text->empty() ? "" : *text + "\n";
        *text = rendered + engine::RenderToolCalls(*calls);
      } else if (tools.active()) {
        *text = engine::RenderToolResponse(*text);
      }
    } else if (role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string()) {
        return Fail(p + ".tool_call_id", p + ".tool_call_id must be a string");
      }
    }
    chat.push_back({std::move(role), std::move(*text)});
  }
  if (tools.active()) {
    const std::string prompt = engine::ToolSystemPrompt(tools.tools);
    if (chat[0].role == "system") {
      chat[0].content += "\n\n" + prompt;
    } else {
      chat.insert(chat.begin(), {"system", default_system.empty() ? prompt
                                                                  : default_system + "\n\n" + prompt});
    }
  }
  return chat;
}

std::vector<json> ToolCallAssembler::Push(std::string_view text) {
  events_.clear();
  parser_.Push(text, events_);
  std::vector<json> deltas;
  for (auto& e : events_) {
    using Kind = engine::ToolOutputParser::Event::Kind;
    switch (e.kind) {
      case Kind::kContent:
        content_ += e.text;
        deltas.push_back({{"content", std::move(e.text)}});
        break;
      case Kind::kCallStart:
        calls_.push_back({NewId("call"), e.text, ""});
        deltas.push_back({{"tool_calls",
                           json::array({{{"index", e.index},
                                         {"id", calls_.back().id},
                                         {"type", "function"},
                                         {"function", {{"name", e.text}, {"arguments", ""}}}}})}});
        break;
      case Kind::kArguments:
        calls_[static_cast<size_t>(e.index)].arguments += e.text;
        deltas.push_back({{"tool_calls", json::array({{{"index", e.index},
                                                       {"function", {{"arguments", e.text}}}}})}});
        break;
    }
  }
  return deltas;
}

json ToolCallAssembler::Message() const {
  // refusal: OpenAI's schema requires the key (null: the engine never refuses).
  json m = {{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr}};
  if (!content_.empty() || calls_.empty()) m["content"] = content_;
  if (!calls_.empty()) {
    json calls = json::array();
    for (const Call& c : calls_) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace kvgate::gateway
