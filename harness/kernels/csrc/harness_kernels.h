// Host-side launchers for the harness's own CUDA kernels (no torch types here).
//
// native_int4.cu : the naive scalar INT4 GEMM (TinyLoop's always-works fallback).
// correction.cu  : the asymmetric zero-point correction for Marlin (a_group_sum,
//                  correction_accum) and the cached, doubling scratch buffer for a_sum.
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
// Test-only planted defects for the correction entry points (flags argument, default 0).
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

}  // namespace harness_int4
