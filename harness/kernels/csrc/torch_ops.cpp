// Torch wrappers of the harness's own kernels: argument checks, device guard, stream.
#include "harness_ops.h"

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "harness_kernels.h"

namespace harness_int4 {

void check_cuda_tensor(const torch::Tensor& t, const char* name, c10::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", c10::toString(dtype), ", got ",
              c10::toString(t.scalar_type()));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

namespace {
const __half* half_ptr(const torch::Tensor& t) {
  return reinterpret_cast<const __half*>(t.data_ptr<at::Half>());
}
__half* half_ptr_mut(torch::Tensor& t) { return reinterpret_cast<__half*>(t.data_ptr<at::Half>()); }
cudaStream_t current_stream(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}
}  // namespace

void native_int4_gemm(const torch::Tensor& A, const torch::Tensor& Bq,
                      const torch::Tensor& scale, const torch::Tensor& zero,
                      torch::Tensor& out, int64_t group_size) {
  check_cuda_tensor(A, "A", torch::kHalf);
  check_cuda_tensor(Bq, "Bq", torch::kInt);
  check_cuda_tensor(scale, "scale", torch::kHalf);
  check_cuda_tensor(zero, "zero", torch::kHalf);
  check_cuda_tensor(out, "out", torch::kHalf);
  TORCH_CHECK(A.dim() == 2 && Bq.dim() == 2 && out.dim() == 2, "native_int4_gemm: 2-D tensors only");
  const int64_t M = A.size(0), K = A.size(1), N = out.size(1);
  TORCH_CHECK(K % 8 == 0, "native_int4_gemm: K=", K, " must be a multiple of 8");
  TORCH_CHECK(group_size > 0 && group_size % 8 == 0 && K % group_size == 0,
              "native_int4_gemm: group_size=", group_size, " must be a multiple of 8 dividing K=", K);
  TORCH_CHECK(Bq.size(0) == K / 8 && Bq.size(1) == N, "native_int4_gemm: Bq must be [K/8, N]");
  TORCH_CHECK(out.size(0) == M, "native_int4_gemm: out must be [M, N]");
  TORCH_CHECK(scale.size(0) == K / group_size && scale.size(1) == N && zero.sizes() == scale.sizes(),
              "native_int4_gemm: scale and zero must be [K/group_size, N]");
  const c10::cuda::CUDAGuard guard(A.device());
  C10_CUDA_CHECK(launch_native_int4(half_ptr(A), reinterpret_cast<const uint32_t*>(Bq.data_ptr<int>()),
                                    half_ptr(scale), half_ptr(zero), half_ptr_mut(out),
                                    static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                    static_cast<int>(group_size), current_stream(A)));
}

torch::Tensor a_group_sum(const torch::Tensor& A, int64_t groups, bool use_scratch,
                          int64_t flags) {
  check_cuda_tensor(A, "A", torch::kHalf);
  TORCH_CHECK(A.dim() == 2, "a_group_sum: A must be [M, K]");
  const int64_t M = A.size(0), K = A.size(1);
  TORCH_CHECK(groups > 0 && K % groups == 0, "a_group_sum: groups=", groups, " must divide K=", K);
  const c10::cuda::CUDAGuard guard(A.device());
  auto out = torch::zeros({M, groups}, A.options().dtype(torch::kFloat));
  if (!use_scratch) {
    C10_CUDA_CHECK(launch_a_group_sum(half_ptr(A), out.data_ptr<float>(), static_cast<int>(M),
                                      static_cast<int>(K), static_cast<int>(groups), current_stream(A)));
    return out;
  }
  float* scratch = nullptr;
  const int rows = launch_a_group_sum_scratch(half_ptr(A), static_cast<int>(M), static_cast<int>(K),
                                              static_cast<int>(groups), static_cast<int>(flags),
                                              A.get_device(), current_stream(A), &scratch);
  TORCH_CHECK(rows >= 0, "a_group_sum: scratch allocation or launch failed");
  C10_CUDA_CHECK(cudaGetLastError());
  if (rows > 0)
    C10_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr<float>(), scratch,
                                   static_cast<size_t>(rows) * groups * sizeof(float),
                                   cudaMemcpyDeviceToDevice, current_stream(A)));
  return out;
}

void correction_accum(torch::Tensor& C, const torch::Tensor& a_sum, const torch::Tensor& delta,
                      int64_t flags) {
  check_cuda_tensor(C, "C", torch::kHalf);
  check_cuda_tensor(a_sum, "a_sum", torch::kFloat);
  check_cuda_tensor(delta, "delta", torch::kFloat);
  TORCH_CHECK(C.dim() == 2 && a_sum.dim() == 2 && delta.dim() == 2, "correction_accum: 2-D tensors only");
  const int64_t M = C.size(0), N = C.size(1), G = delta.size(0);
  TORCH_CHECK(a_sum.size(0) == M && a_sum.size(1) == G, "correction_accum: a_sum must be [M, G]");
  TORCH_CHECK(delta.size(1) == N, "correction_accum: delta must be [G, N]");
  const c10::cuda::CUDAGuard guard(C.device());
  C10_CUDA_CHECK(launch_correction_accum(half_ptr_mut(C), a_sum.data_ptr<float>(), delta.data_ptr<float>(),
                                         static_cast<int>(M), static_cast<int>(N), static_cast<int>(G),
                                         static_cast<int>(M), static_cast<int>(flags), current_stream(C)));
}

void apply_correction(const torch::Tensor& A, torch::Tensor& C, const torch::Tensor& delta,
                      int64_t flags) {
  check_cuda_tensor(A, "A", torch::kHalf);
  check_cuda_tensor(C, "C", torch::kHalf);
  check_cuda_tensor(delta, "delta", torch::kFloat);
  const int64_t M = A.size(0), K = A.size(1), N = C.size(1), G = delta.size(0);
  TORCH_CHECK(C.size(0) == M && delta.size(1) == N, "apply_correction: C must be [M, N], delta [G, N]");
  TORCH_CHECK(G > 0 && K % G == 0, "apply_correction: delta has ", G, " groups, which must divide K=", K);
  const c10::cuda::CUDAGuard guard(A.device());
  float* a_sum = nullptr;
  const int rows = launch_a_group_sum_scratch(half_ptr(A), static_cast<int>(M), static_cast<int>(K),
                                              static_cast<int>(G), static_cast<int>(flags),
                                              A.get_device(), current_stream(A), &a_sum);
  TORCH_CHECK(rows >= 0, "apply_correction: scratch allocation or a_group_sum launch failed");
  C10_CUDA_CHECK(cudaGetLastError());
  C10_CUDA_CHECK(launch_correction_accum(half_ptr_mut(C), a_sum, delta.data_ptr<float>(),
                                         static_cast<int>(M), static_cast<int>(N), static_cast<int>(G),
                                         rows, static_cast<int>(flags), current_stream(C)));
}

std::tuple<int64_t, int64_t, int64_t> scratch_state(int64_t device) {
  const ScratchInfo info = scratch_info(static_cast<int>(device));
  return {reinterpret_cast<int64_t>(info.ptr), static_cast<int64_t>(info.capacity_bytes),
          static_cast<int64_t>(info.grow_count)};
}

void scratch_free(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  scratch_release(static_cast<int>(device));
}

}  // namespace harness_int4
