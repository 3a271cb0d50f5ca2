// OpenAI chat request -> Anthropic Messages request.
//
// Field by field:
//   messages[role=system|developer] -> `system` text blocks (in order, wherever they appear)
//   messages[role=user]             -> user message; string -> one text block; parts: text -> text
//                                      block, image_url -> image block (data: URL -> base64 source,
//                                      http(s) URL -> url source)
//   messages[role=assistant]        -> assistant message; text (and refusal) parts -> text blocks,
//                                      tool_calls -> tool_use blocks (arguments parsed to `input`)
//   messages[role=tool]             -> user message with one tool_result block (tool_call_id)
//   consecutive messages that end up with the same role are merged, so roles alternate; a message
//   with no content at all (empty string) is dropped, as Anthropic rejects empty text blocks
//   `cache_control` on a content part, on a tool, or on a whole message (applied to its last block)
//   is copied as is; at most 4 in total (Anthropic's limit), else kInvalidArgument
//   max_completion_tokens, else max_tokens, else options.default_max_tokens -> max_tokens
//   tools[type=function] -> {name, description, input_schema (parameters, default empty object)}
//   tool_choice auto|none|required|{function} -> {type: auto|none|any|tool}; parallel_tool_calls:
//   false -> disable_parallel_tool_use
//   stop -> stop_sequences; temperature, top_p, top_k -> same; user -> metadata.user_id;
//   `thinking` (an Anthropic field sent through extra_body) -> same
//   n > 1 -> kInvalidArgument. Every other OpenAI field is dropped (the Messages API rejects
//   unknown fields).
#include <string>
#include <utility>

#include "gateway/providers/internal.h"

namespace kvgate::providers::internal {
namespace {

constexpr int kMaxCacheBreakpoints = 4;

std::unexpected<Error> Invalid(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}

// Builds an image block from an OpenAI image_url part.
Result<json> ImageBlock(const json& part, const std::string& where) {
  const json* image_url = Member(part, "image_url");
  std::string_view url;
  if (image_url != nullptr && image_url->is_string()) {
    url = image_url->get_ref<const std::string&>();
  } else if (image_url != nullptr) {
    url = StringMember(*image_url, "url");
  }
  if (url.empty()) return Invalid(where + ": image_url part has no url");
  json block = {{"type", "image"}};
  if (url.starts_with("data:")) {
    const size_t comma = url.find(',');
    std::string_view header = url.substr(5, comma == std::string_view::npos ? 0 : comma - 5);
    if (comma == std::string_view::npos || !header.ends_with(";base64")) {
      return Invalid(where + ": image data URLs must be base64 (data:<media type>;base64,<data>)");
    }
    header.remove_suffix(7);
    block["source"] = {{"type", "base64"},
                       {"media_type", std::string(header)},
                       {"data", std::string(url.substr(comma + 1))}};
  } else if (url.starts_with("http://") || url.starts_with("https://")) {
    block["source"] = {{"type", "url"}, {"url", std::string(url)}};
  } else {
    return Invalid(where + ": image URL must be a data: URL or an http(s) URL");
  }
  return block;
}

class RequestBuilder {
 public:
  explicit RequestBuilder(const CallOptions& options) : options_(options) {}

