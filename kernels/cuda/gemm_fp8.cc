#include "kernels/cuda/gemm_fp8.h"

#include <cublasLt.h>

#include <utility>

#include "kernels/cuda/gemm.h"  // GemmPointerAlignment

namespace kvgate::cuda {
namespace {

CudaStatus CublasFail(cublasStatus_t s, const char* what) {
  return {CudaStatusKind::kCublasError, static_cast<int>(s), what};
}
CudaStatus CudaFail(cudaError_t e, const char* what) {
  return {CudaStatusKind::kCudaError, static_cast<int>(e), what};
}

}  // namespace

struct GemmFp8::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CudaStatus GemmFp8::Create(size_t workspace_bytes, std::unique_ptr<GemmFp8>* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return {CudaStatusKind::kNoDevice, 0, "no CUDA device found"};
  std::unique_ptr<GemmFp8> g(new GemmFp8());
  cublasLtHandle_t h = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtCreate");
  g->handle_ = h;
  if (workspace_bytes > 0) {
    if (cudaError_t e = cudaMalloc(&g->workspace_, workspace_bytes); e != cudaSuccess)
      return CudaFail(e, "cudaMalloc(fp8 gemm workspace)");
  }
  g->workspace_bytes_ = workspace_bytes;
  *out = std::move(g);
  return CudaStatus::Ok();
}

GemmFp8::~GemmFp8() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

CudaStatus GemmFp8::Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                        int64_t ldw, const float* w_scale, __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n,
                        int64_t k, float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, x_scale, w, ldw, w_scale, y, false, ldy, m, n, k, beta, stream);
}

CudaStatus GemmFp8::Run(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                        int64_t ldw, const float* w_scale, float* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                        float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, x_scale, w, ldw, w_scale, y, true, ldy, m, n, k, beta, stream);
}

// The same row-major -> column-major mapping as GemmBf16: A = w (K x N col-major, transposed),
// B = x (K x M col-major, as is), C = D = y^T (N x M). That is exactly the TN form FP8 requires.
CudaStatus GemmFp8::RunTyped(const __nv_fp8_e4m3* x, int64_t ldx, const float* x_scale, const __nv_fp8_e4m3* w,
                             int64_t ldw, const float* w_scale, void* y, bool y_f32, int64_t ldy, int64_t m,
                             int64_t n, int64_t k, float beta, cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return CudaStatus::Invalid("fp8 gemm sizes must be positive");
  if (ldx < k || ldw < k || ldy < n) return CudaStatus::Invalid("fp8 gemm leading dimension too small");
  if (k % 16 != 0 || ldx % 16 != 0 || ldw % 16 != 0)
    return CudaStatus::Invalid("fp8 gemm needs K, ldx and ldw multiples of 16 (cuBLASLt FP8)");
  if (ldy % (y_f32 ? 4 : 8) != 0) return CudaStatus::Invalid("fp8 gemm ldy must be 16 bytes a row");
  if (!x || !w || !y || !x_scale || !w_scale) return CudaStatus::Invalid("fp8 gemm pointer is null");
  if (beta != 0.0f && beta != 1.0f) return CudaStatus::Invalid("fp8 gemm beta must be 0 or 1");
  const uint32_t align_x = GemmPointerAlignment(x), align_w = GemmPointerAlignment(w),
                 align_y = GemmPointerAlignment(y);
  if (align_x < 16 || align_w < 16 || align_y < 16)
    return CudaStatus::Invalid("fp8 gemm buffers must be 16-byte aligned");
  auto key = std::make_tuple(m, n, k, ldx, ldw, ldy, beta != 0.0f, align_x, align_w, align_y, y_f32);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto p = std::make_unique<Plan>();
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    // Scale pointers live in the descriptor; a different pointer on a later call is set below.
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    // C has D's type: bf16 or f32 (never FP8 here), both allowed with E4M3 x E4M3.
    const cudaDataType_t yt = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    if ((s = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, u(k), u(n), ldw)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, u(k), u(m), ldx)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasLtMatrixLayoutCreate(&p->c, yt, u(n), u(m), ldy)) != CUBLAS_STATUS_SUCCESS)
      return CublasFail(s, "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t pref = nullptr;
    if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
      return CublasFail(s, "cublasLtMatmulPreferenceCreate");
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                         sizeof(workspace_bytes_));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_w},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_x},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_y},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_y}};
    for (const auto& [attr, bytes] : aligns) {
      if ((s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes))) != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulPreferenceDestroy(pref);
        return CublasFail(s, "cublasLtMatmulPreferenceSetAttribute(alignment)");
      }
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c,
                                       pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) return CublasFail(CUBLAS_STATUS_NOT_SUPPORTED, "no cuBLASLt FP8 algorithm for shape");
    p->algo = result.algo;
    it = plans_.emplace(key, std::move(p)).first;
  }
  Plan& p = *it->second;
  // A = w, B = x: the weight's scale goes with A. Set on every call (cheap host writes) so a plan
  // is shared by calls whose scales live at different addresses.
  cublasStatus_t s;
  if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale))) !=
          CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale))) !=
          CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtMatmulDescSetAttribute(scale pointer)");
  const float alpha = 1.0f;
  s = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                     &p.algo, workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmul");
  return CudaStatus::Ok();
}

}  // namespace kvgate::cuda
