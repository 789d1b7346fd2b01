// Torch-facing entry points of the harness extension (bound to Python in bindings.cpp).
#pragma once

#include <torch/extension.h>

#ifndef HARNESS_WITH_MARLIN
#define HARNESS_WITH_MARLIN 0
#endif

namespace harness_int4 {

// TORCH_CHECKs that t is a contiguous CUDA tensor of dtype `dtype`; `name` is in the message.
void check_cuda_tensor(const torch::Tensor& t, const char* name, c10::ScalarType dtype);

// Native INT4 GEMM into out [M, N] fp16. Bq int32 [K/8, N]; scale, zero fp16 [G, N].
void native_int4_gemm(const torch::Tensor& A, const torch::Tensor& Bq,
                      const torch::Tensor& scale, const torch::Tensor& zero,
                      torch::Tensor& out, int64_t group_size);

// a_sum [M, G] fp32, computed by the a_group_sum kernel. With use_scratch the kernel writes
// into the cached scratch buffer and a copy is returned (flags apply); otherwise into a
// fresh tensor.
torch::Tensor a_group_sum(const torch::Tensor& A, int64_t groups, bool use_scratch,
                          int64_t flags);

// C += a_sum @ delta via correction_accum (a_sum fp32 [M, G], delta fp32 [G, N]).
void correction_accum(torch::Tensor& C, const torch::Tensor& a_sum,
                      const torch::Tensor& delta, int64_t flags);

// Both kernels, a_sum in the cached scratch: C += a_group_sum(A) @ delta.
void apply_correction(const torch::Tensor& A, torch::Tensor& C, const torch::Tensor& delta,
                      int64_t flags);

// (pointer, capacity_bytes, grow_count) of the scratch on `device`; release frees it.
std::tuple<int64_t, int64_t, int64_t> scratch_state(int64_t device);
void scratch_free(int64_t device);

#if HARNESS_WITH_MARLIN
// Marlin's symmetric GEMM (quanto's kernel, q * s + sz); returns Marlin's rc.
int64_t marlin_gemm(const torch::Tensor& A, const torch::Tensor& B, torch::Tensor& C,
                    const torch::Tensor& s, const torch::Tensor& sz, torch::Tensor& workspace,
                    int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                    int64_t max_par);

// Zero C, Marlin, then the correction (skipped when rc != 0); returns Marlin's rc.
int64_t marlin_mm_asymmetric(const torch::Tensor& A, const torch::Tensor& B, torch::Tensor& C,
                             const torch::Tensor& s, const torch::Tensor& sz,
                             const torch::Tensor& delta, torch::Tensor& workspace,
                             int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                             int64_t max_par, int64_t flags);
#endif

}  // namespace harness_int4
