// Correction variant blocked: stream's sequence (asum_flat on the side stream while Marlin
// runs, joined by an event) with a register-blocked accumulation for grouped weights above
// decode (issue 41).
//
// Why: the correction is a rank-G update, C[M, N] += a_sum[M, G] x delta[G, N], and above
// decode with 64 groups the shipped accumulations were several microseconds over the rmw
// floor (H100, graph mode, docs/hopper.md 5.10: the faster of gsplit and wide 7.3 us over rmw
// at M64-N2048-K8192-g128, 10.0 us at M256 and 18.9 us at M1024, of which asum_flat is a few
// microseconds). wide walks 32-group chunks with one row or a few per warp, so at M = 256 its
// 256 blocks each stage delta's chunk for their 8-32 rows (delta crosses L2 8-32 times), and
// at 32 or more groups with M <= 256 stream's corr_tile runs instead; the arithmetic
// (M x N x G multiply-adds: 33.5 M at M256-N2048-G64) is a few hundred cycles of the GPU.
//
// corr_blocked_kernel<TM>: the usual blocking of a small GEMM on the CUDA cores. A block owns
// 16 x TM rows and 128 columns; its 256 threads are 16 column slots x 16 row slots, thread
// (tx, ty) owns rows ty*TM .. ty*TM + TM - 1 and the two quads of columns 4tx and 64 + 4tx
// (so a warp's 16-byte reads of staged delta are contiguous and conflict-free, as in wide).
// Per chunk of 32 groups the block stages delta [32, 128] and a_sum [16 TM, 32] in shared
// memory (one barrier), then each thread adds the groups in order g = 0, 1, ..., G - 1 in
// fp32 (fmaf from zero, then one add to C: the order and bits of wide and stream), 8 TM
// multiply-adds per pair of staged reads. Delta crosses L2 once per 16 TM rows, a_sum once
// per 128 columns. C's loads are issued before the staging (in flight with it), each C
// piece is written once. No atomics, no scratch beyond a_sum.
//
// The host picks TM (4, 2, 1) as the largest whose grid still fills every SM once
// (blocked_rows_per_thread). Where blocked_takes refuses (one group per row, or decode M,
// where gsplit was measured the faster) gsplit's accumulation runs instead (launch_gsplit,
// which itself runs wide's and stream's where it does not take). Flag bits (planted
// defects) as everywhere: fp16 accumulation, the last 128 columns untouched.
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kBlkTX = 16;                    // column slots: 16 threads x two quads
constexpr int kBlkTY = kThreads / kBlkTX;     // row slots
constexpr int kBlkCols = 8 * kBlkTX;          // 128 columns a block
constexpr int kBlkHalf = kBlkCols / 2;        // a thread's second quad starts here
constexpr int kBlkGC = 32;                    // groups staged per chunk
constexpr int kBlkAStride = kBlkGC + 4;       // a staged a_sum row, padded (16-byte rows)
constexpr int kBlkMaxTM = 4;
constexpr int kBlockedMinM = 17;              // decode keeps gsplit's accumulation
static_assert(kBlkTX * kBlkTY == kThreads, "16 x 16 slots");

