// Correction variant stream: the side_stream sequence (a_sum on the side stream while
// Marlin runs, joined by an event, then the accumulation after Marlin) with two kernels
// written after the kernel study (`harness study kernels`, H200) showed where the tiled
// kernels lose their time:
//  * asum_flat_*: asum_kernel puts all the rows of a block in one block and, at small M,
//    one row in one block: 2.9-3.5 us for a few KB (the floor is an empty kernel, 0.54 us).
//    Here the work is cut by group instead. A row-major A [M, K] is a flat array of M * K
//    / 8 vectors of 8 halves in which flat group f = m * G + g is the vpg = group_size / 8
//    vectors [f * vpg, (f + 1) * vpg), and f is also a_sum's flat index. Small groups (vpg
//    divides 32): a warp reduces kPasses x 32 consecutive vectors, each pass holding 32 /
//    vpg whole groups, by shuffles within segments of vpg lanes. Large groups (vpg a
//    multiple of 32): a team (a warp; the whole block when vpg >= 512) reduces one group,
//    thread t adding vectors t, t + team, ... (coalesced), then the warp's shuffles, then
//    the block's warps in order. Fixed orders: bitwise repeatable.
//  * corr_stream_kernel<RM, kHalfAccum>: corr_tile_kernel splits G over 4-32 slices and
//    adds them in shared memory between two barriers per 64-column tile, and loads C only
//    after that, one 16-byte vector per thread per tile: at M = 1024 it moved C at 0.7-0.8
//    TB/s (5.3x its floor). Here thread (octet, slot) owns 8 columns of RM rows (slot,
//    slot + 32, ...), loads those RM vectors of C first (their latency then hides behind
//    the arithmetic), accumulates all G groups in registers in order (delta as two float4
//    per group, a_sum through the read-only cache) and writes C once. No shared memory,
//    no barrier. At M <= 16 (corr_stream_split_kernel) the idle row slots take slices of
//    G instead, added in order through shared memory after one barrier. corr_tile_kernel
//    (side_stream's) accumulates instead where the study measured it faster
//    (stream_takes_tile): grouped weights at 2 <= M <= 256, and G >= 32 at every M > 1.
// Flag bits (planted defects) as everywhere: fp16 accumulation, the last 128 columns
// untouched. Shared internals: correction_variants.cuh.
#include "correction_variants.cuh"

#include <algorithm>
#include <cstdint>

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kFlatThreads = 256;
constexpr int kSmallPasses = 4;          // vectors per lane in flight, small groups
constexpr int kStreamSlots = 32;         // row slots of a corr_stream block (x 8 octets)
constexpr int kStreamTileMinG = 32;      // from this many groups per row (M > 1): corr_tile
constexpr int kStreamTileMaxM = 256;     // grouped weights (G > 1) up to this M: corr_tile

// Whether corr_tile accumulates for stream (same a_sum [M, G], same flags). The kernel
// study and the whole-path study on an H200 (docs/hopper.md 5.3, 5.4): corr_stream wins at
// G = 1 at every M (0.25-0.6x corr_tile), and the decode split kernel at M = 1 (1.5-1.8 us
// against 2.5-2.8 warm); at M = 16 the split kernel lost at G = 16 (3.3 against 2.9-3.0
// warm, 5.7-6.0 against 3.5-3.9 cold) and G = 64 (8.5 against 5.3, 17.5 against 6.5); at
// M = 32-256, G = 16 the path with corr_stream was 1.00-1.11x side_stream's (graph); at
// G = 64 and M > 16 corr_tile was 2.3x (warm) to 3.7x (cold) faster; at M = 1024, G = 16
// the path with corr_stream was the faster.
bool stream_takes_tile(int M, int G) {
  if (M <= 1 || G <= 1) return false;
  return G >= kStreamTileMinG || M <= kStreamTileMaxM;
}

