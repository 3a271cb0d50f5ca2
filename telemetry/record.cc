#include "telemetry/record.h"

#include "common/utf8.h"

namespace kvgate::telemetry {

void MakeTextValid(RequestRecord& record) {
  for (std::string* text :
       {&record.request_id, &record.thread_id, &record.endpoint, &record.model, &record.provider,
        &record.provider_type, &record.upstream_model, &record.api_key_id, &record.status,
        &record.error, &record.upstream_request_id, &record.response_id, &record.finish_reason,
        &record.usage.raw, &record.target, &record.system_fingerprint, &record.purpose}) {
    MakeValidUtf8(*text);
  }
}

}  // namespace kvgate::telemetry
