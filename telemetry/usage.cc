// Normalization of each provider's usage JSON into telemetry::Usage (the table in
// docs/providers.md). The usage object is read as raw_json (no tree is built on the proxy's path); every
// accessor here is non-throwing and checks the kind of a value before reading it.
// values whose type was not tested first.
#include "telemetry/usage.h"

#include <array>
#include <charconv>
#include <cstdlib>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

// Counts above this are treated as garbage; it also keeps every sum and difference below far from
// int64 overflow, and tokens x price (<= 2^50 x ~2^30) inside int64 in pricing.
constexpr int64_t kMaxTokens = int64_t{1} << 50;

// A count no single request can have: ten times the largest context window any model offers. A
// provider's report above it is a bug on its side (one reported 4e9 tokens, which would have
// charged a key $800,000 and pushed its token limit's reset decades out): read as unknown and
// flagged `clamped`, with `raw` kept to show what came.
constexpr int64_t kMaxPlausibleTokens = 100'000'000;

// A value that may be absent: nullopt for a missing member.
using Node = std::optional<raw_json::Value>;

// The member `key` of `obj`, or nullopt when `obj` is not an object or has no such member.
Node Member(Node obj, std::string_view key) {
  if (!obj || !obj->is_object()) return std::nullopt;
  return raw_json::Find(*obj, key);
}

// Follows a path of object keys from `root`, whose members were read once (the root is consulted
// for every count; nested objects are small).
Node Path(const raw_json::Object& root, std::initializer_list<std::string_view> keys) {
  Node cur;
  bool first = true;
  for (std::string_view key : keys) {
    cur = first ? root.Find(key) : Member(cur, key);
    first = false;
    if (!cur) return std::nullopt;
  }
  return cur;
}

