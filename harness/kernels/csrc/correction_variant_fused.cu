// Correction variants fused and fused_pdl, the accumulation of side_stream, and the
// floors empty / empty_pdl:
//  * corr_tile_kernel<RM, kSum, kHalfAccum>: one block = TM rows x (col_tiles x 64)
//    columns; each C vector (8 halves) is read, added and written once. kSum: the block
//    computes a_sum for its rows itself (fused, fused_pdl: one launch after Marlin, no
//    scratch); otherwise it reads the a_sum of side_stream. Under programmatic dependent
//    launch (fused_pdl, SM 9.0) it waits for Marlin only just before touching C.
//  * empty_kernel: the launch-latency floor of a one-kernel correction.
// Flag bits 0 and 1 of CorrectionProblem::flags (planted defects) select the fp16
// accumulation and the skipped last 128-column tile. Shared internals: correction_variants.cuh.
#include "correction_variants.cuh"

namespace harness_int4 {
namespace corr_detail {

std::atomic<long> g_pdl_fallbacks{0};

namespace {

template <int RM, bool kSum, bool kHalfAccum>
__global__ void __launch_bounds__(kThreads)
corr_tile_kernel(__half* __restrict__ C, const __half* __restrict__ A,
                 const float* __restrict__ a_sum, const float* __restrict__ delta, int M, int N,
                 int K, int G, int W, int RG, int col_tiles, int n_end) {
  extern __shared__ float smem[];
  const int TM = RG * RM;
  const int GS = 32 / RG;
  const int astride = G + 1;                        // padded: rows hit different banks
  float* s_asum = smem;                             // TM * (G + 1), rounded up to 4 floats
  float* s_red = s_asum + ((TM * astride + 3) & ~3);  // GS * TM * 64, 16-byte aligned
  float* s_part = s_red + GS * TM * kTileN;         // kSum: TM * (K / 8 / W)
  const int row0 = blockIdx.y * TM;
  const int rows = min(TM, M - row0);
  const int tid = threadIdx.x;
  const int ntiles = (N + kTileN - 1) / kTileN;

  {  // delta does not depend on a_sum: start pulling this block's columns into L2 now
    const int first = blockIdx.x * col_tiles;
    const int lines = G * 2 * max(0, min(col_tiles, ntiles - first));  // 2 x 128 B per row of a tile
    for (int i = tid; i < lines; i += kThreads) {
      const int rest = i >> 1;
      const int n = (first + rest / G) * kTileN + (i & 1) * 32;
      if (n < N) prefetch_l2(delta + static_cast<size_t>(rest % G) * N + n);
    }
  }
  for (int i = rows * astride + tid; i < TM * astride; i += kThreads) s_asum[i] = 0.0f;
  if (kSum) {
    block_group_sums(A, row0, rows, K, G, W, s_part, s_asum, astride);
  } else {
    for (int i = tid; i < rows * G; i += kThreads) {
      const int r = i / G;
      s_asum[r * astride + (i - r * G)] = a_sum[static_cast<size_t>(row0) * G + i];
    }
    __syncthreads();
  }

  const int oct = tid & 7;
  const int slot = tid >> 3;                        // 0..31
  const int rg = slot & (RG - 1);
  const int gs = slot / RG;
  bool waited = false;
  for (int t = 0; t < col_tiles; ++t) {
    const int tile = blockIdx.x * col_tiles + t;
    if (tile >= ntiles) break;                      // uniform over the block
    const int n0 = tile * kTileN + oct * 8;
    float acc[RM][8];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
    if (n0 < N) {                                   // N % 8 == 0: the whole octet is inside
      const float* dcol = delta + n0;
#pragma unroll 4
      for (int g = gs; g < G; g += GS) {
        float dv[8];
        load_octet(dcol + static_cast<size_t>(g) * N, dv);
#pragma unroll
        for (int r = 0; r < RM; ++r)  // kHalfAccum: planted defect, fp16 operands and accumulator
          fma_octet<kHalfAccum>(acc[r], s_asum[(rg * RM + r) * astride + g], dv);
      }
    }
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      float4* dst = reinterpret_cast<float4*>(s_red + (gs * TM + rg * RM + r) * kTileN + oct * 8);
      dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
    }
    __syncthreads();
    if (!waited) {                                  // first access to Marlin's output follows
      wait_for_primary_grid();
      waited = true;
    }
    for (int i = tid; i < rows * 8; i += kThreads) {
      const int r = i >> 3;
      const int o = i & 7;
      const int n = tile * kTileN + o * 8;
      if (n >= n_end) continue;                     // n_end <= N, a multiple of 8
      float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int z = 0; z < GS; ++z) {
        const float4* src = reinterpret_cast<const float4*>(s_red + (z * TM + r) * kTileN + o * 8);
        const float4 a = src[0];
        const float4 b = src[1];
        s[0] += a.x; s[1] += a.y; s[2] += a.z; s[3] += a.w;
        s[4] += b.x; s[5] += b.y; s[6] += b.z; s[7] += b.w;
        if (kHalfAccum) {  // planted defect: the slices are added in fp16 too
#pragma unroll
          for (int c = 0; c < 8; ++c) s[c] = __half2float(__float2half_rn(s[c]));
        }
      }
      uint4* cp = reinterpret_cast<uint4*>(C + static_cast<size_t>(row0 + r) * N + n);
      uint4 cv = *cp;
      __half2* h = reinterpret_cast<__half2*>(&cv);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __half22float2(h[j]);
        h[j] = __floats2half2_rn(f.x + s[2 * j], f.y + s[2 * j + 1]);
      }
      *cp = cv;
    }
    __syncthreads();                                // s_red is reused by the next tile
  }
}

