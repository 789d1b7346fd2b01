// Host-side launchers for the harness's own CUDA kernels (no torch types here).
//
// native_int4.cu : the naive scalar INT4 GEMM (TinyLoop's always-works fallback).
// correction.cu  : the asymmetric zero-point correction for Marlin (a_group_sum,
//                  correction_accum) and the cached, doubling scratch buffer for a_sum.
// correction_variants.cu : faster designs of the same correction (side stream, fused
//                  tiled kernel, PDL, CUDA graph), selectable per call: the driver; the
//                  variants live in correction_variant_{graph,side_stream,fused}.cu and
//                  share correction_variants.cuh.
//
// Everything lives in namespace harness_int4 so nothing can collide with the symbols of
// Marlin's kernel source, which is compiled into the same extension.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace harness_int4 {

// ---------------------------------------------------------------- native INT4
// C[M, N] (fp16) = A[M, K] (fp16) @ W, W[k, n] = q[k, n] * scale[g, n] + zero[g, n].
// Bq is int32 [K / 8, N]: word (kb, n) holds q[8 kb + i, n] in bits 4i..4i+3, so the
// 32 threads of a warp (consecutive n) read 32 consecutive words.
// Requires K % 8 == 0 and group_size % 8 == 0. Returns the launch status.
cudaError_t launch_native_int4(const __half* A, const uint32_t* Bq, const __half* scale,
                               const __half* zero, __half* C, int M, int N, int K,
                               int group_size, cudaStream_t stream);

// ---------------------------------------------------------------- correction
// Bits of the correction entry points' `flags` argument (an ordinary parameter, default 0).
// Each bit makes the correction wrong in a known way: the planted defects the test suite
// must catch. The product passes 0; a test builds MarlinAsymPath(correction_flags=...) or
// calls the entry points with a bit set.
enum CorrectionFlags : int {
  kFlagHalfAccum = 1,      // bit 0: correction_accum accumulates in fp16 instead of fp32
  kFlagSkipLastNTile = 2,  // bit 1: correction_accum skips the last 128-column tile
  kFlagNoRegrow = 4,       // bit 2: the scratch buffer is not regrown; a_sum rows that do
                           //        not fit are left out of the correction
};

constexpr int kCorrectionThreads = 128;  // block size of both correction kernels

struct ScratchInfo {
  void* ptr;              // device pointer (nullptr before the first use)
  size_t capacity_bytes;  // current capacity
  int grow_count;         // how many times it was (re)allocated
};

// Scratch state of one device; release frees it (tests use this to start from empty).
ScratchInfo scratch_info(int device);
void scratch_release(int device);

// a_sum[m, g] = sum_{k in group g} A[m, k] (fp32) into the device's cached scratch.
// One block per (m, g), kCorrectionThreads threads, shared-memory tree reduction.
// *a_sum_out receives the scratch pointer ([M, G] row-major). Returns the number of rows
// of a_sum that were computed: M, or fewer only under kFlagNoRegrow.
int launch_a_group_sum_scratch(const __half* A, int M, int K, int G, int flags, int device,
                               cudaStream_t stream, float** a_sum_out);

// The same reduction into caller-owned memory a_sum[M, G] (fp32).
cudaError_t launch_a_group_sum(const __half* A, float* a_sum, int M, int K, int G,
                               cudaStream_t stream);

// C[m, n] += sum_g a_sum[m, g] * delta[g, n] for m < rows_with_sum; fp32 accumulation
// (fp16 under kFlagHalfAccum), one thread per output cell; C is fp16 [M, N].
cudaError_t launch_correction_accum(__half* C, const float* a_sum, const float* delta, int M,
                                    int N, int G, int rows_with_sum, int flags,
                                    cudaStream_t stream);

