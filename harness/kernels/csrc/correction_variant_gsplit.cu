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
// corr_gsplit_kernel<RM>: a block owns 64 columns (8 octets) of TR x RM rows, and its 256
// threads are (octet, row slot, slice) with TR x S = 32; slot r holds rows r, r + TR, ...
// (RM of them, which share each delta octet it loads). Slice z adds groups z, z + S, z + 2S, ... of
// its row for its 8 columns, at most kGsplitBatch groups in flight at once (their delta
// octets, two float4 each, and a_sum values all loaded before the first multiply), so a
// thread pays one or two load round trips, not G. The output threads load their C values
// first, so C's latency hides behind the sums. The S slices go through shared memory (one
// barrier) and are added in slice order: each C octet (8 columns of a row) by 32 / rows
// threads, each adding its share of the slices in order, then a fixed butterfly of
// shuffles: a fixed order, bitwise repeatable. The octet is then added to its C vector in
// fp32 and written once with a 16-byte store (the first build added single halves, 2-byte
// loads and stores, and lost to wide at M x N >= 64 x 6144 on an H100, 2026-12-06). No
// atomics, no scratch beyond a_sum.
//
// The host picks S so that a thread holds at most kGsplitGroups groups where it can, TR no
// larger than M needs, and RM (1, 2, 4) as large as keeps two blocks per SM (gsplit_shape):
// at larger M each delta octet then travels from L2 once per RM rows, not once per row. Where gsplit_takes refuses (G = 1, or M above
// M = 1, or M above kGsplitMaxM) the wide variant's accumulation runs instead (launch_wide).
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
constexpr int kGsplitMaxRM = 4;       // rows per thread, at most
static_assert(kTileN / 8 * kGsplitLanes == kThreads, "8 octets x 32 (row, slice) pairs");

template <int RM, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_gsplit_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                   const float* __restrict__ delta, int M, int N, int G, int n_end, int TR,
                   int S) {
  __shared__ __align__(16) float s_red[kGsplitLanes * RM * kTileN];  // [slice][row][64 columns]
  const int oct = threadIdx.x & 7;
  const int pair = threadIdx.x >> 3;                 // r + TR * z
  const int r = pair % TR, z = pair / TR;
  const int rows = TR * RM;                          // the block's rows: r + TR * i, i < RM
  const int m0 = blockIdx.y * rows;
  const int n0 = blockIdx.x * kTileN + oct * 8;
  // the C octet (8 columns of one row) this thread adds after the barrier: rows x 8 <= 256
  // octets (rows <= 32, gsplit_shape), tpo = 32 / rows threads per octet, each adding
  // S / tpo of its slices (tpo <= S: S = 32 / TR >= 32 / rows)
  const int tpo = kThreads / (rows * 8);
  const int oi = threadIdx.x / tpo, q = threadIdx.x % tpo;
  const int ro = oi >> 3, oc = oi & 7;
  const int mo = m0 + ro, no = blockIdx.x * kTileN + oc * 8;
  const bool writes = q == 0 && mo < M && no < n_end;        // n_end: a multiple of 8
  __half* c_at = C + static_cast<size_t>(writes ? mo : 0) * N + (writes ? no : 0);
  uint4 cv = writes ? *reinterpret_cast<const uint4*>(c_at)  // C first: its latency hides
                    : make_uint4(0u, 0u, 0u, 0u);            // behind the sums
  float acc[RM][8];
  const float* arow[RM];
  bool live[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int m = m0 + r + TR * i;
    live[i] = m < M;
    arow[i] = a_sum + static_cast<size_t>(live[i] ? m : 0) * G;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
  }
  if (live[0] && n0 < N) {
    const float* dcol = delta + n0;
    for (int g0 = z; g0 < G; g0 += S * kGsplitBatch) {
      float dv[kGsplitBatch][8];
      float av[kGsplitBatch][RM];
#pragma unroll
      for (int b = 0; b < kGsplitBatch; ++b) {       // every load of the batch before any use
        const int g = g0 + b * S;
        if (g < G) {
          load_octet(dcol + static_cast<size_t>(g) * N, dv[b]);
#pragma unroll
          for (int i = 0; i < RM; ++i) av[b][i] = __ldg(arow[i] + g);  // row 0's for rows past M
        } else {
#pragma unroll
          for (int i = 0; i < RM; ++i) av[b][i] = 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) dv[b][c] = 0.0f;
        }
      }
#pragma unroll
      for (int b = 0; b < kGsplitBatch; ++b) {        // in group order
        if (g0 + b * S >= G) continue;
#pragma unroll
        for (int i = 0; i < RM; ++i) fma_octet<kHalfAccum>(acc[i], av[b][i], dv[b]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    float4* dst = reinterpret_cast<float4*>(s_red + (z * rows + r + TR * i) * kTileN + oct * 8);
    dst[0] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    dst[1] = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
  __syncthreads();
  float sum[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) sum[c] = 0.0f;
  const int span = S / tpo;
  for (int j = q * span; j < (q + 1) * span; ++j) {  // this thread's slices, in order
    const float4* src = reinterpret_cast<const float4*>(s_red + (j * rows + ro) * kTileN + oc * 8);
    const float4 u = src[0], v = src[1];
    const float x[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      sum[c] += x[c];
      if (kHalfAccum) sum[c] = __half2float(__float2half_rn(sum[c]));  // planted: fp16 too
    }
  }
  for (int off = 1; off < tpo; off <<= 1)            // the tpo parts: a fixed butterfly
#pragma unroll
    for (int c = 0; c < 8; ++c) sum[c] += __shfl_xor_sync(0xffffffffu, sum[c], off);
  if (writes) {
    __half2* h = reinterpret_cast<__half2*>(&cv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(h[j]);
      h[j] = __floats2half2_rn(f.x + sum[2 * j], f.y + sum[2 * j + 1]);
    }
    *reinterpret_cast<uint4*>(c_at) = cv;
  }
}

template <int RM>
void launch_gsplit_rm(const CorrectionProblem& p, const float* a_sum, int n_end, GsplitShape s,
                      cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                  static_cast<unsigned>((p.M + s.TR * RM - 1) / (s.TR * RM)));
  if (p.flags & kFlagHalfAccum)
    corr_gsplit_kernel<RM, true><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, s.TR, s.S);
  else
    corr_gsplit_kernel<RM, false><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end, s.TR, s.S);
}

}  // namespace

