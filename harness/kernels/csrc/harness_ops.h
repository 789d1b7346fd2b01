// Torch-facing entry points of the harness extension (bound to Python in bindings.cpp).
// ATen's tensor and c10's checks only: <torch/extension.h> (torch's whole C++ API and
// pybind11) took 24 s to parse per file, most of a fresh machine's build.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <string>
#include <tuple>
#include <vector>

#ifndef HARNESS_WITH_MARLIN
#define HARNESS_WITH_MARLIN 0
#endif

namespace harness_int4 {

// TORCH_CHECKs that t is a contiguous CUDA tensor of dtype `dtype`; `name` is in the message.
void check_cuda_tensor(const at::Tensor& t, const char* name, c10::ScalarType dtype);

// Native INT4 GEMM into out [M, N] fp16. Bq int32 [K/8, N]; scale, zero fp16 [G, N].
void native_int4_gemm(const at::Tensor& A, const at::Tensor& Bq,
                      const at::Tensor& scale, const at::Tensor& zero,
                      at::Tensor& out, int64_t group_size);

// a_sum [M, G] fp32, computed by the a_group_sum kernel. With use_scratch the kernel writes
// into the cached scratch buffer and a copy is returned (flags apply); otherwise into a
// fresh tensor.
at::Tensor a_group_sum(const at::Tensor& A, int64_t groups, bool use_scratch,
                          int64_t flags);

// C += a_sum @ delta via correction_accum (a_sum fp32 [M, G], delta fp32 [G, N]).
void correction_accum(at::Tensor& C, const at::Tensor& a_sum,
                      const at::Tensor& delta, int64_t flags);

// Both kernels, a_sum in the cached scratch: C += a_group_sum(A) @ delta.
void apply_correction(const at::Tensor& A, at::Tensor& C, const at::Tensor& delta,
                      int64_t flags);

// (pointer, capacity_bytes, grow_count) of the scratch on `device`; release frees it.
std::tuple<int64_t, int64_t, int64_t> scratch_state(int64_t device);
void scratch_free(int64_t device);

// ---- correction variants (correction_variants.cu): names indexed by variant id.
std::vector<std::string> correction_variant_names();
// Only the correction of variant `variant` on an existing C (no Marlin, no zeroing).
void correction_variant(const at::Tensor& A, at::Tensor& C, const at::Tensor& delta,
                        int64_t variant, int64_t flags);
// One empty kernel on the current stream of `device` (PDL when asked and supported).
void launch_empty(int64_t device, bool pdl);
bool pdl_supported_on(int64_t device);
int64_t pdl_fallbacks();
// (pointer, capacity_bytes, grow_count, retired buffers) of the variants' scratch.
std::tuple<int64_t, int64_t, int64_t, int64_t> variant_scratch_state(int64_t device);
void variant_scratch_free(int64_t device);
int64_t graph_cache_entries();
void graph_cache_reset();

#if HARNESS_WITH_MARLIN
// Marlin + correction variant `variant` in one call (no per-call allocation); returns
// Marlin's rc, the correction skipped when it is non-zero. Positional arguments keep the
// Python-side cost of the call low.
int64_t marlin_asym_variant(const at::Tensor& A, at::Tensor& C, const at::Tensor& B,
                            const at::Tensor& s, const at::Tensor& sz,
                            const at::Tensor& delta, at::Tensor& workspace,
                            int64_t groupsize, int64_t variant, int64_t flags, int64_t max_par);

// Marlin's symmetric GEMM (quanto's kernel, q * s + sz); returns Marlin's rc.
int64_t marlin_gemm(const at::Tensor& A, const at::Tensor& B, at::Tensor& C,
                    const at::Tensor& s, const at::Tensor& sz, at::Tensor& workspace,
                    int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                    int64_t max_par);

// Zero C, Marlin, then the correction (skipped when rc != 0); returns Marlin's rc.
int64_t marlin_mm_asymmetric(const at::Tensor& A, const at::Tensor& B, at::Tensor& C,
                             const at::Tensor& s, const at::Tensor& sz,
                             const at::Tensor& delta, at::Tensor& workspace,
                             int64_t groupsize, int64_t thread_k, int64_t thread_n, int64_t sms,
                             int64_t max_par, int64_t flags);
#endif

}  // namespace harness_int4
