#include "telemetry/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <utility>

#include "telemetry/pricing.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvgate::telemetry {
namespace {

// A 64-bit finalizer (MurmurHash3's fmix64) so that nearby inputs spread.
uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

uint64_t HashBytes(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

uint64_t CombinePrefix(uint64_t previous, uint64_t element_hash, FingerprintElement::Kind kind,
                       uint64_t length) {
  return Fmix64(previous * 0x9e3779b97f4a7c15ULL + element_hash + (uint64_t(kind) + 1) * 31 +
                (length << 3));
}


// `value` minified, without its cache_control members at any depth: a breakpoint marks where a
// provider may cache, it is not part of the prompt's tokens, and clients move it every turn (to
// the newest message), which must not read as a change of the message it left.
void AppendElementBytes(raw_json::Value value, std::string& out) {
  if (value.text.find("\"cache_control\"") == std::string_view::npos) {
    raw_json::AppendMinified(value, out);
    return;
  }
  if (value.is_object()) {
    out += '{';
    bool first = true;
    raw_json::ForEachMember(value, [&](const raw_json::Member& m) {
      if (m.KeyIs("cache_control")) return;
      if (!first) out += ',';
      first = false;
      out += '"';
      out += m.key;
      out += "\":";
      AppendElementBytes(m.value, out);
    });
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    raw_json::ForEachElement(value, [&](raw_json::Value element) {
      if (!first) out += ',';
      first = false;
      AppendElementBytes(element, out);
    });
    out += ']';
  } else {
    raw_json::AppendMinified(value, out);
  }
}

// A plain JSON string's text without its quotes; "" for anything else (roles and item types are
// short ASCII words: an escaped one is not worth decoding).
std::string_view PlainString(const std::optional<raw_json::Value>& value) {
  if (!value || !value->is_string() || value->text.size() < 2 ||
      value->text.find('\\') != std::string_view::npos) {
    return {};
  }
  return value->text.substr(1, value->text.size() - 2);
}

// A message's role; a Responses API item without one is a tool's output or the model's call.
std::string MessageRole(raw_json::Value message) {
  if (message.is_string()) return "user";  // a Responses string input
  if (!message.is_object()) return "";
  std::string_view role = PlainString(raw_json::Find(message, "role"));
  if (!role.empty()) return std::string(role.substr(0, 32));
  const std::string_view type = PlainString(raw_json::Find(message, "type"));
  if (type.ends_with("_call_output")) return "tool";
  if (type.ends_with("_call") || type == "reasoning") return "assistant";
  return "";
}

void AddElement(PromptFingerprint& fp, FingerprintElement::Kind kind, int message_index,
                raw_json::Value value, std::string& text) {
  text.clear();
  AppendPromptBytes(value, text);
  FingerprintElement e;
  e.kind = kind;
  e.message_index = message_index;
  if (kind == FingerprintElement::Kind::kMessage) {
    e.role = MessageRole(value);
    e.system_role = e.role == "system" || e.role == "developer";
  }
  e.length = text.size();
  e.chunks.reserve((text.size() + kFingerprintChunkBytes - 1) / kFingerprintChunkBytes);
  for (size_t off = 0; off < text.size(); off += kFingerprintChunkBytes) {
    const std::string_view chunk = std::string_view(text).substr(off, kFingerprintChunkBytes);
    e.chunks.push_back(uint32_t(HashBytes(chunk) >> 32));
  }
  const uint64_t previous = fp.elements.empty() ? 0 : fp.elements.back().prefix_hash;
  e.prefix_hash = CombinePrefix(previous, HashBytes(text), kind, e.length);
  fp.elements.push_back(std::move(e));
}


// Cache hits come in whole granularity steps, and nothing below the minimum is cached.
int64_t Cacheable(int64_t tokens, const CacheRules& rules) {
  if (tokens <= 0 || tokens < rules.min_tokens) return 0;
  const int64_t g = std::max<int64_t>(1, rules.granularity);
  return tokens / g * g;
}

}  // namespace

std::string_view ElementKindName(FingerprintElement::Kind kind) {
  switch (kind) {
    case FingerprintElement::Kind::kTools:
      return "tools";
    case FingerprintElement::Kind::kSystem:
      return "system";
    case FingerprintElement::Kind::kMessage:
      return "message";
  }
  return "message";
}

void AppendPromptBytes(raw_json::Value value, std::string& out) { AppendElementBytes(value, out); }

uint64_t PromptFingerprint::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& e : elements) total += e.length;
  return total;
}

