// Helpers shared by the provider tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "gateway/providers/provider.h"

namespace kvgate::providers::testing_util {

// BuildUpstreamCall on the bytes a client would send for `body` (its compact serialization).
inline Result<UpstreamCall> BuildCall(ProviderType type, const nlohmann::json& body,
                                      const CallOptions& options) {
  const std::string text = body.dump();
  return BuildUpstreamCall(type, raw_json::Object(raw_json::Parse(text).value()), options);
}

inline bool WantsUsage(const nlohmann::json& body) {
  const std::string text = body.dump();
  return ClientWantsStreamUsage(raw_json::Object(raw_json::Parse(text).value()));
}

inline std::string ReadGolden(std::string_view name) {
  const std::string path =
      std::string(KVGATE_SOURCE_DIR) + "/tests/providers/golden/" + std::string(name);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct StreamResult {
  std::string bytes;
  bool any_content = false;
  // Offset in `bytes` where the first Output with has_content ended; npos when none.
  size_t first_content_end = std::string::npos;
};

// Feeds `stream` in pieces of `piece` bytes (0: all at once), then Finish(true).
inline StreamResult RunStream(StreamTranslator& t, std::string_view stream, size_t piece = 0) {
  StreamResult r;
  if (piece == 0) piece = stream.size() + 1;
  for (size_t i = 0; i < stream.size(); i += piece) {
    StreamTranslator::Output out = t.Feed(stream.substr(i, piece));
    r.bytes += out.bytes;
    if (out.has_content && !r.any_content) {
      r.any_content = true;
      r.first_content_end = r.bytes.size();
    }
  }
  r.bytes += t.Finish(/*upstream_eof=*/true);
  return r;
}

// Feeds `stream` as two pieces split at `at`, then Finish(true); returns the client bytes.
inline std::string RunSplit(StreamTranslator& t, std::string_view stream, size_t at) {
  std::string bytes = t.Feed(stream.substr(0, at)).bytes;
  bytes += t.Feed(stream.substr(at)).bytes;
  bytes += t.Finish(/*upstream_eof=*/true);
  return bytes;
}

struct ExpectedUsage {
  std::optional<int64_t> cache_read;
  std::optional<int64_t> cache_write_5m;
  std::optional<int64_t> cache_write_1h;
  std::optional<int64_t> uncached;
  std::optional<int64_t> output;
  std::optional<int64_t> reasoning;
};

inline void ExpectUsage(const telemetry::Usage& u, const ExpectedUsage& e) {
  EXPECT_EQ(u.cache_read, e.cache_read) << "cache_read";
  EXPECT_EQ(u.cache_write_5m, e.cache_write_5m) << "cache_write_5m";
  EXPECT_EQ(u.cache_write_1h, e.cache_write_1h) << "cache_write_1h";
  EXPECT_EQ(u.uncached, e.uncached) << "uncached";
  EXPECT_EQ(u.output, e.output) << "output";
  EXPECT_EQ(u.reasoning, e.reasoning) << "reasoning";
  EXPECT_FALSE(u.clamped);
}

// `text` with the first occurrence of `piece` removed (which must exist).
inline std::string Without(std::string text, std::string_view piece) {
  const size_t pos = text.find(piece);
  EXPECT_NE(pos, std::string::npos) << "missing: " << piece;
  if (pos != std::string::npos) text.erase(pos, piece.size());
  return text;
}

inline CallOptions StreamOptions(bool client_wants_usage) {
  CallOptions o;
  o.stream = true;
  o.client_wants_usage = client_wants_usage;
  o.created = 1754000000;
  return o;
}

}  // namespace kvgate::providers::testing_util
