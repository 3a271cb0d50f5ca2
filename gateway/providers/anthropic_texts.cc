// Long message texts set aside while the Anthropic Messages translation works on a tree.
//
// Why: the translation (anthropic_request.cc) rewrites the request's structure but copies every
// message text into a text block unchanged. Parsing those texts into an nlohmann tree and
// serializing them again cost ~130 instructions per byte: 13.7M of the 15.1M event-loop
// instructions of a 102 KB request (bench/gateway_overhead/NOTES.md), against 0.2M to validate the
// same bytes. So each long text is replaced by a short placeholder before the tree is built, and
// its raw bytes (a valid JSON string's inside, escapes as the client wrote them) are put back into
// the translated body. A placeholder carries a random nonce: client text cannot forge one.
#include <random>
#include <string>
#include <vector>

#include "common/raw_json.h"
#include "gateway/providers/internal.h"

namespace kvgate::providers::internal {
namespace {

// \u0001 is a control character: serialized by nlohmann as the same six bytes it was parsed from.
constexpr std::string_view kEdge = "\\u0001";

std::string NewMarker() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string marker(kEdge);
  marker += "kv";
  for (uint64_t v = engine(), i = 0; i < 16; ++i, v >>= 4) marker += kHex[v & 0xf];
  marker += '.';
  return marker;
}

}  // namespace

SetAsideTexts SetAsideLongTexts(raw_json::Value body, size_t min_raw_bytes) {
  SetAsideTexts out;
  if (!body.is_object()) return out;
  const char* end = body.text.data() + body.text.size();
  std::vector<raw_json::Value> long_texts;  // in document order
  auto consider = [&](raw_json::Value v) {
    if (v.is_string() && v.text.size() >= min_raw_bytes + 2) long_texts.push_back(v);
  };
  // messages[i].content when a string, and messages[i].content[j].text: where the translation
  // takes text verbatim.
  raw_json::WalkMembers(body.text.data(), end, [&](std::string_view key, const char*& p) {
    if (!raw_json::KeyIs(key, "messages")) return raw_json::SkipMember(p, end);
    p = raw_json::WalkElements(p, end, [&](const char*& message) {
      message = raw_json::WalkMembers(message, end, [&](std::string_view mkey, const char*& c) {
        if (!raw_json::KeyIs(mkey, "content")) return raw_json::SkipMember(c, end);
        if (*c == '"') return consider(raw_json::ReadMember(c, end));
        c = raw_json::WalkElements(c, end, [&](const char*& part) {
          part = raw_json::WalkMembers(part, end, [&](std::string_view pkey, const char*& t) {
            if (!raw_json::KeyIs(pkey, "text")) return raw_json::SkipMember(t, end);
            consider(raw_json::ReadMember(t, end));
          });
        });
      });
    });
  });
  if (long_texts.empty()) return out;
  out.marker = NewMarker();
  out.reduced_body.reserve(body.text.size() / 4);
  const char* copied = body.text.data();
  for (const raw_json::Value& v : long_texts) {
    out.reduced_body.append(copied, v.text.data());
    out.reduced_body += '"';
    out.reduced_body += out.marker;
    out.reduced_body += std::to_string(out.texts.size());
    out.reduced_body += kEdge;
    out.reduced_body += '"';
    out.texts.push_back(v.text.substr(1, v.text.size() - 2));
    copied = v.text.data() + v.text.size();
  }
  out.reduced_body.append(copied, end);
  return out;
}

std::string RestoreTexts(std::string_view translated, const SetAsideTexts& set_aside) {
  if (set_aside.texts.empty()) return std::string(translated);
  std::string out;
  size_t total = translated.size();
  for (std::string_view t : set_aside.texts) total += t.size();
  out.reserve(total);
  size_t pos = 0;
  for (;;) {
    const size_t hit = translated.find(set_aside.marker, pos);
    if (hit == std::string_view::npos) break;
    size_t digits = hit + set_aside.marker.size();
    size_t index = 0;
    size_t q = digits;
    while (q < translated.size() && translated[q] >= '0' && translated[q] <= '9') {
      index = index * 10 + static_cast<size_t>(translated[q] - '0');
      ++q;
    }
    if (q == digits || index >= set_aside.texts.size() || translated.substr(q, kEdge.size()) != kEdge) {
      out.append(translated.substr(pos, q - pos));  // not a placeholder of ours: kept as is
      pos = q;
      continue;
    }
    out.append(translated.substr(pos, hit - pos));
    out.append(set_aside.texts[index]);
    pos = q + kEdge.size();
  }
  out.append(translated.substr(pos));
  return out;
}

}  // namespace kvgate::providers::internal