// ---------------------------------------------------------------- correction variants
// Ids of the variants run by run_marlin_asym_variant (names: correction_variant_name).
enum CorrectionVariant : int {
  kVariantMarlinOnly = 0,     // Marlin alone: no zeroing, no correction (overhead baseline)
  kVariantTwoKernelLean = 1,  // the seed's sequence (memset C, Marlin, a_group_sum,
                              // correction_accum) issued by one host call
  kVariantGraph = 2,          // that sequence captured once per (pointers, shape) into a
                              // CUDA graph and replayed; launched directly inside a capture
  kVariantSideStream = 3,     // a_sum on a side stream concurrent with Marlin, joined by an
                              // event, then one tiled accumulation kernel
  kVariantFused = 4,          // Marlin, then one tiled kernel computing a_sum in shared memory
  kVariantFusedPdl = 5,       // the same kernel with programmatic dependent launch (SM >= 9.0;
                              // a plain launch elsewhere)
  kVariantEmpty = 6,          // Marlin + an empty kernel: launch floor of a one-kernel correction
  kVariantEmptyPdl = 7,       // Marlin + an empty kernel launched with PDL
  kVariantStream = 8,         // side_stream's sequence with the per-group a_sum kernels and the
                              // barrier-free accumulation (correction_variant_stream.cu)
  kVariantWide = 9,           // stream's sequence with the wide accumulation where it wins
                              // (correction_variant_wide.cu); at M <= 4 one kernel after
                              // Marlin (correction_variant_decode.cu)
  kVariantRmw = 10,           // Marlin + one kernel that reads C and writes it back unchanged:
                              // the floor of a correction reading C after Marlin
                              // (correction_variant_floor.cu)
  kVariantGsplit = 11,        // stream's sequence with the groups split over a block's threads
                              // at 2 <= M <= 256, G >= 2 (correction_variant_gsplit.cu); wide's
                              // accumulation elsewhere
  kVariantBlocked = 12,       // stream's sequence with a register-blocked accumulation at
                              // M >= 17, G >= 2 (correction_variant_blocked.cu); gsplit's
                              // accumulation elsewhere
  kVariantFold = 13,          // per-column weights (G = 1) at M >= 17: the group sum folded
                              // into one kernel after Marlin (correction_variant_fold.cu);
                              // blocked's sequence elsewhere
  kVariantCount = 14
};

// Marlin's arguments, so the variant drivers can launch (and capture) it via a callback.
struct MarlinCall {
  const void* A;
  const void* B;
  void* C;
  void* s;
  void* sz;
  int M, N, K;
  void* workspace;
  int groupsize;
  int device;
  int sms;
  int max_par;
};
// Launches Marlin on `stream`; returns Marlin's status (0 ok).
using MarlinLauncher = int (*)(const MarlinCall& call, cudaStream_t stream);

// One correction: C[M, N] fp16 += a_group_sum(A[M, K] fp16, G groups) @ delta[G, N] fp32.
struct CorrectionProblem {
  const __half* A;
  __half* C;
  const float* delta;
  int M, N, K, G;
  int flags;   // CorrectionFlags (bits 0 and 1 for every variant; bit 2 only for the
               // seed's own scratch in correction.cu: the variants own a grow-only scratch)
  int device;
};

// "marlin_only", "two_kernel_lean", ... for an id; nullptr when out of range.
const char* correction_variant_name(int variant);
// nullptr when `variant` can run problem p; otherwise a one-line reason.
const char* correction_problem_unsupported(const CorrectionProblem& p, int variant);
// Marlin (via `marlin`) then the correction of `variant` on `stream`. Returns Marlin's
// status (the correction is skipped when it is non-zero); the first CUDA error goes to *err
// (variant_last_error_detail() may say more).
int run_marlin_asym_variant(int variant, const CorrectionProblem& p, const MarlinCall& mc,
                            MarlinLauncher marlin, cudaStream_t stream, cudaError_t* err);
// Only the correction of `variant` on an existing C (no Marlin, no zeroing); for tests.
cudaError_t run_correction_variant(int variant, const CorrectionProblem& p, cudaStream_t stream);
// One empty kernel (with PDL when asked and the device supports it).
cudaError_t launch_empty_kernel(bool pdl, int device, cudaStream_t stream);
const char* variant_last_error_detail();
bool pdl_supported(int device);
// How many PDL launches the driver refused and were relaunched plainly (process total).
long pdl_fallback_count();

struct VariantScratchInfo {
  void* ptr;
  size_t capacity_bytes;
  int grow_count;
  int retired;  // earlier buffers kept alive for graphs that captured them
};
VariantScratchInfo variant_scratch_info(int device);
// Frees the device's variant scratch (and retired buffers) after clearing the graph cache.
cudaError_t variant_scratch_release(int device);
size_t graph_cache_size();
// Synchronises the device, then destroys every cached graph.
cudaError_t graph_cache_clear();

}  // namespace harness_int4