template <int TM, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_blocked_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                    const float* __restrict__ delta, int M, int N, int G, int n_end) {
  constexpr int BM = kBlkTY * TM;
  __shared__ __align__(16) float s_d[kBlkGC * kBlkCols];     // 16 KB
  __shared__ __align__(16) float s_a[BM * kBlkAStride];      // 2.3-9.2 KB
  const int tid = threadIdx.x;
  const int tx = tid % kBlkTX, ty = tid / kBlkTX;
  const int col0 = blockIdx.x * kBlkCols;
  const int row0 = blockIdx.y * BM;
  const int m0 = row0 + ty * TM;
  const int na = col0 + tx * 4, nb = na + kBlkHalf;   // the thread's two quads of columns
  const bool va = m0 < M && na < n_end, vb = m0 < M && nb < n_end;   // n_end % 8 == 0
  uint2 ca[TM], cb[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) {               // C first: in flight with the staging loads
    const bool live = m0 + i < M;
    const __half* crow = C + static_cast<size_t>(live ? m0 + i : 0) * N;
    ca[i] = va && live ? *reinterpret_cast<const uint2*>(crow + na) : make_uint2(0u, 0u);
    cb[i] = vb && live ? *reinterpret_cast<const uint2*>(crow + nb) : make_uint2(0u, 0u);
  }
  float acc[TM][8];                            // [0, 4): columns na.., [4, 8): nb..
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
  for (int g0 = 0; g0 < G; g0 += kBlkGC) {     // uniform over the block
    const int gc = min(kBlkGC, G - g0);
    if (g0 > 0) __syncthreads();               // the last chunk's readers are done
    for (int q = tid; q < gc * (kBlkCols / 4); q += kThreads) {   // delta, zeros past N
      const int r = q / (kBlkCols / 4), c = (q - r * (kBlkCols / 4)) * 4;
      const float4 v = col0 + c < N
          ? __ldg(reinterpret_cast<const float4*>(delta + static_cast<size_t>(g0 + r) * N + col0 + c))
          : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(s_d + r * kBlkCols + c) = v;
    }
    for (int e = tid; e < BM * gc; e += kThreads) {                // a_sum, zeros past M
      const int r = e / gc, g = e - r * gc;
      s_a[r * kBlkAStride + g] =
          row0 + r < M ? __ldg(a_sum + static_cast<size_t>(row0 + r) * G + g0 + g) : 0.0f;
    }
    __syncthreads();
    if (!va) continue;                         // still at every barrier of the block
    const float* sa = s_a + ty * TM * kBlkAStride;
    const float* sd = s_d + tx * 4;
    int g = 0;
    for (; g + 4 <= gc; g += 4) {              // groups g .. g + 3 in order
      float4 av[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = *reinterpret_cast<const float4*>(sa + i * kBlkAStride + g);
      float dv[4][8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 x = *reinterpret_cast<const float4*>(sd + (g + j) * kBlkCols);
        const float4 y = *reinterpret_cast<const float4*>(sd + (g + j) * kBlkCols + kBlkHalf);
        dv[j][0] = x.x; dv[j][1] = x.y; dv[j][2] = x.z; dv[j][3] = x.w;
        dv[j][4] = y.x; dv[j][5] = y.y; dv[j][6] = y.z; dv[j][7] = y.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        fma_octet<kHalfAccum>(acc[i], av[i].x, dv[0]);
        fma_octet<kHalfAccum>(acc[i], av[i].y, dv[1]);
        fma_octet<kHalfAccum>(acc[i], av[i].z, dv[2]);
        fma_octet<kHalfAccum>(acc[i], av[i].w, dv[3]);
      }
    }
    for (; g < gc; ++g) {                      // the chunk's last G % 4 groups, one at a time
      const float4 x = *reinterpret_cast<const float4*>(sd + g * kBlkCols);
      const float4 y = *reinterpret_cast<const float4*>(sd + g * kBlkCols + kBlkHalf);
      const float dv[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
      for (int i = 0; i < TM; ++i) fma_octet<kHalfAccum>(acc[i], sa[i * kBlkAStride + g], dv);
    }
  }
  if (!va) return;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    if (m0 + i >= M) break;
    __half* crow = C + static_cast<size_t>(m0 + i) * N;
    __half2* ha = reinterpret_cast<__half2*>(&ca[i]);
    __half2* hb = reinterpret_cast<__half2*>(&cb[i]);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float2 fa = __half22float2(ha[j]), fb = __half22float2(hb[j]);
      ha[j] = __floats2half2_rn(fa.x + acc[i][2 * j], fa.y + acc[i][2 * j + 1]);
      hb[j] = __floats2half2_rn(fb.x + acc[i][4 + 2 * j], fb.y + acc[i][4 + 2 * j + 1]);
    }
    *reinterpret_cast<uint2*>(crow + na) = ca[i];
    if (vb) *reinterpret_cast<uint2*>(crow + nb) = cb[i];
  }
}

template <int TM>
cudaError_t launch_blocked_tm(const CorrectionProblem& p, const float* a_sum, int n_end,
                              cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kBlkCols - 1) / kBlkCols),
                  static_cast<unsigned>((p.M + kBlkTY * TM - 1) / (kBlkTY * TM)));
  if (p.flags & kFlagHalfAccum)
    corr_blocked_kernel<TM, true><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  else
    corr_blocked_kernel<TM, false><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  return cudaGetLastError();
}

}  // namespace

int blocked_rows_per_thread(int M, int N, int sms) {
  const long col_blocks = (N + kBlkCols - 1) / kBlkCols;
  for (int tm = kBlkMaxTM; tm > 1; tm /= 2)
    if (col_blocks * ((M + kBlkTY * tm - 1) / (kBlkTY * tm)) >= sms) return tm;
  return 1;
}

bool blocked_takes(const CorrectionProblem& p) { return p.G >= 2 && p.M >= kBlockedMinM; }

const char* blocked_unsupported(const CorrectionProblem& p) {
  if (const char* why = gsplit_unsupported(p)) return why;   // its group sums, its fallbacks
  if (blocked_takes(p) && (p.M + kBlkTY * kBlkMaxTM - 1) / (kBlkTY * kBlkMaxTM) > 65535L)
    return "M too large for the blocked correction (grid.y > 65535)";
  return nullptr;
}

cudaError_t launch_blocked(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  if (!blocked_takes(p)) return launch_gsplit(p, a_sum, stream);
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  int tm = blocked_rows_per_thread(p.M, p.N, sms);
  while (tm < kBlkMaxTM && (p.M + kBlkTY * tm - 1) / (kBlkTY * tm) > 65535) tm *= 2;
  switch (tm) {
    case 4: return launch_blocked_tm<4>(p, a_sum, n_end, stream);
    case 2: return launch_blocked_tm<2>(p, a_sum, n_end, stream);
    default: return launch_blocked_tm<1>(p, a_sum, n_end, stream);
  }
}

}  // namespace corr_detail
}  // namespace harness_int4