  Result<json> Build(const json& in) {
    json out = json::object();
    out["model"] = options_.upstream_model.empty() ? std::string(StringMember(in, "model"))
                                                   : options_.upstream_model;

    if (const json* n = Member(in, "n");
        n != nullptr && n->is_number_integer() && n->get<int64_t>() > 1) {
      return Invalid("'n' > 1 is not supported by Anthropic providers");
    }

    if (std::optional<std::string> unsupported = UnsupportedFeature(in, "Anthropic providers")) {
      return Invalid(std::move(*unsupported));
    }
    for (const char* key : {"temperature", "top_p", "top_k"}) {
      if (const json* v = Member(in, key); v != nullptr && !v->is_null() && !v->is_number()) {
        return Invalid(std::string("'") + key + "' must be a number");
      }
    }

    auto max_tokens = MaxTokens(in);
    if (!max_tokens) return std::unexpected(max_tokens.error());
    out["max_tokens"] = *max_tokens;

    json system = json::array();
    json messages = json::array();
    const json& in_messages = in["messages"];
    for (size_t i = 0; i < in_messages.size(); ++i) {
      const json& message = in_messages[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!message.is_object()) return Invalid(where + " must be an object");
      const std::string_view role = StringMember(message, "role");
      if (role == "system" || role == "developer") {
        auto status = AppendContent(message, where, /*allow_images=*/false, system);
        if (!status) return std::unexpected(status.error());
        continue;
      }
      json blocks = json::array();
      std::string_view anthropic_role;
      if (role == "user") {
        anthropic_role = "user";
        auto status = AppendContent(message, where, /*allow_images=*/true, blocks);
        if (!status) return std::unexpected(status.error());
      } else if (role == "assistant") {
        anthropic_role = "assistant";
        auto status = AppendAssistant(message, where, blocks);
        if (!status) return std::unexpected(status.error());
      } else if (role == "tool") {
        anthropic_role = "user";
        auto status = AppendToolResult(message, where, blocks);
        if (!status) return std::unexpected(status.error());
      } else {
        return Invalid(where + ": role '" + std::string(role) +
                       "' is not supported by Anthropic providers");
      }
      if (blocks.empty()) continue;
      if (!messages.empty() && StringMember(messages.back(), "role") == anthropic_role) {
        json& content = messages.back()["content"];
        for (json& block : blocks) content.push_back(std::move(block));
      } else {
        messages.push_back({{"role", std::string(anthropic_role)}, {"content", std::move(blocks)}});
      }
    }
    if (messages.empty()) {
      // Empty texts are left out (Anthropic rejects empty text blocks); say so rather than let
      // Anthropic answer "messages: Field required" to a client that sent messages.
      return Invalid(
          "messages: no message with content is left for Anthropic (it rejects empty text; "
          "a conversation needs at least one non-empty user or assistant message besides system)");
    }
    if (!system.empty()) out["system"] = std::move(system);
    out["messages"] = std::move(messages);

    auto status = AddTools(in, out);
    if (!status) return std::unexpected(status.error());

    if (breakpoints_ > kMaxCacheBreakpoints) {
      return Invalid(
          "at most " + std::to_string(kMaxCacheBreakpoints) +
          " cache_control breakpoints are allowed per request by Anthropic; this request has " +
          std::to_string(breakpoints_));
    }

    if (const json* stop = Member(in, "stop"); stop != nullptr && !stop->is_null()) {
      if (stop->is_string()) {
        out["stop_sequences"] = json::array({*stop});
      } else if (stop->is_array()) {
        for (const json& s : *stop) {
          if (!s.is_string()) return Invalid("'stop' must be a string or an array of strings");
        }
        out["stop_sequences"] = *stop;
      } else {
        return Invalid("'stop' must be a string or an array of strings");
      }
    }
    for (const char* key : {"temperature", "top_p", "top_k"}) {
      if (const json* v = Member(in, key); v != nullptr && v->is_number()) out[key] = *v;
    }
    if (std::string_view user = StringMember(in, "user"); !user.empty()) {
      out["metadata"] = {{"user_id", std::string(user)}};
    }
    if (const json* thinking = Member(in, "thinking");
        thinking != nullptr && thinking->is_object()) {
      out["thinking"] = *thinking;
    }
    if (options_.stream) out["stream"] = true;
    return out;
  }

 private:
  Result<int64_t> MaxTokens(const json& in) {
    for (const char* key : {"max_completion_tokens", "max_tokens"}) {
      const json* v = Member(in, key);
      if (v == nullptr || v->is_null()) continue;
      if (!v->is_number_integer() || v->get<int64_t>() <= 0) {
        return Invalid(std::string("'") + key + "' must be a positive integer");
      }
      return v->get<int64_t>();
    }
    return options_.default_max_tokens;
  }

