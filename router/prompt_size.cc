#include "router/prompt_size.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace kvgate::router::internal {
namespace {

int64_t Scaled(uint64_t bytes, double bytes_per_token) {
  return static_cast<int64_t>(double(bytes) / std::max(0.1, bytes_per_token));
}

// A turn of the thread whose billed input and prompt bytes give a ratio for this text.
bool HasRatio(const telemetry::TurnSummary& turn) {
  return turn.total_input && *turn.total_input > 0 && turn.fingerprint &&
         turn.fingerprint->TotalBytes() > 0;
}

int64_t ScaledByTurn(const telemetry::TurnSummary& turn, uint64_t bytes) {
  return static_cast<int64_t>(double(*turn.total_input) * double(bytes) /
                              double(turn.fingerprint->TotalBytes()));
}

// The mean learned ratio of the targets other than `self` that `pick` accepts; 0 when none has
// learned one. Each target's lock is taken alone, in turn.
template <class Pick>
double MeanLearnedRatio(const RouterState& s, size_t self, Pick pick) {
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < s.targets.size(); ++i) {
    if (i == self || !pick(s.targets[i])) continue;
    MutexLock lock(&s.learned[i]->mu);
    if (!s.learned[i]->ratio_seen) continue;
    sum += s.learned[i]->bytes_per_token;
    ++n;
  }
  return n > 0 ? sum / n : 0.0;
}

}  // namespace

std::string_view RatioSourceName(RatioSource source) {
  switch (source) {
    case RatioSource::kTokenizer:
      return "tokenizer";
    case RatioSource::kLearned:
      return "learned";
    case RatioSource::kThread:
      return "thread";
    case RatioSource::kOtherTargets:
      return "other_targets";
    case RatioSource::kDefault:
      return "default";
  }
  return "default";
}

std::string_view TokenizerFamily(const Target& target) {
  if (target.type == telemetry::ProviderType::kAnthropic) return "claude";
  std::string m = target.upstream_model;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  // "meta-llama/Llama-3.3-70B-Instruct", "anthropic.claude-3-5-sonnet": the vendor prefix goes.
  if (size_t slash = m.rfind('/'); slash != std::string::npos) m = m.substr(slash + 1);
  auto has = [&](std::string_view part) { return m.find(part) != std::string::npos; };
  auto starts = [&](std::string_view part) { return m.rfind(part, 0) == 0; };
  if (has("claude")) return "claude";
  if (starts("gpt-4o") || starts("gpt-4.1") || starts("gpt-4.5") || starts("gpt-5") ||
      starts("o1") || starts("o3") || starts("o4") || starts("chatgpt-4o") || has("gpt-oss")) {
    return "o200k";
  }
  if (starts("gpt-4") || starts("gpt-3.5")) return "cl100k";
  if (has("gemini") || has("gemma")) return "gemini";
  if (has("llama-3") || has("llama3")) return "llama3";
  if (has("deepseek")) return "deepseek";
  if (has("qwen")) return "qwen";
  if (has("mistral") || has("mixtral") || has("codestral")) return "mistral";
  return "";
}

PromptSize EstimatePromptSize(const RouterState& s, size_t t, const RequestFacts& facts,
                              const telemetry::ThreadView& thread) {
  // The engine counted it: no estimate beats that.
  if (auto probe = ProbeFor(facts, t)) {
    return {.tokens = (*probe)->prompt_tokens, .source = RatioSource::kTokenizer};
  }
  const Target& target = s.targets[t];
  const bool comparable = facts.fingerprint != nullptr;
  // This thread's last prompt there, scaled by bytes: the same text on the same tokenizer.
  const telemetry::TurnSummary* last = thread.OnTarget(target.name);
  if (comparable && last != nullptr && HasRatio(*last)) {
    return {.tokens = ScaledByTurn(*last, facts.prompt_bytes), .source = RatioSource::kLearned};
  }
  {
    MutexLock lock(&s.learned[t]->mu);
    if (s.learned[t]->ratio_seen) {
      return {.tokens = Scaled(facts.prompt_bytes, s.learned[t]->bytes_per_token),
              .source = RatioSource::kLearned};
    }
  }
  // A target never used: the ratio this thread's text showed on the target it was on. The text
  // decides the ratio far more than the tokenizer does (code and JSON run 2-3 bytes per token,
  // prose 4-5, random identifiers 8 or more).
  if (comparable) {
    if (thread.latest && HasRatio(*thread.latest)) {
      return {.tokens = ScaledByTurn(*thread.latest, facts.prompt_bytes),
              .source = RatioSource::kThread};
    }
    for (const telemetry::TurnSummary& turn : thread.by_target) {
      if (HasRatio(turn)) {
        return {.tokens = ScaledByTurn(turn, facts.prompt_bytes), .source = RatioSource::kThread};
      }
    }
  }
  // What the other targets learned: those of the same tokenizer family, else any.
  const std::string_view family = TokenizerFamily(target);
  double ratio = 0;
  if (!family.empty()) {
    ratio = MeanLearnedRatio(s, t, [&](const Target& o) { return TokenizerFamily(o) == family; });
  }
  if (ratio <= 0) ratio = MeanLearnedRatio(s, t, [](const Target&) { return true; });
  if (ratio > 0) {
    return {.tokens = Scaled(facts.prompt_bytes, ratio), .source = RatioSource::kOtherTargets};
  }
  double fallback;
  {
    MutexLock lock(&s.learned[t]->mu);
    fallback = s.learned[t]->bytes_per_token;
  }
  return {.tokens = Scaled(facts.prompt_bytes, fallback), .source = RatioSource::kDefault};
}

}  // namespace kvgate::router::internal
