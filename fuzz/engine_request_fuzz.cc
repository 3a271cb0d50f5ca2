// libFuzzer target: the built-in engine's request adapter (gateway/engine_request.h), which reads
// a client's chat or completions body. Input: a selector byte (bit 0: completions rather than
// chat; bits 1-3: the engine's max_choices - 1), then the body bytes. The adapter must answer a
// request or an OpenAI-shaped 400 (invalid_request_error with a message), never crash; a request
// must keep the engine's bounds (n in 1..max_choices, logprobs -1..kMaxTopLogprobs, a grammar
// with tools) and fit the context, or be refused, with max_tokens at least 1; and the prompt
// alone (EnginePromptOf) must be the request's when no tools are involved.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "gateway/engine_request.h"

namespace {

using kvgate::gateway::EngineCall;
using kvgate::providers::ClientError;
using kvgate::providers::Endpoint;

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "engine_request_fuzz: %s\ninput (%zu bytes): %.*s\n", what, input.size(),
               static_cast<int>(input.size() > 512 ? 512 : input.size()), input.data());
  std::abort();
}

void CheckRefusal(const ClientError& e, std::string_view input) {
  if (e.status != 400) Fail("a refusal that is not a 400", input);
  const auto it = e.body.find("error");
  if (it == e.body.end() || !it->is_object()) Fail("a refusal without an error object", input);
  if ((*it)["type"] != "invalid_request_error") Fail("a refusal of another type", input);
  if (!(*it)["message"].is_string() || (*it)["message"].get<std::string>().empty()) {
    Fail("a refusal without a message", input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const kvgate::engine::ChatTemplate kChatMl{
      .kind = kvgate::engine::ChatTemplateKind::kChatMl, .default_system = "Be brief."};
  const bool completions = (data[0] & 1) != 0;
  const int32_t max_choices = 1 + ((data[0] >> 1) & 7);
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Endpoint endpoint = completions ? Endpoint::kCompletions : Endpoint::kChatCompletions;
  std::expected<EngineCall, ClientError> call = kvgate::gateway::EngineCallFrom(
      body, endpoint, {.chat_template = &kChatMl, .max_choices = max_choices});
  if (!call) {
    CheckRefusal(call.error(), body);
    return 0;
  }
  if (call->n < 1 || call->n > max_choices) Fail("n out of the engine's bounds", body);
  if (call->sampling.logprobs < -1 || call->sampling.logprobs > kvgate::engine::kMaxTopLogprobs) {
    Fail("logprobs out of range", body);
  }
  if (call->tools && call->sampling.json_grammar == nullptr) Fail("tools without a grammar", body);
  if (completions && call->tools) Fail("tools on completions", body);

  // The whole prompt, as the lookup and the count read it, is the request's.
  const nlohmann::json tree = nlohmann::json::parse(body, nullptr, false);
  if (!tree.is_object()) Fail("a request from a body that is not an object", body);
  auto alone = kvgate::gateway::EnginePromptOf(tree, !completions, kChatMl);
  // (Tools are read there from the unordered tree, so their prompt may differ: not compared.)
  const bool comparable = completions ? true : tree.contains("messages") && !tree.contains("tools");
  if (comparable && (!alone || *alone != call->prompt)) {
    Fail("EnginePromptOf differs from EngineCallFrom's prompt", body);
  }

  // One token per byte of the prompt, in a context of 64 to 4096 tokens.
  const int64_t prompt_tokens = static_cast<int64_t>(call->prompt.size());
  const int64_t context = 64 << (data[0] >> 4 & 6);
  const bool asked = call->asked_max;
  const int32_t asked_tokens = call->sampling.max_tokens;
  auto fits = kvgate::gateway::FitToContext(*call, endpoint, prompt_tokens, context, data[0]);
  if (!fits) {
    CheckRefusal(fits.error(), body);
    if (prompt_tokens < context && !(asked && prompt_tokens + asked_tokens > context)) {
      Fail("a prompt that fits was refused", body);
    }
    return 0;
  }
  if (call->sampling.max_tokens < 1) Fail("max_tokens below 1", body);
  if (prompt_tokens + call->sampling.max_tokens > context) Fail("the answer overflows", body);
  if (asked && call->sampling.max_tokens != asked_tokens) Fail("max_tokens not kept", body);
  return 0;
}
