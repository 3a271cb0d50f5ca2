#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <utility>

namespace kvgate::cuda {
namespace {

CudaStatus CublasFail(cublasStatus_t s, const char* what) {
  return {CudaStatusKind::kCublasError, static_cast<int>(s), what};
}
CudaStatus CudaFail(cudaError_t e, const char* what) {
  return {CudaStatusKind::kCudaError, static_cast<int>(e), what};
}

}  // namespace

struct GemmBf16::Plan {
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

CudaStatus GemmBf16::Create(size_t workspace_bytes, std::unique_ptr<GemmBf16>* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return {CudaStatusKind::kNoDevice, 0, "no CUDA device found"};
  std::unique_ptr<GemmBf16> g(new GemmBf16());
  cublasLtHandle_t h = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtCreate");
  g->handle_ = h;
  if (workspace_bytes > 0) {
    if (cudaError_t e = cudaMalloc(&g->workspace_, workspace_bytes); e != cudaSuccess)
      return CudaFail(e, "cudaMalloc(gemm workspace)");
  }
  g->workspace_bytes_ = workspace_bytes;
  *out = std::move(g);
  return CudaStatus::Ok();
}

GemmBf16::~GemmBf16() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

// Row-major y = x w^T is column-major y^T [N x M] = w^T-op(A = w as K x N col-major, transposed)
// times B = x^T (K x M col-major, i.e. x row-major as is).
CudaStatus GemmBf16::Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw,
                         __nv_bfloat16* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
                         float alpha, float beta, cudaStream_t stream) {
  return RunTyped(x, ldx, w, ldw, y, false, ldy, m, n, k, alpha, beta, stream);
}

CudaStatus GemmBf16::Run(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, float* y,
                         int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                         cudaStream_t stream) {
  return RunTyped(x, ldx, w, ldw, y, true, ldy, m, n, k, alpha, beta, stream);
}

CudaStatus GemmBf16::RunTyped(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, void* y,
                              bool y_f32, int64_t ldy, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                              cudaStream_t stream) {
  if (m <= 0 || n <= 0 || k <= 0) return CudaStatus::Invalid("gemm sizes must be positive");
  if (ldx < k || ldw < k || ldy < n) return CudaStatus::Invalid("gemm leading dimension too small");
  if (!x || !w || !y) return CudaStatus::Invalid("gemm pointer is null");
  const uint32_t align_x = GemmPointerAlignment(x), align_w = GemmPointerAlignment(w),
                 align_y = GemmPointerAlignment(y);
  auto key = std::make_tuple(m, n, k, ldx, ldw, ldy, beta != 0.0f, align_x, align_w, align_y, y_f32);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto p = std::make_unique<Plan>();
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    if ((s = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, u(k), u(n), ldw)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, u(k), u(m), ldx)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasLtMatrixLayoutCreate(&p->c, y_f32 ? CUDA_R_32F : CUDA_R_16BF, u(n), u(m), ldy)) !=
            CUBLAS_STATUS_SUCCESS)
      return CublasFail(s, "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t pref = nullptr;
    if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
      return CublasFail(s, "cublasLtMatmulPreferenceCreate");
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace_bytes_, sizeof(workspace_bytes_));
    // A = w, B = x, C = D = y (see above). Without these the heuristic assumes 256-byte aligned
    // buffers and may pick a kernel whose vector loads fault on (or misread) a less aligned one.
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
    s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b,
                                       p->c, p->c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) return CublasFail(CUBLAS_STATUS_NOT_SUPPORTED, "no cuBLASLt algorithm for shape");
    p->algo = result.algo;
    it = plans_.emplace(key, std::move(p)).first;
  }
  Plan& p = *it->second;
  cublasStatus_t s = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a,
                                    x, p.b, &beta, y, p.c, y, p.c, &p.algo, workspace_,
                                    workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmul");
  return CudaStatus::Ok();
}

}  // namespace kvgate::cuda
