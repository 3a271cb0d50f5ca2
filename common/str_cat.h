// StrCat: builds a message from strings and integers (std::format is missing from GCC 12's library).
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

namespace kvgate {

namespace str_cat_internal {
inline void AppendTo(std::string& out, std::string_view s) { out += s; }
template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, char> && !std::is_same_v<T, bool>)
void AppendTo(std::string& out, T v) {
  out += std::to_string(v);
}
}  // namespace str_cat_internal

template <class... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (str_cat_internal::AppendTo(out, args), ...);
  return out;
}

}  // namespace kvgate
