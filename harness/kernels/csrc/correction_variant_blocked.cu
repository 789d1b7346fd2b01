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
// defects) as everywhere: fp16 accumulation, the last 128 columns untouched. The body
// (staging, group order, C written once) is wide's (staged_accumulation, correction_variants.cuh).
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kBlkTX = 16;                    // column slots: 16 threads x two quads
constexpr int kBlkTY = kThreads / kBlkTX;     // row slots
constexpr int kBlkCols = 8 * kBlkTX;          // 128 columns a block
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
  const int tx = threadIdx.x % kBlkTX, ty = threadIdx.x / kBlkTX;
  const int col0 = blockIdx.x * kBlkCols;
  const int row0 = blockIdx.y * BM;
  staged_accumulation<TM, kBlkCols, kBlkGC, kBlkAStride, kHalfAccum>(
      C, a_sum, delta, M, N, G, n_end, s_d, s_a, row0, BM, ty * TM, col0, tx * 4);
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
