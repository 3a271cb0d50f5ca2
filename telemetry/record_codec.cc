// RequestRecord <-> a crash journal entry (journal.h). Every stored field goes through here; the
// static_asserts below fail the build when Usage or Cost gain a field, so that a new field cannot
// silently miss the journal. Also the reader of the JSON lines that kvgate's journal held before
// its entries were binary, so that a journal an older kvgate left is still replayed.
#include <cstring>

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

#if defined(__x86_64__) && defined(__GLIBCXX__)
// (Sizes on the platform kvgate ships for; a field added to one of these must be added below.)
static_assert(sizeof(Usage) == 216, "a Usage field was added: journal it in record_codec.cc");
static_assert(sizeof(Cost) == 64, "a Cost field was added: journal it in record_codec.cc");
#endif

// The binary entry: a version byte, then every field in the order VisitFields lists them. One
// list serves both directions, so the writer and the reader cannot disagree on it. Binary, not
// JSON: this runs on every request, and writing the JSON line cost ~20,000 instructions, ten
// times these copies.
// Version 2 appended cache_helper, version 3 provider_cache_miss_reason, version 4
// usage.cache_read_offload_tier, version 5 usage.estimated, version 6 thread_source and
// thread_parent, version 7 purpose and keep_warm_saved; entries of older versions (an older
// kvgate's journal) still decode.
constexpr char kEntryVersion = 7;

class EntryWriter {
 public:
  explicit EntryWriter(std::string& out) : out_(out) {}
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void I64(int64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Int(int v) { I64(v); }
  void Bool(bool v) { out_ += static_cast<char>(v); }
  void Opt(const std::optional<int64_t>& v) {
    Bool(v.has_value());
    if (v) I64(*v);
  }
  void Json(const json& v) { v.is_null() ? U32(0) : Str(WriteJson(v)); }

 private:
  void U32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  std::string& out_;
};

// Reads what EntryWriter wrote; a short or malformed entry sets ok() false (the frame's checksum
// already caught torn entries, so this guards against a kvgate bug, not the disk).
class EntryReader {
 public:
  explicit EntryReader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_ && in_.empty(); }
  void Str(std::string& s) {
    uint32_t n = 0;
    Copy(&n, sizeof n);
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return;
    }
    s.assign(in_.data(), n);
    in_.remove_prefix(n);
  }
  void I64(int64_t& v) { Copy(&v, sizeof v); }
  void Int(int& v) {
    int64_t wide = 0;
    I64(wide);
    v = static_cast<int>(wide);
  }
  void Bool(bool& v) {
    char c = 0;
    Copy(&c, 1);
    v = c != 0;
  }
  void Opt(std::optional<int64_t>& v) {
    bool present = false;
    Bool(present);
    v.reset();
    if (!present) return;
    int64_t value = 0;
    I64(value);
    v = value;
  }
  void Json(json& v) {
    std::string text;
    Str(text);
    v = text.empty() ? json() : json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) ok_ = false;
  }

 private:
  void Copy(void* to, size_t n) {
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return;
    }
    std::memcpy(to, in_.data(), n);
    in_.remove_prefix(n);
  }
  std::string_view in_;
  bool ok_ = true;
};

template <class Io, class Record>
void VisitFields(Io& io, Record& r, char version) {
  io.Str(r.request_id);
  io.Str(r.thread_id);
  io.I64(r.created_at_us);
  io.Str(r.endpoint);
  io.Str(r.model);
  io.Str(r.provider);
  io.Str(r.provider_type);
  io.Str(r.upstream_model);
  io.Str(r.target);
  io.Int(r.key_index);
  io.Str(r.system_fingerprint);
  io.Str(r.api_key_id);
  io.Bool(r.stream);
  io.Str(r.status);
  io.Int(r.http_status);
  io.Int(r.upstream_status);
  io.Opt(r.latency_us);
  io.Opt(r.ttft_us);
  auto& u = r.usage;
  io.Opt(u.cache_read);
  io.Opt(u.cache_write_5m);
  io.Opt(u.cache_write_1h);
  io.Opt(u.cache_write_no_ttl);
  io.Opt(u.uncached);
  io.Opt(u.output);
  io.Opt(u.reasoning);
  io.Bool(u.clamped);
  io.Str(u.raw);
  io.Opt(u.reported_input);
  io.Opt(u.cache_read_offload);
  auto& c = r.cost;
  io.I64(c.cache_read);
  io.I64(c.cache_write);
  io.I64(c.uncached);
  io.I64(c.output);
  io.I64(c.total);
  io.I64(c.saved);
  io.Bool(c.complete);
  io.Bool(c.priced);
  io.I64(c.missed);
  io.Str(r.error);
  io.Str(r.upstream_request_id);
  io.Str(r.response_id);
  io.Str(r.finish_reason);
  io.Json(r.cache_diagnosis);
  io.Str(r.route);
  io.Json(r.attempts);
  if (version >= 2) io.Str(r.cache_helper);
  if (version >= 3) io.Str(r.provider_cache_miss_reason);
  if (version >= 4) io.Str(r.usage.cache_read_offload_tier);
  if (version >= 5) io.Bool(r.usage.estimated);
  if (version >= 6) {
    io.Str(r.thread_source);
    io.Str(r.thread_parent);
  }
  if (version >= 7) {
    io.Str(r.purpose);
    io.I64(r.keep_warm_saved);
  }
}

}  // namespace

std::string EncodeJournalEntry(const RequestRecord& record) {
  std::string out;
  out.reserve(1024);
  out += kEntryVersion;
  EntryWriter writer(out);
  VisitFields(writer, record, kEntryVersion);
  return out;
}

Result<RequestRecord> DecodeJournalEntry(std::string_view entry) {
  if (entry.empty() || entry.front() < 1 || entry.front() > kEntryVersion) {
    return MakeError(ErrorCode::kCorruptData, "journal entry of an unknown version");
  }
  RequestRecord r;
  EntryReader reader(entry.substr(1));
  VisitFields(reader, r, entry.front());
  if (!reader.ok()) return MakeError(ErrorCode::kCorruptData, "journal entry is not a record");
  if (r.attempts.is_null()) r.attempts = json::array();
  MakeTextValid(r);  // the entry keeps bytes as they were; stored text must be UTF-8
  return r;
}

// The JSON line format (read only: segments an older kvgate left).
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