// A token count: a non-negative integer (integral floats accepted) no larger than kMaxTokens.
// Integers beyond 64 bits read as floats (as a JSON library would) and are too large either way.
std::optional<int64_t> Count(Node value) {
  if (!value || value->kind != raw_json::Kind::kNumber) return std::nullopt;
  const std::string_view text = value->text;
  if (text.find_first_of(".eE") == std::string_view::npos) {
    if (text[0] == '-') {
      return text == "-0" ? std::optional<int64_t>(0) : std::nullopt;
    }
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v > static_cast<uint64_t>(kMaxTokens)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  const double v = std::strtod(std::string(text).c_str(), nullptr);
  if (!std::isfinite(v) || v < 0 || v > static_cast<double>(kMaxTokens) || std::floor(v) != v) {
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

std::optional<int64_t> Count(const raw_json::Object& root,
                             std::initializer_list<std::string_view> keys) {
  return Count(Path(root, keys));
}

std::optional<int64_t> FirstKnown(std::optional<int64_t> a, std::optional<int64_t> b) {
  return a.has_value() ? a : b;
}

std::optional<int64_t> Sum(std::initializer_list<std::optional<int64_t>> parts) {
  int64_t total = 0;
  for (const auto& p : parts) {
    if (!p.has_value()) return std::nullopt;
    total += *p;
  }
  return total;
}

// total - sum(parts), clamped at 0 (setting *clamped); unknown when any operand is unknown.
std::optional<int64_t> Remainder(std::optional<int64_t> total,
                                 std::initializer_list<std::optional<int64_t>> parts,
                                 bool* clamped) {
  std::optional<int64_t> subtracted = Sum(parts);
  if (!total.has_value() || !subtracted.has_value()) return std::nullopt;
  int64_t rest = *total - *subtracted;
  if (rest < 0) {
    *clamped = true;
    rest = 0;
  }
  return rest;
}

// The OpenAI Chat shape shared by OpenAI, OpenRouter, kvgate's engine and OpenAI-compatible servers.
// `write_absent_is_zero`: the provider reports cache_write_tokens only when there are some.
// `has_writes`: false for providers whose table row says writes are always 0.
void NormalizeChatShape(const raw_json::Object& u, bool has_writes, bool write_absent_is_zero,
                        Usage* out) {
  const std::optional<int64_t> prompt = Count(u, {"prompt_tokens"});
  out->cache_read = Count(u, {"prompt_tokens_details", "cached_tokens"});
  std::optional<int64_t> write = 0;
  if (has_writes) {
    write = Count(u, {"prompt_tokens_details", "cache_write_tokens"});
    const bool absent = !Path(u, {"prompt_tokens_details", "cache_write_tokens"});
    if (!write.has_value() && absent && write_absent_is_zero) write = 0;
  }
  // OpenAI-shaped writes carry no TTL (none at all for kvgate's engine): their own bucket.
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  out->cache_write_no_ttl = write;
  out->uncached = Remainder(prompt, {out->cache_read, write}, &out->clamped);
  out->output = Count(u, {"completion_tokens"});
  out->reasoning = Count(u, {"completion_tokens_details", "reasoning_tokens"});
  out->reported_input = prompt;
}

void NormalizeResponses(const raw_json::Object& u, Usage* out) {
  const std::optional<int64_t> input = Count(u, {"input_tokens"});
  out->cache_read = Count(u, {"input_tokens_details", "cached_tokens"});
  std::optional<int64_t> write = Count(u, {"input_tokens_details", "cache_write_tokens"});
  if (!write.has_value() && !Path(u, {"input_tokens_details", "cache_write_tokens"})) {
    write = 0;
  }
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  out->cache_write_no_ttl = write;
  out->uncached = Remainder(input, {out->cache_read, write}, &out->clamped);
  out->output = Count(u, {"output_tokens"});
  out->reasoning = Count(u, {"output_tokens_details", "reasoning_tokens"});
  out->reported_input = input;
}

// An embedding has no cache and no output: both are a known 0 once the input count is known.
void NormalizeEmbeddings(const raw_json::Object& u, Usage* out) {
  out->uncached = Count(u, {"prompt_tokens"});
  out->cache_read = 0;
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  if (out->uncached.has_value()) {
    out->output = 0;
    out->reasoning = 0;
  }
  out->reported_input = out->uncached;
}

void NormalizeAnthropic(const raw_json::Object& u, Usage* out) {
  out->uncached = Count(u, {"input_tokens"});
  out->cache_read = Count(u, {"cache_read_input_tokens"});
  const std::optional<int64_t> creation = Count(u, {"cache_creation_input_tokens"});
  const std::optional<int64_t> w5m = Count(u, {"cache_creation", "ephemeral_5m_input_tokens"});
  const std::optional<int64_t> w1h = Count(u, {"cache_creation", "ephemeral_1h_input_tokens"});
  if (w5m.has_value() && w1h.has_value()) {
    out->cache_write_5m = w5m;
    out->cache_write_1h = w1h;
  } else if (w1h.has_value()) {
    // Only the 1h bucket given: the rest of the creation count is 5m.
    out->cache_write_1h = w1h;
    out->cache_write_5m = creation.has_value() ? std::optional<int64_t>(*creation > *w1h
                                                                            ? *creation - *w1h
                                                                            : 0)
                                               : std::optional<int64_t>(0);
  } else if (w5m.has_value()) {
    out->cache_write_5m = w5m;
    out->cache_write_1h = creation.has_value()
                              ? std::optional<int64_t>(*creation > *w5m ? *creation - *w5m : 0)
                              : std::optional<int64_t>(0);
  } else if (creation.has_value()) {
    out->cache_write_5m = creation;  // no split: all 5m
    out->cache_write_1h = 0;
  }  // else both unknown
  out->output = Count(u, {"output_tokens"});
  out->reported_input = Sum({out->uncached, out->cache_read, out->cache_write_5m, out->cache_write_1h});
}

void NormalizeBedrock(const raw_json::Object& u, Usage* out) {
  out->cache_read = Count(u, {"cacheReadInputTokens"});
  out->cache_write_5m = Count(u, {"cacheWriteInputTokens"});
  out->cache_write_1h = out->cache_write_5m.has_value() ? std::optional<int64_t>(0) : std::nullopt;
  // cacheDetails ([{ttl: "5m" | "1h", inputTokens}], Converse's split of the writes by TTL): the
  // 1h writes move out of the 5m bucket. Without it every write is 5m, the default TTL.
  if (Node details = u.Find("cacheDetails"); details && details->is_array() &&
                                             out->cache_write_5m.has_value()) {
    int64_t one_hour = 0;
    bool readable = true;
    for (const raw_json::Value& d : raw_json::Elements(*details)) {
      const raw_json::Object detail(d);
      const std::optional<int64_t> n = Count(detail, {"inputTokens"});
      const Node ttl = detail.Find("ttl");
      if (!n || !ttl || !ttl->is_string()) {
        readable = false;
        break;
      }
      if (raw_json::DecodeString(*ttl).value_or("") == "1h") one_hour += *n;
    }
    if (readable && one_hour <= *out->cache_write_5m) {
      out->cache_write_1h = one_hour;
      *out->cache_write_5m -= one_hour;
    }
  }
  out->uncached = Count(u, {"inputTokens"});
  out->output = Count(u, {"outputTokens"});
  out->reported_input =
      Sum({out->uncached, out->cache_read, out->cache_write_5m, out->cache_write_1h});
}

void NormalizeGeminiNative(const raw_json::Object& u, Usage* out) {
  const std::optional<int64_t> prompt = Count(u, {"promptTokenCount"});
  // proto3 JSON omits zero-valued fields, so with a prompt count present "absent" means 0. A field
  // that is present but malformed stays unknown.
  auto zero_if_absent = [&](std::string_view key) -> std::optional<int64_t> {
    const Node v = u.Find(key);
    if (!v) return prompt.has_value() ? std::optional<int64_t>(0) : std::nullopt;
    return Count(v);
  };
  out->cache_read = zero_if_absent("cachedContentTokenCount");
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  out->uncached = Remainder(prompt, {out->cache_read}, &out->clamped);
  const std::optional<int64_t> thoughts = zero_if_absent("thoughtsTokenCount");
  out->output = Sum({zero_if_absent("candidatesTokenCount"), thoughts});
  out->reasoning = thoughts;
  out->reported_input = prompt;
}

void NormalizeGeminiOpenAI(const raw_json::Object& u, Usage* out) {
  const std::optional<int64_t> prompt = Count(u, {"prompt_tokens"});
  out->cache_read = Count(u, {"prompt_tokens_details", "cached_tokens"});
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  out->uncached = Remainder(prompt, {out->cache_read}, &out->clamped);
  const std::optional<int64_t> total = Count(u, {"total_tokens"});
  if (total.has_value() && prompt.has_value() && *total >= *prompt) {
    out->output = *total - *prompt;
  } else {
    out->output = Count(u, {"completion_tokens"});
  }
  out->reasoning = Count(u, {"completion_tokens_details", "reasoning_tokens"});
  out->reported_input = prompt;
}

void NormalizeDeepSeek(const raw_json::Object& u, Usage* out) {
  const std::optional<int64_t> prompt = Count(u, {"prompt_tokens"});
  out->cache_read = FirstKnown(Count(u, {"prompt_cache_hit_tokens"}),
                               Count(u, {"prompt_tokens_details", "cached_tokens"}));
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  const std::optional<int64_t> miss = Count(u, {"prompt_cache_miss_tokens"});
  out->uncached = miss.has_value() ? miss : Remainder(prompt, {out->cache_read}, &out->clamped);
  out->output = Count(u, {"completion_tokens"});
  out->reasoning = Count(u, {"completion_tokens_details", "reasoning_tokens"});
  out->reported_input = FirstKnown(prompt, Sum({out->cache_read, out->uncached}));
}

void NormalizeLlamaCpp(const raw_json::Object& response, Usage* out) {
  const Node usage_member = response.Find("usage");
  const raw_json::Object u = (usage_member && usage_member->is_object())
                                 ? raw_json::Object(*usage_member)
                                 : response;
  const Node timings = response.Find("timings");
  const std::optional<int64_t> prompt = Count(u, {"prompt_tokens"});
  out->cache_read =
      FirstKnown(Count(u, {"prompt_tokens_details", "cached_tokens"}), Count(Member(timings, "cache_n")));
  out->cache_write_5m = 0;
  out->cache_write_1h = 0;
  const std::optional<int64_t> prompt_n = Count(Member(timings, "prompt_n"));
  out->uncached = prompt_n.has_value() ? prompt_n : Remainder(prompt, {out->cache_read}, &out->clamped);
  out->output = FirstKnown(Count(u, {"completion_tokens"}), Count(Member(timings, "predicted_n")));
  out->reasoning = Count(u, {"completion_tokens_details", "reasoning_tokens"});
  out->reported_input = FirstKnown(prompt, Sum({out->cache_read, out->uncached}));
}

constexpr std::array<std::pair<UsageFlavor, std::string_view>, 14> kFlavorNames = {{
    {UsageFlavor::kOpenAIChat, "openai"},
    {UsageFlavor::kOpenAIResponses, "openai-responses"},
    {UsageFlavor::kOpenAIEmbeddings, "openai-embeddings"},
    {UsageFlavor::kOpenAICompatible, "openai-compatible"},
    {UsageFlavor::kOpenRouter, "openrouter"},
    {UsageFlavor::kAnthropic, "anthropic"},
    {UsageFlavor::kBedrock, "bedrock"},
    {UsageFlavor::kGeminiNative, "gemini"},
    {UsageFlavor::kGeminiOpenAI, "gemini-openai"},
    {UsageFlavor::kDeepSeek, "deepseek"},
    {UsageFlavor::kVllm, "vllm"},
    {UsageFlavor::kSglang, "sglang"},
    {UsageFlavor::kLlamaCpp, "llamacpp"},
    {UsageFlavor::kKvgateEngine, "kvgate"},
}};

}  // namespace

std::optional<UsageFlavor> UsageFlavorFromName(std::string_view name) {
  for (const auto& [flavor, flavor_name] : kFlavorNames) {
    if (flavor_name == name) return flavor;
  }
  return std::nullopt;
}

std::string_view UsageFlavorName(UsageFlavor flavor) {
  for (const auto& [f, flavor_name] : kFlavorNames) {
    if (f == flavor) return flavor_name;
  }
  return "unknown";
}

std::optional<int64_t> Usage::TotalInput() const {
  return Sum({cache_read, cache_write_5m, cache_write_1h, cache_write_no_ttl, uncached});
}

std::optional<int64_t> Usage::CacheWrite() const {
  return Sum({cache_write_5m, cache_write_1h, cache_write_no_ttl});
}

Usage NormalizeUsage(UsageFlavor flavor, const nlohmann::json& usage) {
  if (usage.is_null()) return Usage{};
  std::string text;
  try {
    text = usage.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception&) {
    return Usage{};
  }
  Result<raw_json::Value> parsed = raw_json::Parse(text);
  if (!parsed) return Usage{};  // unreachable: nlohmann writes valid JSON
  return NormalizeUsage(flavor, *parsed);
}

Usage NormalizeUsage(UsageFlavor flavor, raw_json::Value usage) {
  Usage out;
  try {
    if (!usage.is_null()) raw_json::AppendMinified(usage, out.raw);
    if (!usage.is_object()) return out;
    const raw_json::Object u(usage);
    switch (flavor) {
      case UsageFlavor::kOpenAIChat:
      case UsageFlavor::kOpenRouter:
        NormalizeChatShape(u, /*has_writes=*/true, /*write_absent_is_zero=*/true, &out);
        break;
      case UsageFlavor::kKvgateEngine:
        NormalizeChatShape(u, /*has_writes=*/true, /*write_absent_is_zero=*/false, &out);
        out.cache_read_offload = Count(u, {"prompt_tokens_details", "cache_read_offload_tokens"});
        if (Node tier = Path(u, {"prompt_tokens_details", "cache_read_offload_tier"})) {
          // Only a kind this gateway's engine names: the column is a label, not free text.
          const std::optional<std::string> kind = raw_json::DecodeString(*tier);
          if (kind && (*kind == "disk" || *kind == "host")) out.cache_read_offload_tier = *kind;
        }
        break;
      case UsageFlavor::kOpenAICompatible:
      case UsageFlavor::kVllm:
      case UsageFlavor::kSglang:
        NormalizeChatShape(u, /*has_writes=*/false, /*write_absent_is_zero=*/false, &out);
        break;
      case UsageFlavor::kOpenAIResponses:
        NormalizeResponses(u, &out);
        break;
      case UsageFlavor::kOpenAIEmbeddings:
        NormalizeEmbeddings(u, &out);
        break;
      case UsageFlavor::kAnthropic:
        NormalizeAnthropic(u, &out);
        break;
      case UsageFlavor::kBedrock:
        NormalizeBedrock(u, &out);
        break;
      case UsageFlavor::kGeminiNative:
        NormalizeGeminiNative(u, &out);
        break;
      case UsageFlavor::kGeminiOpenAI:
        NormalizeGeminiOpenAI(u, &out);
        break;
      case UsageFlavor::kDeepSeek:
        NormalizeDeepSeek(u, &out);
        break;
      case UsageFlavor::kLlamaCpp:
        NormalizeLlamaCpp(u, &out);
        break;
    }
    for (std::optional<int64_t>* count :
         {&out.cache_read, &out.cache_write_5m, &out.cache_write_1h, &out.cache_write_no_ttl,
          &out.uncached, &out.output, &out.reasoning, &out.reported_input,
          &out.cache_read_offload}) {
      if (count->has_value() && **count > kMaxPlausibleTokens) {
        count->reset();
        out.clamped = true;
      }
    }
    // The chat shape and Responses set the no-TTL bucket themselves (an unknown one stays
    // unknown); no other flavour has writes without a TTL.
    if (!out.cache_write_no_ttl.has_value() && flavor != UsageFlavor::kKvgateEngine &&
        flavor != UsageFlavor::kOpenAIChat && flavor != UsageFlavor::kOpenRouter &&
        flavor != UsageFlavor::kOpenAICompatible && flavor != UsageFlavor::kVllm &&
        flavor != UsageFlavor::kSglang && flavor != UsageFlavor::kOpenAIResponses) {
      out.cache_write_no_ttl = 0;
    }
  } catch (const std::exception&) {
    // Only allocation can throw here; report nothing rather than half a result.
    return Usage{};
  }
  return out;
}

}  // namespace kvgate::telemetry
