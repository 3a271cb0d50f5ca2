// The read API over the telemetry store (GET /api/threads[/{id}], /api/requests[/{id}],
// /api/overview, /api/live) and the router's and engine's state (/api/routes, /api/engine): the
// query parameters checked (query_params.h), the queries run on the blocking pool.
#include "gateway/admin/admin_api.h"
#include "gateway/admin/query_params.h"
#include "gateway/answers.h"
#include "gateway/run_blocking.h"
#include "telemetry/request_filters.h"

namespace kvgate::gateway {
namespace {

using nlohmann::json;
namespace asio = boost::asio;
using admin::OverviewRange;
using admin::OverviewRangeFrom;
using admin::RequestListing;
using admin::RequestListingFrom;
using admin::ThreadQueryFrom;

}  // namespace

json AdminApi::ComparisonPrices() const {
  json out = json::object();
  for (const router::Target& t : deps_.router->targets()) {
    if (!t.price_as.empty()) out[t.name] = t.price_as;
  }
  return out;
}

asio::awaitable<void> AdminApi::HandleRead(http::Request& request, http::ResponseWriter& writer) {
  const std::string& path = request.path;
  telemetry::TelemetryStore& store = *deps_.store;
  boost::asio::thread_pool& pool = *deps_.blocking_pool;
  auto run = [&pool](auto fn) { return RunBlocking(pool, std::move(fn)); };

  Result<json> result = MakeError(ErrorCode::kNotFound, "Invalid URL (GET " + path + ")");
  if (path == "/api/threads") {
    auto query = ThreadQueryFrom(request);
    if (!query) {
      result = std::unexpected(query.error());
    } else {
      const telemetry::ThreadQuery& q = *query;
      result = co_await run([&store, &q] { return store.ListThreads(q); });
    }
  } else if (path.rfind("/api/threads/", 0) == 0) {
    std::string id = http::PercentDecode(std::string_view(path).substr(13));
    result = co_await run([&store, &id] { return store.GetThread(id); });
    if (result) (*result)["comparison_prices"] = ComparisonPrices();
  } else if (path == "/api/requests") {
    auto listing = RequestListingFrom(request);
    if (!listing) {
      result = std::unexpected(listing.error());
    } else {
      const RequestListing& l = *listing;
      result = co_await run([&store, &l] {
        return l.agrees ? telemetry::ListRequestsByAgreement(store, l.query, *l.agrees)
                        : store.ListRequests(l.query);
      });
    }
  } else if (path.rfind("/api/requests/", 0) == 0) {
    std::string id = http::PercentDecode(std::string_view(path).substr(14));
    result = co_await run([&store, &id] { return store.GetRequest(id); });
  } else if (path == "/api/routes") {
    result = deps_.router->Describe();
  } else if (path == "/api/overview") {
    auto range = OverviewRangeFrom(request, deps_.clock->NowUnixMicros());
    if (!range) {
      result = std::unexpected(range.error());
    } else {
      const OverviewRange& r = *range;
      result = co_await run(
          [&store, &r] { return store.Overview(r.since_us, r.until_us, r.bucket_seconds); });
      if (result) (*result)["comparison_prices"] = ComparisonPrices();
    }
  } else if (path == "/api/live") {
    const std::string thread_id = request.query_param("thread_id");
    result = co_await run([&store, &thread_id] { return store.Live(thread_id); });
  } else if (path == "/api/engine") {
    result = EngineState();
  }
  co_await SendResult(writer, result);
}

}  // namespace kvgate::gateway
