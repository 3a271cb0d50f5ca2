#include "common/ids.h"

#include <cstdint>
#include <random>

namespace kvgate {

std::string NewId(std::string_view prefix) {
  // One engine per thread: no lock on the request path, no shared mutable state.
  thread_local std::mt19937_64 engine{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id.push_back('_');
  for (int word = 0; word < 2; ++word) {
    uint64_t bits = engine();
    for (int i = 0; i < (word == 0 ? 16 : 8); ++i) {
      id.push_back(kHex[bits & 0xf]);
      bits >>= 4;
    }
  }
  return id;
}

}  // namespace kvgate
