// The wide variant at decode (M <= 4): the whole correction in one kernel after Marlin, on
// Marlin's stream, with no side stream, no event and no a_sum scratch.
//
// Why: at M = 1 the side_stream sequence costs the graph an event fork and join and two
// kernels (asum_flat beside Marlin, then the accumulation); the study of 5513b259b980
// (docs/hopper.md 5.4) put stream's graph-mode time 1.4-2.3 us above Marlin + one empty
// kernel at M = 1, where the split accumulation kernel alone took 1.3-1.8 us. A decode row
// of A is 4-16 KB (K = 2048-8192), which every block can afford to read again from L2
// (Marlin has just read it).
//
// corr_decode_kernel<JV, kHalfAccum>: a block owns 64 columns of all M rows. It issues
// every load it needs at once (its JV vectors of A, the block's delta [G, 64] as float4
// quads, its thread's C element), so the kernel pays one memory round trip; then the group
// sums in asum_flat's order (each lane sums its 8 halves, then xor shuffles over the vpg
// lanes of a group; vpg >= 32: whole warps, their partials added in order by one thread
// per group), delta into shared memory, one barrier (two for large groups), and thread
// (row = tid / 64, column = tid % 64) adds the G groups in order in fp32 and writes its C
// element once. Deterministic (fixed orders, no atomics). Flag bits (planted defects) as
// everywhere: fp16 accumulation, the last 128 columns untouched.
// Takes (wide_decode_takes): M <= 4, G <= 128, M * K / 8 <= 1024 vectors of A, and the
// group sizes stream's kernels take. Shared internals: correction_variants.cuh.
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kDecCols = 64;                                   // columns of a block
constexpr int kDecMaxM = kThreads / kDecCols;                  // 4: one output per thread
constexpr int kDecMaxG = 128;
constexpr int kDecMaxJV = 4;                                   // vectors of A per thread
constexpr int kDecDeltaQuads = kDecMaxG * kDecCols / 4 / kThreads;   // per thread: 8

template <int JV, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_decode_kernel(__half* __restrict__ C, const __half* __restrict__ A,
                   const float* __restrict__ delta, int M, int N, int K, int G, int vpg,
                   int n_end) {
  __shared__ __align__(16) float s_d[kDecMaxG * kDecCols];      // 32 KB
  __shared__ float s_a[kDecMaxM * kDecMaxG];                    // a_sum [M, G]
  __shared__ float s_part[kDecMaxJV * kThreads / 32];           // warp partials (vpg > 32)
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int col0 = blockIdx.x * kDecCols;
  const int total = M * (K / 8);                                // vectors of A, <= JV * 256
  // 1. every load at once: A, the block's delta columns (zeros past N), the C element
  const uint4* a4 = reinterpret_cast<const uint4*>(A);
  uint4 v[JV];
#pragma unroll
  for (int j = 0; j < JV; ++j) {
    const int idx = tid + j * kThreads;
    v[j] = idx < total ? __ldg(a4 + idx) : make_uint4(0u, 0u, 0u, 0u);
  }
  float4 dq[kDecDeltaQuads];
#pragma unroll
  for (int k = 0; k < kDecDeltaQuads; ++k) {
    const int q = tid + k * kThreads, r = q / (kDecCols / 4), c = (q % (kDecCols / 4)) * 4;
    dq[k] = r < G && col0 + c < N
        ? __ldg(reinterpret_cast<const float4*>(delta + static_cast<size_t>(r) * N + col0 + c))
        : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int om = tid / kDecCols, on = col0 + tid % kDecCols;
  const bool out_live = om < M && on < n_end;
  const float c_old = out_live ? __half2float(C[static_cast<size_t>(om) * N + on]) : 0.0f;
  // 2. group sums (flat group f = m * G + g is vector idx / vpg: a row is G * vpg vectors)
#pragma unroll
  for (int j = 0; j < JV; ++j) {
    const int idx = tid + j * kThreads;                         // warp-uniform validity:
    float s = sum_half8(v[j]);                                  // total % 32 == 0 or vpg | 32
    if (vpg <= 32) {
      for (int off = vpg >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (idx < total && (lane & (vpg - 1)) == 0) s_a[idx / vpg] = s;
    } else {
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (idx < total && lane == 0) s_part[idx / 32] = s;
    }
  }
#pragma unroll
  for (int k = 0; k < kDecDeltaQuads; ++k) {
    const int q = tid + k * kThreads, r = q / (kDecCols / 4), c = (q % (kDecCols / 4)) * 4;
    if (r < G) *reinterpret_cast<float4*>(s_d + r * kDecCols + c) = dq[k];
  }
  __syncthreads();
  if (vpg > 32) {                                               // uniform over the block
    const int per = vpg / 32;
    for (int f = tid; f < M * G; f += kThreads) {
      float s = 0.0f;
      for (int p = 0; p < per; ++p) s += s_part[f * per + p];
      s_a[f] = s;
    }
    __syncthreads();
  }
  // 3. the thread's output: groups in order, fp32 (kHalfAccum: planted, fp16 throughout)
  if (!out_live) return;
  const float* sa = s_a + om * G;
  const float* sd = s_d + tid % kDecCols;
  float acc = 0.0f;
  for (int g = 0; g < G; ++g) {
    if (kHalfAccum)
      acc = __half2float(__hfma(__float2half_rn(sa[g]), __float2half_rn(sd[g * kDecCols]),
                                __float2half_rn(acc)));
    else
      acc = fmaf(sa[g], sd[g * kDecCols], acc);
  }
  C[static_cast<size_t>(om) * N + on] = __float2half_rn(c_old + acc);
}

template <int JV>
cudaError_t launch_decode_jv(const CorrectionProblem& p, int vpg, int n_end, bool half,
                             cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((p.N + kDecCols - 1) / kDecCols);
  if (half)
    corr_decode_kernel<JV, true><<<blocks, kThreads, 0, stream>>>(p.C, p.A, p.delta, p.M, p.N, p.K, p.G, vpg, n_end);
  else
    corr_decode_kernel<JV, false><<<blocks, kThreads, 0, stream>>>(p.C, p.A, p.delta, p.M, p.N, p.K, p.G, vpg, n_end);
  return cudaGetLastError();
}

}  // namespace

bool wide_decode_takes(const CorrectionProblem& p) {
  if (p.M < 1 || p.M > kDecMaxM || p.G > kDecMaxG || p.K % 8 != 0) return false;
  if (static_cast<long>(p.M) * (p.K / 8) > static_cast<long>(kDecMaxJV) * kThreads) return false;
  const int vpg = p.K / p.G / 8;
  // the shuffles of a group stay inside a warp (vpg | 32) or take whole warps (32 | vpg)
  return vpg > 0 && ((vpg <= 32 && 32 % vpg == 0) || vpg % 32 == 0);
}

cudaError_t launch_wide_decode(const CorrectionProblem& p, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const bool half = (p.flags & kFlagHalfAccum) != 0;
  const int vpg = p.K / p.G / 8;
  const long total = static_cast<long>(p.M) * (p.K / 8);
  if (total <= kThreads) return launch_decode_jv<1>(p, vpg, n_end, half, stream);
  if (total <= 2 * kThreads) return launch_decode_jv<2>(p, vpg, n_end, half, stream);
  return launch_decode_jv<4>(p, vpg, n_end, half, stream);
}

}  // namespace corr_detail
}  // namespace harness_int4
