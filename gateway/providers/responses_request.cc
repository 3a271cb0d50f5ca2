// A Responses API request -> an OpenAI chat request; responses_translate.h has the rules.
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "gateway/providers/responses_translate.h"

namespace kvgate::providers {
namespace {

using ojson = nlohmann::ordered_json;

// Thrown inside the translation, turned into the client's 400 at its edge.
struct Refusal {
  std::string message, param, code = "invalid_request";
};

[[noreturn]] void Refuse(std::string param, std::string message,
                         std::string code = "invalid_request") {
  throw Refusal{std::move(message), std::move(param), std::move(code)};
}

bool Given(const ojson& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// The text of a content value: a string, or input_text / output_text parts (joined).
std::string TextOf(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Refuse(where, where + " must be a string or an array of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string()) {
        Refuse(at + ".text", at + ".text must be a string");
      }
      text += part["text"].get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      Refuse(at + ".type", "content parts of type " + type + " are not supported on this target "
                           "(it reads text only); send input_text parts");
    } else {
      Refuse(at + ".type", "unsupported content part type '" + type + "' in " + at);
    }
  }
  return text;
}

ojson ChatTool(const ojson& tool, const std::string& at) {
  if (!tool.is_object()) Refuse(at, at + " must be an object");
  const std::string type = tool.value("type", "");
  if (type != "function") {
    Refuse(at + ".type", "tools of type '" + type + "' (built-in tools) are not supported on this "
                         "target; only function tools are");
  }
  if (!tool.contains("name") || !tool["name"].is_string() || tool["name"].get<std::string>().empty()) {
    Refuse(at + ".name", at + ".name must be a non-empty string");
  }
  ojson function = {{"name", tool["name"]}};
  if (Given(tool, "description")) function["description"] = tool["description"];
  if (Given(tool, "parameters")) function["parameters"] = tool["parameters"];
  if (Given(tool, "strict")) function["strict"] = tool["strict"];
  return {{"type", "function"}, {"function", std::move(function)}};
}

ojson ChatToolChoice(const ojson& choice) {
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c == "auto" || c == "none" || c == "required") return choice;
    Refuse("tool_choice", "tool_choice must be auto, none, required or a function");
  }
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name") &&
      choice["name"].is_string()) {
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  }
  Refuse("tool_choice", "tool_choice must be auto, none, required or {type: function, name}; "
                        "allowed_tools and built-in tool choices are not supported on this target");
}

ojson ResponseFormat(const ojson& text) {
  if (!text.is_object()) Refuse("text", "text must be an object");
  if (Given(text, "verbosity")) {
    Refuse("text.verbosity", "text.verbosity is not supported on this target");
  }
  if (!Given(text, "format")) return nullptr;
  const ojson& format = text["format"];
  const std::string type = format.is_object() ? format.value("type", "") : "";
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type != "json_schema") {
    Refuse("text.format.type", "text.format.type must be text, json_object or json_schema");
  }
  if (!format.contains("schema") || !format["schema"].is_object()) {
    Refuse("text.format.schema", "text.format.schema must be an object");
  }
  ojson schema = {{"name", format.value("name", "response")}, {"schema", format["schema"]}};
  if (Given(format, "description")) schema["description"] = format["description"];
  if (Given(format, "strict")) schema["strict"] = format["strict"];
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// Appends the chat messages of `input` (a string or input items) to `messages`.
void AppendInput(const ojson& input, ojson& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array() || input.empty()) {
    Refuse("input", "input must be a string or a non-empty array of input items", "invalid_type");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string at = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) Refuse(at, at + " must be an object");
    const std::string type = item.value("type", "message");
    if (type == "message") {
      std::string role = item.value("role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant") {
        Refuse(at + ".role", at + ".role must be user, system, developer or assistant");
      }
      if (!item.contains("content")) Refuse(at + ".content", at + " has no content");
      messages.push_back({{"role", role}, {"content", TextOf(item["content"], at + ".content")}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!item.contains(key) || !item[key].is_string()) {
          Refuse(at + "." + key, at + "." + key + " must be a string");
        }
      }
      ojson call = {{"id", item["call_id"]},
                    {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      // Parallel calls are one assistant turn in chat.
      if (!messages.empty() && messages.back()["role"] == "assistant" &&
          messages.back().contains("tool_calls")) {
        messages.back()["tool_calls"].push_back(std::move(call));
      } else {
        messages.push_back({{"role", "assistant"}, {"content", nullptr},
                            {"tool_calls", ojson::array({std::move(call)})}});
      }
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) {
        Refuse(at + ".call_id", at + ".call_id must be a string");
      }
      if (!item.contains("output")) Refuse(at + ".output", at + " has no output");
      messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]},
                          {"content", TextOf(item["output"], at + ".output")}});
    } else if (type == "reasoning") {
      continue;  // these targets produce no reasoning items to continue from
    } else {
      Refuse(at + ".type", "input items of type '" + type + "' are not supported on this target "
                           "(message, function_call, function_call_output are)");
    }
  }
}

