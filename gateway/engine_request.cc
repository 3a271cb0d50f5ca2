#include "gateway/engine_request.h"

#include <algorithm>
#include <utility>

#include "local_engine/json_grammar.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The first request field that asks for what the engine does not do (the legacy function
// calling, logit_bias; tools on /v1/completions), or nullopt. The request gets a 400 naming it
// (docs/api.md): an answer that silently lacks what was asked for is worse than an error. Empty
// values ask for nothing.
std::optional<std::string> UnsupportedByEngine(const json& body, bool chat) {
  for (const char* key : {"functions", "logit_bias", "function_call", "tools", "tool_choice"}) {
    if (chat && (std::string_view(key) == "tools" || std::string_view(key) == "tool_choice"))
      continue;
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if ((it->is_array() || it->is_object()) && it->empty()) continue;
    if (it->is_string() && *it == "none") continue;  // tool_choice / function_call: "none"
    return std::string(key);
  }
  return std::nullopt;
}

// What response_format asks of the built-in engine: nothing (absent, null or {type: text}), any
// JSON object (json_object) or a value of a JSON Schema (json_schema, its keys in declared order:
// `body` is the request parsed as ordered_json). Errors name the field.
std::expected<std::shared_ptr<const engine::JsonGrammar>, FieldError> GrammarFrom(
    const ordered_json& body) {
  auto it = body.find("response_format");
  if (it == body.end()) return nullptr;
  const ordered_json& format = *it;
  if (format.is_null()) return nullptr;
  auto fail = [](std::string param, std::string message) {
    return std::unexpected(FieldError{std::move(param), std::move(message), "invalid_request"});
  };
  if (!format.is_object()) return fail("response_format", "response_format must be an object");
  auto type = format.find("type");
  if (type == format.end() || !type->is_string()) {
    return fail("response_format.type", "response_format.type must be a string");
  }
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text") return nullptr;
  if (name == "json_object") return engine::JsonObjectGrammar();
  if (name != "json_schema") {
    return fail("response_format.type",
                "response_format.type must be text, json_object or "
                "json_schema, not '" +
                    name + "'");
  }
  auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) {
    return fail("response_format.json_schema", "response_format.json_schema must be an object");
  }
  auto schema_name = spec->find("name");
  if (schema_name == spec->end() || !schema_name->is_string() ||
      schema_name->get_ref<const std::string&>().empty()) {
    return fail("response_format.json_schema.name",
                "response_format.json_schema.name must be a non-empty string");
  }
  if (auto strict = spec->find("strict");
      strict != spec->end() && !strict->is_null() && !strict->is_boolean()) {
    return fail("response_format.json_schema.strict",
                "response_format.json_schema.strict must be a boolean");
  }
  auto schema = spec->find("schema");
  if (schema == spec->end()) {
    return fail("response_format.json_schema.schema",
                "response_format.json_schema.schema is required by the built-in engine");
  }
  auto grammar = engine::CompileJsonSchema(*schema, "response_format.json_schema.schema");
  if (!grammar) {
    return std::unexpected(
        FieldError{grammar.error().path,
                   "Invalid schema for response_format '" + schema_name->get<std::string>() +
                       "': " + grammar.error().path + ": " + grammar.error().message,
                   "invalid_json_schema"});
  }
  return *grammar;
}

// n (OpenAI's choices): 1 when absent or null; otherwise an integer from 1 to `max` (the engine's
// bound: every choice is a running sequence).
std::expected<int32_t, FieldError> ChoicesFrom(const json& body, int32_t max) {
  auto it = body.find("n");
  if (it == body.end() || it->is_null()) return 1;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max) {
    return std::unexpected(
        FieldError{"n",
                   "n must be an integer between 1 and " + std::to_string(max) +
                       " on this engine (each choice is a running sequence: max_running)",
                   "invalid_request"});
  }
  return static_cast<int32_t>(it->get<int64_t>());
}

// logprobs / top_logprobs (chat) or logprobs: N (completions), taken out of `body` so that the
// checks for features the engine lacks do not see them: SamplingParams::logprobs (-1: none).
std::expected<int32_t, FieldError> LogprobsFrom(json& body, bool chat) {
  auto take = [&](const char* key) {
    json v;
    if (auto it = body.find(key); it != body.end()) {
      v = std::move(*it);
      body.erase(it);
    }
    return v;
  };
  const json logprobs = take("logprobs");
  const json top = take("top_logprobs");
  const std::string range = "between 0 and " + std::to_string(engine::kMaxTopLogprobs);
  auto fail = [](std::string param, std::string message) {
    return std::unexpected(FieldError{std::move(param), std::move(message), "invalid_request"});
  };
  if (!chat) {
    if (!top.is_null()) return fail("top_logprobs", "top_logprobs is for chat completions");
    if (logprobs.is_null()) return -1;
    if (!logprobs.is_number_integer() || logprobs.get<int64_t>() < 0 ||
        logprobs.get<int64_t>() > engine::kMaxTopLogprobs) {
      return fail("logprobs", "logprobs must be an integer " + range);
    }
    return static_cast<int32_t>(logprobs.get<int64_t>());
  }
  if (!logprobs.is_null() && !logprobs.is_boolean()) {
    return fail("logprobs", "logprobs must be a boolean");
  }
  const bool on = logprobs.is_boolean() && logprobs.get<bool>();
  if (top.is_null()) return on ? 0 : -1;
  if (!top.is_number_integer() || top.get<int64_t>() < 0 ||
      top.get<int64_t>() > engine::kMaxTopLogprobs) {
    return fail("top_logprobs", "top_logprobs must be an integer " + range);
  }
  if (!on) return fail("top_logprobs", "top_logprobs needs logprobs: true");
  return static_cast<int32_t>(top.get<int64_t>());
}

