// Shared internals of the correction variants (correction_variants*.cu); not a public API.
//
// The variants are split by family, one translation unit each, all in namespace
// harness_int4::corr_detail (nothing collides with Marlin's symbols, compiled into the
// same extension):
//   correction_variants.cu               the driver: public entry points, the variant
//                                        switch, per-device state (scratch, streams)
//   correction_variant_graph.cu          two_kernel_lean (the seed's sequence from one
//                                        call) and graph (that sequence as a CUDA graph)
//   correction_variant_side_stream.cu    side_stream: asum_kernel on a side stream
//   correction_variant_fused.cu          the tiled accumulation (corr_tile_kernel) of
//                                        side_stream / fused / fused_pdl, and the empty
//                                        floors (empty_kernel)
//   correction_variant_stream.cu         stream: per-group a_sum kernels (asum_flat_*) and
//                                        the barrier-free accumulation (corr_stream_kernel)
//   correction_variant_wide.cu           wide: corr_wide_kernel (a warp per 256 columns)
//   correction_variant_decode.cu         wide at M <= 4: corr_decode_kernel (one launch)
//   correction_variant_gsplit.cu         gsplit: corr_gsplit_kernel (groups split over
//                                        a block's threads, small M)
//   correction_variant_blocked.cu        blocked: corr_blocked_kernel (16 TM x 128 output
//                                        tiles, groups staged by chunks, M >= 17)
//   correction_variant_fold.cu           fold: corr_fold_kernel (G = 1, M >= 17: row sums and
//                                        the rank-1 update in one kernel after Marlin)
//   correction_variant_floor.cu          the rmw floor: rmw_kernel (C read and written
//                                        back unchanged, once)
// This header holds what more than one of them needs: constants, the device helpers of
// the a_sum stage, the launch configurations and the per-device state.
#pragma once

#include "harness_kernels.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace harness_int4 {
namespace corr_detail {

constexpr int kThreads = 256;          // block size of every kernel here
constexpr int kTileN = 64;             // columns per tile: 8 octets of 8 columns
constexpr int kLoadUnroll = 8;         // 16-byte loads in flight per thread in the a_sum stage
constexpr size_t kSmemDefault = 48 * 1024;
constexpr int kMaxDev = 64;
constexpr size_t kScratchMin = 4096;
constexpr size_t kGraphCacheMax = 4096;

// Why the last call failed, beyond its cudaError_t (variant_last_error_detail()).
extern thread_local const char* t_detail;
// PDL launches the driver refused and that were relaunched plainly (launch_ex).
extern std::atomic<long> g_pdl_fallbacks;

// ------------------------------------------------------------------------ device helpers
static __device__ __forceinline__ void wait_for_primary_grid() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

static __device__ __forceinline__ float sum_half8(const uint4& v) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    s += f.x;
    s += f.y;
  }
  return s;
}

// The 8 fp32 values at p (16-byte aligned) through the read-only cache: an octet of delta.
static __device__ __forceinline__ void load_octet(const float* __restrict__ p, float (&dv)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  dv[0] = a.x; dv[1] = a.y; dv[2] = a.z; dv[3] = a.w;
  dv[4] = b.x; dv[5] = b.y; dv[6] = b.z; dv[7] = b.w;
}

// acc[c] += a * dv[c] for the 8 columns of an octet, in fp32; kHalfAccum (planted defect,
// flag bit 0): fp16 operands and accumulator instead.
template <bool kHalfAccum>
static __device__ __forceinline__ void fma_octet(float (&acc)[8], float a, const float (&dv)[8]) {
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    if (kHalfAccum)
      acc[c] = __half2float(__hfma(__float2half_rn(a), __float2half_rn(dv[c]), __float2half_rn(acc[c])));
    else
      acc[c] = fmaf(a, dv[c], acc[c]);
  }
}