void ForEachPromptElement(
    const raw_json::Object& body,
    const std::function<void(FingerprintElement::Kind, int, raw_json::Value)>& fn) {
  if (auto v = body.Find("tools"); v && !v->is_null()) fn(FingerprintElement::Kind::kTools, -1, *v);
  // The Responses API's system text is `instructions`.
  std::optional<raw_json::Value> system = body.Find("system");
  if (!system || system->is_null()) system = body.Find("instructions");
  if (system && !system->is_null()) fn(FingerprintElement::Kind::kSystem, -1, *system);
  std::optional<raw_json::Value> messages = body.Find("messages");
  if (!messages || !messages->is_array()) messages = body.Find("input");  // Responses API
  if (messages && messages->is_array()) {
    int index = 0;
    raw_json::ForEachElement(*messages, [&](raw_json::Value message) {
      fn(FingerprintElement::Kind::kMessage, index++, message);
    });
  } else if (messages && messages->is_string()) {
    fn(FingerprintElement::Kind::kMessage, 0, *messages);  // one user message
  }
}

PromptFingerprint Fingerprint(const raw_json::Object& body) {
  PromptFingerprint fp;
  std::string text;  // one buffer for every element's minified bytes
  ForEachPromptElement(body, [&](FingerprintElement::Kind kind, int index, raw_json::Value value) {
    AddElement(fp, kind, index, value, text);
  });
  return fp;
}

PrefixComparison ComparePrefixes(const PromptFingerprint& previous,
                                 const PromptFingerprint& current) {
  PrefixComparison out;
  const auto& p = previous.elements;
  const auto& c = current.elements;
  size_t i = 0;
  while (i < p.size() && i < c.size() && p[i].prefix_hash == c[i].prefix_hash) {
    out.common_bytes += c[i].length;
    ++i;
  }
  out.common_elements = i;
  out.previous_intact = i == p.size();
  if (out.previous_intact || i >= c.size()) return out;
  const FingerprintElement& pe = p[i];
  const FingerprintElement& ce = c[i];
  out.diverged_kind = ce.kind;
  out.diverged_message_index = ce.message_index;
  out.diverged_system_role = ce.system_role;
  if (pe.kind != ce.kind) return out;  // a different element altogether: offset 0
  size_t k = 0;
  while (k < pe.chunks.size() && k < ce.chunks.size() && pe.chunks[k] == ce.chunks[k]) ++k;
  // Chunks are aligned from the element's start, so the first unequal chunk (or the end of the
  // shorter element) bounds the first differing byte.
  const uint64_t offset =
      std::min<uint64_t>(uint64_t(k) * kFingerprintChunkBytes, std::min(pe.length, ce.length));
  out.diverged_char_offset = offset;
  out.common_bytes += offset;
  return out;
}

nlohmann::json Diagnosis::ToJson() const {
  nlohmann::json j = {{"cause", cause},
                      {"detail", detail},
                      {"expected_cached", expected_cached},
                      {"cached", cached},
                      {"idle_seconds", idle_seconds}};
  if (message_index) j["message_index"] = *message_index;
  if (system_message) j["system_message"] = true;
  if (element) j["element"] = *element;
  if (char_offset) j["char_offset"] = *char_offset;
  if (lost_tokens) j["lost_tokens"] = *lost_tokens;
  if (previous_model) j["previous_model"] = *previous_model;
  if (previous_provider) j["previous_provider"] = *previous_provider;
  if (router) j["router"] = *router;
  if (min_tokens) j["min_tokens"] = *min_tokens;
  if (ttl_seconds) j["ttl_seconds"] = *ttl_seconds;
  if (role) j["role"] = *role;
  if (message_number) j["message_number"] = *message_number;
  if (excerpt) {
    nlohmann::json& x = j["excerpt"] = nlohmann::json::object();
    if (excerpt->before) x["before"] = *excerpt->before;
    if (excerpt->after) x["after"] = *excerpt->after;
    if (excerpt->beyond_kept) x["beyond_kept"] = true;
  }
  if (volatile_prefix) {
    j["volatile"] = true;
    j["turns_changed"] = turns_changed;
    j["lost_usd"] = PicoUsdToUsd(lost);
  }
  return j;
}

