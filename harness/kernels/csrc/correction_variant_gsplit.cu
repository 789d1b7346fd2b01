// Correction variant gsplit: stream's sequence (asum_flat on the side stream while Marlin
// runs, joined by an event) with an accumulation that splits the groups over the threads
// of a block, for small M with grouped weights (issue 41).
//
// Why: at M = 16, N = 2048, G = 64 the accumulation kernels before this one ran at 5.3 us
// (corr_tile) and 8.5 us (corr_stream's split kernel) warm on an H200 against a 0.54-us
// empty kernel (docs/data/study-kernels-h200-decode-f33d13cd33f1-warm.csv): 32 blocks of
// 64 columns, each thread walking 32-64 groups in a chain of loads. Their work is
// M x N x G = 2.1 M multiply-adds, a few hundred cycles of the GPU: what they pay is the
// chain of dependent memory round trips, not bytes or arithmetic.
//
// corr_gsplit_kernel: a block owns 64 columns (8 octets) of TR rows, and its 256 threads
// are (octet, row, slice) with TR x S = 32. Slice z adds groups z, z + S, z + 2S, ... of
// its row for its 8 columns, at most kGsplitBatch groups in flight at once (their delta
// octets, two float4 each, and a_sum values all loaded before the first multiply), so a
// thread pays one or two load round trips, not G. The output threads load their C values
// first, so C's latency hides behind the sums. The S slices go through shared memory (one
// barrier) and are added in slice order, by one thread per output (TR >= 4) or by 4 / TR
// threads each adding 8 slices in order and then a fixed butterfly of shuffles: a fixed
// order, bitwise repeatable. Each output is then added to its C value in fp32 and written
// once. No atomics, no scratch beyond a_sum.
//
// The host picks S so that a thread holds at most kGsplitGroups groups where it can, and TR
// no larger than M needs (gsplit_shape). Where gsplit_takes refuses (G = 1, or M above
// kGsplitMaxM) the wide variant's accumulation runs instead (launch_wide).
// Flag bits (planted defects) as everywhere: fp16 accumulation (the slices and their sum
// rounded to fp16 as they go), the last 128 columns untouched.
#include "correction_variants.cuh"

#include <algorithm>

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kGsplitLanes = 32;      // TR x S: the (row, slice) pairs of a block
constexpr int kGsplitGroups = 4;      // groups per thread the host aims for
constexpr int kGsplitBatch = 4;       // groups whose loads a thread has in flight at once
constexpr int kGsplitMaxM = 256;      // larger M: wide's accumulation
static_assert(kTileN / 8 * kGsplitLanes == kThreads, "8 octets x 32 (row, slice) pairs");

int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

template <bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_gsplit_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                   const float* __restrict__ delta, int M, int N, int G, int n_end, int TR,
                   int S) {
  __shared__ __align__(16) float s_red[kGsplitLanes * kTileN];   // [slice][row][64 columns]
  const int oct = threadIdx.x & 7;
  const int pair = threadIdx.x >> 3;                 // r + TR * z
  const int r = pair % TR, z = pair / TR;
  const int m = blockIdx.y * TR + r;
  const int n0 = blockIdx.x * kTileN + oct * 8;
  // the outputs this thread adds after the barrier: TR * 64 of them over 256 threads
  const int outs = TR * kTileN;
  const int tpo = outs >= kThreads ? 1 : kThreads / outs;   // threads per output: 1, 2 or 4
  const int per = outs >= kThreads ? outs / kThreads : 1;   // outputs per thread: 1 .. 8
  __half c_old[8];
  size_t at[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {                      // C first: its latency hides behind the sums
    at[k] = SIZE_MAX;
    c_old[k] = __float2half_rn(0.0f);
    if (k >= per) continue;
    const int o = (tpo > 1 ? threadIdx.x / tpo : threadIdx.x + k * kThreads);
    const int ro = o / kTileN, col = o - ro * kTileN;
    const int mo = blockIdx.y * TR + ro, no = blockIdx.x * kTileN + col;
    if (mo < M && no < n_end && (tpo == 1 || threadIdx.x % tpo == 0)) {
      at[k] = static_cast<size_t>(mo) * N + no;
      c_old[k] = C[at[k]];
    }
  }
  float acc[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) acc[c] = 0.0f;
  if (m < M && n0 < N) {
    const float* arow = a_sum + static_cast<size_t>(m) * G;
    const float* dcol = delta + n0;
    for (int g0 = z; g0 < G; g0 += S * kGsplitBatch) {
      float dv[kGsplitBatch][8];
      float av[kGsplitBatch];
#pragma unroll
      for (int b = 0; b < kGsplitBatch; ++b) {       // every load of the batch before any use
        const int g = g0 + b * S;
        if (g < G) {
          load_octet(dcol + static_cast<size_t>(g) * N, dv[b]);
          av[b] = __ldg(arow + g);
        } else {
          av[b] = 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) dv[b][c] = 0.0f;
        }
      }
#pragma unroll
      for (int b = 0; b < kGsplitBatch; ++b)          // in group order
        if (g0 + b * S < G) fma_octet<kHalfAccum>(acc, av[b], dv[b]);
    }
  }
  float4* dst = reinterpret_cast<float4*>(s_red + (z * TR + r) * kTileN + oct * 8);
  dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (k >= per) break;                             // uniform over the block
    const int o = (tpo > 1 ? threadIdx.x / tpo : threadIdx.x + k * kThreads);
    const int ro = o / kTileN, col = o - ro * kTileN;
    const int q = tpo > 1 ? threadIdx.x % tpo : 0;
    const int span = S / tpo;                        // S >= tpo: TR * S = 32, tpo = 4 / TR
    float sum = 0.0f;
    for (int j = q * span; j < (q + 1) * span; ++j) {
      sum += s_red[(j * TR + ro) * kTileN + col];
      if (kHalfAccum) sum = __half2float(__float2half_rn(sum));  // planted: fp16 throughout
    }
    for (int off = 1; off < tpo; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (at[k] != SIZE_MAX) C[at[k]] = __float2half_rn(__half2float(c_old[k]) + sum);
  }
}

}  // namespace

GsplitShape gsplit_shape(int M, int G) {
  const int s0 = std::min(kGsplitLanes, pow2_at_least((G + kGsplitGroups - 1) / kGsplitGroups));
  const int tr = std::min(kGsplitLanes / s0, pow2_at_least(M));
  return GsplitShape{tr, kGsplitLanes / tr};
}

bool gsplit_takes(const CorrectionProblem& p) { return p.G >= 2 && p.M >= 1 && p.M <= kGsplitMaxM; }

const char* gsplit_unsupported(const CorrectionProblem& p) { return wide_unsupported(p); }

cudaError_t launch_gsplit(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  if (!gsplit_takes(p)) return launch_wide(p, a_sum, stream);
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const GsplitShape s = gsplit_shape(p.M, p.G);
  const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                  static_cast<unsigned>((p.M + s.TR - 1) / s.TR));
  if (p.flags & kFlagHalfAccum)
    corr_gsplit_kernel<true><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, s.TR, s.S);
  else
    corr_gsplit_kernel<false><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, s.TR, s.S);
  return cudaGetLastError();
}

}  // namespace corr_detail
}  // namespace harness_int4
