// Serving the dashboard: its static files (web/, compiled into the binary, see web/embedded.h)
// at "/" (index.html) and "/assets/<file>", for GET and HEAD.
//
// Every answer carries a strong ETag and "Cache-Control: no-cache" (asset URLs are not versioned,
// so a browser revalidates each load and gets a bodiless 304 while the binary is unchanged), a
// Content-Security-Policy that allows only this origin's scripts, styles and connections (no
// inline script or style, no framing), and "X-Content-Type-Options: nosniff".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "gateway/http/server.h"

namespace kvgate::gateway {

// The Content-Security-Policy every dashboard file is served with.
inline constexpr std::string_view kDashboardCsp =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

// A whole answer, built without I/O.
struct WebReply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<http::Header> headers;
};

// True for the paths this module answers: "/", "/index.html" and "/assets/...".
bool IsWebPath(std::string_view path);

// The answer to `request` on a web path: 200 with the file, 304 when If-None-Match names its
// ETag, 404 for an unknown file, 405 for a method other than GET and HEAD.
// REQUIRES: IsWebPath(request.path).
WebReply ServeWebAsset(const http::Request& request);

// Sends ServeWebAsset(request) through `writer`.
boost::asio::awaitable<void> SendWebAsset(const http::Request& request,
                                          http::ResponseWriter& writer);

}  // namespace kvgate::gateway
