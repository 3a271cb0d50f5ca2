// Keeping secrets out of messages: URLs with credentials in them show up in config errors and in
// the admin API.
#pragma once

#include <string>
#include <string_view>

namespace kvgate {

// `url` with its userinfo ("user:password@", or a bare token before '@') replaced by "***":
// "https://u:p@host/v1" -> "https://***@host/v1". Anything else is returned unchanged.
inline std::string RedactUrlCredentials(std::string_view url) {
  const size_t scheme_end = url.find("://");
  const size_t authority_begin = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const size_t authority_end = url.find_first_of("/?#", authority_begin);
  const std::string_view authority = url.substr(authority_begin, authority_end - authority_begin);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, authority_begin));
  out += "***";
  out += url.substr(authority_begin + at);
  return out;
}

}  // namespace kvgate