// acc[i] += the staged groups [0, gc) of a thread's RM rows, in group order g = 0, 1, ...:
// a_sum of row i at sa[i * kAStride + g] (16-byte aligned rows), delta of group g at
// sd[g * kCols + c] for the thread's first quad (acc[i][0..3]) and sd[g * kCols + kCols / 2
// + c] for its second (acc[i][4..7]); four groups per pass, then the rest one at a time.
// The inner loop of wide's and blocked's accumulations (the same order, the same bits).
template <int RM, int kCols, int kAStride, bool kHalfAccum>
static __device__ __forceinline__ void fma_staged_groups(float (&acc)[RM][8], const float* sa,
                                                         const float* sd, int gc) {
  constexpr int kHalf = kCols / 2;
  int g = 0;
  for (; g + 4 <= gc; g += 4) {              // groups g .. g + 3 in order
    float4 av[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) av[i] = *reinterpret_cast<const float4*>(sa + i * kAStride + g);
    float dv[4][8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = *reinterpret_cast<const float4*>(sd + (g + j) * kCols);
      const float4 y = *reinterpret_cast<const float4*>(sd + (g + j) * kCols + kHalf);
      dv[j][0] = x.x; dv[j][1] = x.y; dv[j][2] = x.z; dv[j][3] = x.w;
      dv[j][4] = y.x; dv[j][5] = y.y; dv[j][6] = y.z; dv[j][7] = y.w;
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      fma_octet<kHalfAccum>(acc[i], av[i].x, dv[0]);
      fma_octet<kHalfAccum>(acc[i], av[i].y, dv[1]);
      fma_octet<kHalfAccum>(acc[i], av[i].z, dv[2]);
      fma_octet<kHalfAccum>(acc[i], av[i].w, dv[3]);
    }
  }
  for (; g < gc; ++g) {                      // a chunk of G % 4 groups: one at a time
    const float4 x = *reinterpret_cast<const float4*>(sd + g * kCols);
    const float4 y = *reinterpret_cast<const float4*>(sd + g * kCols + kHalf);
    const float dv[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
    for (int i = 0; i < RM; ++i) fma_octet<kHalfAccum>(acc[i], sa[i * kAStride + g], dv);
  }
}

// One row's two quads of C (4 halves each, columns na.. and nb..) plus acc[0..3] and
// acc[4..7] in fp32, rounded once and written back; the second quad only where vb.
static __device__ __forceinline__ void store_quads(__half* crow, int na, int nb, bool vb, uint2 ca,
                                                   uint2 cb, const float (&acc)[8]) {
  __half2* ha = reinterpret_cast<__half2*>(&ca);
  __half2* hb = reinterpret_cast<__half2*>(&cb);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float2 fa = __half22float2(ha[j]), fb = __half22float2(hb[j]);
    ha[j] = __floats2half2_rn(fa.x + acc[2 * j], fa.y + acc[2 * j + 1]);
    hb[j] = __floats2half2_rn(fb.x + acc[4 + 2 * j], fb.y + acc[4 + 2 * j + 1]);
  }
  *reinterpret_cast<uint2*>(crow + na) = ca;
  if (vb) *reinterpret_cast<uint2*>(crow + nb) = cb;
}

