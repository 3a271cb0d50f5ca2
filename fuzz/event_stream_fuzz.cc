// libFuzzer target: the AWS event-stream decoder and the Bedrock stream translators on top of it,
// on untrusted bytes (a Bedrock stream, or anything posing as one). Checked: no crash or sanitizer
// report; the decoder finds the same messages whether the bytes come whole or split anywhere;
// every message it returns re-encodes to the bytes it came from; the translators end with exactly
// one outcome (completed, or an error) after Finish.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/providers/event_stream.h"
#include "gateway/providers/provider.h"

namespace {

namespace p = kvgate::providers;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "event_stream_fuzz: %s\n", what);
  std::abort();
}

// The messages of `bytes` fed in pieces of `step` bytes (0: whole), and whether it failed.
std::vector<p::EventStreamMessage> Decode(std::string_view bytes, size_t step, bool& failed) {
  p::EventStreamDecoder decoder;
  std::vector<p::EventStreamMessage> out;
  failed = false;
  size_t at = 0;
  while (at < bytes.size() && !failed) {
    const size_t n = step == 0 ? bytes.size() : std::min(step, bytes.size() - at);
    decoder.Feed(bytes.substr(at, n));
    at += n;
    while (true) {
      auto m = decoder.Next();
      if (!m) {
        failed = true;
        break;
      }
      if (!*m) break;
      out.push_back(std::move(**m));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  bool whole_failed = false;
  bool split_failed = false;
  const auto whole = Decode(bytes, 0, whole_failed);
  const auto split = Decode(bytes, 1 + (size % 13), split_failed);
  if (whole_failed != split_failed || whole.size() != split.size()) {
    Fail("whole and split decoding disagree");
  }
  size_t offset = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i].payload != split[i].payload) Fail("payloads differ");
    const std::string again = p::EncodeEventStreamMessage(whole[i].headers, whole[i].payload);
    if (bytes.substr(offset, again.size()) != again)
      Fail("a message does not re-encode to its bytes");
    offset += again.size();
  }
  for (p::BedrockApi api : {p::BedrockApi::kConverse, p::BedrockApi::kInvoke}) {
    p::CallOptions options;
    options.upstream_model = "anthropic.claude-sonnet-4-5-20250929-v1:0";
    options.stream = true;
    options.bedrock_api = api;
    options.created = 1700000000;
    auto translator = p::NewStreamTranslator(p::ProviderType::kBedrock, options);
    for (size_t at = 0; at < size; at += 7) translator->Feed(bytes.substr(at, 7));
    translator->Finish(true);
    if (!translator->completed() && !translator->client_error()) {
      Fail("a stream ended neither complete nor with an error");
    }
  }
  return 0;
}
