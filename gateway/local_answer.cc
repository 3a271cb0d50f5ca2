#include "gateway/local_answer.h"

namespace kvgate::gateway {

using nlohmann::json;

EngineAnswer::EngineAnswer(ResponseHead head, int32_t n, bool tools, int32_t logprobs,
                           const engine::Tokenizer& tokenizer)
    : head_(std::move(head)), choices_(static_cast<size_t>(std::max(n, 1))) {
  for (Choice& c : choices_) {
    if (tools) c.tool_out.emplace();
    if (logprobs >= 0) c.logprobs_out.emplace(head_.chat(), tokenizer);
  }
}

std::string EngineAnswer::OpeningChunks() const {
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const json role = {{"role", "assistant"},
                       {"content", choices_[i].tool_out ? json() : json("")}};
    out += Chunk(head_, role, nullptr, nullptr, static_cast<int32_t>(i));
  }
  return out;
}

std::string EngineAnswer::Add(EngineEvent e, bool streaming) {
  if (e.choice < 0 || e.choice >= static_cast<int32_t>(choices_.size())) return {};
  Choice& c = choices_[static_cast<size_t>(e.choice)];
  if (c.finished) return {};
  c.usage = e.usage;
  if (e.logprobs && c.logprobs_out) c.logprobs_out->Add(*e.logprobs);
  std::string out;
  if (!e.text.empty()) {
    if (c.tool_out) {
      // A token's logprobs go with the first chunk that follows it.
      for (const json& delta : c.tool_out->Push(e.text)) {
        if (streaming) out += Chunk(head_, delta, nullptr, c.TakeLogprobs(), e.choice);
      }
    } else if (streaming) {
      const json delta = head_.chat() ? json{{"content", e.text}} : json(e.text);
      out += Chunk(head_, delta, nullptr, c.TakeLogprobs(), e.choice);
    } else {
      c.text += e.text;
    }
  }
  if (e.finished) {
    c.finished = true;
    c.reason = e.reason;
    c.stop_string = std::move(e.stop_string);
    ++finished_;
    if (e.reason == engine::FinishReason::kError && error_.empty()) {
      error_ = e.error.empty() ? "unknown error" : e.error;
    }
  }
  return out;
}

engine::Usage EngineAnswer::usage() const {
  engine::Usage total;
  int32_t completion = 0;
  for (const Choice& c : choices_) {
    // The prompt fields are the request's, the same in every choice heard from (zeros otherwise).
    if (c.usage.prompt_tokens > 0) total = c.usage;
    completion += c.usage.completion_tokens;
  }
  total.completion_tokens = completion;
  return total;
}

std::string EngineAnswer::FinishReason(int32_t choice) const {
  const Choice& c = choices_.at(static_cast<size_t>(choice));
  if (c.reason == engine::FinishReason::kError) return "error";
  std::string reason = FinishReasonFor(c.reason);
  if (reason == "stop" && c.tool_out && c.tool_out->has_calls()) reason = "tool_calls";
  return reason;
}

json EngineAnswer::StopReason(int32_t choice) const {
  const std::string& stop = choices_.at(static_cast<size_t>(choice)).stop_string;
  return stop.empty() ? json(nullptr) : json(stop);
}

std::string EngineAnswer::ClosingChunks() {
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    out += Chunk(head_, head_.chat() ? json::object() : json(""), FinishReason(index),
                 choices_[i].TakeLogprobs(), index, StopReason(index));
  }
  return out;
}

std::string EngineAnswer::Whole() {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const auto index = static_cast<int32_t>(i);
    json message = c.tool_out ? c.tool_out->Message()
                   : head_.chat()
                       ? json{{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}
                       : json(c.text);
    json choice = {{"index", index}, {"logprobs", c.TakeLogprobs()},
                   {"finish_reason", FinishReason(index)}, {"stop_reason", StopReason(index)}};
    choice[head_.chat() ? "message" : "text"] = std::move(message);
    choices.push_back(std::move(choice));
  }
  return FullResponse(head_, std::move(choices), usage());
}

}  // namespace kvgate::gateway