Result<engine::SamplingParams> SamplingFrom(const json& body) {
  if (std::optional<std::string> unsupported =
          providers::UnsupportedFeature(body, "the built-in engine")) {
    return MakeError(ErrorCode::kInvalidArgument, std::move(*unsupported));
  }
  engine::SamplingParams p;
  p.temperature = 1.0f;  // OpenAI's default
  auto number = [&](const char* key, float& slot) -> Status {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return {};
    if (!it->is_number()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be a number");
    }
    slot = it->get<float>();
    return {};
  };
  for (auto [key, slot] : {std::pair{"temperature", &p.temperature},
                           {"top_p", &p.top_p},
                           {"min_p", &p.min_p},
                           {"presence_penalty", &p.presence_penalty},
                           {"frequency_penalty", &p.frequency_penalty},
                           {"repetition_penalty", &p.repetition_penalty}}) {
    if (auto s = number(key, *slot); !s) return std::unexpected(s.error());
  }
  for (auto [key, value] : {std::pair{"presence_penalty", p.presence_penalty},
                            {"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {  // OpenAI's range
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be between -2 and 2");
    }
  }
  auto integer = [&](const char* key) -> Result<std::optional<int64_t>> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::optional<int64_t>{};
    if (!it->is_number_integer()) {
      return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be an integer");
    }
    return std::optional<int64_t>{it->get<int64_t>()};
  };
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    auto v = integer(key);
    if (!v) return std::unexpected(v.error());
    if (*v) {
      if (**v < 1)
        return MakeError(ErrorCode::kInvalidArgument, std::string(key) + " must be >= 1");
      p.max_tokens = static_cast<int32_t>(std::min<int64_t>(**v, 1 << 20));
      break;
    }
  }
  auto top_k = integer("top_k");
  if (!top_k) return std::unexpected(top_k.error());
  if (*top_k) p.top_k = static_cast<int32_t>(**top_k);
  auto seed = integer("seed");
  if (!seed) return std::unexpected(seed.error());
  if (*seed) p.seed = static_cast<uint64_t>(**seed);
  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const auto& s : *stop) {
        if (!s.is_string()) return MakeError(ErrorCode::kInvalidArgument, "stop must be strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return MakeError(ErrorCode::kInvalidArgument, "stop must be a string or up to 4 strings");
    }
  }
  if (auto s = engine::ValidateSamplingParams(p); !s) return std::unexpected(s.error());
  return p;
}

// The prompt text for the engine: the chat template over the messages (`chat_messages`, with the
// tools when `tools` is active), or the raw prompt.
std::expected<std::string, FieldError> PromptText(const engine::ChatTemplate& chat_template,
                                                  const json& body, bool chat_messages,
                                                  const ToolRequest& tools) {
  if (!chat_messages) {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) {
      return std::unexpected(FieldError{"prompt", "prompt must be a string for the built-in engine",
                                        "invalid_request"});
    }
    return prompt->get<std::string>();
  }
  auto messages = body.find("messages");
  auto chat = ChatMessagesFor(messages == body.end() ? json() : *messages, tools,
                              chat_template.default_system);
  if (!chat) return std::unexpected(chat.error());
  auto text = engine::ApplyChatTemplate(chat_template, *chat, /*add_generation_prompt=*/true);
  if (!text)
    return std::unexpected(FieldError{"messages", text.error().message, "invalid_request"});
  return *text;
}

// Why an explicit max_tokens or the prompt itself does not fit the engine's context (OpenAI's
// wording and code: clients look for it to trim history), or "" when it fits.
std::string TooLong(int64_t prompt_tokens, int64_t context_length, bool asked_max,
                    int64_t max_tokens, const std::string& what) {
  if (prompt_tokens >= context_length) {
    return "This model's maximum context length is " + std::to_string(context_length) +
           " tokens. However, your " + what + " resulted in " + std::to_string(prompt_tokens) +
           " tokens" +
           (prompt_tokens == context_length ? ", which leaves no room for a completion" : "") +
           ". Please reduce the length of the " + what + ".";
  }
  // An explicit max_tokens must fit beside the prompt (OpenAI and vLLM refuse it too): otherwise
  // a "length" finish would come before max_tokens.
  if (asked_max && prompt_tokens + max_tokens > context_length) {
    return "This model's maximum context length is " + std::to_string(context_length) +
           " tokens. However, you requested " + std::to_string(prompt_tokens + max_tokens) +
           " tokens (" + std::to_string(prompt_tokens) + " in the " + what + ", " +
           std::to_string(max_tokens) + " in the completion). Please reduce the length of the " +
           what + " or completion.";
  }
  return "";
}

