#include "telemetry/otlp/exporter.h"

#include <algorithm>
#include <cstdio>

#include "common/thread_name.h"

namespace kvgate::telemetry::otlp {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t NowUnixNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool Retryable(int status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

}  // namespace

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\r')) value.remove_suffix(1);
  if (value.empty() || value.size() > 9) return std::nullopt;
  int64_t seconds = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    seconds = seconds * 10 + (c - '0');
  }
  return std::chrono::seconds(seconds);
}

Exporter::Exporter(ExporterOptions options, Counter* dropped,
                   std::unique_ptr<alerts::HttpSender> sender)
    : options_(std::move(options)),
      resource_{.attributes = {{"service.name", options_.service_name},
                               {"telemetry.sdk.name", std::string("kvgate")},
                               {"telemetry.sdk.language", std::string("cpp")}},
                .scope_name = "kvgate"},
      dropped_counter_(dropped),
      sender_(sender ? std::move(sender) : std::make_unique<alerts::CurlHttpSender>()) {}

std::unique_ptr<Exporter> Exporter::Start(ExporterOptions options, Counter* dropped,
                                          std::unique_ptr<alerts::HttpSender> sender) {
  std::unique_ptr<Exporter> exporter(new Exporter(std::move(options), dropped, std::move(sender)));
  exporter->thread_ = std::thread([e = exporter.get()] {
    NameThisThread("kvgate-otlp");
    e->Run();
  });
  return exporter;
}

Exporter::~Exporter() { Stop(); }

void Exporter::Observe(const RequestRecord& record) {
  const bool spans = options_.traces && record.trace.active && record.trace.sampled;
  if (!spans && !options_.metrics) return;
  Enqueue(FinishedFrom(record));
}

void Exporter::Enqueue(FinishedRequest request) {
  {
    MutexLock lock(&mu_);
    if (!stopping_ && queue_.size() < options_.queue_capacity) {
      queue_.push_back(std::move(request));
      // A full batch goes at once; otherwise the thread's batch delay gathers more.
      if (queue_.size() == 1 || queue_.size() >= options_.max_batch) wake_.Signal();
      return;
    }
  }
  CountDropped(1);
}

void Exporter::CountDropped(uint64_t requests) {
  if (requests == 0) return;
  dropped_.fetch_add(requests, std::memory_order_relaxed);
  dropped_unlogged_.fetch_add(requests, std::memory_order_relaxed);
  if (dropped_counter_ != nullptr) dropped_counter_->Inc(requests);
}

void Exporter::LogDrops(bool force) {
  const auto now = Clock::now();
  if (!force && last_drop_log_ != Clock::time_point{} &&
      now - last_drop_log_ < std::chrono::minutes(1)) {
    return;
  }
  const uint64_t n = dropped_unlogged_.exchange(0, std::memory_order_relaxed);
  if (n == 0) return;
  last_drop_log_ = now;
  std::fprintf(stderr,
               "kvgate: otlp: dropped the telemetry of %llu request(s) (export queue full or "
               "collector at %s not taking exports); see kvgate_otlp_dropped_total\n",
               static_cast<unsigned long long>(n), options_.endpoint.c_str());
}

bool Exporter::SleepUntil(Clock::time_point deadline) {
  MutexLock lock(&mu_);
  while (!stopping_) {
    if (!wake_.WaitUntil(&mu_, deadline) && Clock::now() >= deadline) return true;
  }
  return false;
}

