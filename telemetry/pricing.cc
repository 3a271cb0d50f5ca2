// Exact integer pricing: decimal parsing of prices, the cost of one request, and the price catalog.
#include "telemetry/pricing.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <exception>
#include <utility>

#include "common/str_cat.h"
#include "telemetry/catalog_json.h"  // generated: kBuiltInCatalogJson

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

constexpr int64_t kPicoPerUsd = 1'000'000'000'000;

// Float noise: a shortest round-trip form this long is an artefact of binary floats, not a price
// someone wrote down, so rounding it is faithful to the intent.
constexpr size_t kNoiseSignificantDigits = 15;

bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool CheckedAdd(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// Parses a non-negative decimal "[digits][.digits][e[+-]digits]" and returns value x 10^scale as an
// integer. Digits below the unit must be 0 unless `round_noise` and the number has at least
// kNoiseSignificantDigits significant digits, in which case it is rounded half up.
Result<int64_t> ParseScaledDecimal(std::string_view text, int scale, bool round_noise) {
  const std::string_view original = text;
  auto invalid = [&](std::string_view why) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "price \"" + std::string(original) + "\": " + std::string(why));
  };
  std::string digits;  // integer and fraction digits, in order
  int64_t exponent = 0;  // value = digits x 10^exponent
  size_t i = 0;
  bool any_digit = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    digits.push_back(text[i++]);
    any_digit = true;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      digits.push_back(text[i++]);
      --exponent;
      any_digit = true;
    }
  }
  if (!any_digit) return invalid("not a non-negative decimal number");
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
    int64_t e = 0;
    const size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      e = e * 10 + (text[i++] - '0');
      if (e > 1000) return invalid("exponent out of range");
    }
    if (i == start) return invalid("missing exponent digits");
    exponent += negative ? -e : e;
  }
  if (i != text.size()) return invalid("unexpected characters");

  // Significant digits: strip leading zeros (they never matter) and count without trailing zeros.
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return int64_t{0};
  digits.erase(0, first);
  const size_t last = digits.find_last_not_of('0');
  const size_t significant = last + 1;

  exponent += scale;
  int64_t value = 0;
  bool round_up = false;
  size_t keep = digits.size();
  if (exponent < 0) {
    const int64_t drop = -exponent;
    keep = drop >= static_cast<int64_t>(digits.size()) ? 0 : digits.size() - static_cast<size_t>(drop);
    const std::string_view dropped =
        std::string_view(digits).substr(keep);  // plus implicit leading zeros when drop > size
    const bool exact = dropped.find_first_not_of('0') == std::string_view::npos;
    if (!exact) {
      if (!round_noise || significant < kNoiseSignificantDigits) {
        return invalid("finer than the smallest unit");
      }
      // Half up: the first dropped digit, which is an implicit 0 when drop exceeds the digit count.
      round_up = drop <= static_cast<int64_t>(digits.size()) && dropped.front() >= '5';
    }
    exponent = 0;
  }
  for (size_t k = 0; k < keep; ++k) {
    if (!CheckedMul(value, 10, &value) || !CheckedAdd(value, digits[k] - '0', &value)) {
      return invalid("too large");
    }
  }
  for (int64_t k = 0; k < exponent; ++k) {
    if (!CheckedMul(value, 10, &value)) return invalid("too large");
  }
  if (round_up && !CheckedAdd(value, 1, &value)) return invalid("too large");
  return value;
}

Result<int64_t> ParseScaledJson(const json& value, int scale) {
  try {
    if (value.is_string()) {
      return ParseScaledDecimal(value.get_ref<const std::string&>(), scale, /*round_noise=*/false);
    }
    if (value.is_number_unsigned() || value.is_number_integer()) {
      if (value.is_number_integer() && !value.is_number_unsigned() &&
          value.get_ref<const json::number_integer_t&>() < 0) {
        return MakeError(ErrorCode::kInvalidArgument, "price is negative: " + value.dump());
      }
      return ParseScaledDecimal(value.dump(), scale, /*round_noise=*/false);
    }
    if (value.is_number_float()) {
      // dump() is the shortest form that reads back as the same double, so "0.075" stays 0.075.
      const std::string text = value.dump();
      if (!text.empty() && text.front() == '-') {
        return MakeError(ErrorCode::kInvalidArgument, "price is negative: " + text);
      }
      return ParseScaledDecimal(text, scale, /*round_noise=*/true);
    }
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInvalidArgument, std::string("price: ") + e.what());
  }
  return MakeError(ErrorCode::kInvalidArgument, "price is not a number or decimal string: " + value.dump());
}

