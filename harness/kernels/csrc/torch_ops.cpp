// Torch wrappers of the harness's own kernels: argument checks, device guard, stream.
#include "harness_ops.h"

#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "harness_kernels.h"

#if HARNESS_WITH_MARLIN
#include "marlin_cuda_kernel.cuh"  // quanto's declaration of marlin_cuda(...)
#endif

namespace harness_int4 {

void check_cuda_tensor(const at::Tensor& t, const char* name, c10::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", c10::toString(dtype), ", got ",
              c10::toString(t.scalar_type()));
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

namespace {
const __half* half_ptr(const at::Tensor& t) {
  return reinterpret_cast<const __half*>(t.data_ptr<at::Half>());
}
__half* half_ptr_mut(at::Tensor& t) { return reinterpret_cast<__half*>(t.data_ptr<at::Half>()); }
cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}
}  // namespace

void native_int4_gemm(const at::Tensor& A, const at::Tensor& Bq,
                      const at::Tensor& scale, const at::Tensor& zero,
                      at::Tensor& out, int64_t group_size) {
  check_cuda_tensor(A, "A", at::kHalf);
  check_cuda_tensor(Bq, "Bq", at::kInt);
  check_cuda_tensor(scale, "scale", at::kHalf);
  check_cuda_tensor(zero, "zero", at::kHalf);
  check_cuda_tensor(out, "out", at::kHalf);
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

at::Tensor a_group_sum(const at::Tensor& A, int64_t groups, bool use_scratch,
                          int64_t flags) {
  check_cuda_tensor(A, "A", at::kHalf);
  TORCH_CHECK(A.dim() == 2, "a_group_sum: A must be [M, K]");
  const int64_t M = A.size(0), K = A.size(1);
  TORCH_CHECK(groups > 0 && K % groups == 0, "a_group_sum: groups=", groups, " must divide K=", K);
  const c10::cuda::CUDAGuard guard(A.device());
  auto out = at::zeros({M, groups}, A.options().dtype(at::kFloat));
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

void correction_accum(at::Tensor& C, const at::Tensor& a_sum, const at::Tensor& delta,
                      int64_t flags) {
  check_cuda_tensor(C, "C", at::kHalf);
  check_cuda_tensor(a_sum, "a_sum", at::kFloat);
  check_cuda_tensor(delta, "delta", at::kFloat);
  TORCH_CHECK(C.dim() == 2 && a_sum.dim() == 2 && delta.dim() == 2, "correction_accum: 2-D tensors only");
  const int64_t M = C.size(0), N = C.size(1), G = delta.size(0);
  TORCH_CHECK(a_sum.size(0) == M && a_sum.size(1) == G, "correction_accum: a_sum must be [M, G]");
  TORCH_CHECK(delta.size(1) == N, "correction_accum: delta must be [G, N]");
  const c10::cuda::CUDAGuard guard(C.device());
  C10_CUDA_CHECK(launch_correction_accum(half_ptr_mut(C), a_sum.data_ptr<float>(), delta.data_ptr<float>(),
                                         static_cast<int>(M), static_cast<int>(N), static_cast<int>(G),
                                         static_cast<int>(M), static_cast<int>(flags), current_stream(C)));
}

void apply_correction(const at::Tensor& A, at::Tensor& C, const at::Tensor& delta,
                      int64_t flags) {
  check_cuda_tensor(A, "A", at::kHalf);
  check_cuda_tensor(C, "C", at::kHalf);
  check_cuda_tensor(delta, "delta", at::kFloat);
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

// ---------------------------------------------------------------- correction variants
namespace {
CorrectionProblem make_problem(const at::Tensor& A, at::Tensor& C, const at::Tensor& delta,
                               int64_t flags, const char* what) {
  check_cuda_tensor(A, "A", at::kHalf);
  check_cuda_tensor(C, "C", at::kHalf);
  check_cuda_tensor(delta, "delta", at::kFloat);
  TORCH_CHECK(A.dim() == 2 && C.dim() == 2 && delta.dim() == 2, what, ": A, C, delta must be 2-D");
  const int64_t M = A.size(0), K = A.size(1), N = C.size(1), G = delta.size(0);
  TORCH_CHECK(C.size(0) == M && delta.size(1) == N, what, ": C must be [M, N] and delta [G, N]");
  TORCH_CHECK(G > 0 && K % G == 0, what, ": delta has ", G, " groups, which must divide K=", K);
  TORCH_CHECK(C.get_device() == A.get_device() && delta.get_device() == A.get_device(), what,
              ": A, C and delta must be on one device");
  return CorrectionProblem{half_ptr(A), half_ptr_mut(C), delta.data_ptr<float>(), static_cast<int>(M),
                           static_cast<int>(N), static_cast<int>(K), static_cast<int>(G),
                           static_cast<int>(flags), A.get_device()};
}

void check_variant(const CorrectionProblem& p, int64_t variant, const char* what) {
  TORCH_CHECK(correction_variant_name(static_cast<int>(variant)) != nullptr, what, ": variant id ",
              variant, " is out of range");
  const char* why = correction_problem_unsupported(p, static_cast<int>(variant));
  TORCH_CHECK(why == nullptr, what, ": variant ", correction_variant_name(static_cast<int>(variant)),
              " cannot run this problem: ", why);
}

void raise_if(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const char* detail = variant_last_error_detail();
  TORCH_CHECK(false, what, ": CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")",
              (detail && *detail) ? "; " : "", (detail && *detail) ? detail : "");
}
}  // namespace

std::vector<std::string> correction_variant_names() {
  std::vector<std::string> out;
  for (int i = 0; i < kVariantCount; ++i) out.emplace_back(correction_variant_name(i));
  return out;
}

void correction_variant(const at::Tensor& A, at::Tensor& C, const at::Tensor& delta,
                        int64_t variant, int64_t flags) {
  const CorrectionProblem p = make_problem(A, C, delta, flags, "correction_variant");
  check_variant(p, variant, "correction_variant");
  const c10::cuda::CUDAGuard guard(A.device());
  raise_if(run_correction_variant(static_cast<int>(variant), p, current_stream(A)), "correction_variant");
}

void launch_empty(int64_t device, bool pdl) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  raise_if(launch_empty_kernel(pdl, static_cast<int>(device), stream), "launch_empty");
}

bool pdl_supported_on(int64_t device) { return pdl_supported(static_cast<int>(device)); }

int64_t pdl_fallbacks() { return static_cast<int64_t>(pdl_fallback_count()); }

std::tuple<int64_t, int64_t, int64_t, int64_t> variant_scratch_state(int64_t device) {
  const VariantScratchInfo info = variant_scratch_info(static_cast<int>(device));
  return {reinterpret_cast<int64_t>(info.ptr), static_cast<int64_t>(info.capacity_bytes),
          static_cast<int64_t>(info.grow_count), static_cast<int64_t>(info.retired)};
}

void variant_scratch_free(int64_t device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  raise_if(variant_scratch_release(static_cast<int>(device)), "variant_scratch_free");
}

int64_t graph_cache_entries() { return static_cast<int64_t>(graph_cache_size()); }

void graph_cache_reset() { raise_if(graph_cache_clear(), "graph_cache_reset"); }

#if HARNESS_WITH_MARLIN
namespace {
constexpr int kMaxSmDevices = 64;

int sm_count_cached(int device) {
  static int cache[kMaxSmDevices] = {0};
  if (device < 0 || device >= kMaxSmDevices) return -1;
  if (cache[device] == 0) {
    int v = -1;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) v = -1;
    cache[device] = v;
  }
  return cache[device];
}

int launch_quanto_marlin(const MarlinCall& c, cudaStream_t stream) {
  return marlin_cuda(c.A, c.B, c.C, c.s, c.sz, c.M, c.N, c.K, c.workspace, c.groupsize, c.device,
                     stream, -1, -1, c.sms, c.max_par);
}
}  // namespace

