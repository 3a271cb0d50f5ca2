#include "kernels/cuda/fp8_linear.h"

#include <algorithm>
#include <utility>

#include "kernels/cuda/fp8_quant.h"

namespace kvgate::cuda {
namespace {

constexpr size_t kScalesOffsetAlign = 256;  // the codes' buffer ends here, the three floats follow

size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

CudaStatus Call(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return CudaStatus::Ok();
  return {CudaStatusKind::kCudaError, static_cast<int>(e), what};
}

}  // namespace

CudaStatus Fp8Linear::Create(size_t workspace_bytes, std::unique_ptr<Fp8Linear>* out) {
  std::unique_ptr<GemmFp8> gemm;
  if (CudaStatus s = GemmFp8::Create(workspace_bytes, &gemm); !s.ok()) return s;
  out->reset(new Fp8Linear(std::move(gemm)));
  return CudaStatus::Ok();
}

Fp8Linear::~Fp8Linear() {
  for (auto& [key, w] : weights_) cudaFree(w.codes);
  if (act_) cudaFree(act_);
}

CudaStatus Fp8Linear::PrepareWeight(const __nv_bfloat16* w, int64_t n, int64_t k, cudaStream_t stream) {
  if (HasWeight(w)) return CudaStatus::Ok();
  if (!w || n <= 0 || k <= 0) return CudaStatus::Invalid("fp8 linear: weight must be non-null with n, k > 0");
  const size_t elems = static_cast<size_t>(n * k), codes = RoundUp(elems, kScalesOffsetAlign);
  Weight q{nullptr, nullptr, n, k};
  if (CudaStatus s = Call(cudaMalloc(&q.codes, codes + 4 * sizeof(float)), "cudaMalloc(fp8 weight)"); !s.ok())
    return s;
  q.scales = reinterpret_cast<float*>(static_cast<char*>(q.codes) + codes);
  CudaStatus s = LaunchAmaxBf16(w, n * k, q.scales, stream);
  if (s.ok()) s = LaunchFp8ScaleFromAmax(q.scales, q.scales + 1, q.scales + 2, stream);
  if (s.ok()) s = LaunchQuantizeE4M3Bf16(w, n * k, q.scales + 2, static_cast<uint8_t*>(q.codes), stream);
  if (!s.ok()) {
    cudaStreamSynchronize(stream);
    cudaFree(q.codes);
    return s;
  }
  weights_.emplace(w, q);
  return CudaStatus::Ok();
}

CudaStatus Fp8Linear::ReserveActivations(int64_t elems, cudaStream_t stream) {
  if (ActivationsFit(elems)) return CudaStatus::Ok();
  const size_t want = std::max(RoundUp(static_cast<size_t>(elems), kScalesOffsetAlign), act_bytes_ * 2);
  if (act_) {
    if (CudaStatus s = Call(cudaStreamSynchronize(stream), "fp8 linear scratch sync"); !s.ok()) return s;
    cudaFree(act_);
    act_ = nullptr, act_bytes_ = 0, act_scales_ = nullptr;
  }
  if (CudaStatus s = Call(cudaMalloc(&act_, want + 4 * sizeof(float)), "cudaMalloc(fp8 activations)"); !s.ok())
    return s;
  act_bytes_ = want;
  act_scales_ = reinterpret_cast<float*>(static_cast<char*>(act_) + want);
  return CudaStatus::Ok();
}

CudaStatus Fp8Linear::QuantizeActivations(const float* x, int64_t t, int64_t k, cudaStream_t stream) {
  if (!x || t <= 0 || k <= 0) return CudaStatus::Invalid("fp8 linear: activations must be non-null with t, k > 0");
  if (!ActivationsFit(t * k)) return CudaStatus::Invalid("fp8 linear: activation scratch too small (Reserve first)");
  CudaStatus s = LaunchAmaxF32(x, t * k, act_scales_, stream);
  if (s.ok()) s = LaunchFp8ScaleFromAmax(act_scales_, act_scales_ + 1, act_scales_ + 2, stream);
  if (s.ok()) s = LaunchQuantizeE4M3F32(x, t * k, act_scales_ + 2, static_cast<uint8_t*>(act_), stream);
  act_elems_ = s.ok() ? t * k : 0;
  return s;
}

CudaStatus Fp8Linear::Run(const __nv_bfloat16* w, int64_t n, float* y, int64_t t, int64_t k, cudaStream_t stream) {
  const auto it = weights_.find(w);
  if (it == weights_.end()) return CudaStatus::Invalid("fp8 linear: weight not prepared");
  const Weight& q = it->second;
  if (q.n != n || q.k != k) return CudaStatus::Invalid("fp8 linear: weight shape differs from its preparation");
  if (act_elems_ != t * k) return CudaStatus::Invalid("fp8 linear: activations of another shape were quantized");
  return gemm_->Run(static_cast<const __nv_fp8_e4m3*>(act_), k, act_scales_ + 1,
                    static_cast<const __nv_fp8_e4m3*>(q.codes), k, q.scales + 1, y, n, t, n, k, 0.0f, stream);
}

}  // namespace kvgate::cuda
