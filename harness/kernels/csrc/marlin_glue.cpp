// Calls Marlin's C entry point from optimum-quanto's marlin_cuda_kernel.cu (compiled into
// this extension from the installed package; never copied into the repository) and wraps
// it with the asymmetric correction, as TinyLoop's marlin_mm_asymmetric does.
//
// quanto's public op raises on a non-zero status; calling the C entry directly keeps
// Marlin's return code (1: problem shape, 2: no kernel for this tile/group configuration),
// which is what TinyLoop's dispatcher falls back on.
//
// Built only when HARNESS_WITH_MARLIN is 1 (the build found quanto's source).
#include "harness_ops.h"

#if HARNESS_WITH_MARLIN

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "marlin_cuda_kernel.cuh"  // quanto's declaration of marlin_cuda(...)

namespace harness_int4 {

int64_t marlin_gemm(const at::Tensor& A, const at::Tensor& B, at::Tensor& C,
                    const at::Tensor& s, const at::Tensor& sz, at::Tensor& workspace,
                    int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                    int64_t max_par) {
  check_cuda_tensor(A, "A", at::kHalf);
  check_cuda_tensor(B, "B", at::kInt);
  check_cuda_tensor(C, "C", at::kHalf);
  check_cuda_tensor(s, "s", at::kHalf);
  check_cuda_tensor(sz, "sz", at::kHalf);
  check_cuda_tensor(workspace, "workspace", at::kInt);
  TORCH_CHECK(A.dim() == 2 && C.dim() == 2 && C.size(0) == A.size(0),
              "marlin_gemm: A must be [M, K] and C [M, N]");
  TORCH_CHECK(s.sizes() == sz.sizes(), "marlin_gemm: sz must have the shape of s");
  const int prob_m = static_cast<int>(A.size(0));
  const int prob_k = static_cast<int>(A.size(1));
  const int prob_n = static_cast<int>(C.size(1));
  TORCH_CHECK(workspace.numel() >= prob_n / 128 * max_par,
              "marlin_gemm: workspace needs at least N/128*max_par = ", prob_n / 128 * max_par,
              " int32 entries, got ", workspace.numel());
  const c10::cuda::CUDAGuard guard(A.device());
  const int dev = A.get_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  const int rc = marlin_cuda(A.data_ptr(), B.data_ptr(), C.data_ptr(), s.data_ptr(),
                             sz.data_ptr(), prob_m, prob_n, prob_k, workspace.data_ptr(),
                             static_cast<int>(groupsize), dev, stream,
                             static_cast<int>(thread_k), static_cast<int>(thread_n),
                             static_cast<int>(sms), static_cast<int>(max_par));
  C10_CUDA_CHECK(cudaGetLastError());  // a failed launch is an error, not a return code
  return rc;
}

int64_t marlin_mm_asymmetric(const at::Tensor& A, const at::Tensor& B, at::Tensor& C,
                             const at::Tensor& s, const at::Tensor& sz,
                             const at::Tensor& delta, at::Tensor& workspace,
                             int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                             int64_t max_par, int64_t flags) {
  check_cuda_tensor(C, "C", at::kHalf);
  const c10::cuda::CUDAGuard guard(C.device());
  C.zero_();
  const int64_t rc = marlin_gemm(A, B, C, s, sz, workspace, groupsize, thread_k, thread_n, sms,
                                 max_par);
  if (rc != 0) return rc;  // the caller falls back; no correction on a skipped GEMM
  apply_correction(A, C, delta, flags);
  return 0;
}

}  // namespace harness_int4

#endif  // HARNESS_WITH_MARLIN