// The body of wide's and blocked's accumulations once the kernel has placed the thread:
// the block covers rows [row0, row0 + rows) and columns [col0, col0 + kCols); the thread owns
// RM rows from row0 + srow and the quads of columns col0 + scol and col0 + scol + kCols / 2
// (scol a multiple of 4). C's values are loaded first (in flight with the staging); per chunk of kGC groups
// delta [kGC, kCols] (zeros past N) and the rows' a_sum [rows, kGC] (zeros past M, rows
// kAStride apart) are staged in s_d and s_a (one barrier), the thread adds its groups in
// order (fma_staged_groups) and each C piece is written once. Every thread of the block
// calls it (the barriers).
template <int RM, int kCols, int kGC, int kAStride, bool kHalfAccum>
static __device__ __forceinline__ void staged_accumulation(
    __half* __restrict__ C, const float* __restrict__ a_sum, const float* __restrict__ delta,
    int M, int N, int G, int n_end, float* s_d, float* s_a, int row0, int rows, int srow,
    int col0, int scol) {
  const int tid = threadIdx.x;
  const int m0 = row0 + srow;
  const int na = col0 + scol, nb = na + kCols / 2;
  const bool va = m0 < M && na < n_end, vb = m0 < M && nb < n_end;  // n_end % 8 == 0
  uint2 ca[RM], cb[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) {               // C first: in flight with the staging loads
    const bool live = m0 + i < M;
    const __half* crow = C + static_cast<size_t>(live ? m0 + i : 0) * N;
    ca[i] = va && live ? *reinterpret_cast<const uint2*>(crow + na) : make_uint2(0u, 0u);
    cb[i] = vb && live ? *reinterpret_cast<const uint2*>(crow + nb) : make_uint2(0u, 0u);
  }
  float acc[RM][8];                            // [0, 4): columns na.., [4, 8): nb..
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
  for (int g0 = 0; g0 < G; g0 += kGC) {        // uniform over the block
    const int gc = min(kGC, G - g0);
    if (g0 > 0) __syncthreads();               // the last chunk's readers are done
    // the chunk's delta rows over the block's columns (zeros past N), then the a_sum of
    // the block's rows (zeros past M). (Unrolling these loops to a fixed count, all loads
    // into registers before any store, measured slower for wide on the H200: 394e076.)
    for (int q = tid; q < gc * (kCols / 4); q += kThreads) {
      const int r = q / (kCols / 4), c = (q - r * (kCols / 4)) * 4;
      const float4 v = col0 + c < N
          ? __ldg(reinterpret_cast<const float4*>(delta + static_cast<size_t>(g0 + r) * N + col0 + c))
          : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(s_d + r * kCols + c) = v;
    }
    for (int e = tid; e < rows * gc; e += kThreads) {
      const int r = e / gc, g = e - r * gc;
      s_a[r * kAStride + g] = row0 + r < M ? a_sum[static_cast<size_t>(row0 + r) * G + g0 + g] : 0.0f;
    }
    __syncthreads();
    if (!va) continue;                         // still at every barrier of the block
    fma_staged_groups<RM, kCols, kAStride, kHalfAccum>(acc, s_a + srow * kAStride, s_d + scol, gc);
  }
  if (!va) return;
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    if (m0 + i >= M) break;
    store_quads(C + static_cast<size_t>(m0 + i) * N, na, nb, vb, ca[i], cb[i], acc[i]);
  }
}

