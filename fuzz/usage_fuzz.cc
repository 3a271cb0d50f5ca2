// libFuzzer target: usage normalization for every usage flavour (so every provider type), and the
// non-streaming response translation that feeds it.
//
// Input: byte 0 picks the mode and the flavour / provider type; the rest is JSON (or not).
//  - byte 0 < 128: NormalizeUsage(flavour, value) on the raw_json value and on the nlohmann tree
//    of the same text must agree (telemetry/usage.h: the tree overload is "the same"), counts are
//    unknown or in [0, 10^8] (larger ones are implausible: unknown and `clamped`), `clamped` only
//    with uncached == 0 or some count unknown, and `raw` is the usage minified.
//  - byte 0 >= 128: TranslateResponse(type, body) for a 2xx body: an answer is JSON with in-range
//    usage, an error has a message; TranslateUpstreamError never throws and its body serializes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/raw_json.h"
#include "gateway/providers/provider.h"
#include "telemetry/usage.h"

namespace {

using kvgate::providers::ProviderType;
using kvgate::telemetry::Usage;
using kvgate::telemetry::UsageFlavor;
using nlohmann::json;

constexpr UsageFlavor kFlavors[] = {
    UsageFlavor::kOpenAIChat,   UsageFlavor::kOpenAIResponses, UsageFlavor::kOpenAICompatible,
    UsageFlavor::kOpenRouter,   UsageFlavor::kAnthropic,       UsageFlavor::kBedrock,
    UsageFlavor::kGeminiNative, UsageFlavor::kGeminiOpenAI,    UsageFlavor::kDeepSeek,
    UsageFlavor::kVllm,         UsageFlavor::kSglang,          UsageFlavor::kLlamaCpp,
    UsageFlavor::kKvgateEngine, UsageFlavor::kOpenAIEmbeddings,
};
constexpr ProviderType kTypes[] = {
    ProviderType::kOpenAI,     ProviderType::kAnthropic,    ProviderType::kDeepSeek,
    ProviderType::kVllm,       ProviderType::kSglang,       ProviderType::kLlamaCpp,
    ProviderType::kOpenRouter, ProviderType::kGeminiOpenAI, ProviderType::kLocal,
    ProviderType::kBedrock,
};

[[noreturn]] void Fail(const char* what, std::string_view input) {
  std::fprintf(stderr, "usage_fuzz: %s\ninput: %.*s\n", what,
               static_cast<int>(input.size() > 1024 ? 1024 : input.size()), input.data());
  std::abort();
}

void CheckUsage(const Usage& u, std::string_view input) {
  for (const auto* c : {&u.cache_read, &u.cache_write_5m, &u.cache_write_1h,
                        &u.cache_write_no_ttl, &u.uncached, &u.output, &u.reasoning,
                        &u.reported_input}) {
    if (*c && (**c < 0 || **c > 100'000'000)) Fail("a count is out of [0, 10^8]", input);
  }
  if (u.clamped && u.uncached.has_value() && *u.uncached != 0) {
    Fail("clamped without uncached == 0 or unknown", input);
  }
  if (!u.raw.empty() && json::parse(u.raw, nullptr, false).is_discarded()) {
    Fail("Usage::raw is not JSON", input);
  }
  // Sums stay exact: five counts of at most 2^50 cannot overflow.
  const auto total = u.TotalInput();
  if (total && *total != *u.cache_read + *u.cache_write_5m + *u.cache_write_1h +
                             *u.cache_write_no_ttl + *u.uncached) {
    Fail("TotalInput is not the sum of its parts", input);
  }
}

// Everything but `raw`, which each overload minifies from its own text.
bool SameCounts(Usage a, Usage b) {
  a.raw.clear();
  b.raw.clear();
  return a == b;
}

void Normalize(UsageFlavor flavor, std::string_view text) {
  const auto value = kvgate::raw_json::Parse(text);
  if (!value) return;
  const Usage from_raw = kvgate::telemetry::NormalizeUsage(flavor, *value);
  CheckUsage(from_raw, text);
  const json tree = json::parse(text, nullptr, false);
  if (tree.is_discarded()) return;  // deeper than nlohmann goes? (raw_json accepted it)
  if (!from_raw.raw.empty() && json::parse(from_raw.raw, nullptr, false) != tree) {
    Fail("Usage::raw is not the usage value", text);
  }
  const Usage from_tree = kvgate::telemetry::NormalizeUsage(flavor, tree);
  CheckUsage(from_tree, text);
  if (!SameCounts(from_raw, from_tree)) {
    Fail("NormalizeUsage on the text and on its tree disagree", text);
  }
}

void TranslateBody(ProviderType type, std::string_view body) {
  kvgate::providers::CallOptions options;
  options.created = 1;
  const auto translated = kvgate::providers::TranslateResponse(type, body, options);
  if (translated) {
    if (json::parse(translated->body, nullptr, false).is_discarded()) {
      Fail("TranslateResponse answered with a body that is not JSON", body);
    }
    CheckUsage(translated->usage, body);
    (void)kvgate::providers::ResponseIdOf(translated->body);
  } else if (translated.error().message.empty()) {
    Fail("TranslateResponse failed without a message", body);
  }
  const auto error = kvgate::providers::TranslateUpstreamError(type, 400 + body.size() % 200, body);
  if (error.status < 400 || error.status > 599) Fail("an upstream error became a non-error", body);
  // kvgate writes every error body through JsonText (which cannot throw); it must be JSON.
  if (json::parse(kvgate::JsonText(error.body), nullptr, false).is_discarded()) {
    Fail("an upstream error body does not serialize to JSON", body);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] < 128) {
    Normalize(kFlavors[data[0] % std::size(kFlavors)], text);
  } else {
    TranslateBody(kTypes[(data[0] - 128) % std::size(kTypes)], text);
  }
  return 0;
}
