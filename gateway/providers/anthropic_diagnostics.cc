// Anthropic's cache diagnostics: a request carrying `diagnostics: {previous_message_id}` gets a
// response whose `diagnostics.cache_miss_reason` names the first part of the request that differs
// from that earlier message's (model, system, tools, messages), or why it could not compare.
#include <optional>
#include <string>
#include <string_view>

#include "common/raw_json.h"
#include "gateway/providers/internal.h"

namespace kvgate::providers::internal {

namespace {

// Stored and used as a metric label: a short token of the provider's vocabulary, nothing else.
std::string Vetted(std::string reason) {
  if (reason.empty() || reason.size() > 64 ||
      reason.find_first_not_of("abcdefghijklmnopqrstuvwxyz_0123456789") != std::string::npos) {
    return "unrecognized";
  }
  return reason;
}

}  // namespace

std::string CacheMissReasonOf(raw_json::Value message) {
  if (!message.is_object()) return "";
  std::optional<raw_json::Value> diagnostics = raw_json::Find(message, "diagnostics");
  if (!diagnostics || !diagnostics->is_object()) return "";
  std::optional<raw_json::Value> reason = raw_json::Find(*diagnostics, "cache_miss_reason");
  if (!reason || reason->is_null()) return "none";
  return Vetted(Decoded(reason));
}

std::string CacheMissReasonOf(const json& message) {
  const json* diagnostics = Member(message, "diagnostics");
  if (diagnostics == nullptr || !diagnostics->is_object()) return "";
  const json* reason = Member(*diagnostics, "cache_miss_reason");
  if (reason == nullptr || reason->is_null()) return "none";
  return Vetted(reason->is_string() ? reason->get<std::string>() : std::string());
}

std::optional<std::string> AddCacheDiagnostics(std::string_view body, std::string_view id) {
  Result<raw_json::Value> parsed = raw_json::Parse(body);
  if (!parsed || !parsed->is_object() || raw_json::Find(*parsed, "diagnostics")) return std::nullopt;
  const size_t close = body.find_last_of('}');
  if (close == std::string_view::npos) return std::nullopt;
  std::string out(body.substr(0, close));
  size_t end = out.size();
  while (end > 0 && raw_json::internal::IsSpace(static_cast<unsigned char>(out[end - 1]))) --end;
  const bool empty = end > 0 && out[end - 1] == '{';
  out.resize(end);
  out += empty ? "" : ",";
  out += R"("diagnostics":{"previous_message_id":)";
  raw_json::AppendQuoted(id, out);
  out += "}}";
  return out;
}

}  // namespace kvgate::providers::internal