int64_t Diagnosis::MissedTokens() const {
  if (cause == "below_minimum") return 0;
  return std::max<int64_t>(0, expected_cached - cached);
}

std::optional<bool> ProviderDiagnosisAgrees(const nlohmann::json& kvgate_diagnosis,
                                            std::string_view provider_reason) {
  const std::string cause =
      kvgate_diagnosis.is_object() ? kvgate_diagnosis.value("cause", std::string()) : std::string();
  const std::string element =
      kvgate_diagnosis.is_object() ? kvgate_diagnosis.value("element", std::string()) : std::string();
  const bool structural = cause == "prompt_changed" || cause == "model_switch" ||
                          cause == "routed_away";
  // A system or developer message of a chat body is the provider's system prompt.
  const bool system_message = kvgate_diagnosis.is_object() &&
                              kvgate_diagnosis.value("system_message", false);
  const std::string changed =
      element == "message" && system_message ? std::string("system") : element;
  if (provider_reason == "none") return !structural;
  if (provider_reason == "model_changed") return cause == "model_switch" || cause == "routed_away";
  for (auto [reason, part] : {std::pair{"system_changed", "system"}, {"tools_changed", "tools"},
                              {"messages_changed", "message"}}) {
    if (provider_reason == reason) return cause == "prompt_changed" && changed == part;
  }
  return std::nullopt;
}

TurnSummary TurnSummary::Of(const RequestRecord& r,
                            std::shared_ptr<const PromptFingerprint> fingerprint) {
  TurnSummary t;
  t.model = r.model;
  t.target = r.target.empty() ? r.model : r.target;
  t.provider = r.provider;
  t.key = r.key_index;
  t.system_fingerprint = r.system_fingerprint;
  t.response_id = r.response_id;
  t.created_at_us = r.created_at_us;
  t.fingerprint = std::move(fingerprint);
  t.cache_read = r.usage.cache_read;
  t.cache_write = r.usage.CacheWrite();
  t.total_input = r.usage.TotalInput();
  t.output = r.usage.output;
  t.wrote_1h = r.usage.cache_write_1h.value_or(0) > 0;
  return t;
}

std::optional<CacheExpectation> ExpectCached(const TurnSummary& last,
                                             const PromptFingerprint& current,
                                             std::optional<int64_t> current_input_tokens,
                                             const CacheRules& rules, int64_t now_us) {
  if (!last.total_input || !last.fingerprint) return std::nullopt;
  CacheExpectation e;
  e.comparison = ComparePrefixes(*last.fingerprint, current);
  const int64_t last_tokens = *last.total_input;
  if (e.comparison.previous_intact) {
    e.shared_tokens = last_tokens;
  } else {
    // Bytes of minified JSON -> tokens at the last prompt's own ratio.
    const uint64_t last_bytes = std::max<uint64_t>(1, last.fingerprint->TotalBytes());
    e.shared_tokens = static_cast<int64_t>(
        static_cast<double>(e.comparison.common_bytes) * static_cast<double>(last_tokens) /
        static_cast<double>(last_bytes));
    e.shared_tokens = std::min(e.shared_tokens, last_tokens);
  }
  if (rules.automatic) {
    e.left_cached = last_tokens;
  } else if (last.cache_read && last.cache_write) {
    e.left_cached = *last.cache_read + *last.cache_write;
  } else {
    return std::nullopt;
  }
  int64_t usable = std::min(e.left_cached, e.shared_tokens);
  // With breakpoints only whole cached prefixes are read: a prompt that diverged before the end
  // of what was written can still read the shorter prefix the last turn read (an earlier
  // breakpoint), else nothing.
  if (!rules.automatic && usable < e.left_cached) {
    usable = last.cache_read && *last.cache_read <= e.shared_tokens ? *last.cache_read : 0;
  }
  if (current_input_tokens) usable = std::min(usable, *current_input_tokens);
  e.tokens = Cacheable(usable, rules);
  e.idle_seconds = double(now_us - std::max(last.created_at_us, last.renewed_at_us)) / 1e6;
  e.ttl_seconds = rules.ttl_seconds;
  if (e.ttl_seconds && last.wrote_1h) {
    e.ttl_seconds = std::max<int64_t>(*e.ttl_seconds, rules.long_ttl_seconds);
  }
  e.expired = e.ttl_seconds && e.idle_seconds >= double(*e.ttl_seconds);
  return e;
}

