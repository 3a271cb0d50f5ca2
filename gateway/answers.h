// The gateway's plain JSON answers outside the inference path: OpenAI-shaped error bodies, the
// status an ErrorCode maps to, the 404 and 405 every route gives, and the bearer token of an
// Authorization header. Shared by the dispatch (gateway.cc) and the admin API (admin/), so that
// both answer a wrong method or an unknown path in the same words.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/error.h"
#include "gateway/http/server.h"

namespace kvgate::gateway {

// The OpenAI error body (providers::MakeOpenAIError owns its shape); the status goes separately.
std::string ErrorJson(std::string message, std::string type, std::string code);

// The HTTP status of an error kvgate answers with (an unmapped code is a 500).
int StatusFor(ErrorCode code);

// The OpenAI error type of a status kvgate answers with.
std::string ErrorTypeFor(int status);

// The credentials of an "Authorization: Bearer <token>" header (the scheme is case-insensitive,
// RFC 9110 11.1), or "" when there are none.
std::string_view BearerToken(std::string_view authorization);

// GET routes answer HEAD too (the server leaves the body out).
inline bool IsGet(std::string_view method) { return method == "GET" || method == "HEAD"; }

// 405 with an Allow header listing `allow`.
boost::asio::awaitable<void> SendMethodNotAllowed(http::ResponseWriter& writer,
                                                  const http::Request& request, std::string allow);

// 404 naming the method and path.
boost::asio::awaitable<void> SendNotFound(http::ResponseWriter& writer,
                                          const http::Request& request);

// A JSON answer: `ok_status` with the value, or the error's status (StatusFor) with its message,
// the type of that status and the code's name.
boost::asio::awaitable<void> SendResult(http::ResponseWriter& writer,
                                        const Result<nlohmann::json>& result, int ok_status = 200);

}  // namespace kvgate::gateway
