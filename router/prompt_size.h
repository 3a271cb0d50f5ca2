// Internal to the router: how many tokens a request's prompt is on a target before anything was
// sent there, and where that number comes from. A target the router has never used has no
// bytes-per-token ratio of its own, and the default (4 bytes per token) can be off by a factor
// of two for the text a thread carries; the best prior at hand is taken instead.
#pragma once

#include <cstdint>
#include <string_view>

#include "router/state.h"

namespace kvgate::router::internal {

// Where a candidate's prompt-token estimate came from, best first in the order they are tried:
// the engine's own count (exact), the target's ratio (this thread's last turn there, else its
// gateway-wide EWMA), the ratio the thread showed on another target for the same text, the
// ratios learned on the other targets (those of the same tokenizer family first), the default.
enum class RatioSource { kTokenizer, kLearned, kThread, kOtherTargets, kDefault };
// "tokenizer" | "learned" | "thread" | "other_targets" | "default" (the route JSON's words).
std::string_view RatioSourceName(RatioSource source);

struct PromptSize {
  int64_t tokens = 0;
  RatioSource source = RatioSource::kDefault;
};

// The prompt (facts.prompt_bytes, fingerprint when there is one) on target t.
PromptSize EstimatePromptSize(const RouterState& s, size_t t, const RequestFacts& facts,
                              const telemetry::ThreadView& thread);

// The tokenizer family of a target's model as far as its name tells ("claude", "o200k",
// "cl100k", "gemini", "llama3", ...), "" when it does not: targets of one family count the
// same text in about the same number of tokens.
std::string_view TokenizerFamily(const Target& target);

}  // namespace kvgate::router::internal