providers::ClientError BadRequest(std::string message, std::string code, std::string param = "") {
  return providers::MakeOpenAIError(400, std::move(message), "invalid_request_error",
                                    std::move(code), std::move(param));
}

providers::ClientError BadField(const FieldError& e) {
  return BadRequest(e.message, e.code, e.param);
}

}  // namespace

std::expected<EngineCall, providers::ClientError> EngineCallFrom(std::string_view text,
                                                                 providers::Endpoint endpoint,
                                                                 const EngineModel& model) {
  // The chat template is rendered from a tree; schemas (response_format, tools) are read from an
  // ordered one, so that objects are generated with their keys in the declared order.
  json body = json::parse(text, nullptr, false);
  const ordered_json ordered = ordered_json::parse(text, nullptr, false);
  if (!body.is_object() || !ordered.is_object()) {
    return std::unexpected(BadRequest("the request body must be a JSON object", "invalid_json"));
  }
  providers::TakeKvgateFields(body);
  const bool chat = providers::EndpointTraitsOf(endpoint).chat_messages;
  if (std::optional<std::string> param = UnsupportedByEngine(body, chat)) {
    return std::unexpected(BadRequest("'" + *param + "' is not supported by the built-in engine",
                                      "unsupported_parameter", *param));
  }
  auto grammar = GrammarFrom(ordered);
  if (!grammar) return std::unexpected(BadField(grammar.error()));
  body.erase("response_format");
  auto tools = chat ? ParseToolRequest(ordered) : ToolRequest{};
  if (!tools) return std::unexpected(BadField(tools.error()));
  for (const char* key : {"tools", "tool_choice", "parallel_tool_calls"}) body.erase(key);
  if (tools->active()) {
    if (*grammar) {
      return std::unexpected(
          BadField({"response_format",
                    "response_format other than text beside tools is not supported by the built-in "
                    "engine (unless tool_choice is none)"}));
    }
    auto tool_grammar = ToolGrammar(*tools);
    if (!tool_grammar) return std::unexpected(BadField(tool_grammar.error()));
    *grammar = std::move(*tool_grammar);
  }
  auto logprobs = LogprobsFrom(body, chat);
  if (!logprobs) return std::unexpected(BadField(logprobs.error()));
  auto choices = ChoicesFrom(body, model.max_choices);
  if (!choices) return std::unexpected(BadField(choices.error()));
  auto sampling = SamplingFrom(body);
  if (!sampling) return std::unexpected(BadRequest(sampling.error().message, "invalid_request"));
  sampling->json_grammar = std::move(*grammar);
  sampling->logprobs = *logprobs;
  auto prompt = PromptText(*model.chat_template, body, chat, *tools);
  if (!prompt) return std::unexpected(BadField(prompt.error()));
  EngineCall call{.sampling = std::move(*sampling),
                  .n = *choices,
                  .tools = tools->active(),
                  .prompt = std::move(*prompt)};
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    call.asked_max = call.asked_max || (body.contains(key) && !body[key].is_null());
  }
  return call;
}

std::expected<void, providers::ClientError> FitToContext(EngineCall& call,
                                                         providers::Endpoint endpoint,
                                                         int64_t prompt_tokens,
                                                         int64_t context_length,
                                                         int64_t max_output_tokens_default) {
  const std::string what =
      providers::EndpointTraitsOf(endpoint).chat_messages ? "messages" : "prompt";
  if (std::string too_long =
          TooLong(prompt_tokens, context_length, call.asked_max, call.sampling.max_tokens, what);
      !too_long.empty()) {
    return std::unexpected(BadRequest(std::move(too_long), "context_length_exceeded", what));
  }
  if (!call.asked_max) {
    // To the end of the context, bounded by the provider's max_output_tokens_default.
    int64_t room = context_length - prompt_tokens;
    if (max_output_tokens_default > 0) room = std::min(room, max_output_tokens_default);
    call.sampling.max_tokens = static_cast<int32_t>(std::min<int64_t>(room, 1 << 30));
  }
  return {};
}

std::expected<std::string, FieldError> EnginePromptOf(const json& body, bool chat,
                                                      const engine::ChatTemplate& chat_template) {
  // (The body's key order is gone here: a tool's parameters are described in sorted order,
  // which may differ from the request's and so count fewer cached tokens.)
  auto tools = chat ? ParseToolRequest(ordered_json(body)) : ToolRequest{};
  if (!tools) return std::unexpected(tools.error());
  return PromptText(chat_template, body, chat, *tools);
}

}  // namespace kvgate::gateway
