#include "kernels/bench/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <thread>

#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8.h"

namespace kvgate::cuda::ref {

void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  const int threads = static_cast<int>(std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 64));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    });
  for (auto& th : pool) th.join();
}

double RelError(std::span<const float> out, std::span<const double> ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    const double e = static_cast<double>(out[i]) - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

double DecodeE4M3ByDefinition(uint8_t code) {
  const int sign = (code & 0x80) ? -1 : 1;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign * mag;
}

uint8_t EncodeE4M3ByDefinition(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7e;
  uint8_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {  // every finite non-negative code, in increasing value
    const double err = std::fabs(DecodeE4M3ByDefinition(static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return sign | best;
}

double HostPagedKv::K(int64_t slot, int h, int d) const {
  const size_t i = static_cast<size_t>((slot * num_kv_heads + h) * head_dim + d);
  if (!fp8) return f16 ? HalfToFloat(k16[i]) : Bf16ToFloat(k16[i]);
  return static_cast<double>(DecodeE4M3(k8[i])) *
         k_scale[static_cast<size_t>(slot / kBlockTokens * num_kv_heads + h)];
}

double HostPagedKv::V(int64_t slot, int h, int d) const {
  const size_t i = static_cast<size_t>((slot * num_kv_heads + h) * head_dim + d);
  if (!fp8) return f16 ? HalfToFloat(v16[i]) : Bf16ToFloat(v16[i]);
  return static_cast<double>(DecodeE4M3(v8[i])) *
         v_scale[static_cast<size_t>(slot / kBlockTokens * num_kv_heads + h)];
}

void AttendOne(const HostPagedKv& kv, const int32_t* block_row, int n_keys, int kvh,
               const float* q, double scale, double* out) {
  const int d = kv.head_dim;
  std::vector<double> s(static_cast<size_t>(n_keys));
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n_keys; ++j) {
    const int64_t slot = static_cast<int64_t>(block_row[j / kBlockTokens]) * kBlockTokens + j % kBlockTokens;
    double dot = 0.0;
    for (int i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * kv.K(slot, kvh, i);
    s[static_cast<size_t>(j)] = dot * scale;
    mx = std::max(mx, s[static_cast<size_t>(j)]);
  }
  double sum = 0.0;
  for (auto& v : s) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (int i = 0; i < d; ++i) out[i] = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    const int64_t slot = static_cast<int64_t>(block_row[j / kBlockTokens]) * kBlockTokens + j % kBlockTokens;
    const double p = s[static_cast<size_t>(j)] / sum;
    for (int i = 0; i < d; ++i) out[i] += p * kv.V(slot, kvh, i);
  }
}

void RmsNormRow(const uint16_t* x, const uint16_t* w, int cols, double eps, double* out) {
  double ss = 0.0;
  for (int i = 0; i < cols; ++i) ss += static_cast<double>(Bf16ToFloat(x[i])) * Bf16ToFloat(x[i]);
  const double inv = 1.0 / std::sqrt(ss / cols + eps);
  for (int i = 0; i < cols; ++i) out[i] = Bf16ToFloat(x[i]) * inv * Bf16ToFloat(w[i]);
}

void RopePair(double x0, double x1, int i, int d, int32_t pos, double theta, double* y0, double* y1) {
  const double angle = pos * std::pow(theta, -2.0 * i / d);
  const double c = std::cos(angle), s = std::sin(angle);
  *y0 = x0 * c - x1 * s;
  *y1 = x0 * s + x1 * c;
}

double SiluMul(double gate, double up) { return gate / (1.0 + std::exp(-gate)) * up; }

void Fp8CacheWrite(const uint16_t* x, int64_t stride, std::span<const CacheSegment> segments,
                   int num_kv_heads, int head_dim, std::vector<uint8_t>* cache,
                   std::vector<float>* scales) {
  const int64_t row = static_cast<int64_t>(num_kv_heads) * head_dim;
  for (const CacheSegment& seg : segments) {
    for (int h = 0; h < num_kv_heads; ++h) {
      float amax = 0.0f;
      for (int t = 0; t < seg.count; ++t)
        for (int i = 0; i < head_dim; ++i)
          amax = std::max(amax, std::fabs(Bf16ToFloat(x[(seg.token_begin + t) * stride + h * head_dim + i])));
      const size_t si = static_cast<size_t>(seg.block) * num_kv_heads + h;
      const float old_scale = seg.first_offset == 0 ? 0.0f : (*scales)[si];
      const float scale = Fp8RaisedScale(old_scale, amax);
      const int64_t base = static_cast<int64_t>(seg.block) * kBlockTokens * row + h * head_dim;
      if (old_scale > 0.0f && scale != old_scale) {
        for (int t = 0; t < seg.first_offset; ++t)
          for (int i = 0; i < head_dim; ++i) {
            uint8_t& c = (*cache)[static_cast<size_t>(base + t * row + i)];
            c = EncodeE4M3((DecodeE4M3(c) * old_scale) / scale);
          }
      }
      for (int t = 0; t < seg.count; ++t)
        for (int i = 0; i < head_dim; ++i) {
          const float v = Bf16ToFloat(x[(seg.token_begin + t) * stride + h * head_dim + i]);
          (*cache)[static_cast<size_t>(base + (seg.first_offset + t) * row + i)] =
              scale > 0.0f ? EncodeE4M3(v / scale) : 0;
        }
      (*scales)[si] = scale;
    }
  }
}

}  // namespace kvgate::cuda::ref
