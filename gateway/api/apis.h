// The client APIs kvgate serves, by path: the table the gateway dispatches POST /v1/* through
// (client_api.h has the interface). A new client API is one factory here and one row in
// ClientApis' constructor.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "gateway/api/client_api.h"

namespace kvgate::gateway::api {

std::unique_ptr<ClientApi> NewChatApi(providers::Endpoint endpoint);  // chat or completions
std::unique_ptr<ClientApi> NewEmbeddingsApi();
std::unique_ptr<ClientApi> NewResponsesApi();
std::unique_ptr<ClientApi> NewMessagesApi();

// Constant after construction; shared by every event loop.
class ClientApis {
 public:
  ClientApis();
  // The API served at `path` (by POST), null when none is.
  const ClientApi* Find(std::string_view path) const;

 private:
  struct Row {
    std::string_view path;  // providers::EndpointPath of the API's endpoint
    std::unique_ptr<ClientApi> api;
  };
  std::vector<Row> rows_;
};

}  // namespace kvgate::gateway::api
