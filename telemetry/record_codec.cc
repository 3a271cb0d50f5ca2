// RequestRecord <-> one line of JSON, for the crash journal (journal.h). Every stored field goes
// through here; the static_asserts below fail the build when RequestRecord, Usage or Cost gain a
// field, so that a new field cannot silently miss the journal.
#include "common/json_text.h"
#include "telemetry/record.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

json Opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(); }

std::optional<int64_t> OptFrom(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t Int(const json& j, const char* key) { return OptFrom(j, key).value_or(0); }

bool Bool(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

#if defined(__x86_64__) && defined(__GLIBCXX__)
// (Sizes on the platform kvgate ships for; a field added to one of these must be added below.)
static_assert(sizeof(Usage) == 184, "a Usage field was added: journal it in record_codec.cc");
static_assert(sizeof(Cost) == 64, "a Cost field was added: journal it in record_codec.cc");
#endif

std::string ToJournalLine(const RequestRecord& r) {
  const Usage& u = r.usage;
  const Cost& c = r.cost;
  json j = {
      {"id", r.request_id}, {"th", r.thread_id}, {"t", r.created_at_us}, {"ep", r.endpoint},
      {"m", r.model}, {"p", r.provider}, {"pt", r.provider_type}, {"um", r.upstream_model},
      {"tg", r.target}, {"k", r.key_index}, {"sf", r.system_fingerprint}, {"ak", r.api_key_id},
      {"s", r.stream}, {"st", r.status}, {"hs", r.http_status}, {"us", r.upstream_status},
      {"lat", Opt(r.latency_us)}, {"ttft", Opt(r.ttft_us)},
      {"u", {{"cr", Opt(u.cache_read)}, {"w5", Opt(u.cache_write_5m)},
             {"w1", Opt(u.cache_write_1h)}, {"wn", Opt(u.cache_write_no_ttl)},
             {"un", Opt(u.uncached)}, {"o", Opt(u.output)}, {"r", Opt(u.reasoning)},
             {"cl", u.clamped}, {"raw", u.raw}, {"ri", Opt(u.reported_input)},
             {"cro", Opt(u.cache_read_offload)}}},
      {"c", {{"cr", c.cache_read}, {"cw", c.cache_write}, {"un", c.uncached}, {"o", c.output},
             {"t", c.total}, {"sv", c.saved}, {"cp", c.complete}, {"pr", c.priced},
             {"ms", c.missed}}},
      {"e", r.error}, {"uid", r.upstream_request_id}, {"rid", r.response_id},
      {"fr", r.finish_reason}, {"dg", r.cache_diagnosis}, {"rt", r.route},
      {"at", r.attempts}};
  std::string line = JsonText(j);
  line += '\n';
  return line;
}

Result<RequestRecord> FromJournalLine(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) {
    return MakeError(ErrorCode::kCorruptData, "journal entry is not a record");
  }
  RequestRecord r;
  r.request_id = Str(j, "id");
  r.thread_id = Str(j, "th");
  r.created_at_us = Int(j, "t");
  r.endpoint = Str(j, "ep");
  r.model = Str(j, "m");
  r.provider = Str(j, "p");
  r.provider_type = Str(j, "pt");
  r.upstream_model = Str(j, "um");
  r.target = Str(j, "tg");
  r.key_index = static_cast<int>(Int(j, "k"));
  r.system_fingerprint = Str(j, "sf");
  r.api_key_id = Str(j, "ak");
  r.stream = Bool(j, "s");
  r.status = Str(j, "st");
  r.http_status = static_cast<int>(Int(j, "hs"));
  r.upstream_status = static_cast<int>(Int(j, "us"));
  r.latency_us = OptFrom(j, "lat");
  r.ttft_us = OptFrom(j, "ttft");
  const json u = j.value("u", json::object());
  r.usage.cache_read = OptFrom(u, "cr");
  r.usage.cache_write_5m = OptFrom(u, "w5");
  r.usage.cache_write_1h = OptFrom(u, "w1");
  r.usage.cache_write_no_ttl = OptFrom(u, "wn");
  r.usage.uncached = OptFrom(u, "un");
  r.usage.output = OptFrom(u, "o");
  r.usage.reasoning = OptFrom(u, "r");
  r.usage.clamped = Bool(u, "cl");
  r.usage.raw = Str(u, "raw");
  r.usage.reported_input = OptFrom(u, "ri");
  r.usage.cache_read_offload = OptFrom(u, "cro");  // absent in lines of older kvgates: unknown
  const json c = j.value("c", json::object());
  r.cost.cache_read = Int(c, "cr");
  r.cost.cache_write = Int(c, "cw");
  r.cost.uncached = Int(c, "un");
  r.cost.output = Int(c, "o");
  r.cost.total = Int(c, "t");
  r.cost.saved = Int(c, "sv");
  r.cost.complete = Bool(c, "cp");
  r.cost.priced = Bool(c, "pr");
  r.cost.missed = Int(c, "ms");
  r.error = Str(j, "e");
  r.upstream_request_id = Str(j, "uid");
  r.response_id = Str(j, "rid");
  r.finish_reason = Str(j, "fr");
  r.cache_diagnosis = j.value("dg", json());
  r.route = j.value("rt", json());
  r.attempts = j.value("at", json::array());
  return r;
}

}  // namespace kvgate::telemetry
