// The asymmetric zero-point correction that lets an unmodified symmetric Marlin serve
// TinyLoop's asymmetric weights (see the seed):
//
//   C[m, n] = C_marlin[m, n] + sum_g a_sum[m, g] * delta[g, n],
//   a_sum[m, g] = sum_{k in group g} A[m, k],   delta = W_asym - W_implied.
//
// Two kernels, as in TinyLoop: a_group_sum (one block per (m, g), 128-thread
// shared-memory tree reduction, fp32 out) and correction_accum (one thread per output
// cell, fp32 accumulation, fp16 C). a_sum lives in a per-device cached scratch buffer that
// grows by doubling, so steady state performs no allocation.
#include "harness_kernels.h"

#include <mutex>

namespace harness_int4 {
namespace {

__global__ void a_group_sum_kernel(const __half* __restrict__ A, float* __restrict__ a_sum,
                                   int M, int K, int G, int gsize) {
  __shared__ float partial[kCorrectionThreads];
  const int g = blockIdx.x;
  const int tid = threadIdx.x;
  for (int m = blockIdx.y; m < M; m += gridDim.y) {
    const __half* src = A + static_cast<size_t>(m) * K + static_cast<size_t>(g) * gsize;
    float v = 0.0f;
    for (int k = tid; k < gsize; k += kCorrectionThreads) v += __half2float(src[k]);
    partial[tid] = v;
    __syncthreads();
#pragma unroll
    for (int stride = kCorrectionThreads / 2; stride > 0; stride >>= 1) {
      if (tid < stride) partial[tid] += partial[tid + stride];
      __syncthreads();
    }
    if (tid == 0) a_sum[static_cast<size_t>(m) * G + g] = partial[0];
    __syncthreads();  // partial[] is reused by the next m
  }
}

template <bool kHalfAccum>
__global__ void correction_accum_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                                        const float* __restrict__ delta, int M, int N, int G,
                                        int rows_with_sum) {
  const int n = blockIdx.x * kCorrectionThreads + threadIdx.x;
  if (n >= N) return;
  for (int m = blockIdx.y; m < M && m < rows_with_sum; m += gridDim.y) {
    const size_t cell = static_cast<size_t>(m) * N + n;
    const float* a_row = a_sum + static_cast<size_t>(m) * G;
    if (kHalfAccum) {  // planted defect: fp16 accumulation
      __half acc = C[cell];
      for (int g = 0; g < G; ++g)
        acc = __hfma(__float2half_rn(a_row[g]), __float2half_rn(delta[static_cast<size_t>(g) * N + n]), acc);
      C[cell] = acc;
    } else {
      float acc = 0.0f;
      for (int g = 0; g < G; ++g) acc = fmaf(a_row[g], delta[static_cast<size_t>(g) * N + n], acc);
      C[cell] = __float2half_rn(__half2float(C[cell]) + acc);
    }
  }
}

constexpr int kMaxDevices = 64;
constexpr size_t kScratchMinBytes = 4096;

struct Scratch {
  void* ptr = nullptr;
  size_t capacity = 0;
  int grow_count = 0;
};

std::mutex g_scratch_mutex;
Scratch g_scratch[kMaxDevices];

dim3 grid_rows(int x, int M) { return dim3(x, M < 65535 ? M : 65535); }

}  // namespace

ScratchInfo scratch_info(int device) {
  std::lock_guard<std::mutex> lock(g_scratch_mutex);
  if (device < 0 || device >= kMaxDevices) return ScratchInfo{nullptr, 0, 0};
  const Scratch& s = g_scratch[device];
  return ScratchInfo{s.ptr, s.capacity, s.grow_count};
}

void scratch_release(int device) {
  std::lock_guard<std::mutex> lock(g_scratch_mutex);
  if (device < 0 || device >= kMaxDevices) return;
  Scratch& s = g_scratch[device];
  if (s.ptr != nullptr) cudaFree(s.ptr);  // implicitly waits for work using it
  s = Scratch{};
}

cudaError_t launch_a_group_sum(const __half* A, float* a_sum, int M, int K, int G,
                               cudaStream_t stream) {
  if (M <= 0 || G <= 0) return cudaSuccess;
  if (K % G != 0) return cudaErrorInvalidValue;
  a_group_sum_kernel<<<grid_rows(G, M), kCorrectionThreads, 0, stream>>>(A, a_sum, M, K, G, K / G);
  return cudaGetLastError();
}

int launch_a_group_sum_scratch(const __half* A, int M, int K, int G, int flags, int device,
                               cudaStream_t stream, float** a_sum_out) {
  *a_sum_out = nullptr;
  if (device < 0 || device >= kMaxDevices || M <= 0 || G <= 0) return -1;
  const size_t row_bytes = static_cast<size_t>(G) * sizeof(float);
  const size_t need = row_bytes * static_cast<size_t>(M);
  int rows = M;
  {
    std::lock_guard<std::mutex> lock(g_scratch_mutex);
    Scratch& s = g_scratch[device];
    if (need > s.capacity) {
      if (flags & kFlagNoRegrow) {
        rows = static_cast<int>(s.capacity / row_bytes);  // planted defect: stale capacity
      } else {
        size_t cap = s.capacity ? s.capacity : kScratchMinBytes;
        while (cap < need) cap *= 2;
        if (s.ptr != nullptr) cudaFree(s.ptr);
        s.ptr = nullptr;
        s.capacity = 0;
        if (cudaMalloc(&s.ptr, cap) != cudaSuccess) {
          s.ptr = nullptr;
          return -1;
        }
        s.capacity = cap;
        s.grow_count += 1;
      }
    }
    *a_sum_out = static_cast<float*>(s.ptr);
  }
  if (rows > 0 && launch_a_group_sum(A, *a_sum_out, rows, K, G, stream) != cudaSuccess) return -1;
  return rows;
}

cudaError_t launch_correction_accum(__half* C, const float* a_sum, const float* delta, int M,
                                    int N, int G, int rows_with_sum, int flags,
                                    cudaStream_t stream) {
  if (M <= 0 || N <= 0 || G <= 0 || rows_with_sum <= 0) return cudaSuccess;
  int tiles = (N + kCorrectionThreads - 1) / kCorrectionThreads;
  if (flags & kFlagSkipLastNTile) tiles -= 1;  // planted defect: last column tile untouched
  if (tiles <= 0) return cudaSuccess;
  const dim3 grid = grid_rows(tiles, M);
  if (flags & kFlagHalfAccum)
    correction_accum_kernel<true><<<grid, kCorrectionThreads, 0, stream>>>(C, a_sum, delta, M, N, G, rows_with_sum);
  else
    correction_accum_kernel<false><<<grid, kCorrectionThreads, 0, stream>>>(C, a_sum, delta, M, N, G, rows_with_sum);
  return cudaGetLastError();
}

}  // namespace harness_int4
