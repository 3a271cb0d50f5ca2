// Anthropic Messages request -> OpenAI chat request (messages.h has the field-by-field rules),
// and the thread id of a Messages request. The chat body is written from the client's bytes:
// texts, tool schemas and tool inputs keep their escapes and key order (OpenAI-compatible caches
// hash the prompt too), nothing goes through a tree.
#include <string>
#include <utility>
#include <vector>

#include "common/json_writer.h"
#include "common/str_cat.h"
#include "gateway/providers/internal.h"
#include "gateway/providers/messages.h"

namespace kvgate::providers {
namespace {

std::unexpected<Error> Invalid(std::string message) {
  return MakeError(ErrorCode::kInvalidArgument, std::move(message));
}

std::string Decoded(std::optional<raw_json::Value> v) {
  if (!v) return "";
  return raw_json::DecodeString(*v).value_or("");
}

bool IsPositiveInteger(std::optional<raw_json::Value> v) {
  return v && v->kind == raw_json::Kind::kNumber &&
         v->text.find_first_of(".eE-") == std::string_view::npos && v->text != "0" &&
         v->text.find_first_not_of('0') != std::string_view::npos;
}

// One text part, from a string value's bytes.
std::string TextPart(raw_json::Value text) {
  JsonWriter w;
  w.BeginObject().Key("type").String("text").Key("text").Raw(text.text).EndObject();
  return w.Take();
}

// An image block -> an image_url part.
Result<std::string> ImagePart(raw_json::Value block, const std::string& where) {
  std::optional<raw_json::Value> source = raw_json::Find(block, "source");
  if (!source || !source->is_object()) return Invalid(where + ": image block has no source");
  const std::string type = Decoded(raw_json::Find(*source, "type"));
  std::string url;
  if (type == "base64") {
    url = "data:" + Decoded(raw_json::Find(*source, "media_type")) + ";base64," +
          Decoded(raw_json::Find(*source, "data"));
  } else if (type == "url") {
    url = Decoded(raw_json::Find(*source, "url"));
  } else {
    return Invalid(where + ": image source type '" + type +
                   "' cannot be translated (base64 and "
                   "url can)");
  }
  JsonWriter w;
  w.BeginObject().Key("type").String("image_url").Key("image_url").BeginObject();
  w.Key("url").String(url).EndObject().EndObject();
  return w.Take();
}

// A message whose content is `parts` (JSON text of each), or the one text itself when it is a
// single text part: plain strings are what every OpenAI-compatible server takes.
void WriteMessage(JsonWriter& w, std::string_view role, const std::vector<std::string>& parts,
                  std::optional<raw_json::Value> single_text) {
  w.BeginObject().Key("role").String(role).Key("content");
  if (parts.size() == 1 && single_text) {
    w.Raw(single_text->text);
  } else {
    w.BeginArray();
    for (const std::string& p : parts) w.Raw(p);
    w.EndArray();
  }
  w.EndObject();
}

// The content of a tool_result: its string, or its text blocks as text parts.
Result<std::string> ToolResultContent(std::optional<raw_json::Value> content,
                                      const std::string& where) {
  if (!content || content->is_null()) return std::string("\"\"");
  if (content->is_string()) return std::string(content->text);
  if (!content->is_array()) return Invalid(where + ".content must be a string or an array");
  JsonWriter w;
  w.BeginArray();
  std::string error;
  int j = 0;
  raw_json::ForEachElement(*content, [&](raw_json::Value block) {
    const std::string type = Decoded(raw_json::Find(block, "type"));
    std::optional<raw_json::Value> text = raw_json::Find(block, "text");
    if (type == "text" && text && text->is_string()) {
      w.Raw(TextPart(*text));
    } else if (error.empty()) {
      error = StrCat(where, ".content[", j, "]: a tool result's '", type,
                     "' block cannot be translated (only text can)");
    }
    ++j;
  });
  if (!error.empty()) return Invalid(std::move(error));
  w.EndArray();
  return w.Take();
}

// A user message's blocks: text and image parts, with each tool_result its own `tool` message,
// in block order.
Status WriteUser(JsonWriter& w, raw_json::Value content, const std::string& where) {
  std::vector<std::string> parts;
  std::optional<raw_json::Value> single_text;
  auto flush = [&] {
    if (!parts.empty()) WriteMessage(w, "user", parts, single_text);
    parts.clear();
    single_text.reset();
  };
  int j = 0;
  for (const raw_json::Value& block : raw_json::Elements(content)) {
    const std::string block_where = StrCat(where, ".content[", j++, "]");
    const std::string type = Decoded(raw_json::Find(block, "type"));
    if (type == "text") {
      std::optional<raw_json::Value> text = raw_json::Find(block, "text");
      if (!text || !text->is_string()) return Invalid(block_where + ": text block has no text");
      parts.push_back(TextPart(*text));
      single_text = parts.size() == 1 ? text : std::nullopt;
    } else if (type == "image") {
      auto part = ImagePart(block, block_where);
      if (!part) return std::unexpected(part.error());
      parts.push_back(std::move(*part));
      single_text.reset();
    } else if (type == "tool_result") {
      flush();
      std::optional<raw_json::Value> id = raw_json::Find(block, "tool_use_id");
      if (!id || !id->is_string()) return Invalid(block_where + ": tool_result has no tool_use_id");
      auto result = ToolResultContent(raw_json::Find(block, "content"), block_where);
      if (!result) return std::unexpected(result.error());
      w.BeginObject().Key("role").String("tool").Key("tool_call_id").Raw(id->text);
      w.Key("content").Raw(*result).EndObject();
    } else {
      return Invalid(block_where + ": block type '" + type +
                     "' cannot be translated for this "
                     "target (text, image, tool_use and tool_result can)");
    }
  }
  flush();
  return {};
}

// An assistant message's blocks: its texts as the content, tool_use blocks as tool_calls.
Status WriteAssistant(JsonWriter& w, raw_json::Value content, const std::string& where) {
  std::vector<raw_json::Value> texts;
  JsonWriter calls;
  calls.BeginArray();
  bool any_call = false;
  int j = 0;
  for (const raw_json::Value& block : raw_json::Elements(content)) {
    const std::string block_where = StrCat(where, ".content[", j++, "]");
    const std::string type = Decoded(raw_json::Find(block, "type"));
    if (type == "text") {
      std::optional<raw_json::Value> text = raw_json::Find(block, "text");
      if (!text || !text->is_string()) return Invalid(block_where + ": text block has no text");
      texts.push_back(*text);
    } else if (type == "tool_use") {
      std::optional<raw_json::Value> id = raw_json::Find(block, "id");
      std::optional<raw_json::Value> name = raw_json::Find(block, "name");
      if (!id || !id->is_string() || !name || !name->is_string()) {
        return Invalid(block_where + ": tool_use needs an id and a name");
      }
      std::string arguments = "{}";
      if (std::optional<raw_json::Value> input = raw_json::Find(block, "input")) {
        arguments.clear();
        raw_json::AppendMinified(*input, arguments);
      }
      calls.BeginObject().Key("id").Raw(id->text).Key("type").String("function");
      calls.Key("function").BeginObject().Key("name").Raw(name->text);
      calls.Key("arguments").String(arguments).EndObject().EndObject();
      any_call = true;
    } else if (type == "thinking" || type == "redacted_thinking") {
      continue;  // the target cannot take a signed reasoning trace back
    } else {
      return Invalid(block_where + ": block type '" + type +
                     "' cannot be translated for this "
                     "target (text and tool_use can, in assistant turns)");
    }
  }
  calls.EndArray();
  w.BeginObject().Key("role").String("assistant").Key("content");
  if (texts.size() == 1) {
    w.Raw(texts[0].text);
  } else if (texts.empty()) {
    if (any_call) {
      w.Null();
    } else {
      w.String("");
    }
  } else {
    std::string joined;
    for (const raw_json::Value& t : texts) joined += raw_json::DecodeString(t).value_or("");
    w.String(joined);
  }
  if (any_call) w.Key("tool_calls").Raw(calls.Take());
  w.EndObject();
  return {};
}

Status WriteSystem(JsonWriter& w, raw_json::Value system) {
  if (system.is_string()) {
    if (system.text.size() > 2) {
      w.BeginObject().Key("role").String("system").Key("content").Raw(system.text).EndObject();
    }
    return {};
  }
  if (!system.is_array()) return Invalid("system must be a string or an array of text blocks");
  std::vector<std::string> parts;
  std::optional<raw_json::Value> single_text;
  int j = 0;
  for (const raw_json::Value& block : raw_json::Elements(system)) {
    std::optional<raw_json::Value> text = raw_json::Find(block, "text");
    if (Decoded(raw_json::Find(block, "type")) != "text" || !text || !text->is_string()) {
      return Invalid(StrCat("system[", j, "] must be a text block"));
    }
    parts.push_back(TextPart(*text));
    single_text = text;
    ++j;
  }
  if (!parts.empty()) WriteMessage(w, "system", parts, single_text);
  return {};
}

Status WriteTools(JsonWriter& w, raw_json::Value tools, std::optional<raw_json::Value> choice) {
  if (!tools.is_array()) return Invalid("tools must be an array");
  const std::vector<raw_json::Value> list = raw_json::Elements(tools);
  if (list.empty()) return {};
  w.Key("tools").BeginArray();
  for (size_t i = 0; i < list.size(); ++i) {
    const raw_json::Value& tool = list[i];
    const std::string type = Decoded(raw_json::Find(tool, "type"));
    if (!type.empty() && type != "custom") {
      return Invalid(StrCat("tools[", i, "]: the server tool '", type,
                            "' runs only on Anthropic; "
                            "it cannot be translated for this target"));
    }
    std::optional<raw_json::Value> name = raw_json::Find(tool, "name");
    if (!name || !name->is_string() || name->text.size() <= 2) {
      return Invalid(StrCat("tools[", i, "] has no name"));
    }
    w.BeginObject().Key("type").String("function").Key("function").BeginObject();
    w.Key("name").Raw(name->text);
    if (std::optional<raw_json::Value> d = raw_json::Find(tool, "description");
        d && d->is_string()) {
      w.Key("description").Raw(d->text);
    }
    std::optional<raw_json::Value> schema = raw_json::Find(tool, "input_schema");
    w.Key("parameters")
        .Raw(schema && schema->is_object() ? schema->text : R"({"type":"object","properties":{}})");
    w.EndObject().EndObject();
  }
  w.EndArray();
  if (!choice || choice->is_null()) return {};
  if (!choice->is_object()) return Invalid("tool_choice must be an object");
  const std::string type = Decoded(raw_json::Find(*choice, "type"));
  w.Key("tool_choice");
  if (type == "auto" || type == "none") {
    w.String(type);
  } else if (type == "any") {
    w.String("required");
  } else if (type == "tool") {
    std::optional<raw_json::Value> name = raw_json::Find(*choice, "name");
    if (!name || !name->is_string()) return Invalid("tool_choice of type tool needs a name");
    w.BeginObject().Key("type").String("function").Key("function").BeginObject();
    w.Key("name").Raw(name->text).EndObject().EndObject();
  } else {
    return Invalid("tool_choice.type must be auto, any, tool or none");
  }
  std::optional<raw_json::Value> no_parallel = raw_json::Find(*choice, "disable_parallel_tool_use");
  if (no_parallel && no_parallel->is_true() && type != "none") {
    w.Key("parallel_tool_calls").Bool(false);
  }
  return {};
}

Result<std::string> Translate(const raw_json::Object& body, const MessagesToChatOptions& options) {
  std::optional<raw_json::Value> messages = body.Find("messages");
  if (!messages || !messages->is_array()) return Invalid("messages: an array is required");
  std::optional<raw_json::Value> max_tokens = body.Find("max_tokens");
  if (!IsPositiveInteger(max_tokens) && !(options.prompt_only && !max_tokens)) {
    return Invalid("max_tokens: a positive integer is required");
  }
  JsonWriter w;
  w.BeginObject();
  if (std::optional<raw_json::Value> model = body.Find("model")) w.Key("model").Raw(model->text);
  w.Key("messages").BeginArray();
  if (std::optional<raw_json::Value> system = body.Find("system"); system && !system->is_null()) {
    if (Status s = WriteSystem(w, *system); !s) return std::unexpected(s.error());
  }
  int i = 0;
  for (const raw_json::Value& message : raw_json::Elements(*messages)) {
    const std::string where = StrCat("messages[", i++, "]");
    const std::string role = Decoded(raw_json::Find(message, "role"));
    if (role != "user" && role != "assistant") {
      return Invalid(where + ".role must be user or assistant");
    }
    std::optional<raw_json::Value> content = raw_json::Find(message, "content");
    if (content && content->is_string()) {
      w.BeginObject().Key("role").String(role).Key("content").Raw(content->text).EndObject();
      continue;
    }
    if (!content || !content->is_array()) {
      return Invalid(where + ".content must be a string or an array of blocks");
    }
    Status s = role == "user" ? WriteUser(w, *content, where) : WriteAssistant(w, *content, where);
    if (!s) return std::unexpected(s.error());
  }
  w.EndArray();
  if (max_tokens) w.Key("max_tokens").Raw(max_tokens->text);
  if (std::optional<raw_json::Value> stop = body.Find("stop_sequences"); stop && !stop->is_null()) {
    bool strings = stop->is_array();
    raw_json::ForEachElement(*stop, [&](raw_json::Value s) { strings = strings && s.is_string(); });
    if (!strings) return Invalid("stop_sequences must be an array of strings");
    if (!raw_json::Elements(*stop).empty()) w.Key("stop").Raw(stop->text);
  }
  for (const char* key : {"temperature", "top_p", "top_k"}) {
    std::optional<raw_json::Value> v = body.Find(key);
    if (!v || v->is_null()) continue;
    if (v->kind != raw_json::Kind::kNumber) return Invalid(StrCat(key, " must be a number"));
    if (std::string_view(key) == "top_k" && !options.top_k) continue;
    w.Key(key).Raw(v->text);
  }
  if (std::optional<raw_json::Value> stream = body.Find("stream");
      stream && stream->kind == raw_json::Kind::kBool) {
    w.Key("stream").Raw(stream->text);
  }
  if (std::optional<raw_json::Value> metadata = body.Find("metadata")) {
    std::optional<raw_json::Value> user = raw_json::Find(*metadata, "user_id");
    if (user && user->is_string()) w.Key("user").Raw(user->text);
  }
  if (std::optional<raw_json::Value> tools = body.Find("tools"); tools && !tools->is_null()) {
    if (Status s = WriteTools(w, *tools, body.Find("tool_choice")); !s) {
      return std::unexpected(s.error());
    }
  }
  w.EndObject();
  return w.Take();
}

}  // namespace

Result<std::string> MessagesToChat(const raw_json::Object& messages_body,
                                   const MessagesToChatOptions& options) {
  try {
    if (!messages_body.is_object()) return Invalid("the request body must be a JSON object");
    return Translate(messages_body, options);
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInternal,
                     std::string("translating the Messages request failed: ") + e.what());
  }
}

Result<ClientThread> MessagesThreadIdOf(const raw_json::Object& body, std::string_view header,
                                        AgentSession session) {
  Result<ClientThread> named = ThreadIdOf(body, header);
  if (!named || !named->id.empty()) return named;
  auto checked = [](std::string value, std::string_view where,
                    std::string_view source) -> Result<ClientThread> {
    if (Status s = ValidateThreadId(value, where); !s) return std::unexpected(s.error());
    return ClientThread{std::move(value), source};
  };
  if (!session.value.empty()) {
    return checked(std::string(session.value), StrCat("the ", session.header, " header"),
                   telemetry::kThreadFromHeader);
  }
  if (std::optional<raw_json::Value> metadata = body.Find("metadata")) {
    std::string user = Decoded(raw_json::Find(*metadata, "user_id"));
    if (!user.empty()) {
      return checked(std::move(user), "metadata.user_id", telemetry::kThreadFromBody);
    }
  }
  return ClientThread{};
}

}  // namespace kvgate::providers
