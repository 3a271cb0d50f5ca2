// RequestRecord <-> one line of JSON, for the crash journal (journal.h). Every stored field goes
// through here; the static_asserts below fail the build when RequestRecord, Usage or Cost gain a
// field, so that a new field cannot silently miss the journal.
#include <charconv>

#include "common/json_text.h"
#include "common/utf8.h"
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

// One journal line, written by hand rather than through a json tree and dump(): the line is built
// on the request path (once or twice per request), where nlohmann's tree of std::map nodes cost
// about 60,000 instructions a record. The output is ordinary JSON, read back with nlohmann.
class LineWriter {
 public:
  LineWriter() { out_.reserve(1024); }
  void Str(std::string_view key, std::string_view value) {
    Key(key);
    const size_t mark = out_.size();
    out_ += '"';
    // Runs of plain bytes are appended whole; only quotes, backslashes and control bytes are
    // escaped one by one.
    unsigned char seen = 0;
    size_t run = 0;
    for (size_t i = 0; i < value.size(); ++i) {
      const auto byte = static_cast<unsigned char>(value[i]);
      seen |= byte;
      if (byte >= 0x20 && byte != '"' && byte != '\\') continue;
      out_.append(value.data() + run, i - run);
      run = i + 1;
      if (byte >= 0x20) {
        out_ += '\\';
        out_ += static_cast<char>(byte);
      } else {
        static constexpr char kHex[] = "0123456789abcdef";
        out_ += "\\u00";
        out_ += kHex[byte >> 4];
        out_ += kHex[byte & 0xf];
      }
    }
    out_.append(value.data() + run, value.size() - run);
    out_ += '"';
    if ((seen & 0x80) && !IsValidUtf8(value)) {
      // The rare record with bytes no sanitizer reached: written with U+FFFD for them instead.
      out_.resize(mark);
      out_ += JsonText(json(std::string(value)));
    }
  }
  void Int(std::string_view key, int64_t value) {
    Key(key);
    AppendInt(value);
  }
  void Opt(std::string_view key, const std::optional<int64_t>& value) {
    Key(key);
    if (value) {
      AppendInt(*value);
    } else {
      out_.append("null", 4);
    }
  }
  void Bool(std::string_view key, bool value) {
    Key(key);
    if (value) {
      out_.append("true", 4);
    } else {
      out_.append("false", 5);
    }
  }
  void Json(std::string_view key, const json& value) {
    Key(key);
    if (value.is_null()) {
      out_.append("null", 4);
    } else {
      out_ += JsonText(value);
    }
  }
  void Open(std::string_view key) {
    Key(key);
    out_ += '{';
    first_ = true;
  }
  void Close() {
    out_ += '}';
    first_ = false;
  }
  std::string Finish() {
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  void Key(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_.append(key.data(), key.size());
    out_.append("\":", 2);
  }
  void AppendInt(int64_t value) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    out_.append(digits, static_cast<size_t>(end - digits));
  }
  std::string out_ = "{";
  bool first_ = true;
};

}  // namespace

#if defined(__x86_64__) && defined(__GLIBCXX__)
// (Sizes on the platform kvgate ships for; a field added to one of these must be added below.)
static_assert(sizeof(Usage) == 168, "a Usage field was added: journal it in record_codec.cc");
static_assert(sizeof(Cost) == 64, "a Cost field was added: journal it in record_codec.cc");
#endif

std::string ToJournalLine(const RequestRecord& r) {
  const Usage& u = r.usage;
  const Cost& c = r.cost;
  LineWriter w;
  w.Str("id", r.request_id);
  w.Str("th", r.thread_id);
  w.Int("t", r.created_at_us);
  w.Str("ep", r.endpoint);
  w.Str("m", r.model);
  w.Str("p", r.provider);
  w.Str("pt", r.provider_type);
  w.Str("um", r.upstream_model);
  w.Str("tg", r.target);
  w.Int("k", r.key_index);
  w.Str("sf", r.system_fingerprint);
  w.Str("ak", r.api_key_id);
  w.Bool("s", r.stream);
  w.Str("st", r.status);
  w.Int("hs", r.http_status);
  w.Int("us", r.upstream_status);
  w.Opt("lat", r.latency_us);
  w.Opt("ttft", r.ttft_us);
  w.Open("u");
  w.Opt("cr", u.cache_read);
  w.Opt("w5", u.cache_write_5m);
  w.Opt("w1", u.cache_write_1h);
  w.Opt("wn", u.cache_write_no_ttl);
  w.Opt("un", u.uncached);
  w.Opt("o", u.output);
  w.Opt("r", u.reasoning);
  w.Bool("cl", u.clamped);
  w.Str("raw", u.raw);
  w.Opt("ri", u.reported_input);
  w.Close();
  w.Open("c");
  w.Int("cr", c.cache_read);
  w.Int("cw", c.cache_write);
  w.Int("un", c.uncached);
  w.Int("o", c.output);
  w.Int("t", c.total);
  w.Int("sv", c.saved);
  w.Bool("cp", c.complete);
  w.Bool("pr", c.priced);
  w.Int("ms", c.missed);
  w.Close();
  w.Str("e", r.error);
  w.Str("uid", r.upstream_request_id);
  w.Str("rid", r.response_id);
  w.Str("fr", r.finish_reason);
  w.Json("dg", r.cache_diagnosis);
  w.Json("rt", r.route);
  w.Json("at", r.attempts);
  return w.Finish();
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