namespace {

// Sets where a prompt changed on `d`: its element, role and position.
void SetChangedElement(const PrefixComparison& cmp, const FingerprintElement& changed,
                       Diagnosis& d) {
  d.element = std::string(ElementKindName(*cmp.diverged_kind));
  d.char_offset = cmp.diverged_char_offset;
  switch (*cmp.diverged_kind) {
    case FingerprintElement::Kind::kTools:
      d.role = "tools";
      break;
    case FingerprintElement::Kind::kSystem:
      d.role = "system";
      break;
    case FingerprintElement::Kind::kMessage:
      d.message_index = cmp.diverged_message_index;
      d.message_number = cmp.diverged_message_index + 1;
      d.system_message = cmp.diverged_system_role;
      if (!changed.role.empty()) {
        d.role = changed.role;
      } else if (changed.system_role) {
        d.role = "system";  // a stored fingerprint from before roles were kept
      }
      break;
  }
}

// 1920 -> "1,920".
std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// pico-USD as "$0.0123" (cents and up: "$1.25").
std::string Dollars(int64_t pico) {
  const double usd = PicoUsdToUsd(pico);
  char buf[48];
  std::snprintf(buf, sizeof(buf), usd >= 0.995 ? "$%.2f" : "$%.4f", usd);
  return buf;
}

// "the system prompt", "message 4 (user)", "the tools": where a prompt changed, in words.
std::string ChangedElementName(const Diagnosis& d) {
  if (d.element == "tools") return "the tools";
  if (d.element == "system") return "the system prompt";
  const std::string number = std::to_string(d.message_number.value_or(0));
  if (d.role == "system" || d.role == "developer") return "the system prompt (message " + number + ")";
  if (d.role) return "message " + number + " (" + *d.role + ")";
  return "message " + number;
}

}  // namespace

