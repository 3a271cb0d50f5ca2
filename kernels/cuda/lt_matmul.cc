#include "kernels/cuda/lt_matmul.h"

#include <cublasLt.h>

#include <utility>

namespace kvgate::cuda {
namespace {

CudaStatus CublasFail(cublasStatus_t s, const char* what) {
  return {CudaStatusKind::kCublasError, static_cast<int>(s), what};
}

}  // namespace

struct LtMatmul::Plan {
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

CudaStatus LtMatmul::Create(size_t workspace_bytes, std::unique_ptr<LtMatmul>* out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return {CudaStatusKind::kNoDevice, 0, "no CUDA device found"};
  }
  std::unique_ptr<LtMatmul> g(new LtMatmul());
  cublasLtHandle_t h = nullptr;
  if (cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtCreate");
  g->handle_ = h;
  if (workspace_bytes > 0) {
    if (cudaError_t e = cudaMalloc(&g->workspace_, workspace_bytes); e != cudaSuccess)
      return {CudaStatusKind::kCudaError, static_cast<int>(e), "cudaMalloc(gemm workspace)"};
  }
  g->workspace_bytes_ = workspace_bytes;
  *out = std::move(g);
  return CudaStatus::Ok();
}

LtMatmul::~LtMatmul() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

CudaStatus LtMatmul::MakePlan(const LtProduct& q, std::unique_ptr<Plan>* out) {
  auto p = std::make_unique<Plan>();
  cublasStatus_t s = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const auto in = static_cast<cudaDataType_t>(q.in_type), outt = static_cast<cudaDataType_t>(q.out_type);
  if ((s = cublasLtMatrixLayoutCreate(&p->a, in, u(q.k), u(q.n), q.ldw)) != CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatrixLayoutCreate(&p->b, in, u(q.k), u(q.m), q.ldx)) != CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatrixLayoutCreate(&p->c, outt, u(q.n), u(q.m), q.ldy)) != CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t pref = nullptr;
  if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtMatmulPreferenceCreate");
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  // A = w, B = x, C = D = y.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, q.align_w},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, q.align_x},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, q.align_y},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, q.align_y}};
  for (const auto& [attr, bytes] : aligns) {
    if ((s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes))) != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatmulPreferenceDestroy(pref);
      return CublasFail(s, "cublasLtMatmulPreferenceSetAttribute(alignment)");
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c, pref, 1,
                                     &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) return CublasFail(CUBLAS_STATUS_NOT_SUPPORTED, "no cuBLASLt algorithm for shape");
  p->algo = result.algo;
  *out = std::move(p);
  return CudaStatus::Ok();
}

CudaStatus LtMatmul::Run(const LtProduct& q, const void* x, const void* w, void* y, float alpha, float beta,
                         const float* x_scale, const float* w_scale, cudaStream_t stream) {
  auto it = plans_.find(q.key());
  if (it == plans_.end()) {
    std::unique_ptr<Plan> p;
    if (CudaStatus st = MakePlan(q, &p); !st.ok()) return st;
    it = plans_.emplace(q.key(), std::move(p)).first;
  }
  Plan& p = *it->second;
  cublasStatus_t s;
  // The weight is A, so its scale is A's.
  if (w_scale && (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                                      sizeof(w_scale))) != CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtMatmulDescSetAttribute(A scale pointer)");
  if (x_scale && (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                                      sizeof(x_scale))) != CUBLAS_STATUS_SUCCESS)
    return CublasFail(s, "cublasLtMatmulDescSetAttribute(B scale pointer)");
  s = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                     &p.algo, workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasFail(s, "cublasLtMatmul");
  return CudaStatus::Ok();
}

}  // namespace kvgate::cuda