GsplitShape gsplit_shape(int M, int N, int G, int sms) {
  const int s0 = std::min(kGsplitLanes, pow2_at_least((G + kGsplitGroups - 1) / kGsplitGroups));
  const int tr = std::min(kGsplitLanes / s0, pow2_at_least(M));
  const long col_blocks = (N + kTileN - 1) / kTileN;
  int rm = 1;   // more rows per thread while the grid keeps two blocks per SM: fewer re-reads of delta
  while (rm < kGsplitMaxRM && tr * rm * 2 <= kGsplitLanes &&
         col_blocks * ((M + tr * rm * 2 - 1) / (tr * rm * 2)) >= 2L * sms)
    rm *= 2;
  return GsplitShape{tr, kGsplitLanes / tr, rm};
}

// M = 1: stream's decode kernel (launch_wide -> launch_stream) measured faster on an H100
// (8.0 against 13.5 pp over rmw at M1-N2048-K2048-g128, 2026-12-06)
bool gsplit_takes(const CorrectionProblem& p) { return p.G >= 2 && p.M >= 2 && p.M <= kGsplitMaxM; }

const char* gsplit_unsupported(const CorrectionProblem& p) { return wide_unsupported(p); }

cudaError_t launch_gsplit(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  if (!gsplit_takes(p)) return launch_wide(p, a_sum, stream);
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  const GsplitShape s = gsplit_shape(p.M, p.N, p.G, sms);
  if (s.RM == 4) launch_gsplit_rm<4>(p, a_sum, n_end, s, stream);
  else if (s.RM == 2) launch_gsplit_rm<2>(p, a_sum, n_end, s, stream);
  else launch_gsplit_rm<1>(p, a_sum, n_end, s, stream);
  return cudaGetLastError();
}

}  // namespace corr_detail
}  // namespace harness_int4
