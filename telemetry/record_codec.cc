// RequestRecord <-> one line of JSON, for the crash journal (journal.h). Every stored field goes
// through here; the static_asserts below fail the build when RequestRecord, Usage or Cost gain a
// field, so that a new field cannot silently miss the journal.
#include "common/json_text.h"
#include "common/json_writer.h"
#include "telemetry/record.h"

namespace kvgate::telemetry {
namespace {

using nlohmann::json;

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
  // Written by hand (common/json_writer.h): this runs on the request path.
  JsonWriter w;
  w.BeginObject();
  w.Key("id").String(r.request_id);
  w.Key("th").String(r.thread_id);
  w.Key("t").Int(r.created_at_us);
  w.Key("ep").String(r.endpoint);
  w.Key("m").String(r.model);
  w.Key("p").String(r.provider);
  w.Key("pt").String(r.provider_type);
  w.Key("um").String(r.upstream_model);
  w.Key("tg").String(r.target);
  w.Key("k").Int(r.key_index);
  w.Key("sf").String(r.system_fingerprint);
  w.Key("ak").String(r.api_key_id);
  w.Key("s").Bool(r.stream);
  w.Key("st").String(r.status);
  w.Key("hs").Int(r.http_status);
  w.Key("us").Int(r.upstream_status);
  w.Key("lat").OptInt(r.latency_us);
  w.Key("ttft").OptInt(r.ttft_us);
  w.Key("u").BeginObject();
  w.Key("cr").OptInt(u.cache_read);
  w.Key("w5").OptInt(u.cache_write_5m);
  w.Key("w1").OptInt(u.cache_write_1h);
  w.Key("wn").OptInt(u.cache_write_no_ttl);
  w.Key("un").OptInt(u.uncached);
  w.Key("o").OptInt(u.output);
  w.Key("r").OptInt(u.reasoning);
  w.Key("cl").Bool(u.clamped);
  w.Key("raw").String(u.raw);
  w.Key("ri").OptInt(u.reported_input);
  w.Key("cro").OptInt(u.cache_read_offload);
  w.EndObject();
  w.Key("c").BeginObject();
  w.Key("cr").Int(c.cache_read);
  w.Key("cw").Int(c.cache_write);
  w.Key("un").Int(c.uncached);
  w.Key("o").Int(c.output);
  w.Key("t").Int(c.total);
  w.Key("sv").Int(c.saved);
  w.Key("cp").Bool(c.complete);
  w.Key("pr").Bool(c.priced);
  w.Key("ms").Int(c.missed);
  w.EndObject();
  w.Key("e").String(r.error);
  w.Key("uid").String(r.upstream_request_id);
  w.Key("rid").String(r.response_id);
  w.Key("fr").String(r.finish_reason);
  w.Key("dg").Json(r.cache_diagnosis);
  w.Key("rt").Raw(r.route);
  w.Key("at").Json(r.attempts);
  w.EndObject();
  std::string line = w.Take();
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
  if (auto it = j.find("rt"); it != j.end() && !it->is_null()) r.route = JsonText(*it);
  r.attempts = j.value("at", json::array());
  return r;
}

}  // namespace kvgate::telemetry