  // Copies a cache_control member onto `block`, counting the breakpoint.
  void CopyCacheControl(const json& from, json& block) {
    const json* cc = Member(from, "cache_control");
    if (cc == nullptr || cc->is_null()) return;
    block["cache_control"] = *cc;
    ++breakpoints_;
  }

  // A message-level cache_control marks the message's last block.
  void ApplyMessageCacheControl(const json& message, json& blocks, size_t first_new) {
    if (blocks.size() > first_new && !blocks.back().contains("cache_control")) {
      CopyCacheControl(message, blocks.back());
    }
  }

  Status AppendParts(const json& content, const std::string& where, bool allow_images,
                     json& blocks) {
    if (content.is_null()) return {};
    if (content.is_string()) {
      if (!content.get_ref<const std::string&>().empty()) {
        blocks.push_back({{"type", "text"}, {"text", content}});
      }
      return {};
    }
    if (!content.is_array())
      return Invalid(where + ": content must be a string or an array of parts");
    for (size_t j = 0; j < content.size(); ++j) {
      const json& part = content[j];
      const std::string part_where = where + ".content[" + std::to_string(j) + "]";
      const std::string_view type = StringMember(part, "type");
      json block;
      if (type == "text" || type == "refusal") {
        const json* text = Member(part, type == "text" ? "text" : "refusal");
        if (text == nullptr || !text->is_string())
          return Invalid(part_where + ": text part has no text");
        if (text->get_ref<const std::string&>().empty() && !part.contains("cache_control"))
          continue;
        block = {{"type", "text"}, {"text", *text}};
      } else if (type == "image_url" && allow_images) {
        auto image = ImageBlock(part, part_where);
        if (!image) return std::unexpected(image.error());
        block = std::move(*image);
      } else {
        return Invalid(part_where + ": content part type '" + std::string(type) +
                       "' is not supported here by Anthropic providers");
      }
      CopyCacheControl(part, block);
      blocks.push_back(std::move(block));
    }
    return {};
  }

  Status AppendContent(const json& message, const std::string& where, bool allow_images,
                       json& blocks) {
    const size_t first_new = blocks.size();
    const json* content = Member(message, "content");
    if (content != nullptr) {
      auto status = AppendParts(*content, where, allow_images, blocks);
      if (!status) return status;
    }
    ApplyMessageCacheControl(message, blocks, first_new);
    return {};
  }

  Status AppendAssistant(const json& message, const std::string& where, json& blocks) {
    const json* content = Member(message, "content");
    if (content != nullptr) {
      auto status = AppendParts(*content, where, /*allow_images=*/false, blocks);
      if (!status) return status;
    }
    const json* tool_calls = Member(message, "tool_calls");
    if (tool_calls != nullptr && !tool_calls->is_null()) {
      if (!tool_calls->is_array()) return Invalid(where + ": tool_calls must be an array");
      for (size_t k = 0; k < tool_calls->size(); ++k) {
        const json& call = (*tool_calls)[k];
        const std::string call_where = where + ".tool_calls[" + std::to_string(k) + "]";
        const json* function = Member(call, "function");
        if (function == nullptr || StringMember(*function, "name").empty()) {
          return Invalid(call_where + " has no function name");
        }
        json input = json::object();
        std::string_view arguments = StringMember(*function, "arguments");
        if (!arguments.empty()) {
          input = ParseJson(arguments);
          if (input.is_discarded() || !input.is_object()) {
            return Invalid(call_where + ".function.arguments must be a JSON object");
          }
        }
        blocks.push_back({{"type", "tool_use"},
                          {"id", std::string(StringMember(call, "id"))},
                          {"name", std::string(StringMember(*function, "name"))},
                          {"input", std::move(input)}});
      }
    }
    ApplyMessageCacheControl(message, blocks, 0);
    return {};
  }

