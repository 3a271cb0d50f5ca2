// The anthropic_auto_cache helper (CacheHelpers): Anthropic caches only up to a cache_control
// breakpoint, so a client that sets none pays full price for every turn. Two breakpoints are
// what a hand-tuned client sets: the end of the system prompt (shared by every conversation of
// the app) and the end of the last message (the whole conversation so far, read back next turn).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/providers/internal.h"
#include "gateway/providers/json_splice.h"

namespace kvgate::providers::internal {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json CacheControl(std::string_view ttl) {
  ordered_json cc = {{"type", "ephemeral"}};
  if (ttl != "5m") cc["ttl"] = std::string(ttl);  // 5m is the default; 1h must be named
  return cc;
}

// Anthropic refuses a breakpoint on a thinking block and on an empty text block.
bool Cacheable(const ordered_json& block) {
  if (!block.is_object()) return false;
  const auto type = block.find("type");
  if (type == block.end() || !type->is_string()) return false;
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "thinking" || t == "redacted_thinking") return false;
  if (t == "text") {
    const auto text = block.find("text");
    return text != block.end() && text->is_string() && !text->get_ref<const std::string&>().empty();
  }
  return true;
}

// Marks the last cacheable block of `blocks` (an array); false when none is.
bool MarkLast(ordered_json& blocks, const ordered_json& cc) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (Cacheable(*it)) {
      (*it)["cache_control"] = cc;
      return true;
    }
  }
  return false;
}

std::string Encode(const ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The new `system` value, or nullopt to leave it alone. A string becomes one text block (its
// bytes, escapes and all, kept as the block's text).
std::optional<std::string> MarkedSystem(raw_json::Value system, const ordered_json& cc) {
  if (system.is_string()) {
    if (system.text.size() <= 2) return std::nullopt;  // ""
    std::string out = R"([{"type":"text","text":)";
    out += system.text;
    out += R"(,"cache_control":)";
    out += Encode(cc);
    out += "}]";
    return out;
  }
  if (!system.is_array()) return std::nullopt;
  ordered_json blocks = ordered_json::parse(system.text);
  if (!MarkLast(blocks, cc)) return std::nullopt;
  return Encode(blocks);
}

// The new `messages` value: only its last element is re-encoded, the others keep their bytes.
std::optional<std::string> MarkedMessages(raw_json::Value messages, const ordered_json& cc) {
  if (!messages.is_array()) return std::nullopt;
  const std::vector<raw_json::Value> elements = raw_json::Elements(messages);
  if (elements.empty() || !elements.back().is_object()) return std::nullopt;
  const raw_json::Value last = elements.back();
  ordered_json message = ordered_json::parse(last.text);
  auto content = message.find("content");
  if (content == message.end()) return std::nullopt;
  if (content->is_string()) {
    if (content->get_ref<const std::string&>().empty()) return std::nullopt;
    *content = ordered_json::array({{{"type", "text"}, {"text", *content}, {"cache_control", cc}}});
  } else if (!content->is_array() || !MarkLast(*content, cc)) {
    return std::nullopt;
  }
  const size_t start = static_cast<size_t>(last.text.data() - messages.text.data());
  std::string out(messages.text.substr(0, start));
  out += Encode(message);
  out += messages.text.substr(start + last.text.size());
  return out;
}

// LengthenCacheWrites' walk over one top-level value: the breakpoints found (to be made 1h),
// or a TTL the client named (the whole body is then left alone).
struct Breakpoints {
  std::vector<ordered_json*> unnamed;
  bool named_ttl = false;
};

void CollectBreakpoint(ordered_json& block, Breakpoints& found) {
  if (!block.is_object()) return;
  auto cc = block.find("cache_control");
  if (cc == block.end() || !cc->is_object()) return;
  if (cc->contains("ttl")) {
    found.named_ttl = true;
    return;
  }
  found.unnamed.push_back(&*cc);
}

void CollectBlocks(ordered_json& blocks, Breakpoints& found) {
  if (!blocks.is_array()) return;
  for (ordered_json& block : blocks) {
    CollectBreakpoint(block, found);
    // A tool result's own content blocks may carry breakpoints too.
    if (block.is_object()) {
      if (auto inner = block.find("content"); inner != block.end()) CollectBlocks(*inner, found);
    }
  }
}

}  // namespace

std::optional<std::string> LengthenCacheWrites(std::string_view messages_body) {
  if (messages_body.find("\"cache_control\"") == std::string_view::npos) return std::nullopt;
  Result<raw_json::Value> body = raw_json::Parse(messages_body);
  if (!body || !body->is_object()) return std::nullopt;
  // Each top-level value with a breakpoint, parsed, and the breakpoints in it.
  std::vector<std::pair<std::string, ordered_json>> values;
  Breakpoints found;
  for (const raw_json::Member& m : raw_json::Members(*body)) {
    const bool tools = m.KeyIs("tools"), system = m.KeyIs("system"), messages = m.KeyIs("messages");
    if (!(tools || system || messages)) continue;
    if (m.value.text.find("\"cache_control\"") == std::string_view::npos) continue;
    ordered_json value = ordered_json::parse(m.value.text);
    values.emplace_back(std::string(m.key), std::move(value));
  }
  for (auto& [key, value] : values) {
    if (key == "messages") {
      if (!value.is_array()) continue;
      for (ordered_json& message : value) {
        if (!message.is_object()) continue;
        if (auto content = message.find("content"); content != message.end()) {
          CollectBlocks(*content, found);
        }
      }
    } else {
      CollectBlocks(value, found);  // tools, and system as blocks (a string has none)
    }
  }
  if (found.named_ttl || found.unnamed.empty()) return std::nullopt;
  for (ordered_json* cc : found.unnamed) (*cc)["ttl"] = "1h";
  size_t next = 0;
  return SpliceMembers(*body, [&](const raw_json::Member& m) {
    if (next < values.size() && m.KeyIs(values[next].first)) {
      return MemberEdit{MemberEdit::Kind::kReplaceValue, Encode(values[next++].second)};
    }
    return MemberEdit{};
  });
}

std::optional<std::string> AddAutoCacheBreakpoints(std::string_view messages_body,
                                                   std::string_view ttl) {
  // A key can only be spelled this way outside strings (inside one its quotes are escaped): the
  // client's own breakpoints, which the helper never second-guesses.
  if (messages_body.find("\"cache_control\"") != std::string_view::npos) return std::nullopt;
  Result<raw_json::Value> body = raw_json::Parse(messages_body);
  if (!body || !body->is_object()) return std::nullopt;
  const ordered_json cc = CacheControl(ttl);
  bool changed = false;
  std::string out = SpliceMembers(*body, [&](const raw_json::Member& m) {
    std::optional<std::string> value;
    if (m.KeyIs("system")) value = MarkedSystem(m.value, cc);
    if (m.KeyIs("messages")) value = MarkedMessages(m.value, cc);
    if (!value) return MemberEdit{};
    changed = true;
    return MemberEdit{MemberEdit::Kind::kReplaceValue, std::move(*value)};
  });
  if (!changed) return std::nullopt;
  return out;
}

}  // namespace kvgate::providers::internal
