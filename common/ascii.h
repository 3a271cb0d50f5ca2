// ASCII case folding, the one definition kvgate uses for what protocols compare without case
// (HTTP header names, URL schemes, auth schemes, tokens) and for names it lowers (GGUF metadata,
// config words). Locale-free: only A-Z fold, every other byte (UTF-8 included) compares as is.
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

constexpr char AsciiLower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

constexpr bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  }
  return true;
}

constexpr bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && EqualsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

inline std::string AsciiLowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = AsciiLower(c);
  return out;
}

}  // namespace kvgate