// Every field optional: what one JSON entry (or its tier) says.
struct PartialRates {
  std::optional<int64_t> input, cached_input, cache_write_5m, cache_write_1h, output;
  std::optional<int64_t> cache_write_no_ttl;
};

struct RateKeys {
  std::string_view input, cached_input, cache_write_5m, cache_write_1h, output;
  std::string_view cache_write_no_ttl;  // "" when the format has no such key
};
constexpr RateKeys kKvgateKeys{"input",          "cached_input", "cache_write_5m",
                               "cache_write_1h", "output",       "cache_write_no_ttl"};
// LiteLLM has no rate for writes without a TTL: they default to its creation cost.
constexpr RateKeys kLiteLlmKeys{"input_cost_per_token", "cache_read_input_token_cost",
                                "cache_creation_input_token_cost",
                                "cache_creation_input_token_cost_above_1hr", "output_cost_per_token",
                                ""};

// Reads the rate keys of `obj` (key + suffix); null or absent fields stay unset.
Status ReadRates(const json& obj, const RateKeys& keys, std::string_view suffix, int scale,
                 PartialRates* out) {
  auto read = [&](std::string_view key, std::optional<int64_t>* field) -> Status {
    if (key.empty()) return {};
    auto it = obj.find(std::string(key) + std::string(suffix));
    if (it == obj.end() || it->is_null()) return {};
    Result<int64_t> v = ParseScaledJson(*it, scale);
    if (!v) return std::unexpected(v.error());
    *field = *v;
    return {};
  };
  for (auto [key, field] : {std::pair{keys.input, &out->input},
                            std::pair{keys.cached_input, &out->cached_input},
                            std::pair{keys.cache_write_5m, &out->cache_write_5m},
                            std::pair{keys.cache_write_1h, &out->cache_write_1h},
                            std::pair{keys.output, &out->output},
                            std::pair{keys.cache_write_no_ttl, &out->cache_write_no_ttl}}) {
    if (Status s = read(key, field); !s) return s;
  }
  return {};
}

Rates ResolveBase(const PartialRates& p) {
  Rates r;
  r.input = *p.input;
  r.output = *p.output;
  r.cached_input = p.cached_input.value_or(r.input);
  r.cache_write_5m = p.cache_write_5m.value_or(r.input);
  r.cache_write_1h = p.cache_write_1h.value_or(r.cache_write_5m);
  r.cache_write_no_ttl = p.cache_write_no_ttl.value_or(r.cache_write_5m);
  return r;
}

Rates ResolveTier(const PartialRates& p, const Rates& base) {
  Rates r;
  r.input = p.input.value_or(base.input);
  r.output = p.output.value_or(base.output);
  r.cached_input = p.cached_input.value_or(base.cached_input);
  r.cache_write_5m = p.cache_write_5m.value_or(base.cache_write_5m);
  r.cache_write_1h = p.cache_write_1h.value_or(base.cache_write_1h);
  // A tier that prices 5-minute writes prices writes without a TTL alike, unless it says.
  r.cache_write_no_ttl = p.cache_write_no_ttl.value_or(
      p.cache_write_5m.has_value() ? r.cache_write_5m : base.cache_write_no_ttl);
  return r;
}

Result<std::optional<Price>> ParseKvgateEntry(const json& entry) {
  PartialRates base;
  if (Status s = ReadRates(entry, kKvgateKeys, "", 6, &base); !s) return std::unexpected(s.error());
  if (!base.input || !base.output) {
    return MakeError(ErrorCode::kInvalidArgument, "\"input\" and \"output\" prices are required");
  }
  Price price;
  price.base = ResolveBase(base);
  price.above = price.base;
  auto tier = entry.find("tier");
  if (tier != entry.end() && !tier->is_null()) {
    if (!tier->is_object()) return MakeError(ErrorCode::kInvalidArgument, "\"tier\" must be an object");
    auto threshold = tier->find("threshold_tokens");
    if (threshold == tier->end() || !threshold->is_number_integer() ||
        threshold->get<int64_t>() <= 0) {
      return MakeError(ErrorCode::kInvalidArgument, "tier needs a positive integer threshold_tokens");
    }
    PartialRates above;
    if (Status s = ReadRates(*tier, kKvgateKeys, "", 6, &above); !s) return std::unexpected(s.error());
    price.tier_threshold_tokens = threshold->get<int64_t>();
    price.above = ResolveTier(above, price.base);
  }
  return std::optional<Price>(price);
}

