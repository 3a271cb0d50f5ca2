#include "gateway/api/apis.h"

namespace kvgate::gateway::api {

ClientApis::ClientApis() {
  std::unique_ptr<ClientApi> apis[] = {NewChatApi(providers::Endpoint::kChatCompletions),
                                       NewChatApi(providers::Endpoint::kCompletions),
                                       NewEmbeddingsApi(), NewResponsesApi(), NewMessagesApi()};
  for (std::unique_ptr<ClientApi>& api : apis) {
    const std::string_view path = providers::EndpointPath(api->endpoint());
    rows_.push_back({path, std::move(api)});
  }
}

const ClientApi* ClientApis::Find(std::string_view path) const {
  for (const Row& row : rows_) {
    if (row.path == path) return row.api.get();
  }
  return nullptr;
}

}  // namespace kvgate::gateway::api