bool Exporter::Export(const char* path, const std::string& body, bool once) {
  alerts::HttpRequest request{.url = options_.endpoint + path,
                              .headers = options_.headers,
                              .body = body,
                              .timeout_ms = options_.timeout.count()};
  request.headers.emplace_back("Content-Type", ContentType(options_.encoding));
  // At shutdown a collector that does not answer may hold the process only briefly.
  if (once) request.timeout_ms = std::min<int64_t>(request.timeout_ms, 2'000);
  std::chrono::milliseconds backoff = options_.first_backoff;
  for (int attempt = 1;; ++attempt) {
    Result<alerts::HttpResponse> response = sender_->Post(request);
    int status = 0;
    std::optional<std::chrono::seconds> retry_after;
    if (response) {
      status = response->status;
      if (status >= 200 && status < 300) return true;
      if (status == 429 || status == 503) {
        if (auto value = response->Header("retry-after")) retry_after = ParseRetryAfter(*value);
      }
    }
    // A transport error (refused, timed out) or a status the collector may get over is retried.
    const bool retry = !response || Retryable(status);
    if (once || !retry || attempt >= options_.max_tries) {
      failed_exports_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    std::chrono::milliseconds wait = backoff;
    if (retry_after) wait = std::chrono::duration_cast<std::chrono::milliseconds>(*retry_after);
    wait = std::min(wait, options_.max_backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
    if (!SleepUntil(Clock::now() + wait)) {
      failed_exports_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    retries_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Exporter::Run() {
  GenAiMetrics metrics(NowUnixNanos());
  bool metrics_changed = false;
  auto next_metrics = Clock::now() + options_.export_interval;
  for (;;) {
    std::vector<FinishedRequest> batch;
    bool stopping = false;
    {
      MutexLock lock(&mu_);
      // Wait for a request, the metrics' turn, or Stop(); then give others a moment to join the
      // batch unless it is already full.
      while (queue_.empty() && !stopping_ && Clock::now() < next_metrics) {
        wake_.WaitUntil(&mu_, next_metrics);
      }
      if (!queue_.empty() && !stopping_ && queue_.size() < options_.max_batch) {
        const auto gather_until = std::min(Clock::now() + options_.batch_delay, next_metrics);
        while (!stopping_ && queue_.size() < options_.max_batch && Clock::now() < gather_until) {
          wake_.WaitUntil(&mu_, gather_until);
        }
      }
      stopping = stopping_;
      const size_t n = stopping ? queue_.size() : std::min(queue_.size(), options_.max_batch);
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::vector<Span> spans;
    uint64_t traced_requests = 0;
    for (const FinishedRequest& request : batch) {
      if (options_.metrics) {
        metrics.Add(request);
        metrics_changed = true;
      }
      if (options_.traces && request.trace.active && request.trace.sampled) {
        std::vector<Span> own = SpansOf(request);
        spans.insert(spans.end(), std::make_move_iterator(own.begin()),
                     std::make_move_iterator(own.end()));
        ++traced_requests;
      }
    }
    // At shutdown the rest goes out in batches too, one try each.
    for (size_t from = 0; from < spans.size();) {
      const size_t to = std::min(spans.size(), from + options_.max_batch * 4);
      const std::span<const Span> part(spans.data() + from, to - from);
      if (Export("/v1/traces", EncodeTraces(resource_, part, options_.encoding), stopping)) {
        spans_exported_.fetch_add(part.size(), std::memory_order_relaxed);
      } else {
        // The requests whose spans were in the part that failed (rounded up).
        CountDropped(std::max<uint64_t>(1, traced_requests * part.size() / spans.size()));
      }
      from = to;
    }
    if (options_.metrics && metrics_changed && (stopping || Clock::now() >= next_metrics)) {
      // Cumulative: a failed export loses nothing, the next one carries the totals.
      const std::vector<Histogram> snapshot = metrics.Snapshot(NowUnixNanos());
      if (Export("/v1/metrics", EncodeMetrics(resource_, snapshot, options_.encoding), stopping)) {
        metric_exports_.fetch_add(1, std::memory_order_relaxed);
        metrics_changed = false;
      }
    }
    if (Clock::now() >= next_metrics) next_metrics = Clock::now() + options_.export_interval;
    LogDrops(stopping);
    if (stopping) return;
  }
}

void Exporter::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

Exporter::Stats Exporter::stats() const {
  return {.spans_exported = spans_exported_.load(std::memory_order_relaxed),
          .metric_exports = metric_exports_.load(std::memory_order_relaxed),
          .dropped = dropped_.load(std::memory_order_relaxed),
          .retries = retries_.load(std::memory_order_relaxed),
          .failed_exports = failed_exports_.load(std::memory_order_relaxed)};
}

}  // namespace kvgate::telemetry::otlp