// The smallest N of any "<LiteLLM rate key>_above_<N>k_tokens" key, as tokens.
std::optional<int64_t> LiteLlmTierThreshold(const json& entry) {
  std::optional<int64_t> best;
  for (const auto& [key, value] : entry.items()) {
    const std::string_view k = key;
    constexpr std::string_view kTail = "k_tokens";
    const size_t above = k.rfind("_above_");
    if (above == std::string_view::npos || !k.ends_with(kTail)) continue;
    const std::string_view base = k.substr(0, above);
    if (base != kLiteLlmKeys.input && base != kLiteLlmKeys.cached_input &&
        base != kLiteLlmKeys.cache_write_5m && base != kLiteLlmKeys.cache_write_1h &&
        base != kLiteLlmKeys.output) {
      continue;
    }
    const std::string_view number = k.substr(above + 7, k.size() - above - 7 - kTail.size());
    int64_t n = 0;
    auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc() || ptr != number.data() + number.size() || n <= 0 || n > 1'000'000'000) {
      continue;
    }
    if (!best || n * 1000 < *best) best = n * 1000;
  }
  return best;
}

Result<std::optional<Price>> ParseLiteLlmEntry(const json& entry) {
  PartialRates base;
  if (Status s = ReadRates(entry, kLiteLlmKeys, "", 12, &base); !s) return std::unexpected(s.error());
  if (!base.input || !base.output) return std::optional<Price>();  // not a token-priced model
  Price price;
  price.base = ResolveBase(base);
  price.above = price.base;
  if (std::optional<int64_t> threshold = LiteLlmTierThreshold(entry)) {
    const std::string suffix = "_above_" + std::to_string(*threshold / 1000) + "k_tokens";
    PartialRates above;
    if (Status s = ReadRates(entry, kLiteLlmKeys, suffix, 12, &above); !s) {
      return std::unexpected(s.error());
    }
    price.tier_threshold_tokens = threshold;
    price.above = ResolveTier(above, price.base);
  }
  return std::optional<Price>(price);
}

bool LooksLikeLiteLlm(const json& entry) {
  for (const auto& [key, value] : entry.items()) {
    if (key.find("cost") != std::string::npos) return true;
  }
  return false;
}

// Exact name, then the longest prefix of `name` ending right before a '-', then the same for the
// part after the last '/'.
template <class V>
const V* LookupModel(const std::map<std::string, V, std::less<>>& map, std::string_view name) {
  auto try_name = [&](std::string_view n) -> const V* {
    if (auto it = map.find(n); it != map.end()) return &it->second;
    for (size_t pos = n.rfind('-'); pos != std::string_view::npos && pos > 0; pos = n.rfind('-', pos - 1)) {
      if (auto it = map.find(n.substr(0, pos)); it != map.end()) return &it->second;
    }
    return nullptr;
  };
  if (const V* v = try_name(name)) return v;
  if (size_t slash = name.rfind('/'); slash != std::string_view::npos) return try_name(name.substr(slash + 1));
  return nullptr;
}

// A non-negative JSON integer, or nullopt for null/absent when `nullable`.
Result<std::optional<int64_t>> ReadCount(const json& obj, std::string_view key, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return MakeError(ErrorCode::kInvalidArgument, StrCat("missing \"", key, "\""));
    return std::optional<int64_t>();
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return MakeError(ErrorCode::kInvalidArgument, StrCat("\"", key, "\" must be a non-negative integer"));
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

Result<CachingRule> ParseCachingRule(const json& obj) {
  if (!obj.is_object()) return MakeError(ErrorCode::kInvalidArgument, "a caching rule must be an object");
  CachingRule rule;
  auto min = ReadCount(obj, "min_cacheable_tokens", true);
  if (!min) return std::unexpected(min.error());
  rule.min_cacheable_tokens = **min;
  auto granularity = ReadCount(obj, "granularity_tokens", false);
  if (!granularity) return std::unexpected(granularity.error());
  rule.granularity_tokens = granularity->value_or(1);
  if (rule.granularity_tokens < 1) {
    return MakeError(ErrorCode::kInvalidArgument, "\"granularity_tokens\" must be at least 1");
  }
  auto ttl = ReadCount(obj, "ttl_seconds", false);
  if (!ttl) return std::unexpected(ttl.error());
  rule.ttl_seconds = *ttl;
  auto max_ttl = ReadCount(obj, "max_ttl_seconds", false);
  if (!max_ttl) return std::unexpected(max_ttl.error());
  rule.max_ttl_seconds = *max_ttl;
  if (auto automatic = obj.find("automatic"); automatic != obj.end() && !automatic->is_null()) {
    if (!automatic->is_boolean()) return MakeError(ErrorCode::kInvalidArgument, "\"automatic\" must be a boolean");
    rule.automatic = automatic->get<bool>();
  }
  auto models = obj.find("model_min_cacheable_tokens");
  if (models != obj.end() && !models->is_null()) {
    if (!models->is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "\"model_min_cacheable_tokens\" must be an object");
    }
    for (const auto& [model, n] : models->items()) {
      if (!n.is_number_integer() || n.get<int64_t>() < 0) {
        return MakeError(ErrorCode::kInvalidArgument, "minimum for \"" + model + "\" must be a non-negative integer");
      }
      rule.model_min_cacheable_tokens[model] = n.get<int64_t>();
    }
  }
  return rule;
}

