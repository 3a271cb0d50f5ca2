// What the CUDA backend's GEMMs compute, reproduced on the host: each operand is rounded to the
// format the GEMM reads (bf16, or E4M3 codes under a per-tensor or per-row scale, with the scale
// rule of fp8_quant_math.h), products are accumulated in f32, and the scales multiply the finished
// dot once, the way cuBLASLt applies its A/B scale pointers. The FP8 accuracy check
// (bench/fp8_gemm) runs every MatMul of the model through it on the CPU to measure what FP8 costs
// before a GPU runs it. Exact up to accumulation order: the tensor cores sum in another order, and
// Hopper's FP8 MMA keeps fewer accumulator bits than f32 (the device check "gemm fp8" measures
// that part). Plain C++, tested without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kvgate::cuda {

enum class GemmFormat {
  kF32,        // the values as they are (a reference, no GEMM reads this)
  kBf16,       // bf16, round to nearest even: GemmBf16 and the CUDA backend's MatMul today
  kFp8Tensor,  // E4M3 codes, one scale for the whole matrix: GemmFp8 (cuBLASLt's scale pointers)
  kFp8Row,     // E4M3 codes, one scale per row (token of x, output channel of w)
};

std::string_view GemmFormatName(GemmFormat f);
// "f32", "bf16", "fp8" (per tensor) or "fp8-row"; nullopt for anything else.
std::optional<GemmFormat> ParseGemmFormat(std::string_view name);

// One operand as a GEMM reads it: element (r, c) stands for values[r * cols + c] * row_scale[r].
// values are exactly representable in the format (decoded codes, unscaled, for the FP8 formats).
struct GemmOperand {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
  std::vector<float> row_scale;  // [rows]; all equal for kFp8Tensor, all 1 for kF32 and kBf16
};

// x [rows][cols] in format f. The FP8 scales come from the amax of the tensor (kFp8Tensor) or of
// the row (kFp8Row); an all-zero tensor or row gets scale 1 (Fp8TensorScale).
GemmOperand MakeGemmOperand(const float* x, int64_t rows, int64_t cols, GemmFormat f);

// y[m * ldy + n] = (sum_k x(m, k) w(n, k)) * x.row_scale[m] * w.row_scale[n] for the output
// columns n in [n_begin, n_end) and every row m of x; x.cols must equal w.cols. Column ranges are
// independent, so callers split them across threads.
void EmulatedGemmColumns(const GemmOperand& x, const GemmOperand& w, int64_t n_begin, int64_t n_end, float* y,
                         int64_t ldy);

}  // namespace kvgate::cuda
