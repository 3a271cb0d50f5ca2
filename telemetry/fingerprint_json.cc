// The storage form of a prompt fingerprint (RequestRecord.prompt_fingerprint): see ToJsonText in
// diagnosis.h.
#include <algorithm>
#include <cstdio>

#include "telemetry/diagnosis.h"

namespace kvgate::telemetry {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(const std::vector<uint8_t>& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = uint32_t(in[i]) << 16;
    if (i + 1 < in.size()) n |= uint32_t(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= in[i + 2];
    out += kB64[(n >> 18) & 63];
    out += kB64[(n >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[n & 63] : '=';
  }
  return out;
}

std::optional<std::vector<uint8_t>> Unbase64(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = in[i + j];
      if (c == '=' && i + 4 == in.size() && j >= 2) {
        ++pad;
        n <<= 6;
        continue;
      }
      const int v = value(c);
      if (v < 0 || pad > 0) return std::nullopt;
      n = (n << 6) | uint32_t(v);
    }
    out.push_back(uint8_t(n >> 16));
    if (pad < 2) out.push_back(uint8_t(n >> 8));
    if (pad < 1) out.push_back(uint8_t(n));
  }
  return out;
}

std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string ToJsonText(const PromptFingerprint& fp) {
  // Written directly rather than through nlohmann::json: the telemetry writer does this for every
  // turn of every thread, and the text is a fixed, flat shape.
  std::string out = "[";
  std::vector<uint8_t> bytes;
  for (const auto& e : fp.elements) {
    if (out.size() > 1) out += ',';
    out += R"({"k":")";
    out += ElementKindName(e.kind);
    out += '"';
    if (e.kind == FingerprintElement::Kind::kMessage) {
      out += R"(,"i":)";
      out += std::to_string(e.message_index);
      if (e.system_role) out += R"(,"s":1)";
      if (!e.role.empty()) {
        // Roles are plain words (MessageRole keeps only unescaped ones); anything JSON would
        // need to escape is left out rather than escaped.
        if (e.role.find_first_of("\"\\") == std::string::npos &&
            std::all_of(e.role.begin(), e.role.end(), [](char ch) { return ch >= 0x20; })) {
          out += R"(,"r":")";
          out += e.role;
          out += '"';
        }
      }
    }
    out += R"(,"h":")";
    out += Hex16(e.prefix_hash);
    out += R"(","n":)";
    out += std::to_string(e.length);
    bytes.clear();
    for (uint32_t c : e.chunks) {
      for (int b = 0; b < 4; ++b) bytes.push_back(uint8_t(c >> (8 * b)));
    }
    out += R"(,"c":")";
    out += Base64(bytes);
    out += R"("})";
  }
  out += ']';
  return out;
}

Result<PromptFingerprint> FromJson(const nlohmann::json& json) {
  auto bad = [](const std::string& why) {
    return MakeError(ErrorCode::kCorruptData, "prompt fingerprint: " + why);
  };
  if (!json.is_array()) return bad("not an array");
  PromptFingerprint fp;
  for (const auto& j : json) {
    if (!j.is_object()) return bad("element is not an object");
    FingerprintElement e;
    const auto k = j.find("k");
    const auto h = j.find("h");
    const auto n = j.find("n");
    const auto c = j.find("c");
    if (k == j.end() || !k->is_string() || h == j.end() || !h->is_string() || n == j.end() ||
        !n->is_number_unsigned() || c == j.end() || !c->is_string()) {
      return bad("element lacks k/h/n/c");
    }
    const std::string kind = k->get<std::string>();
    if (kind == "tools") {
      e.kind = FingerprintElement::Kind::kTools;
    } else if (kind == "system") {
      e.kind = FingerprintElement::Kind::kSystem;
    } else if (kind == "message") {
      e.kind = FingerprintElement::Kind::kMessage;
      const auto i = j.find("i");
      if (i == j.end() || !i->is_number_integer()) return bad("message element lacks i");
      e.message_index = i->get<int>();
      e.system_role = j.value("s", 0) == 1;
      if (const auto r = j.find("r"); r != j.end() && r->is_string())
        e.role = r->get<std::string>();
    } else {
      return bad("unknown kind '" + kind + "'");
    }
    const std::string hex = h->get<std::string>();
    if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("bad hash");
    }
    e.prefix_hash = std::stoull(hex, nullptr, 16);
    e.length = n->get<uint64_t>();
    auto bytes = Unbase64(c->get<std::string>());
    if (!bytes || bytes->size() % 4 != 0) return bad("bad chunk list");
    if (bytes->size() / 4 != (e.length + kFingerprintChunkBytes - 1) / kFingerprintChunkBytes) {
      return bad("chunk count does not match length");
    }
    for (size_t i = 0; i < bytes->size(); i += 4) {
      e.chunks.push_back(uint32_t((*bytes)[i]) | uint32_t((*bytes)[i + 1]) << 8 |
                         uint32_t((*bytes)[i + 2]) << 16 | uint32_t((*bytes)[i + 3]) << 24);
    }
    fp.elements.push_back(std::move(e));
  }
  return fp;
}

}  // namespace kvgate::telemetry
