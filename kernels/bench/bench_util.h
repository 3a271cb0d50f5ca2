// Helpers of the device check program: device buffers, event timing, the result table.
// Checks return false on a failed CUDA call (printed), never exit.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"

namespace kvgate::cuda::bench {

inline bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
inline bool Ok(const CudaStatus& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "launcher %s failed: %s (kind %d, code %d)\n", what, s.what ? s.what : "",
               static_cast<int>(s.kind), s.code);
  if (s.kind == CudaStatusKind::kCudaError)
    std::fprintf(stderr, "  %s\n", cudaGetErrorString(static_cast<cudaError_t>(s.code)));
  return false;
}
inline bool Ok(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "failed: %s\n", what);
  return ok;
}
#define KV_TRY(expr)                      \
  do {                                    \
    if (!::kvgate::cuda::bench::Ok((expr), #expr)) return false; \
  } while (0)

// Owning device allocation of `bytes`.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool Alloc(size_t bytes) {
    Reset();
    bytes_ = bytes;
    return Ok(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16)), "cudaMalloc");
  }
  void Reset() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // Fills with 0xff bytes: NaN for bf16, f32 and FP8, -1 for integers.
  bool Poison() { return Ok(cudaMemset(ptr_, 0xff, bytes_), "poison"); }
  template <typename T>
  bool Upload(const std::vector<T>& v) {
    return Ok(cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  template <typename T>
  bool Download(std::vector<T>* v, size_t count) const {
    v->resize(count);
    return Ok(cudaMemcpy(v->data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Median milliseconds of `reps` runs of fn after `warmup` runs, timed with CUDA events on stream.
// fn returns false on failure; the median is then negative.
inline double TimeMs(cudaStream_t stream, int warmup, int reps, const std::function<bool()>& fn) {
  for (int i = 0; i < warmup; ++i)
    if (!fn()) return -1.0;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, stream);
    if (!fn()) return -1.0;
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float t = 0.0f;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!Ok(cudaGetLastError(), "timed region")) return -1.0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string kernel, size;
  double err = 0.0;        // relative error (or mismatch count for bit-exact rows)
  double threshold = 0.0;
  bool pass = false;
  double ms = 0.0;
  double rate = 0.0;       // GB/s or TFLOP/s
  std::string unit;        // "GB/s" or "TFLOP/s"
  double ceiling = 0.0;    // the measured ceiling in the same unit (0: none)
  std::string note;
};

inline void PrintHeader(const char* prefix = "") {
  std::printf("%s%-28s %-30s %10s %9s %-4s %9s %10s %-7s %6s  %s\n", prefix, "kernel", "size", "rel_err",
              "thresh", "ok", "ms", "rate", "unit", "frac", "note");
}

inline void PrintRow(const Row& r, const char* prefix = "") {
  char frac[16] = "-";
  if (r.ceiling > 0.0 && r.rate > 0.0) std::snprintf(frac, sizeof(frac), "%.2f", r.rate / r.ceiling);
  std::printf("%s%-28s %-30s %10.3g %9.2g %-4s %9.4f %10.1f %-7s %6s  %s\n", prefix, r.kernel.c_str(),
              r.size.c_str(), r.err, r.threshold, r.pass ? "PASS" : "FAIL", r.ms, r.rate, r.unit.c_str(), frac,
              r.note.c_str());
}

// The result table. Each row is printed (prefixed "row: ") and flushed the moment it is added, so
// a run cut short by a timeout or a fault still leaves every row measured before it in the log;
// the whole table is printed again at the end.
class RowTable {
 public:
  void push_back(Row r) {
    if (rows_.empty()) PrintHeader("row: ");
    PrintRow(r, "row: ");
    std::fflush(stdout);
    rows_.push_back(std::move(r));
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
};

inline void PrintTable(const std::vector<Row>& rows) {
  std::printf("\n");
  PrintHeader();
  for (const Row& r : rows) PrintRow(r);
  std::fflush(stdout);
}

}  // namespace kvgate::cuda::bench
