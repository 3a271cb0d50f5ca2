// Identifiers that kvgate mints (request ids, alert ids).
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

// Digits of an id after its prefix and '_': the creation time in microseconds since the Unix epoch
// (13 hex digits, enough until the year 2112), then 44 random bits.
inline constexpr int kTimeDigits = 13;
inline constexpr int kRandomDigits = 11;

// A URL-safe id with the given prefix, e.g. "req_0643a1f2c9b7e5d41c0f9a2b": lowercase hex, the
// creation time first, so ids minted a microsecond or more apart sort in creation order (like
// UUIDv7), then random bits from a per-thread generator seeded from std::random_device, so ids
// minted in the same microsecond on different threads still differ. Safe to call from any thread.
std::string NewId(std::string_view prefix);

}  // namespace kvgate