// Fields that shape no generation on these targets (bookkeeping, hints) and kvgate's own.
const std::set<std::string>& Accepted() {
  static const std::set<std::string> kAccepted = {
      "model", "input", "instructions", "previous_response_id", "stream", "stream_options",
      "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "text", "reasoning",
      "metadata", "store", "user", "safety_identifier", "prompt_cache_key", "parallel_tool_calls",
      "truncation", "service_tier", "thread_identifier", "include"};
  return kAccepted;
}

ResponsesChat Translate(std::string_view text, const std::string* history) {
  ojson body = ojson::parse(text);
  for (const auto& [key, value] : body.items()) {
    if (!Accepted().count(key)) {
      Refuse(key, "Unknown or unsupported parameter on this target: '" + key + "'.",
             "unsupported_parameter");
    }
  }
  if (Given(body, "reasoning") &&
      !(body["reasoning"].is_object() &&
        (!Given(body["reasoning"], "effort") || body["reasoning"]["effort"] == "none"))) {
    Refuse("reasoning", "reasoning is not supported on this target (it has no reasoning effort "
                        "to set)", "unsupported_parameter");
  }
  if (Given(body, "include") && !(body["include"].is_array() && body["include"].empty())) {
    Refuse("include", "include is not supported on this target", "unsupported_parameter");
  }
  if (Given(body, "truncation") && body["truncation"] != "disabled") {
    Refuse("truncation", "truncation must be \"disabled\" on this target",
           "unsupported_parameter");
  }
  if (Given(body, "max_output_tokens") &&
      !(body["max_output_tokens"].is_number_integer() && body["max_output_tokens"].get<int64_t>() > 0)) {
    Refuse("max_output_tokens", "max_output_tokens must be a positive integer", "invalid_type");
  }
  if (!body.contains("input")) Refuse("input", "Missing required parameter: 'input'.",
                                      "missing_required_parameter");

  ojson conversation = ojson::array();
  if (history != nullptr) conversation = ojson::parse(*history);
  AppendInput(body["input"], conversation);

  ojson messages = ojson::array();
  if (Given(body, "instructions")) {
    if (!body["instructions"].is_string()) Refuse("instructions", "instructions must be a string");
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  for (const ojson& m : conversation) messages.push_back(m);

  ojson chat = {{"model", body.value("model", "")}, {"messages", std::move(messages)}};
  ojson tools = ojson::array();
  if (Given(body, "tools")) {
    if (!body["tools"].is_array()) Refuse("tools", "tools must be an array");
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      tools.push_back(ChatTool(body["tools"][i], "tools[" + std::to_string(i) + "]"));
    }
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (Given(body, "tool_choice")) chat["tool_choice"] = ChatToolChoice(body["tool_choice"]);
  if (Given(body, "parallel_tool_calls")) chat["parallel_tool_calls"] = body["parallel_tool_calls"];
  if (Given(body, "text")) {
    if (ojson format = ResponseFormat(body["text"]); !format.is_null()) {
      chat["response_format"] = std::move(format);
    }
  }
  if (Given(body, "max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
  for (const char* key : {"temperature", "top_p", "user"}) {
    if (Given(body, key)) chat[key] = body[key];
  }
  const bool stream = body.contains("stream") && body["stream"] == true;
  if (stream) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }

  // What the response object echoes (OpenAI's defaults where the request left them out).
  ojson echo = {
      {"instructions", body.value("instructions", ojson())},
      {"max_output_tokens", body.value("max_output_tokens", ojson())},
      {"model", body.value("model", "")},
      {"parallel_tool_calls", body.value("parallel_tool_calls", ojson(true))},
      {"previous_response_id", body.value("previous_response_id", ojson())},
      {"store", body.value("store", ojson(true)) != false},
      {"temperature", body.value("temperature", ojson(1.0))},
      {"text", Given(body, "text") ? body["text"] : ojson({{"format", {{"type", "text"}}}})},
      {"tool_choice", body.value("tool_choice", ojson("auto"))},
      {"tools", Given(body, "tools") ? body["tools"] : ojson::array()},
      {"top_p", body.value("top_p", ojson(1.0))},
      {"user", body.value("user", ojson())},
      {"metadata", Given(body, "metadata") ? body["metadata"] : ojson::object()}};
  echo.erase("thread_identifier");
  if (echo["metadata"].is_object()) echo["metadata"].erase("thread_id");

  ResponsesChat out;
  out.chat_body = chat.dump(-1, ' ', false, ojson::error_handler_t::replace);
  out.conversation = conversation.dump(-1, ' ', false, ojson::error_handler_t::replace);
  out.echo = echo.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return out;
}

}  // namespace

ResponsesChat ResponsesToChat(std::string_view responses_body, const std::string* history) {
  ResponsesChat out;
  try {
    return Translate(responses_body, history);
  } catch (const Refusal& r) {
    out.error = MakeOpenAIError(400, r.message, "invalid_request_error", r.code, r.param);
  } catch (const std::exception& e) {
    // Malformed values nlohmann trips on (a non-object where one is read).
    out.error = MakeOpenAIError(400, std::string("malformed Responses request: ") + e.what(),
                                "invalid_request_error", "invalid_request");
  }
  return out;
}

}  // namespace kvgate::providers