// tokens x rate, or nullopt when tokens are unknown or the product overflows.
std::optional<int64_t> Price1(std::optional<int64_t> tokens, int64_t rate) {
  int64_t out = 0;
  if (!tokens.has_value() || !CheckedMul(*tokens, rate, &out)) return std::nullopt;
  return out;
}

}  // namespace

Result<int64_t> ParseMicroUsdPerMillion(const nlohmann::json& value) { return ParseScaledJson(value, 6); }

Result<int64_t> ParseMicroUsdPerMillionFromPerToken(const nlohmann::json& value) {
  return ParseScaledJson(value, 12);
}

Cost ComputeCost(const Usage& usage, const Price& price) {
  Cost cost;
  cost.priced = true;
  cost.complete = true;
  const Rates* rates = &price.base;
  if (price.tier_threshold_tokens.has_value()) {
    std::optional<int64_t> total = usage.TotalInput();
    if (!total.has_value()) total = usage.reported_input;
    if (!total.has_value()) {
      cost.complete = false;
    } else if (*total > *price.tier_threshold_tokens) {
      rates = &price.above;
    }
  }
  // Adds a known component to *sum; an unknown one (or an overflow) makes the cost incomplete.
  auto add = [&](std::optional<int64_t> part, int64_t* sum) {
    if (!part.has_value() || !CheckedAdd(*sum, *part, sum)) cost.complete = false;
  };
  // What `tokens` would have cost at the uncached rate, minus what they cost.
  auto add_saving = [&](std::optional<int64_t> tokens, std::optional<int64_t> actual) {
    std::optional<int64_t> at_input = Price1(tokens, rates->input);
    int64_t diff = 0;
    if (!at_input || !actual || __builtin_sub_overflow(*at_input, *actual, &diff) ||
        !CheckedAdd(cost.saved, diff, &cost.saved)) {
      cost.complete = false;
    }
  };

  const std::optional<int64_t> read = Price1(usage.cache_read, rates->cached_input);
  const std::optional<int64_t> write_5m = Price1(usage.cache_write_5m, rates->cache_write_5m);
  const std::optional<int64_t> write_1h = Price1(usage.cache_write_1h, rates->cache_write_1h);
  const std::optional<int64_t> write_no_ttl =
      Price1(usage.cache_write_no_ttl, rates->cache_write_no_ttl);
  const std::optional<int64_t> uncached = Price1(usage.uncached, rates->input);
  const std::optional<int64_t> output = Price1(usage.output, rates->output);
  add(read, &cost.cache_read);
  add(write_5m, &cost.cache_write);
  add(write_1h, &cost.cache_write);
  add(write_no_ttl, &cost.cache_write);
  add(uncached, &cost.uncached);
  add(output, &cost.output);
  add_saving(usage.cache_read, read);
  add_saving(usage.cache_write_5m, write_5m);
  add_saving(usage.cache_write_1h, write_1h);
  add_saving(usage.cache_write_no_ttl, write_no_ttl);
  // Uncached tokens cost the input rate either way: they save nothing.
  for (int64_t part : {cost.cache_read, cost.cache_write, cost.uncached, cost.output}) {
    if (!CheckedAdd(cost.total, part, &cost.total)) cost.complete = false;
  }
  return cost;
}

int64_t MissCost(int64_t missed_tokens, const Usage& usage, const Price& price) {
  const Rates* rates = &price.base;
  if (price.tier_threshold_tokens.has_value()) {
    const std::optional<int64_t> total = usage.TotalInput() ? usage.TotalInput()
                                                            : usage.reported_input;
    if (total.has_value() && *total > *price.tier_threshold_tokens) rates = &price.above;
  }
  int64_t out = 0;
  if (missed_tokens <= 0 || rates->input <= rates->cached_input ||
      !CheckedMul(missed_tokens, rates->input - rates->cached_input, &out)) {
    return 0;
  }
  return out;
}