std::optional<Diagnosis> DiagnoseTurn(const TurnSummary& prev, const TurnSummary& cur,
                                      const CacheRules& rules, const TurnContext& context) {
  if (!cur.cache_read || !cur.total_input || !prev.fingerprint || !cur.fingerprint) {
    return std::nullopt;
  }
  const std::optional<CacheExpectation> expectation =
      ExpectCached(prev, *cur.fingerprint, cur.total_input, rules, cur.created_at_us);
  if (!expectation) return std::nullopt;
  const CacheExpectation& e = *expectation;
  const PrefixComparison& cmp = e.comparison;
  const int64_t cached = *cur.cache_read;
  const int64_t full = e.tokens;
  const int64_t tolerance = std::max<int64_t>(std::max<int64_t>(1, rules.granularity), full / 50);
  const bool dropped = full > 0 && cached + tolerance < full;

  Diagnosis d;
  d.expected_cached = full;
  d.cached = cached;
  d.idle_seconds = e.idle_seconds;
  char buf[128];

  if (dropped) {
    if (cur.target != prev.target || cur.provider != prev.provider) {
      d.previous_model = prev.target;
      d.previous_provider = prev.provider;
      if (!context.router.empty()) {
        d.cause = "routed_away";
        d.router = context.router;
        d.detail = "router " + context.router + " moved this thread from " + prev.target +
                   " to " + cur.target + "; prompt caches are per model";
        if (!context.route_reason.empty()) d.detail += " (" + context.route_reason + ")";
      } else {
        d.cause = "model_switch";
        d.detail = "this turn went to " + cur.target + " via " + cur.provider +
                   ", the previous one to " + prev.target + " via " + prev.provider +
                   "; prompt caches are per model";
      }
      return d;
    }
    if (!rules.ttl_seconds && !prev.system_fingerprint.empty() &&
        !cur.system_fingerprint.empty() && prev.system_fingerprint != cur.system_fingerprint) {
      d.cause = "engine_restarted";
      d.detail = "the engine behind " + cur.target + " restarted since the previous turn (" +
                 prev.system_fingerprint + " -> " + cur.system_fingerprint +
                 ") and lost its cache";
      return d;
    }
    const bool reads_gone =
        cached < std::max<int64_t>(std::max<int64_t>(1, rules.granularity), full / 20);
    d.ttl_seconds = e.ttl_seconds;
    if (reads_gone && e.expired) {
      d.cause = "expired";
      std::snprintf(buf, sizeof(buf), "%.0f s idle, at or above the cache TTL of %lld s",
                    d.idle_seconds, static_cast<long long>(*e.ttl_seconds));
      d.detail = std::string("the cache had expired: ") + buf;
      return d;
    }
    d.cause = "partial_eviction";
    d.detail = "only " + std::to_string(cached) + " of the " + std::to_string(full) +
               " tokens this prompt shares with the previous turn were read from the cache";
    if (reads_gone) d.detail += e.ttl_seconds ? " (evicted before the TTL)" : " (evicted)";
    return d;
  }
  if (rules.min_tokens > 0 && *cur.total_input < rules.min_tokens && cached == 0 &&
      cmp.common_elements > 0) {
    d.cause = "below_minimum";
    d.min_tokens = rules.min_tokens;
    d.detail = "the prompt has " + std::to_string(*cur.total_input) +
               " input tokens, below this provider's minimum cacheable length of " +
               std::to_string(rules.min_tokens);
    return d;
  }
  // Reads were what the shared prefix allows. Say so only when the client changed the prompt
  // before the previous turn's last element (an edited history, a new system prompt, other
  // tools) and that cost cached reads: replacing the last message is how regenerations and
  // edits of the latest question work, and costs only that message.
  if (cmp.previous_intact || !cmp.diverged_kind) return std::nullopt;
  const size_t last_element = prev.fingerprint->elements.size() - 1;
  if (cmp.common_elements >= last_element) return std::nullopt;
  const int64_t could_have = Cacheable(std::min(e.left_cached, *cur.total_input), rules);
  const int64_t lost = could_have - std::max(cached, full);
  if (lost <= tolerance) return std::nullopt;
  d.cause = "prompt_changed";
  d.lost_tokens = lost;
  d.expected_cached = could_have;
  SetChangedElement(cmp, cur.fingerprint->elements[cmp.common_elements], d);
  d.detail = ChangedElementName(d) + " changed at character " + Grouped(cmp.diverged_char_offset) +
             " (within " + std::to_string(kFingerprintChunkBytes) + " characters), so " +
             std::to_string(lost) + " tokens the previous turn had cached could not be read";
  return d;
}

// ThreadTracker ----------------------------------------------------------------------------------

ThreadTracker::ThreadTracker(ThreadTrackerOptions options)
    : per_shard_cap_(
          std::max<size_t>(1, options.max_threads / std::max<size_t>(1, options.shards))) {
  const size_t n = std::max<size_t>(1, options.shards);
  for (size_t i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>());
}

ThreadTracker::Shard& ThreadTracker::ShardFor(const std::string& thread_id) {
  return *shards_[std::hash<std::string>{}(thread_id) % shards_.size()];
}

double ThreadView::WarmShare(double ttl_seconds) const {
  if (recent_gaps.empty()) return 1.0;
  size_t warm = 0;
  for (double g : recent_gaps) warm += g < ttl_seconds;
  return double(warm) / double(recent_gaps.size());
}

const TurnSummary* ThreadView::OnTarget(std::string_view target) const {
  for (const TurnSummary& t : by_target) {
    if (t.target == target) return &t;
  }
  return nullptr;
}

