// Correction variant wide: stream's sequence (asum_flat on the side stream while Marlin
// runs, joined by an event) with an accumulation written for the grouped weights at
// M >= 2, where the kernel study on the H200 (docs/hopper.md 5.2-5.4) found the other two
// 4-6x their floor:
//  * corr_tile_kernel and corr_stream_kernel put the 8 octets of a 64-column tile across a
//    warp and 4 row slots in the same warp, so every group costs each thread two 16-byte
//    delta loads that the warp's four slots repeat, and RM scalar a_sum loads at four
//    different rows. By a count of L1 requests (an estimate, not a profile), their loads
//    and not their arithmetic bound them at M = 1024 (corr_tile 43 us at N = 8192, G = 16,
//    measured; the FP32 arithmetic of 134 M FMAs is about 4 us at the datasheet's peak).
//  * corr_wide_kernel: a block covers 256 columns and 8 warps x RM rows. Lane l owns the 4
//    columns at 4l and the 4 at 128 + 4l, so the warp's 16-byte reads of delta cover 512
//    contiguous bytes and the a_sum of a row is one broadcast read. A first version read
//    delta and a_sum from global memory inside the loop over groups: on the H200 it took
//    0.48-0.92x stream's accumulation's time at K = 2048, g128, M >= 32 with a warm L2,
//    but up to 1.8x with a cold L2 at M <= 256 and up to 3.5x at 64 groups: one memory
//    round trip per few groups. So the block now stages up to 32 groups of delta (its 256
//    columns) and of a_sum (its rows) in shared memory, 2-8 loads per thread, after
//    issuing the thread's C loads, and syncs once. The thread then adds the groups in
//    order g = 0, 1, ..., G - 1 in fp32 (corr_stream_kernel's order: the same bits) and
//    writes each C piece once. Two barriers per 32 groups.
// Where it does not run (wide_takes): M = 1, one group per row (G = 1), and 32 or more
// groups at M <= 256, which stream's kernels cover (launch_stream: the decode split kernel,
// corr_stream_kernel, corr_tile_kernel). RM (rows per warp, 1..4) is
// the largest that still gives two blocks per SM. Flag bits (planted defects) as
// everywhere: fp16 accumulation, the last 128 columns untouched. Shared internals:
// correction_variants.cuh, which also holds the kernel's body (staged_accumulation, shared
// with blocked's kernel: the same staging and group order over another tile shape).
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kWideCols = 256;                 // columns of a block: 32 lanes x 2 x 4
constexpr int kWideWarps = kThreads / 32;      // warps of a block, each on its own rows
constexpr int kWideMaxRM = 4;

constexpr int kWideGC = 32;                    // groups staged in shared memory per chunk

template <int RM, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_wide_kernel(__half* __restrict__ C, const float* __restrict__ a_sum,
                 const float* __restrict__ delta, int M, int N, int G, int n_end) {
  __shared__ __align__(16) float s_d[kWideGC * kWideCols];                // 32 KB
  __shared__ __align__(16) float s_a[kWideWarps * kWideMaxRM * kWideGC];  // 4 KB
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int col0 = blockIdx.x * kWideCols;
  const int TM = kWideWarps * RM;
  const int row0 = blockIdx.y * TM;
  // the warp's rows (a_sum of a row: one broadcast read), the lane's two quads of columns
  // (the warp's 16-byte reads of staged delta: 512 contiguous bytes)
  staged_accumulation<RM, kWideCols, kWideGC, kWideGC, kHalfAccum>(
      C, a_sum, delta, M, N, G, n_end, s_d, s_a, row0, TM, warp * RM, col0, lane * 4);
}

// Rows per warp: the largest of 4, 2, 1 that still fills every SM twice (at least one).
// (RM = 8, one pair of shared-memory delta reads per 64 FMAs at 179 registers, was no
// faster on the H200 at M = 1024, N = 8192: 15.6 us against 16.0, 394e076.)
int wide_rows_per_warp(const CorrectionProblem& p) {
  const long col_blocks = (p.N + kWideCols - 1) / kWideCols;
  const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  for (int rm = kWideMaxRM; rm > 1; rm /= 2) {
    const long row_blocks = (p.M + kWideWarps * rm - 1) / (kWideWarps * rm);
    if (col_blocks * row_blocks >= 2L * sms) return rm;
  }
  return 1;
}

template <int RM>
cudaError_t launch_wide_rm(const CorrectionProblem& p, const float* a_sum, int n_end, bool half,
                           cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kWideCols - 1) / kWideCols),
                  static_cast<unsigned>((p.M + kWideWarps * RM - 1) / (kWideWarps * RM)));
  if (half)
    corr_wide_kernel<RM, true><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  else
    corr_wide_kernel<RM, false><<<grid, kThreads, 0, stream>>>(p.C, a_sum, p.delta, p.M, p.N, p.G, n_end);
  return cudaGetLastError();
}

}  // namespace

// The kernel study of 3873e60 (H200, warm and cold L2): corr_wide took 0.47-0.90x (warm)
// and 0.52-1.00x (cold) stream's accumulation at every production shape with 16 groups
// and M >= 16, and at 64 groups 0.70-0.75x at M = 1024 but 1.16-1.57x at M <= 256, where
// its few blocks (one per 256 columns and 8-32 rows) each chain all 64 groups and
// corr_tile's split of the groups over its slots wins.
constexpr int kWideManyGroups = 32;
constexpr int kWideManyGroupsMinM = 257;

bool wide_takes(const CorrectionProblem& p) {
  if (p.M < 2 || p.G < 2) return false;
  return p.G < kWideManyGroups || p.M >= kWideManyGroupsMinM;
}

const char* wide_unsupported(const CorrectionProblem& p) {
  if (const char* why = stream_unsupported(p)) return why;   // its group sums, its fallback
  if (wide_takes(p) && (p.M + kWideWarps - 1) / kWideWarps > 65535L * kWideMaxRM)
    return "M too large for the wide correction (grid.y > 65535)";
  return nullptr;
}

cudaError_t launch_wide(const CorrectionProblem& p, const float* a_sum, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  if (!wide_takes(p)) return launch_stream(p, a_sum, stream);
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const bool half = (p.flags & kFlagHalfAccum) != 0;
  int rm = wide_rows_per_warp(p);
  while (rm < kWideMaxRM && (p.M + kWideWarps * rm - 1) / (kWideWarps * rm) > 65535) rm *= 2;
  switch (rm) {
    case 4: return launch_wide_rm<4>(p, a_sum, n_end, half, stream);
    case 2: return launch_wide_rm<2>(p, a_sum, n_end, half, stream);
    default: return launch_wide_rm<1>(p, a_sum, n_end, half, stream);
  }
}

}  // namespace corr_detail
}  // namespace harness_int4