Cost ComputeCost(const Usage& usage, const PriceCatalog& catalog, std::string_view model) {
  if (std::optional<Price> price = catalog.Find(model)) return ComputeCost(usage, *price);
  Cost cost;
  cost.priced = false;
  cost.complete = false;
  return cost;
}

double PicoUsdToUsd(int64_t pico) {
  return static_cast<double>(pico / kPicoPerUsd) +
         static_cast<double>(pico % kPicoPerUsd) / static_cast<double>(kPicoPerUsd);
}

int64_t CachingRule::MinCacheableTokensFor(std::string_view model) const {
  if (const int64_t* n = LookupModel(model_min_cacheable_tokens, model)) return *n;
  return min_cacheable_tokens;
}

PriceCatalog PriceCatalog::BuiltIn() {
  PriceCatalog catalog;
  // The embedded file is checked by tests; a parse failure here would leave the catalog empty
  // rather than crash a running gateway.
  json doc = json::parse(internal::kBuiltInCatalogJson, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return catalog;
  if (auto it = doc.find("models"); it != doc.end()) (void)catalog.MergeJson(*it);
  if (auto it = doc.find("caching"); it != doc.end()) (void)catalog.MergeCachingRules(*it);
  return catalog;
}

Status PriceCatalog::MergeJson(const nlohmann::json& catalog) {
  try {
    if (!catalog.is_object()) {
      return MakeError(ErrorCode::kInvalidArgument, "a price catalog must be a JSON object");
    }
    std::map<std::string, Price, std::less<>> parsed;
    std::map<std::string, int64_t, std::less<>> windows;
    for (const auto& [model, entry] : catalog.items()) {
      if (!entry.is_object()) {
        return MakeError(ErrorCode::kInvalidArgument, "price entry \"" + model + "\" is not an object");
      }
      Result<std::optional<Price>> price =
          LooksLikeLiteLlm(entry) ? ParseLiteLlmEntry(entry) : ParseKvgateEntry(entry);
      if (!price) {
        return MakeError(ErrorCode::kInvalidArgument, "model \"" + model + "\": " + price.error().message);
      }
      if (price->has_value()) parsed[model] = **price;
      // kvgate's "context_window", or LiteLLM's "max_input_tokens".
      for (const char* key : {"context_window", "max_input_tokens"}) {
        Result<std::optional<int64_t>> window = ReadCount(entry, key, false);
        if (!window) {
          return MakeError(ErrorCode::kInvalidArgument, "model \"" + model + "\": " + window.error().message);
        }
        if (*window && **window > 0) {
          windows[model] = **window;
          break;
        }
      }
    }
    for (auto& [model, price] : parsed) prices_[model] = std::move(price);
    for (auto& [model, window] : windows) context_windows_[model] = window;
    return {};
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInvalidArgument, std::string("price catalog: ") + e.what());
  }
}

void PriceCatalog::Set(std::string model, Price price) { prices_[std::move(model)] = std::move(price); }

std::optional<Price> PriceCatalog::Find(std::string_view model) const {
  if (const Price* p = LookupModel(prices_, model)) return *p;
  return std::nullopt;
}

std::optional<int64_t> PriceCatalog::ContextWindow(std::string_view model) const {
  if (const int64_t* n = LookupModel(context_windows_, model)) return *n;
  return std::nullopt;
}

Status PriceCatalog::MergeCachingRules(const nlohmann::json& rules) {
  try {
    if (!rules.is_object()) return MakeError(ErrorCode::kInvalidArgument, "caching rules must be an object");
    std::map<std::string, CachingRule, std::less<>> parsed;
    for (const auto& [provider_type, obj] : rules.items()) {
      Result<CachingRule> rule = ParseCachingRule(obj);
      if (!rule) {
        return MakeError(ErrorCode::kInvalidArgument,
                         "caching rule \"" + provider_type + "\": " + rule.error().message);
      }
      parsed[provider_type] = std::move(*rule);
    }
    for (auto& [name, rule] : parsed) caching_rules_[name] = std::move(rule);
    return {};
  } catch (const std::exception& e) {
    return MakeError(ErrorCode::kInvalidArgument, std::string("caching rules: ") + e.what());
  }
}

std::optional<CachingRule> PriceCatalog::FindCachingRule(std::string_view provider_type) const {
  if (auto it = caching_rules_.find(provider_type); it != caching_rules_.end()) return it->second;
  return std::nullopt;
}

}  // namespace kvgate::telemetry