template <int kPasses>
__global__ void __launch_bounds__(kFlatThreads)
asum_flat_small_kernel(const __half* __restrict__ A, float* __restrict__ a_sum, long total,
                       int vpg) {
  const uint4* src = reinterpret_cast<const uint4*>(A);
  const int lane = threadIdx.x & 31;
  const long warp = (static_cast<long>(blockIdx.x) * kFlatThreads + threadIdx.x) >> 5;
  const long base = warp * (32L * kPasses);
  uint4 v[kPasses];
#pragma unroll
  for (int u = 0; u < kPasses; ++u) {
    const long idx = base + u * 32 + lane;
    v[u] = idx < total ? __ldg(src + idx) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int u = 0; u < kPasses; ++u) {
    const long idx = base + u * 32 + lane;
    float s = sum_half8(v[u]);
    for (int off = vpg >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    // total is a multiple of vpg: a segment of vpg lanes is wholly inside or outside
    if (idx < total && (lane & (vpg - 1)) == 0) a_sum[idx / vpg] = s;
  }
}

__global__ void __launch_bounds__(kFlatThreads)
asum_flat_large_kernel(const __half* __restrict__ A, float* __restrict__ a_sum, long groups,
                       int vpg, int team) {
  __shared__ float s_warp[kFlatThreads / 32];
  const uint4* src = reinterpret_cast<const uint4*>(A);
  const int lane = threadIdx.x & 31;
  const int t = threadIdx.x % team;
  const long f = static_cast<long>(blockIdx.x) * (kFlatThreads / team) + threadIdx.x / team;
  float s = 0.0f;
  if (f < groups) {
    const uint4* g = src + f * vpg + t;
    const int per = vpg / team;
#pragma unroll 8
    for (int j = 0; j < per; ++j) s += sum_half8(__ldg(g + static_cast<long>(j) * team));
  }
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (team == 32) {                       // uniform over the block
    if (lane == 0 && f < groups) a_sum[f] = s;
    return;
  }
  if (lane == 0) s_warp[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0 && f < groups) {
    float total = 0.0f;
    for (int w = 0; w < kFlatThreads / 32; ++w) total += s_warp[w];
    a_sum[f] = total;
  }
}

template <int RM, bool kHalfAccum>
__global__ void __launch_bounds__(kFlatThreads)
corr_stream_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                   const float* __restrict__ delta, int M, int N, int G, int n_end) {
  const int oct = threadIdx.x & 7;
  const int slot = threadIdx.x >> 3;                 // 0 .. kStreamSlots - 1
  const int n0 = blockIdx.x * kTileN + oct * 8;
  const int row0 = blockIdx.y * (kStreamSlots * RM) + slot;
  if (n0 >= n_end) return;                           // n_end: a multiple of 8; no barrier here
  uint4 cv[RM];
  const float* arow[RM];
  bool live[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) {                     // C first: its latency hides behind the sums
    const int m = row0 + kStreamSlots * i;
    live[i] = m < M;
    arow[i] = a_sum + static_cast<size_t>(live[i] ? m : 0) * G;
    cv[i] = live[i] ? *reinterpret_cast<const uint4*>(C + static_cast<size_t>(m) * N + n0)
                    : make_uint4(0u, 0u, 0u, 0u);
  }
  float acc[RM][8];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
  const float* dcol = delta + n0;
#pragma unroll 4
  for (int g = 0; g < G; ++g) {
    float dv[8];
    load_octet(dcol + static_cast<size_t>(g) * N, dv);
#pragma unroll
    for (int i = 0; i < RM; ++i)  // kHalfAccum: planted defect, fp16 operands and accumulator
      fma_octet<kHalfAccum>(acc[i], __ldg(arow[i] + g), dv);
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    if (!live[i]) continue;
    __half2* h = reinterpret_cast<__half2*>(&cv[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h[j]);
      h[j] = __floats2half2_rn(f.x + acc[i][2 * j], f.y + acc[i][2 * j + 1]);
    }
    *reinterpret_cast<uint4*>(C + static_cast<size_t>(row0 + kStreamSlots * i) * N + n0) = cv[i];
  }
}

// Decode (M <= 16): corr_stream_kernel would leave most row slots idle and run G groups in
// a chain per thread (16 load round trips at G = 64). Here the block's RS = pow2(M) rows
// share its 32 slots with Z <= 32 / RS slices of G: thread (octet, slot = r * Z + z) sums
// groups z, z + Z, ... of row r; the slices go through shared memory (one barrier) and the
// block's RS x 64 outputs are added in order, kSplitOuts per thread at RS = 16 (output o =
// threadIdx.x + k * 256 is (row o / 64, column o % 64)), each to its C element, which the
// thread loaded first.
constexpr int kSplitMaxRows = 16;                                  // M <= 16 takes this kernel
constexpr int kSplitOuts = kSplitMaxRows * kTileN / kFlatThreads;  // outputs per thread, at most
static_assert(kSplitOuts * kFlatThreads == kSplitMaxRows * kTileN, "outputs split evenly");

