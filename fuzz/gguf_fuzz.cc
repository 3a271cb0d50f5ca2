// libFuzzer entry point for the GGUF reader: any byte string must parse or be rejected with an
// error, never crash, hang or read out of bounds (run with -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <span>

#include "local_engine/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvgate::engine::GgufFile::FromBytes(std::span<const uint8_t>(data, size), "fuzz");
  if (file) {
    // Touch what a loader would: every tensor's first and last byte and every metadata value.
    volatile uint8_t sink = 0;
    for (const auto& t : (*file)->tensors()) {
      if (t.n_bytes > 0) sink = sink ^ t.data[0] ^ t.data[t.n_bytes - 1];
    }
    for (const auto& [key, value] : (*file)->metadata()) {
      sink = sink ^ static_cast<uint8_t>(key.size() + value.type);
      (void)(*file)->GetInt(key);
      (void)(*file)->GetString(key);
    }
    (void)sink;
  }
  return 0;
}