template <bool kWait>
__global__ void empty_kernel() {
  if (kWait) wait_for_primary_grid();
}

// cudaLaunchKernelEx with the PDL attribute when `pdl`; if the launch refuses the attribute
// (a non-sticky cudaErrorInvalidValue / cudaErrorNotSupported), clear it, launch plainly and
// count the fallback (pdl_fallback_count), so a study says what it really measured.
template <typename... Params, typename... Args>
cudaError_t launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, bool pdl,
                      cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (pdl && (e == cudaErrorInvalidValue || e == cudaErrorNotSupported)) {
    cudaGetLastError();
    g_pdl_fallbacks.fetch_add(1);
    cfg.numAttrs = 0;
    e = cudaLaunchKernelEx(&cfg, kernel, args...);
  }
  return e;
}

// Raise the dynamic shared-memory limit of `kernel` on `device` once (per kernel).
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, int (&done)[kMaxDev], int device, size_t bytes) {
  if (bytes <= kSmemDefault || device < 0 || device >= kMaxDev) return cudaSuccess;
  if (done[device] >= static_cast<int>(bytes)) return cudaSuccess;
  const int limit = smem_optin(device);
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit);
  if (e == cudaSuccess) done[device] = limit;
  return e;
}

template <int RM, bool kSum, bool kHalf>
cudaError_t launch_tile_t(const CorrectionProblem& p, const float* a_sum, const TileConfig& c,
                          int n_end, bool pdl, cudaStream_t stream) {
  static int smem_done[kMaxDev];
  auto kernel = corr_tile_kernel<RM, kSum, kHalf>;
  const cudaError_t e = allow_smem(kernel, smem_done, p.device, c.smem);
  if (e != cudaSuccess) return e;
  return launch_ex(kernel, c.grid, dim3(kThreads), c.smem, pdl, stream, p.C, p.A, a_sum, p.delta, p.M,
                   p.N, p.K, p.G, c.W, c.RG, c.col_tiles, n_end);
}