void ThreadTracker::Remember(ThreadView& view, TurnSummary turn) {
  // Running means weight recent turns (a thread's habits drift: a long paste, a new task).
  constexpr double kWeight = 0.3;
  auto blend = [&](double& mean, double value, bool first) {
    mean = first ? value : mean + kWeight * (value - mean);
  };
  if (view.latest) {  // the gaps and growth between turns start with the second turn
    if (turn.total_input && view.latest->total_input) {
      blend(view.mean_growth_tokens,
            std::max<double>(0, double(*turn.total_input - *view.latest->total_input)),
            view.turns == 1);
    }
    const double gap = double(turn.created_at_us - view.latest->created_at_us) / 1e6;
    blend(view.mean_gap_seconds, gap, view.turns == 1);
    view.recent_gaps.push_back(gap);
    if (view.recent_gaps.size() > ThreadView::kRecentGaps) {
      view.recent_gaps.erase(view.recent_gaps.begin());
    }
  }
  if (turn.output) blend(view.mean_output_tokens, double(*turn.output), view.turns == 0);
  ++view.turns;
  std::erase_if(view.by_target, [&](const TurnSummary& t) { return t.target == turn.target; });
  view.by_target.insert(view.by_target.begin(), turn);
  if (view.by_target.size() > kTargetsKept) view.by_target.resize(kTargetsKept);
  view.latest = std::move(turn);
}

void ThreadTracker::InsertLocked(Shard& shard, const std::string& thread_id, TurnSummary turn,
                                 std::shared_ptr<const PromptTexts> texts) {
  shard.probation.push_front(thread_id);
  ThreadView view;
  Remember(view, std::move(turn));
  shard.threads.emplace(thread_id, Shard::Entry{std::move(view), shard.probation.begin(), false,
                                                std::move(texts), {}});
  while (shard.threads.size() > per_shard_cap_) {
    std::list<std::string>& victims = shard.probation.empty() ? shard.lru : shard.probation;
    shard.threads.erase(victims.back());
    victims.pop_back();
  }
}

void ThreadTracker::TouchLocked(Shard& shard, Shard::Entry& entry) {
  if (entry.kept) {
    shard.lru.splice(shard.lru.begin(), shard.lru, entry.lru_pos);
    return;
  }
  if (entry.view.turns < 2) {
    shard.probation.splice(shard.probation.begin(), shard.probation, entry.lru_pos);
    return;
  }
  shard.lru.splice(shard.lru.begin(), shard.probation, entry.lru_pos);
  entry.kept = true;
  const size_t kept_cap = std::max<size_t>(1, per_shard_cap_ * 4 / 5);
  while (shard.lru.size() > kept_cap) {
    auto oldest = shard.threads.find(shard.lru.back());
    shard.probation.splice(shard.probation.begin(), shard.lru, std::prev(shard.lru.end()));
    if (oldest != shard.threads.end()) oldest->second.kept = false;
  }
}

bool ThreadTracker::Take(const RequestRecord& turn, bool newer_replaces) {
  if (turn.thread_id.empty() || !turn.prompt_fingerprint) return false;
  Shard& shard = ShardFor(turn.thread_id);
  MutexLock lock(&shard.mu);
  auto it = shard.threads.find(turn.thread_id);
  if (it == shard.threads.end()) {
    InsertLocked(shard, turn.thread_id, TurnSummary::Of(turn, turn.prompt_fingerprint), nullptr);
    return true;
  }
  // A turn this replica served is remembered already, with the same start time; an older stored
  // turn would move the thread backwards.
  if (!newer_replaces || turn.created_at_us <= it->second.view.latest->created_at_us) return false;
  Remember(it->second.view, TurnSummary::Of(turn, turn.prompt_fingerprint));
  // A stored turn carries no text, and the run of changes this replica saw is broken by a turn
  // it did not see.
  it->second.texts.reset();
  it->second.run = {};
  TouchLocked(shard, it->second);
  return true;
}

