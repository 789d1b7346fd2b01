// Correction variant fold: for per-column weights (G = 1) above decode, the group sum folded
// into the accumulation: one kernel after Marlin, on Marlin's stream, with no side stream,
// no event and no a_sum scratch (issue 41: "the group sum folded into the accumulation at
// M > 48").
//
// Why: at G = 1 the correction is a rank-1 update, C[m, n] += a_sum[m] * delta[n], and the
// shipped default's excess over the rmw floor there is the group sum and its sequence, not
// the accumulation (docs/hopper.md 5.8: 1.0-17.6 pp at the per-column shapes). Above M = 48
// quanto's Marlin holds the whole register file of every SM (255 registers x 256 threads),
// so asum_flat on the side stream cannot run beside it: it runs after Marlin anyway, as a
// second dependent launch with its own memory round trip, then the join and the
// accumulation (docs/hopper.md 5.7). Folding the row sums into the kernel that reads C
// leaves one dependent launch, as rmw has, and A's bytes (one row of 4-16 KB per row of C)
// read in the same round trip as C's.
//
// corr_fold_kernel<R>: a block owns R whole rows (every column). Each thread first issues the
// loads of its first C vectors (8 columns x R rows) and its delta octet, then reads A's row
// vectors tid, tid + 256, ... and sums them (8 halves in order, then the vectors in order),
// the 32 lanes of a warp by a fixed butterfly of shuffles and the 8 warps' partials in order
// by one thread per row (a fixed order: bitwise repeatable). After one barrier each thread
// adds a_sum[row] x delta[n] (fmaf from zero, as every variant does at G = 1) to its C
// octets in fp32 and writes each once with a 16-byte store, 2048 columns per pass.
//
// Takes (fold_takes): G = 1 and M >= 17; elsewhere the blocked variant's accumulation
// (launch_blocked, after the side stream's group sums). R (4, 2, 1) is the largest that
// still gives every SM a block (fold_rows_per_block). Flag bits (planted defects) as
// everywhere: fp16 accumulation, the last 128 columns untouched. Shared internals:
// correction_variants.cuh.
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

constexpr int kFoldMaxR = 4;
constexpr int kFoldMinM = 17;                  // decode keeps gsplit's route (stream's kernels)
constexpr int kFoldCols = 8 * kThreads;        // columns per pass: one octet per thread
constexpr int kFoldWarps = kThreads / 32;

template <int R, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_fold_kernel(__half* __restrict__ C, const __half* __restrict__ A,
                 const float* __restrict__ delta, int M, int N, int K, int n_end) {
  __shared__ float s_part[R * kFoldWarps];
  __shared__ float s_sum[R];
  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int row0 = blockIdx.x * R;
  const int n0 = tid * 8;                      // the thread's first octet of columns
  const bool v0 = n0 < n_end;                  // n_end % 8 == 0: the octet is inside
  uint4 c0[R];                                 // C first: in flight with A's loads
#pragma unroll
  for (int i = 0; i < R; ++i)
    c0[i] = v0 && row0 + i < M
        ? *reinterpret_cast<const uint4*>(C + static_cast<size_t>(row0 + i) * N + n0)
        : make_uint4(0u, 0u, 0u, 0u);
  float d0[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (v0) load_octet(delta + n0, d0);          // G = 1: delta is one row of N
  const int vrow = K >> 3;                     // 16-byte vectors of A per row
  float s[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    s[i] = 0.0f;
    if (row0 + i >= M) continue;
    const uint4* src = reinterpret_cast<const uint4*>(A + static_cast<size_t>(row0 + i) * K);
#pragma unroll 4
    for (int v = tid; v < vrow; v += kThreads) s[i] += sum_half8(__ldg(src + v));
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    for (int off = 16; off > 0; off >>= 1) s[i] += __shfl_xor_sync(0xffffffffu, s[i], off);
    if (lane == 0) s_part[i * kFoldWarps + warp] = s[i];
  }
  __syncthreads();
  if (tid < R) {
    float t = 0.0f;
    for (int w = 0; w < kFoldWarps; ++w) t += s_part[tid * kFoldWarps + w];
    s_sum[tid] = t;
  }
  __syncthreads();
  for (int n = n0, pass = 0; n < n_end; n += kFoldCols, ++pass) {
    float dv[8];
    uint4 cv[R];
    if (pass == 0) {
#pragma unroll
      for (int c = 0; c < 8; ++c) dv[c] = d0[c];
#pragma unroll
      for (int i = 0; i < R; ++i) cv[i] = c0[i];
    } else {
      load_octet(delta + n, dv);
#pragma unroll
      for (int i = 0; i < R; ++i)
        cv[i] = row0 + i < M ? *reinterpret_cast<const uint4*>(C + static_cast<size_t>(row0 + i) * N + n)
                             : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (row0 + i >= M) break;
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      fma_octet<kHalfAccum>(acc, s_sum[i], dv);
      __half2* h = reinterpret_cast<__half2*>(&cv[i]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h[j]);
        h[j] = __floats2half2_rn(f.x + acc[2 * j], f.y + acc[2 * j + 1]);
      }
      *reinterpret_cast<uint4*>(C + static_cast<size_t>(row0 + i) * N + n) = cv[i];
    }
  }
}

template <int R>
cudaError_t launch_fold_r(const CorrectionProblem& p, int n_end, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((p.M + R - 1) / R);
  if (p.flags & kFlagHalfAccum)
    corr_fold_kernel<R, true><<<blocks, kThreads, 0, stream>>>(p.C, p.A, p.delta, p.M, p.N, p.K, n_end);
  else
    corr_fold_kernel<R, false><<<blocks, kThreads, 0, stream>>>(p.C, p.A, p.delta, p.M, p.N, p.K, n_end);
  return cudaGetLastError();
}

}  // namespace

int fold_rows_per_block(int M, int sms) {
  for (int r = kFoldMaxR; r > 1; r /= 2)
    if ((M + r - 1) / r >= sms) return r;
  return 1;
}

bool fold_takes(const CorrectionProblem& p) { return p.G == 1 && p.M >= kFoldMinM; }

const char* fold_unsupported(const CorrectionProblem& p) { return blocked_unsupported(p); }

cudaError_t launch_fold(const CorrectionProblem& p, cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  // flag bit 1 (planted): leave the last 128-column tile untouched, as the others do
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  switch (fold_rows_per_block(p.M, sms)) {
    case 4: return launch_fold_r<4>(p, n_end, stream);
    case 2: return launch_fold_r<2>(p, n_end, stream);
    default: return launch_fold_r<1>(p, n_end, stream);
  }
}

}  // namespace corr_detail
}  // namespace harness_int4
