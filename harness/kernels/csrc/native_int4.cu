// TinyLoop's native INT4 GEMM, modelled: one thread per output cell, a plain loop over K.
//
// Intentionally naive (the seed's always-works fallback, about 6.8 TFLOPS on an RTX 4090
// whatever the batch): no shared memory, no tiling, no reuse across outputs. The only
// layout decision is that threads of a warp own consecutive output columns n, so each
// packed weight word, scale and zero load is coalesced across the warp; the activation
// element is the same for the whole warp (a broadcast).
#include "harness_kernels.h"

namespace harness_int4 {
namespace {

constexpr int kNativeThreads = 128;

__global__ void native_int4_kernel(const __half* __restrict__ A,
                                   const uint32_t* __restrict__ Bq,
                                   const __half* __restrict__ scale,
                                   const __half* __restrict__ zero, __half* __restrict__ C,
                                   int M, int N, int K, int group_size) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (int m = blockIdx.y; m < M; m += gridDim.y) {
    const __half* a_row = A + static_cast<size_t>(m) * K;
    float acc = 0.0f;
    for (int kb = 0; kb < K / 8; ++kb) {
      const int k0 = kb * 8;
      const size_t gn = static_cast<size_t>(k0 / group_size) * N + n;
      const float s = __half2float(scale[gn]);
      const float z = __half2float(zero[gn]);
      const uint32_t word = Bq[static_cast<size_t>(kb) * N + n];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float q = static_cast<float>((word >> (4 * i)) & 0xFu);
        const float w = fmaf(q, s, z);  // q * s + z, one rounding
        acc = fmaf(__half2float(a_row[k0 + i]), w, acc);
      }
    }
    C[static_cast<size_t>(m) * N + n] = __float2half_rn(acc);
  }
}

}  // namespace

cudaError_t launch_native_int4(const __half* A, const uint32_t* Bq, const __half* scale,
                               const __half* zero, __half* C, int M, int N, int K,
                               int group_size, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return cudaSuccess;
  if (K % 8 != 0 || group_size <= 0 || group_size % 8 != 0 || K % group_size != 0)
    return cudaErrorInvalidValue;
  const dim3 block(kNativeThreads);
  const dim3 grid((N + kNativeThreads - 1) / kNativeThreads, M < 65535 ? M : 65535);
  native_int4_kernel<<<grid, block, 0, stream>>>(A, Bq, scale, zero, C, M, N, K, group_size);
  return cudaGetLastError();
}

}  // namespace harness_int4