int64_t marlin_asym_variant(const at::Tensor& A, at::Tensor& C, const at::Tensor& B,
                            const at::Tensor& s, const at::Tensor& sz,
                            const at::Tensor& delta, at::Tensor& workspace,
                            int64_t groupsize, int64_t variant, int64_t flags, int64_t max_par) {
  const CorrectionProblem p = make_problem(A, C, delta, flags, "marlin_asym_variant");
  check_variant(p, variant, "marlin_asym_variant");
  check_cuda_tensor(B, "B", at::kInt);
  check_cuda_tensor(s, "s", at::kHalf);
  check_cuda_tensor(sz, "sz", at::kHalf);
  check_cuda_tensor(workspace, "workspace", at::kInt);
  TORCH_CHECK(s.sizes() == sz.sizes(), "marlin_asym_variant: sz must have the shape of s");
  TORCH_CHECK(workspace.numel() >= p.N / 128 * max_par,
              "marlin_asym_variant: workspace needs at least N/128*max_par = ", p.N / 128 * max_par,
              " int32 entries, got ", workspace.numel());
  const c10::cuda::CUDAGuard guard(A.device());
  const MarlinCall mc{A.data_ptr(), B.data_ptr(), C.data_ptr(), s.data_ptr(), sz.data_ptr(), p.M, p.N,
                      p.K, workspace.data_ptr(), static_cast<int>(groupsize), p.device,
                      sm_count_cached(p.device), static_cast<int>(max_par)};
  cudaError_t err = cudaSuccess;
  const int rc = run_marlin_asym_variant(static_cast<int>(variant), p, mc, &launch_quanto_marlin,
                                         current_stream(A), &err);
  raise_if(err, "marlin_asym_variant");
  return rc;
}
#endif  // HARNESS_WITH_MARLIN

}  // namespace harness_int4
