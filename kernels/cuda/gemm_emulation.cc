#include "kernels/cuda/gemm_emulation.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/bf16_host.h"
#include "kernels/cuda/fp8_quant_math.h"

namespace kvgate::cuda {

std::string_view GemmFormatName(GemmFormat f) {
  switch (f) {
    case GemmFormat::kF32: return "f32";
    case GemmFormat::kBf16: return "bf16";
    case GemmFormat::kFp8Tensor: return "fp8";
    case GemmFormat::kFp8Row: return "fp8-row";
  }
  return "?";
}

std::optional<GemmFormat> ParseGemmFormat(std::string_view name) {
  for (GemmFormat f : {GemmFormat::kF32, GemmFormat::kBf16, GemmFormat::kFp8Tensor, GemmFormat::kFp8Row}) {
    if (GemmFormatName(f) == name) return f;
  }
  return std::nullopt;
}

namespace {

float Amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// values[0..cols) = the decoded E4M3 codes of x under the scale of `amax`; *scale = that scale.
void QuantizeRowE4M3(const float* x, int64_t cols, float amax, float* values, float* scale) {
  const float inv = Fp8TensorInvScale(amax);
  *scale = Fp8TensorScale(amax);
  for (int64_t c = 0; c < cols; ++c) values[c] = DecodeE4M3(QuantizeE4M3(x[c], inv));
}

}  // namespace

GemmOperand MakeGemmOperand(const float* x, int64_t rows, int64_t cols, GemmFormat f) {
  GemmOperand op{rows, cols, std::vector<float>(static_cast<size_t>(rows * cols)),
                 std::vector<float>(static_cast<size_t>(rows), 1.0f)};
  const int64_t n = rows * cols;
  switch (f) {
    case GemmFormat::kF32:
      std::copy(x, x + n, op.values.begin());
      break;
    case GemmFormat::kBf16:
      for (int64_t i = 0; i < n; ++i) op.values[i] = RoundBf16(x[i]);
      break;
    case GemmFormat::kFp8Tensor: {
      const float amax = Amax(x, n);
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeRowE4M3(x + r * cols, cols, amax, op.values.data() + r * cols, &op.row_scale[r]);
      }
      break;
    }
    case GemmFormat::kFp8Row:
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        QuantizeRowE4M3(row, cols, Amax(row, cols), op.values.data() + r * cols, &op.row_scale[r]);
      }
      break;
  }
  return op;
}

void EmulatedGemmColumns(const GemmOperand& x, const GemmOperand& w, int64_t n_begin, int64_t n_end, float* y,
                         int64_t ldy) {
  const int64_t k = x.cols;
  // Eight partial sums per dot in a fixed order: the compiler vectorises the lanes without
  // reassociating anything, and each output is the same whatever the column split.
  constexpr int kLanes = 8;
  const int64_t k_main = k - k % kLanes;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const float* wr = w.values.data() + n * k;
    for (int64_t m = 0; m < x.rows; ++m) {
      const float* xr = x.values.data() + m * k;
      float acc[kLanes] = {};
      for (int64_t i = 0; i < k_main; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) acc[j] += xr[i + j] * wr[i + j];
      }
      float dot = 0.0f;
      for (int j = 0; j < kLanes; ++j) dot += acc[j];
      for (int64_t i = k_main; i < k; ++i) dot += xr[i] * wr[i];
      y[m * ldy + n] = dot * (x.row_scale[m] * w.row_scale[n]);
    }
  }
}

}  // namespace kvgate::cuda
