// JSON serialization that cannot throw on text kvgate did not write. nlohmann::json's dump()
// throws type_error 316 on a string that is not UTF-8 (a header value, a percent-decoded path, an
// upstream body); every JSON document kvgate sends or stores goes through JsonText instead, which
// writes such bytes as U+FFFD.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kvgate {

inline std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline std::string JsonText(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace kvgate