  Status AppendToolResult(const json& message, const std::string& where, json& blocks) {
    std::string_view id = StringMember(message, "tool_call_id");
    if (id.empty()) return Invalid(where + ": tool message has no tool_call_id");
    json block = {{"type", "tool_result"}, {"tool_use_id", std::string(id)}};
    const json* content = Member(message, "content");
    if (content != nullptr && content->is_string()) {
      block["content"] = *content;
    } else if (content != nullptr && content->is_array()) {
      json parts = json::array();
      auto status = AppendParts(*content, where, /*allow_images=*/true, parts);
      if (!status) return status;
      block["content"] = std::move(parts);
    } else if (content != nullptr && !content->is_null()) {
      return Invalid(where + ": content must be a string or an array of parts");
    }
    CopyCacheControl(message, block);
    blocks.push_back(std::move(block));
    return {};
  }

  Status AddTools(const json& in, json& out) {
    const json* tools = Member(in, "tools");
    if (tools != nullptr && !tools->is_null()) {
      if (!tools->is_array()) return Invalid("'tools' must be an array");
      json out_tools = json::array();
      for (size_t i = 0; i < tools->size(); ++i) {
        const json& tool = (*tools)[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        if (StringMember(tool, "type") != "function") {
          return Invalid(where + ": only function tools are supported by Anthropic providers");
        }
        const json* function = Member(tool, "function");
        if (function == nullptr || StringMember(*function, "name").empty()) {
          return Invalid(where + " has no function name");
        }
        json t = {{"name", std::string(StringMember(*function, "name"))}};
        if (std::string_view d = StringMember(*function, "description"); !d.empty()) {
          t["description"] = std::string(d);
        }
        const json* params = Member(*function, "parameters");
        t["input_schema"] = (params != nullptr && params->is_object())
                                ? *params
                                : json{{"type", "object"}, {"properties", json::object()}};
        CopyCacheControl(tool, t);
        out_tools.push_back(std::move(t));
      }
      if (!out_tools.empty()) out["tools"] = std::move(out_tools);
    }

    json choice;
    if (const json* tc = Member(in, "tool_choice"); tc != nullptr && !tc->is_null()) {
      if (tc->is_string()) {
        const auto& s = tc->get_ref<const std::string&>();
        if (s == "auto")
          choice = {{"type", "auto"}};
        else if (s == "none")
          choice = {{"type", "none"}};
        else if (s == "required")
          choice = {{"type", "any"}};
        else
          return Invalid("'tool_choice' must be auto, none, required or a function");
      } else if (const json* f = Member(*tc, "function");
                 f != nullptr && !StringMember(*f, "name").empty()) {
        choice = {{"type", "tool"}, {"name", std::string(StringMember(*f, "name"))}};
      } else {
        return Invalid("'tool_choice' must be auto, none, required or a function");
      }
    }
    if (const json* p = Member(in, "parallel_tool_calls");
        p != nullptr && p->is_boolean() && !p->get<bool>()) {
      if (choice.is_null()) choice = {{"type", "auto"}};
      if (choice["type"] != "none") choice["disable_parallel_tool_use"] = true;
    }
    if (!choice.is_null() && out.contains("tools")) out["tool_choice"] = std::move(choice);
    return {};
  }

  const CallOptions& options_;
  int breakpoints_ = 0;
};

}  // namespace

Result<UpstreamCall> BuildAnthropicCall(const json& client_body, const CallOptions& options) {
  if (!EndpointTraitsOf(options.endpoint).chat_messages) {  // a completions prompt
    return Invalid(
        "the /v1/completions endpoint is not supported for Anthropic providers; use "
        "/v1/chat/completions");
  }
  // kvgate's own fields (thread_identifier, metadata.thread_id) are never read by the builder,
  // which copies only the fields it maps, so they cannot reach Anthropic.
  RequestBuilder builder(options);
  auto out = builder.Build(client_body);
  if (!out) return std::unexpected(out.error());

  UpstreamCall call;
  call.path = "/v1/messages";
  call.headers.emplace_back("content-type", "application/json");
  if (!options.api_key.empty()) call.headers.emplace_back("x-api-key", options.api_key);
  call.headers.emplace_back("anthropic-version", "2023-06-01");
  if (options.stream) call.headers.emplace_back("accept", "text/event-stream");
  call.body = Dump(*out);
  return call;
}

}  // namespace kvgate::providers::internal