// s_asum[r * stride + g] = sum of A[row0 + r, k] over group g, r < rows, in a fixed order:
// 8-element vectors, W-lane segments (shuffles), then the segments of a group in order.
// s_part holds rows * (K / 8 / W) floats. Ends with __syncthreads().
static __device__ void block_group_sums(const __half* __restrict__ A, int row0, int rows, int K,
                                        int G, int W, float* s_part, float* s_asum, int stride) {
  const int vrow = K >> 3;
  const int total = rows * vrow;  // a multiple of W
  const int parts_per_row = vrow / W;
  const int chunks = (total + 31) >> 5;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const uint4* src = reinterpret_cast<const uint4*>(A + static_cast<size_t>(row0) * K);
  for (int c0 = warp; c0 < chunks; c0 += nwarps * kLoadUnroll) {  // warp-uniform bound
    uint4 v[kLoadUnroll];
#pragma unroll
    for (int u = 0; u < kLoadUnroll; ++u) {
      const int idx = (c0 + u * nwarps) * 32 + lane;
      v[u] = idx < total ? __ldg(src + idx) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kLoadUnroll; ++u) {
      const int idx = (c0 + u * nwarps) * 32 + lane;
      float s = sum_half8(v[u]);
      for (int off = W >> 1; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (idx < total && (lane & (W - 1)) == 0) s_part[idx / W] = s;
    }
  }
  __syncthreads();
  const int parts_per_group = parts_per_row / G;
  for (int i = threadIdx.x; i < rows * G; i += blockDim.x) {
    const int r = i / G;
    const int g = i - r * G;
    const float* p = s_part + r * parts_per_row + g * parts_per_group;
    float s = 0.0f;
    for (int j = 0; j < parts_per_group; ++j) s += p[j];
    s_asum[r * stride + g] = s;
  }
  __syncthreads();
}

// ------------------------------------------------------------------------ host helpers
// Cached device attributes (0 for a device index out of range, -1 when the query failed).
int sm_count(int device);
int smem_optin(int device);

inline int segment_width(int vectors_per_group) {
  int w = 1;
  while (w < 32 && vectors_per_group % (2 * w) == 0) w *= 2;
  return w;
}

// The least power of two >= x (1 for x <= 1): block shapes of stream's and gsplit's kernels.
inline int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline bool valid_device(int d) { return d >= 0 && d < kMaxDev; }

struct TileConfig {
  int RM, RG, TM, W, col_tiles;
  dim3 grid;
  size_t smem;
};

// Launch configuration of corr_tile_kernel (correction_variant_fused.cu).
TileConfig tile_config(const CorrectionProblem& p, bool sum_in_block);

struct AsumConfig {
  int W, rows_per_block;
  size_t smem;
  unsigned blocks;
};

// Launch configuration of asum_kernel (correction_variant_side_stream.cu).
AsumConfig asum_config(const CorrectionProblem& p);

// ------------------------------------------------------------------------ per-device state
struct DeviceState {
  void* scratch = nullptr;
  size_t capacity = 0;
  int grow_count = 0;
  std::vector<void*> retired;       // earlier scratch buffers (graphs may reference them)
  cudaStream_t side = nullptr;      // a_sum of the side_stream variant
  cudaStream_t capture = nullptr;   // where the graph variant captures its sequence
  cudaEvent_t fork = nullptr, join = nullptr;
};

// One mutex serialises the drivers (single-stream use); the state of every device.
extern std::mutex g_mutex;
extern DeviceState g_dev[kMaxDev];

// The device's grow-only scratch, at least `bytes` (cannot grow while `capturing`).
cudaError_t ensure_scratch(int device, size_t bytes, bool capturing, float** out);
// The side stream, the capture stream and the fork/join events of `device`.
cudaError_t ensure_streams(int device);
bool is_capturing(cudaStream_t stream);
// Marlin via `marlin` on `stream`; a launch error goes to *err. Returns Marlin's status.
int run_marlin(const MarlinCall& mc, MarlinLauncher marlin, cudaStream_t stream, cudaError_t* err);

// ------------------------------------------------------------------------ the variants
// correction_variant_graph.cu: the seed's sequence (memset C, Marlin, a_group_sum,
// correction_accum) on `stream`, and the graph variant that replays it.
int seed_sequence(const CorrectionProblem& p, const MarlinCall& mc, MarlinLauncher marlin,
                  float* a_sum, cudaStream_t stream, cudaError_t* err);
int graph_variant(const CorrectionProblem& p, const MarlinCall& mc, MarlinLauncher marlin,
                  cudaStream_t stream, cudaError_t* err);
// correction_variant_side_stream.cu: a_sum into `a_sum` on `stream`, and the side_stream
// variant (Marlin when `mc` is not null, a_sum beside it, then the tiled accumulation).
cudaError_t launch_asum(const CorrectionProblem& p, float* a_sum, cudaStream_t stream);
// The accumulation after the join: side_stream's corr_tile (a_sum by asum_kernel), or with
// a_sum by asum_flat, stream's (launch_stream) or wide's (launch_wide).
enum SideAccum : int { kAccumTile = 0, kAccumStream = 1, kAccumWide = 2, kAccumGsplit = 3,
                       kAccumBlocked = 4 };
int side_stream_sequence(const CorrectionProblem& p, const MarlinCall* mc, MarlinLauncher marlin,
                         cudaStream_t stream, cudaError_t* err, SideAccum accum = kAccumTile);
// correction_variant_fused.cu: the tiled accumulation (kSum: a_sum computed in-block from
// A; else read from a_sum), and one empty kernel (PDL when `pdl`).
cudaError_t launch_tile(const CorrectionProblem& p, const float* a_sum, bool sum_in_block, bool pdl,
                        cudaStream_t stream);
cudaError_t launch_empty_impl(bool pdl, cudaStream_t stream);
// correction_variant_floor.cu: every half of p.C (M x N) read and written back unchanged
// (16-byte vectors when C is 16-byte aligned, else half2 or single halves), one launch.
cudaError_t launch_rmw(const CorrectionProblem& p, cudaStream_t stream);
// correction_variant_stream.cu: why the stream kernels cannot take `p` (nullptr: they can),
// a_sum into `a_sum` by group, and the accumulation reading that a_sum.
const char* stream_unsupported(const CorrectionProblem& p);
cudaError_t launch_asum_flat(const CorrectionProblem& p, float* a_sum, cudaStream_t stream);
cudaError_t launch_stream(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream);
// correction_variant_wide.cu: whether corr_wide_kernel takes `p` (M >= 2, G >= 2; else
// launch_wide runs launch_stream), why the wide variant cannot (nullptr: it can), and the
// accumulation reading a_sum.
bool wide_takes(const CorrectionProblem& p);
// correction_variant_decode.cu: whether the wide variant's decode kernel takes `p` (M <= 4,
// G <= 128, M * K / 8 <= 1024), and that kernel (a_sum and accumulation in one launch).
bool wide_decode_takes(const CorrectionProblem& p);
cudaError_t launch_wide_decode(const CorrectionProblem& p, cudaStream_t stream);
const char* wide_unsupported(const CorrectionProblem& p);
cudaError_t launch_wide(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream);
// correction_variant_gsplit.cu: a block's (rows, slices of G) for M and G, whether
// corr_gsplit_kernel takes `p` (G >= 2, 2 <= M <= 256; else launch_gsplit runs launch_wide), why
// the gsplit variant cannot (nullptr: it can), and the accumulation reading a_sum.
struct GsplitShape {
  int TR, S, RM;   // row slots and slices of the groups (TR * S = 32), rows per thread
};
GsplitShape gsplit_shape(int M, int N, int G, int sms);
bool gsplit_takes(const CorrectionProblem& p);
const char* gsplit_unsupported(const CorrectionProblem& p);
cudaError_t launch_gsplit(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream);
// correction_variant_blocked.cu: rows per thread (4, 2, 1) for M x N on `sms` SMs, whether
// corr_blocked_kernel takes `p` (G >= 2, M >= 17; else launch_blocked runs launch_gsplit),
// why the blocked variant cannot (nullptr: it can), and the accumulation reading a_sum.
int blocked_rows_per_thread(int M, int N, int sms);
bool blocked_takes(const CorrectionProblem& p);
const char* blocked_unsupported(const CorrectionProblem& p);
cudaError_t launch_blocked(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream);
// correction_variant_fold.cu: rows per block (4, 2, 1) for M on `sms` SMs, whether
// corr_fold_kernel takes `p` (G = 1, M >= 17), why the fold variant cannot (nullptr: it can),
// and the kernel (after Marlin on `stream`; reads A, delta and C, writes C).
int fold_rows_per_block(int M, int sms);
bool fold_takes(const CorrectionProblem& p);
const char* fold_unsupported(const CorrectionProblem& p);
cudaError_t launch_fold(const CorrectionProblem& p, cudaStream_t stream);

}  // namespace corr_detail
}  // namespace harness_int4