template <bool kSum, bool kHalf>
cudaError_t launch_tile_rm(const CorrectionProblem& p, const float* a_sum, const TileConfig& c,
                           int n_end, bool pdl, cudaStream_t stream) {
  switch (c.RM) {
    case 1: return launch_tile_t<1, kSum, kHalf>(p, a_sum, c, n_end, pdl, stream);
    case 2: return launch_tile_t<2, kSum, kHalf>(p, a_sum, c, n_end, pdl, stream);
    default: return launch_tile_t<4, kSum, kHalf>(p, a_sum, c, n_end, pdl, stream);
  }
}

}  // namespace

TileConfig tile_config(const CorrectionProblem& p, bool sum_in_block) {
  TileConfig c{};
  if (p.M <= 8) {
    c.RM = 1;
    c.RG = p.M <= 1 ? 1 : (p.M <= 2 ? 2 : (p.M <= 4 ? 4 : 8));
  } else {
    c.RM = p.M <= 16 ? 2 : 4;
    c.RG = 8;
  }
  c.TM = c.RG * c.RM;
  c.W = segment_width(p.K / p.G / 8);
  const long ntiles = (p.N + kTileN - 1) / kTileN;
  const long mtiles = (p.M + c.TM - 1) / c.TM;
  const long sms = sm_count(p.device) > 0 ? sm_count(p.device) : 132;
  const long target = sum_in_block ? sms : 4 * sms;  // blocks wanted: in-block sums re-read A
  long ct = (ntiles * mtiles) / target;
  ct = ct < 1 ? 1 : (ct > ntiles ? ntiles : ct);
  c.col_tiles = static_cast<int>(ct);
  c.grid = dim3(static_cast<unsigned>((ntiles + ct - 1) / ct), static_cast<unsigned>(mtiles));
  const size_t floats = ((static_cast<size_t>(c.TM) * (p.G + 1) + 3) & ~static_cast<size_t>(3)) +
                        static_cast<size_t>(32 / c.RG) * c.TM * kTileN +
                        (sum_in_block ? static_cast<size_t>(c.TM) * (p.K / 8 / c.W) : 0);
  c.smem = floats * sizeof(float);
  return c;
}

// The tiled accumulation (kSum: a_sum computed in-block from A; else read from a_sum).
cudaError_t launch_tile(const CorrectionProblem& p, const float* a_sum, bool sum_in_block, bool pdl,
                        cudaStream_t stream) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  const TileConfig c = tile_config(p, sum_in_block);
  if (c.grid.y > 65535u) {
    t_detail = "M too large for the tiled correction (grid.y > 65535)";
    return cudaErrorInvalidValue;
  }
  if (c.smem > static_cast<size_t>(smem_optin(p.device))) {
    t_detail = "shared memory of the tiled correction exceeds the device limit (too many groups)";
    return cudaErrorInvalidValue;
  }
  // flag bit 1 (planted): leave the last 128-column tile untouched, as correction_accum does
  const int n_end = (p.flags & kFlagSkipLastNTile) ? ((p.N - 1) / 128) * 128 : p.N;
  const bool half = (p.flags & kFlagHalfAccum) != 0;
  if (sum_in_block)
    return half ? launch_tile_rm<true, true>(p, a_sum, c, n_end, pdl, stream)
                : launch_tile_rm<true, false>(p, a_sum, c, n_end, pdl, stream);
  return half ? launch_tile_rm<false, true>(p, a_sum, c, n_end, pdl, stream)
              : launch_tile_rm<false, false>(p, a_sum, c, n_end, pdl, stream);
}

cudaError_t launch_empty_impl(bool pdl, cudaStream_t stream) {
  return pdl ? launch_ex(empty_kernel<true>, dim3(1), dim3(32), 0, true, stream)
             : launch_ex(empty_kernel<false>, dim3(1), dim3(32), 0, false, stream);
}

}  // namespace corr_detail
}  // namespace harness_int4