std::optional<Diagnosis> ThreadTracker::Diagnose(const RequestRecord& turn,
                                                 std::shared_ptr<const PromptFingerprint> fingerprint,
                                                 const CacheRules& rules,
                                                 const TurnContext& context) {
  if (turn.thread_id.empty()) return std::nullopt;
  TurnSummary current = TurnSummary::Of(turn, std::move(fingerprint));
  std::optional<TurnSummary> previous;
  std::shared_ptr<const PromptTexts> previous_texts;
  {
    Shard& shard = ShardFor(turn.thread_id);
    MutexLock lock(&shard.mu);
    auto it = shard.threads.find(turn.thread_id);
    if (it != shard.threads.end()) {
      previous = it->second.view.latest;
      previous_texts = std::exchange(it->second.texts, context.texts);
      Remember(it->second.view, current);
      TouchLocked(shard, it->second);
    } else {
      InsertLocked(shard, turn.thread_id, current, context.texts);
    }
  }
  // The comparison runs outside the lock: summaries are values, fingerprints and texts immutable.
  if (!previous) return std::nullopt;
  std::optional<Diagnosis> d = DiagnoseTurn(*previous, current, rules, context);
  const int64_t missed = d && context.missed_cost ? context.missed_cost(*d) : 0;
  const PrefixComparison cmp = ComparePrefixes(*previous->fingerprint, *current.fingerprint);
  const Shard::ChangeRun run = ExtendRun(turn.thread_id, cmp, missed);
  if (!d || d->cause != "prompt_changed") return d;
  d->excerpt = ExcerptAt(previous_texts.get(), context.texts.get(), cmp.common_elements);
  if (run.turns >= kVolatileTurns) {
    d->volatile_prefix = true;
    d->turns_changed = run.turns;
    d->lost = run.lost;
    d->detail = ChangedElementName(*d) + " changes at character " + Grouped(*d->char_offset) +
                " on every turn (" + std::to_string(run.turns) +
                " in a row: a timestamp, a request id or a counter?); everything after it is "
                "re-written each turn: " +
                Dollars(run.lost) + " lost over " + std::to_string(run.turns) +
                " turns; move it after the cached part";
  }
  if (d->excerpt && d->excerpt->beyond_kept) {
    d->detail += " (the text there was not kept: kvgate keeps the start of each element, " +
                 Grouped(PromptTextBounds{}.element_bytes) + " bytes at most)";
  }
  return d;
}

ThreadTracker::Shard::ChangeRun ThreadTracker::ExtendRun(const std::string& thread_id,
                                                         const PrefixComparison& cmp,
                                                         int64_t lost) {
  Shard& shard = ShardFor(thread_id);
  MutexLock lock(&shard.mu);
  auto it = shard.threads.find(thread_id);
  if (it == shard.threads.end()) return {};  // forgotten meanwhile
  Shard::ChangeRun& run = it->second.run;
  if (!cmp.diverged_kind) {
    run = {};
    return run;
  }
  const uint64_t offset = cmp.diverged_char_offset;
  const bool same_place =
      run.turns > 0 && run.kind == *cmp.diverged_kind &&
      run.message_index == cmp.diverged_message_index &&
      (offset > run.offset ? offset - run.offset : run.offset - offset) <= kVolatileOffsetSlack;
  if (same_place) {
    ++run.turns;
    run.lost += lost;
    run.offset = offset;
  } else {
    run = {*cmp.diverged_kind, cmp.diverged_message_index, offset, 1, lost};
  }
  return run;
}

ThreadView ThreadTracker::View(const std::string& thread_id) const {
  const Shard& shard = *shards_[std::hash<std::string>{}(thread_id) % shards_.size()];
  MutexLock lock(&shard.mu);
  auto it = shard.threads.find(thread_id);
  return it == shard.threads.end() ? ThreadView{} : it->second.view;
}

bool ThreadTracker::Renew(const std::string& thread_id, std::string_view target, int64_t at_us) {
  Shard& shard = ShardFor(thread_id);
  MutexLock lock(&shard.mu);
  auto it = shard.threads.find(thread_id);
  if (it == shard.threads.end()) return false;
  ThreadView& view = it->second.view;
  for (TurnSummary& t : view.by_target) {
    if (t.target == target) t.renewed_at_us = std::max(t.renewed_at_us, at_us);
  }
  if (view.latest->target == target) {
    view.latest->renewed_at_us = std::max(view.latest->renewed_at_us, at_us);
  }
  return true;
}

void ThreadTracker::Forget(const std::string& thread_id) {
  Shard& shard = ShardFor(thread_id);
  MutexLock lock(&shard.mu);
  auto it = shard.threads.find(thread_id);
  if (it == shard.threads.end()) return;
  (it->second.kept ? shard.lru : shard.probation).erase(it->second.lru_pos);
  shard.threads.erase(it);
}

size_t ThreadTracker::Size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(&shard->mu);
    n += shard->threads.size();
  }
  return n;
}

}  // namespace kvgate::telemetry
