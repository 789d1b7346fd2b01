// Correction variant side_stream: a_sum (asum_kernel: 16-byte loads, deterministic
// segment reduction) on the device's side stream while Marlin runs on the caller's stream,
// joined by an event, then one tiled accumulation kernel (launch_tile, kSum = false, in
// correction_variant_fused.cu) reading that a_sum; no zeroing of C.
// Shared internals: correction_variants.cuh.
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {
namespace {

__global__ void __launch_bounds__(kThreads)
asum_kernel(const __half* __restrict__ A, float* __restrict__ a_sum, int M, int K, int G, int W,
            int rows_per_block) {
  extern __shared__ float smem[];
  const int row0 = blockIdx.x * rows_per_block;
  const int rows = min(rows_per_block, M - row0);
  float* s_asum = smem;
  float* s_part = smem + rows_per_block * G;
  block_group_sums(A, row0, rows, K, G, W, s_part, s_asum, G);
  for (int i = threadIdx.x; i < rows * G; i += blockDim.x)
    a_sum[static_cast<size_t>(row0) * G + i] = s_asum[i];
}

}  // namespace

AsumConfig asum_config(const CorrectionProblem& p) {
  AsumConfig c{};
  c.W = segment_width(p.K / p.G / 8);
  const size_t row_floats = static_cast<size_t>(p.G) + p.K / 8 / c.W;
  const int sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  int rpb = p.M / sms;
  rpb = rpb < 1 ? 1 : (rpb > 32 ? 32 : rpb);
  while (rpb > 1 && rpb * row_floats * sizeof(float) > kSmemDefault) --rpb;
  c.rows_per_block = rpb;
  c.smem = rpb * row_floats * sizeof(float);
  c.blocks = static_cast<unsigned>((p.M + rpb - 1) / rpb);
  return c;
}

cudaError_t launch_asum(const CorrectionProblem& p, float* a_sum, cudaStream_t stream) {
  if (p.M <= 0) return cudaSuccess;
  const AsumConfig c = asum_config(p);
  if (c.smem > kSmemDefault) {
    t_detail = "a_sum of one row does not fit in 48 KB of shared memory (group size too small)";
    return cudaErrorInvalidValue;
  }
  asum_kernel<<<c.blocks, kThreads, c.smem, stream>>>(p.A, a_sum, p.M, p.K, p.G, c.W, c.rows_per_block);
  return cudaGetLastError();
}

// a_sum on the side stream while Marlin runs on `stream`; joined before the accumulation.
// `accum`: side_stream's, or the stream / wide variants' (a_sum by asum_flat) with the same
// sequence.
int side_stream_sequence(const CorrectionProblem& p, const MarlinCall* mc, MarlinLauncher marlin,
                         cudaStream_t stream, cudaError_t* err, SideAccum accum) {
  const bool flat = accum != kAccumTile;
  float* a_sum = nullptr;
  cudaError_t e = ensure_scratch(p.device, static_cast<size_t>(p.M) * p.G * sizeof(float),
                                 is_capturing(stream), &a_sum);
  if (e == cudaSuccess) e = ensure_streams(p.device);
  if (e != cudaSuccess) return *err = e, 0;
  DeviceState& s = g_dev[p.device];
  if ((e = cudaEventRecord(s.fork, stream)) != cudaSuccess) return *err = e, 0;
  if ((e = cudaStreamWaitEvent(s.side, s.fork, 0)) != cudaSuccess) return *err = e, 0;
  cudaError_t side_err = flat ? launch_asum_flat(p, a_sum, s.side) : launch_asum(p, a_sum, s.side);
  e = cudaEventRecord(s.join, s.side);
  const int rc = mc != nullptr ? run_marlin(*mc, marlin, stream, err) : 0;
  const cudaError_t je = cudaStreamWaitEvent(stream, s.join, 0);  // always join
  if (side_err == cudaSuccess) side_err = e != cudaSuccess ? e : je;
  if (side_err != cudaSuccess && *err == cudaSuccess) *err = side_err;
  if (rc != 0 || *err != cudaSuccess) return rc;
  e = accum == kAccumWide     ? launch_wide(p, a_sum, stream)
      : accum == kAccumGsplit ? launch_gsplit(p, a_sum, stream)
      : accum == kAccumBlocked ? launch_blocked(p, a_sum, stream)
      : accum == kAccumStream ? launch_stream(p, a_sum, stream)
                              : launch_tile(p, a_sum, false, false, stream);
  if (e != cudaSuccess) *err = e;
  return 0;
}

}  // namespace corr_detail
}  // namespace harness_int4