template <bool kHalfAccum>
__global__ void __launch_bounds__(kFlatThreads)
corr_stream_split_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                         const float* __restrict__ delta, int M, int N, int G, int n_end, int RS,
                         int Z) {
  __shared__ float s_red[kStreamSlots * kTileN];
  const int oct = threadIdx.x & 7;
  const int slot = threadIdx.x >> 3;
  const int r = slot / Z, z = slot - r * Z;
  const int m = blockIdx.y * RS + r;
  const int n0 = blockIdx.x * kTileN + oct * 8;
  size_t out_at[kSplitOuts];            // the C element of each output it adds; SIZE_MAX: none
  __half c_old[kSplitOuts];
#pragma unroll
  for (int k = 0; k < kSplitOuts; ++k) {
    const int o = threadIdx.x + k * kFlatThreads;
    const int rr = o / kTileN, col = o - rr * kTileN;
    const int mo = blockIdx.y * RS + rr, no = blockIdx.x * kTileN + col;
    const bool live = rr < RS && mo < M && no < n_end;
    out_at[k] = live ? static_cast<size_t>(mo) * N + no : SIZE_MAX;
    c_old[k] = live ? C[out_at[k]] : __float2half_rn(0.0f);
  }
  float acc[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) acc[c] = 0.0f;
  if (r < RS && m < M && n0 < N) {
    const float* arow = a_sum + static_cast<size_t>(m) * G;
    const float* dcol = delta + n0;
#pragma unroll 2
    for (int g = z; g < G; g += Z) {
      float dv[8];
      load_octet(dcol + static_cast<size_t>(g) * N, dv);
      fma_octet<kHalfAccum>(acc, __ldg(arow + g), dv);  // kHalfAccum: planted, fp16 throughout
    }
  }
  float4* dst = reinterpret_cast<float4*>(s_red + slot * kTileN + oct * 8);
  dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kSplitOuts; ++k) {
    if (out_at[k] == SIZE_MAX) continue;
    const int o = threadIdx.x + k * kFlatThreads;
    const int rr = o / kTileN, col = o - rr * kTileN;
    float sum = 0.0f;
    for (int z = 0; z < Z; ++z) {
      sum += s_red[(rr * Z + z) * kTileN + col];
      if (kHalfAccum) sum = __half2float(__float2half_rn(sum));  // planted: the slices in fp16 too
    }
    C[out_at[k]] = __float2half_rn(__half2float(c_old[k]) + sum);
  }
}

template <int RM>
cudaError_t launch_stream_rm(const CorrectionProblem& p, const float* a_sum, int n_end, bool half,
                             cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                  static_cast<unsigned>((p.M + kStreamSlots * RM - 1) / (kStreamSlots * RM)));
  if (half)
    corr_stream_kernel<RM, true><<<grid, kFlatThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  else
    corr_stream_kernel<RM, false><<<grid, kFlatThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  return cudaGetLastError();
}

}  // namespace

const char* stream_unsupported(const CorrectionProblem& p) {
  const int vpg = p.K / p.G / 8;
  const bool small = vpg > 0 && vpg <= 32 && (32 % vpg) == 0;
  if (!small && (vpg % 32) != 0)
    return "the stream correction needs a group size of 8, 16, ..., 256 or a multiple of 256";
  if ((p.M + kStreamSlots * 4 - 1) / (kStreamSlots * 4) > 65535)
    return "M too large for the stream correction (grid.y > 65535)";
  return nullptr;
}

cudaError_t launch_asum_flat(const CorrectionProblem& p, float* a_sum, cudaStream_t stream) {
  if (p.M <= 0) return cudaSuccess;
  const int vpg = p.K / p.G / 8;
  const long groups = static_cast<long>(p.M) * p.G;
  if (vpg <= 32 && 32 % vpg == 0) {
    const long total = groups * vpg;
    const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
    const bool deep = total >= static_cast<long>(sms) * kFlatThreads * kSmallPasses;
    const long per_block = static_cast<long>(kFlatThreads) * (deep ? kSmallPasses : 1);
    const unsigned blocks = static_cast<unsigned>((total + per_block - 1) / per_block);
    if (deep)
      asum_flat_small_kernel<kSmallPasses><<<blocks, kFlatThreads, 0, stream>>>(p.A, a_sum, total, vpg);
    else
      asum_flat_small_kernel<1><<<blocks, kFlatThreads, 0, stream>>>(p.A, a_sum, total, vpg);
    return cudaGetLastError();
  }
  const int team = (vpg >= 512 && vpg % kFlatThreads == 0) ? kFlatThreads : 32;
  const long per_block = kFlatThreads / team;
  const unsigned blocks = static_cast<unsigned>((groups + per_block - 1) / per_block);
  asum_flat_large_kernel<<<blocks, kFlatThreads, 0, stream>>>(p.A, a_sum, groups, vpg, team);
  return cudaGetLastError();
}

cudaError_t launch_stream(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const bool half = (p.flags & kFlagHalfAccum) != 0;
  if (stream_takes_tile(p.M, p.G) &&
      tile_config(p, false).smem <= static_cast<size_t>(smem_optin(p.device)))
    return launch_tile(p, a_sum, false, false, stream);
  if (p.M <= kSplitMaxRows) {
    const int RS = pow2_at_least(p.M);
    const int Z = std::min(kStreamSlots / RS, pow2_at_least(p.G));
    const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                    static_cast<unsigned>((p.M + RS - 1) / RS));
    if (half)
      corr_stream_split_kernel<true><<<grid, kFlatThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, RS, Z);
    else
      corr_stream_split_kernel<false><<<grid, kFlatThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, RS, Z);
    return cudaGetLastError();
  }
  if (p.M >= 128) return launch_stream_rm<4>(p, a_sum, n_end, half, stream);
  if (p.M >= 64) return launch_stream_rm<2>(p, a_sum, n_end, half, stream);
  return launch_stream_rm<1>(p, a_sum, n_end, half, stream);
}

}  // namespace corr_detail
}  // namespace harness_int4
