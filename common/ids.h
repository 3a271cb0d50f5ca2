// Identifiers that kvgate mints (request ids, alert ids).
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

// A random, URL-safe id with the given prefix, e.g. "req_3f9c2a...". 96 bits of randomness from a
// per-thread generator seeded from std::random_device; safe to call from any thread.
std::string NewId(std::string_view prefix);

}  // namespace kvgate
