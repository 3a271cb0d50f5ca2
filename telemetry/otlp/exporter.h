// The OpenTelemetry exporter (config telemetry.otlp): finished requests in, OTLP/HTTP exports out
// — each sampled request's spans to {endpoint}/v1/traces in batches, and the GenAI metrics to
// {endpoint}/v1/metrics every export_interval, cumulative.
//
// The request path only copies a small struct into a bounded queue (Observe): encoding and HTTP
// happen on the exporter's own thread, so a collector that is down or slow never delays a
// request. When the queue is full the request's telemetry is dropped and counted
// (kvgate_otlp_dropped_total, and a log line at most once a minute). A failed export is retried
// with exponential backoff, honouring Retry-After on 429 and 503, while the queue keeps taking
// (and, once full, dropping) new requests.
//
// Thread safety: Observe() from any thread; Stop() once, from the owner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "telemetry/alerts/channels.h"
#include "telemetry/metrics.h"
#include "telemetry/otlp/encode.h"
#include "telemetry/otlp/genai.h"
#include "telemetry/record.h"

namespace kvgate::telemetry::otlp {

struct ExporterOptions {
  std::string endpoint;  // "http://collector:4318", no trailing slash
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every export
  bool traces = true;
  bool metrics = true;
  double sample_ratio = 1.0;  // of the traces kvgate starts; a client's traceparent decides its own
  Encoding encoding = Encoding::kProtobuf;
  std::chrono::milliseconds export_interval{10'000};  // metrics
  // How long spans wait to be batched with others; a full batch goes at once.
  std::chrono::milliseconds batch_delay{200};
  size_t queue_capacity = 4096;               // requests waiting for the exporter's thread
  size_t max_batch = 512;                     // requests per traces export
  std::chrono::milliseconds timeout{10'000};  // per export request
  int max_tries = 5;                          // per export, the first included
  std::chrono::milliseconds first_backoff{500};
  std::chrono::milliseconds max_backoff{30'000};  // also the cap on a Retry-After
  std::string service_name = "kvgate";
};

class Exporter {
 public:
  // Starts the thread. `dropped` (kvgate_otlp_dropped_total) counts requests whose telemetry was
  // dropped: a full queue, or a traces export that failed for good. `sender` posts the exports
  // (libcurl when null; libcurl's global init must have been done).
  static std::unique_ptr<Exporter> Start(ExporterOptions options, Counter* dropped,
                                         std::unique_ptr<alerts::HttpSender> sender = nullptr);
  ~Exporter();  // Stop()
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // A finished request (Recorder listener): queued, or dropped when the queue is full.
  void Observe(const RequestRecord& record);
  void Enqueue(FinishedRequest request);
  // Exports what is queued (and the metrics) with one try each, bounded by the options' timeout,
  // then joins the thread. Idempotent.
  void Stop();

  struct Stats {
    uint64_t spans_exported = 0;
    uint64_t metric_exports = 0;
    uint64_t dropped = 0;  // requests
    uint64_t retries = 0;  // export requests sent again
    uint64_t failed_exports = 0;
  };
  Stats stats() const;

 private:
  explicit Exporter(ExporterOptions options, Counter* dropped,
                    std::unique_ptr<alerts::HttpSender> sender);
  void Run();
  // Posts `body` to `path`, retrying unless `once`; true when the collector took it.
  bool Export(const char* path, const std::string& body, bool once);
  // Sleeps until `deadline` or Stop(); false when stopped.
  bool SleepUntil(std::chrono::steady_clock::time_point deadline);
  void CountDropped(uint64_t requests);
  void LogDrops(bool force);

  const ExporterOptions options_;
  const Resource resource_;
  Counter* const dropped_counter_;
  const std::unique_ptr<alerts::HttpSender> sender_;

  mutable Mutex mu_;
  CondVar wake_;
  std::deque<FinishedRequest> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> spans_exported_{0}, metric_exports_{0}, dropped_{0}, retries_{0},
      failed_exports_{0};
  std::atomic<uint64_t> dropped_unlogged_{0};
  std::chrono::steady_clock::time_point last_drop_log_{};  // the exporter's thread's only
  std::thread thread_;
};

// Reads a Retry-After header's delta-seconds ("120"); nullopt for a date or garbage.
std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value);

}  // namespace kvgate::telemetry::otlp
