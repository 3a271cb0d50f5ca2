#include "gateway/responses_bridge.h"

#include "common/raw_json.h"
#include "gateway/providers/responses_translate.h"

namespace kvgate::gateway {
namespace {

AttemptResult Refused(providers::ClientError error) {
  AttemptResult r;
  if (auto it = error.body.find("error"); it != error.body.end() && it->contains("message")) {
    r.message = (*it)["message"].get<std::string>();
  }
  r.error = std::move(error);
  r.status_word = "error";
  r.outcome.failure = router::Failure::kOther;
  return r;
}

// `conversation` (a JSON array of chat messages) with `message` appended.
std::string Appended(const std::string& conversation, const std::string& message) {
  std::string out = conversation;
  while (!out.empty() && out.back() != ']') out.pop_back();
  if (out.empty()) return "[" + message + "]";
  out.pop_back();
  const bool empty = out.find_last_not_of(" \n\t") == 0;  // only the '['
  return out + (empty ? "" : ",") + message + "]";
}

}  // namespace

AttemptResult PreviousResponseNotFound(const std::string& response_id) {
  // OpenAI's answer; here also for an id this replica forgot (LRU) or never translated.
  return Refused(providers::MakeOpenAIError(
      400, "Previous response with id '" + response_id + "' not found.", "invalid_request_error",
      "previous_response_not_found", "previous_response_id"));
}

bool TranslatesResponses(providers::ProviderType type) {
  return telemetry::TraitsOf(type).translates_responses;
}

std::optional<std::string> ChatBodyForProbe(const raw_json::Object& responses_body,
                                            ResponseThreads& threads, std::string_view api_key_id) {
  std::optional<std::string> history;
  if (std::optional<raw_json::Value> previous = responses_body.Find("previous_response_id");
      previous && !previous->is_null()) {
    history = threads.FindConversation(raw_json::DecodeString(*previous).value_or(""), api_key_id);
    if (!history) return std::nullopt;
  }
  providers::ResponsesChat chat =
      providers::ResponsesToChat(responses_body.value().text, history ? &*history : nullptr);
  if (chat.error) return std::nullopt;
  return std::move(chat.chat_body);
}

std::optional<AttemptResult> TranslateResponsesForChat(const InferenceCall& call,
                                                       ResponseThreads& threads,
                                                       std::string& chat_text,
                                                       InferenceCall& chat_call,
                                                       ClientStream& client) {
  std::optional<std::string> history;
  if (std::optional<raw_json::Value> previous = call.body.Find("previous_response_id");
      previous && !previous->is_null()) {
    const std::string id = raw_json::DecodeString(*previous).value_or("");
    if (call.previous_response_of_other_key.empty()) {
      history = threads.FindConversation(id, client.record().api_key_id);
    }
    if (!history) return PreviousResponseNotFound(id);
  }
  providers::ResponsesChat chat =
      providers::ResponsesToChat(call.body.value().text, history ? &*history : nullptr);
  if (chat.error) return Refused(std::move(*chat.error));
  chat_text = std::move(chat.chat_body);
  Result<raw_json::Value> parsed = raw_json::Parse(chat_text);
  if (!parsed) {
    return Refused(providers::MakeOpenAIError(
        500, "the translated request is not valid JSON: " + parsed.error().message,
        "server_error", "internal_error"));
  }
  chat_call = call;
  chat_call.endpoint = providers::Endpoint::kChatCompletions;
  chat_call.body = raw_json::Object(*parsed);
  chat_call.client_wants_usage = true;
  chat_call.on_response_id = nullptr;  // run below, with the translated id

  std::optional<raw_json::Value> store = call.body.Find("store");
  const bool stored = !(store && store->kind == raw_json::Kind::kBool && !store->is_true());
  telemetry::RequestRecord& record = client.record();
  client.TranslateChatToResponses(
      std::move(chat.echo),
      [&threads, &record, stored, conversation = std::move(chat.conversation),
       on_response_id = call.on_response_id](const providers::ResponsesOutcome& outcome) {
        if (on_response_id) on_response_id(record);  // the response's thread
        if (stored) {
          threads.RememberConversation(outcome.response_id,
                                       Appended(conversation, outcome.assistant_message),
                                       record.api_key_id);
        }
      });
  return std::nullopt;
}

}  // namespace kvgate::gateway
