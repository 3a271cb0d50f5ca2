// `kvgate sigv4-sign`: the Bedrock signer on one request read as JSON from stdin, its headers and
// intermediate strings written as JSON to stdout. It exists so that tests (and a curious operator)
// can compare kvgate's SigV4 with botocore's byte for byte (tests/e2e/test_e2e_bedrock_sigv4.py).
//
// Input:  {"method", "host", "path", "query", "headers": [[name, value], ...], "body",
//          "access_key_id", "secret_access_key", "session_token", "region", "service",
//          "unix_seconds"}   (all but host, path and the two keys optional)
// Output: {"headers": {name: value, ...}, "canonical_request", "string_to_sign"}
#include "gateway/sigv4_command.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "gateway/providers/sigv4.h"

namespace kvgate::gateway {

int RunSigV4SignCommand() {
  using nlohmann::json;
  const std::string input((std::istreambuf_iterator<char>(std::cin)),
                          std::istreambuf_iterator<char>());
  const json in = json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) {
    std::fputs("kvgate sigv4-sign: stdin must be a JSON object (see docs/providers.md)\n", stderr);
    return 2;
  }
  try {
    providers::SigV4Request request;
    request.method = in.value("method", "POST");
    request.host = in.at("host").get<std::string>();
    request.path = in.at("path").get<std::string>();
    request.query = in.value("query", "");
    request.body = in.value("body", "");
    for (const json& h : in.value("headers", json::array())) {
      request.headers.emplace_back(h.at(0).get<std::string>(), h.at(1).get<std::string>());
    }
    const providers::AwsCredentials credentials{
        .access_key_id = in.at("access_key_id").get<std::string>(),
        .secret_access_key = in.at("secret_access_key").get<std::string>(),
        .session_token = in.value("session_token", "")};
    const std::string region = in.value("region", "us-east-1");
    const std::string service = in.value("service", "bedrock");
    const int64_t when = in.value("unix_seconds", int64_t{0});
    const providers::SigV4Parts parts =
        providers::SigV4Compute(request, credentials, region, service, when);
    json out;
    out["headers"] = json::object();
    for (const auto& [name, value] :
         providers::SignSigV4(request, credentials, region, service, when)) {
      out["headers"][name] = value;
    }
    out["canonical_request"] = parts.canonical_request;
    out["string_to_sign"] = parts.string_to_sign;
    std::fputs((out.dump() + "\n").c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvgate sigv4-sign: bad input: %s\n", e.what());
    return 2;
  }
}

}  // namespace kvgate::gateway
