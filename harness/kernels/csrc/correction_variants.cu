// Faster designs of the asymmetric correction C += a_group_sum(A) @ delta, each selectable
// per call next to the seed's two-kernel design (correction.cu), Marlin unmodified.
//
// Kernels (all deterministic: fixed summation orders, no atomics):
//  * asum_kernel: a_sum[M, G] fp32 from 16-byte loads of A; a warp reduces 32 vectors at
//    a time in segments of W lanes (W | vectors per group), the segments of a group are
//    then added in order. Several rows per block, so a large M needs few blocks.
//  * corr_tile_kernel<RM, kSum, kHalfAccum>: one block = TM rows x (col_tiles x 64)
//    columns. Thread (octet, row group, g-slice) accumulates RM rows x 8 columns over its
//    g-slice in registers (delta read as two float4 per group), the g-slices are added in
//    shared memory in order, then each C vector (8 halves) is read, added and written once.
//    kSum: the block computes a_sum for its rows itself (one launch, no scratch; A is
//    re-read once per column block, cheap for small M); otherwise it reads a_sum.
//    Everything before the first C access reads only A, a_sum and delta, so under
//    programmatic dependent launch (SM 9.0) the kernel waits for Marlin
//    (griddepcontrol.wait) only just before touching C.
//  * empty_kernel: the launch-latency floor, measured the same way as the corrections.
//
// Host drivers (run_marlin_asym_variant): Marlin through a callback (the quanto glue lives
// in torch_ops.cpp), then the variant's correction. Per-device resources live for the
// process: a grow-only scratch (old buffers are retired, not freed, so CUDA graphs that
// captured them stay valid), a side stream with two events, a capture stream and an LRU
// cache of instantiated graphs. One mutex serialises the drivers (single-stream use).
#include "harness_kernels.h"

#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace harness_int4 {
namespace {

constexpr int kThreads = 256;          // block size of every kernel here
constexpr int kTileN = 64;             // columns per tile: 8 octets of 8 columns
constexpr int kLoadUnroll = 8;         // 16-byte loads in flight per thread in the a_sum stage
constexpr size_t kSmemDefault = 48 * 1024;
constexpr int kMaxDev = 64;
constexpr size_t kScratchMin = 4096;
constexpr size_t kGraphCacheMax = 4096;

thread_local const char* t_detail = "";

__device__ __forceinline__ void wait_for_primary_grid() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

__device__ __forceinline__ float sum_half8(const uint4& v) {
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

// s_asum[r * stride + g] = sum of A[row0 + r, k] over group g, r < rows, in a fixed order:
// 8-element vectors, W-lane segments (shuffles), then the segments of a group in order.
// s_part holds rows * (K / 8 / W) floats. Ends with __syncthreads().
__device__ void block_group_sums(const __half* __restrict__ A, int row0, int rows, int K, int G,
                                 int W, float* s_part, float* s_asum, int stride) {
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
        const float4* d = reinterpret_cast<const float4*>(dcol + static_cast<size_t>(g) * N);
        const float4 d0 = __ldg(d);
        const float4 d1 = __ldg(d + 1);
        const float dv[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
#pragma unroll
        for (int r = 0; r < RM; ++r) {
          const float a = s_asum[(rg * RM + r) * astride + g];
#pragma unroll
          for (int c = 0; c < 8; ++c) {
            if (kHalfAccum)  // planted defect: fp16 operands and accumulator
              acc[r][c] = __half2float(__hfma(__float2half_rn(a), __float2half_rn(dv[c]),
                                              __float2half_rn(acc[r][c])));
            else
              acc[r][c] = fmaf(a, dv[c], acc[r][c]);
          }
        }
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

// ------------------------------------------------------------------------ host helpers
int cached_attr(int (&cache)[kMaxDev], cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= kMaxDev) return 0;
  if (cache[device] == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, attr, device) != cudaSuccess) v = -1;
    cache[device] = v;
  }
  return cache[device];
}

int g_sms[kMaxDev], g_smem_optin[kMaxDev], g_cc_major[kMaxDev];

int sm_count(int device) { return cached_attr(g_sms, cudaDevAttrMultiProcessorCount, device); }
int smem_optin(int device) {
  return cached_attr(g_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

int segment_width(int vectors_per_group) {
  int w = 1;
  while (w < 32 && vectors_per_group % (2 * w) == 0) w *= 2;
  return w;
}

struct TileConfig {
  int RM, RG, TM, W, col_tiles;
  dim3 grid;
  size_t smem;
};

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

struct AsumConfig {
  int W, rows_per_block;
  size_t smem;
  unsigned blocks;
};

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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

std::atomic<long> g_pdl_fallbacks{0};

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

std::mutex g_mutex;
DeviceState g_dev[kMaxDev];

struct GraphKey {
  uintptr_t ptr[8];
  int val[9];
  bool operator==(const GraphKey& o) const { return std::memcmp(this, &o, sizeof(GraphKey)) == 0; }
};
struct GraphKeyHash {
  size_t operator()(const GraphKey& k) const {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&k);
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(GraphKey); ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
  }
};
struct GraphEntry {
  cudaGraphExec_t exec;
  std::list<GraphKey>::iterator where;
};
// Heap objects that are never destroyed: no CUDA calls from static destructors at exit.
auto* g_graphs = new std::unordered_map<GraphKey, GraphEntry, GraphKeyHash>();
auto* g_lru = new std::list<GraphKey>();

bool valid_device(int d) { return d >= 0 && d < kMaxDev; }

cudaError_t ensure_scratch(int device, size_t bytes, bool capturing, float** out) {
  DeviceState& s = g_dev[device];
  if (bytes > s.capacity) {
    if (capturing) {
      t_detail = "the correction scratch must grow, which cannot happen during CUDA graph capture: "
                 "run the call once outside the capture first";
      return cudaErrorStreamCaptureUnsupported;
    }
    size_t cap = s.capacity ? s.capacity : kScratchMin;
    while (cap < bytes) cap *= 2;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, cap);
    if (e != cudaSuccess) return e;
    if (s.scratch != nullptr) s.retired.push_back(s.scratch);
    s.scratch = p;
    s.capacity = cap;
    s.grow_count += 1;
  }
  *out = static_cast<float*>(s.scratch);
  return cudaSuccess;
}

cudaError_t ensure_streams(int device) {
  DeviceState& s = g_dev[device];
  if (s.side != nullptr) return cudaSuccess;
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&s.side, cudaStreamNonBlocking, greatest);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s.capture, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming);
  return e;
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

int run_marlin(const MarlinCall& mc, MarlinLauncher marlin, cudaStream_t stream, cudaError_t* err) {
  const int rc = marlin(mc, stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) *err = e;
  return rc;
}

// The seed's sequence from one host call: memset C, Marlin, a_group_sum, correction_accum.
int seed_sequence(const CorrectionProblem& p, const MarlinCall& mc, MarlinLauncher marlin,
                  float* a_sum, cudaStream_t stream, cudaError_t* err) {
  cudaError_t e = cudaMemsetAsync(p.C, 0, static_cast<size_t>(p.M) * p.N * sizeof(__half), stream);
  if (e != cudaSuccess) return *err = e, 0;
  const int rc = run_marlin(mc, marlin, stream, err);
  if (rc != 0 || *err != cudaSuccess) return rc;
  e = launch_a_group_sum(p.A, a_sum, p.M, p.K, p.G, stream);
  if (e == cudaSuccess)
    e = launch_correction_accum(p.C, a_sum, p.delta, p.M, p.N, p.G, p.M, p.flags, stream);
  if (e != cudaSuccess) *err = e;
  return 0;
}

GraphKey graph_key(const CorrectionProblem& p, const MarlinCall& mc, const float* a_sum) {
  GraphKey k;
  std::memset(&k, 0, sizeof(k));
  const void* ptrs[8] = {p.A, p.C, p.delta, mc.B, mc.s, mc.sz, mc.workspace, a_sum};
  for (int i = 0; i < 8; ++i) k.ptr[i] = reinterpret_cast<uintptr_t>(ptrs[i]);
  const int vals[9] = {p.M, p.N, p.K, p.G, p.flags, p.device, mc.groupsize, mc.max_par, mc.sms};
  for (int i = 0; i < 9; ++i) k.val[i] = vals[i];
  return k;
}

cudaError_t drop_entry(std::unordered_map<GraphKey, GraphEntry, GraphKeyHash>::iterator it) {
  const cudaError_t e = cudaGraphExecDestroy(it->second.exec);
  g_lru->erase(it->second.where);
  g_graphs->erase(it);
  return e;
}

int graph_variant(const CorrectionProblem& p, const MarlinCall& mc, MarlinLauncher marlin,
                  cudaStream_t stream, cudaError_t* err) {
  const bool capturing = is_capturing(stream);
  float* a_sum = nullptr;
  cudaError_t e = ensure_scratch(p.device, static_cast<size_t>(p.M) * p.G * sizeof(float), capturing, &a_sum);
  if (e != cudaSuccess) return *err = e, 0;
  if (capturing)  // inside an outer capture: its graph already holds these nodes
    return seed_sequence(p, mc, marlin, a_sum, stream, err);
  const GraphKey key = graph_key(p, mc, a_sum);
  auto it = g_graphs->find(key);
  if (it == g_graphs->end()) {
    if ((e = ensure_streams(p.device)) != cudaSuccess) return *err = e, 0;
    cudaStream_t cap = g_dev[p.device].capture;
    if ((e = cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal)) != cudaSuccess) return *err = e, 0;
    cudaError_t inner = cudaSuccess;
    const int rc = seed_sequence(p, mc, marlin, a_sum, cap, &inner);
    cudaGraph_t graph = nullptr;
    e = cudaStreamEndCapture(cap, &graph);
    if (rc != 0 || inner != cudaSuccess || e != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      *err = inner != cudaSuccess ? inner : e;
      return rc;
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return *err = e, 0;
    if (g_graphs->size() >= kGraphCacheMax) {  // evict the least recently used
      cudaStreamSynchronize(stream);            // it may still be in flight on this stream
      drop_entry(g_graphs->find(g_lru->back()));
    }
    g_lru->push_front(key);
    it = g_graphs->emplace(key, GraphEntry{exec, g_lru->begin()}).first;
  } else {
    g_lru->splice(g_lru->begin(), *g_lru, it->second.where);
  }
  if ((e = cudaGraphLaunch(it->second.exec, stream)) != cudaSuccess) *err = e;
  return 0;
}

// a_sum on the side stream while Marlin runs on `stream`; joined before the accumulation.
int side_stream_sequence(const CorrectionProblem& p, const MarlinCall* mc, MarlinLauncher marlin,
                         cudaStream_t stream, cudaError_t* err) {
  float* a_sum = nullptr;
  cudaError_t e = ensure_scratch(p.device, static_cast<size_t>(p.M) * p.G * sizeof(float),
                                 is_capturing(stream), &a_sum);
  if (e == cudaSuccess) e = ensure_streams(p.device);
  if (e != cudaSuccess) return *err = e, 0;
  DeviceState& s = g_dev[p.device];
  if ((e = cudaEventRecord(s.fork, stream)) != cudaSuccess) return *err = e, 0;
  if ((e = cudaStreamWaitEvent(s.side, s.fork, 0)) != cudaSuccess) return *err = e, 0;
  cudaError_t side_err = launch_asum(p, a_sum, s.side);
  e = cudaEventRecord(s.join, s.side);
  const int rc = mc != nullptr ? run_marlin(*mc, marlin, stream, err) : 0;
  const cudaError_t je = cudaStreamWaitEvent(stream, s.join, 0);  // always join
  if (side_err == cudaSuccess) side_err = e != cudaSuccess ? e : je;
  if (side_err != cudaSuccess && *err == cudaSuccess) *err = side_err;
  if (rc != 0 || *err != cudaSuccess) return rc;
  if ((e = launch_tile(p, a_sum, false, false, stream)) != cudaSuccess) *err = e;
  return 0;
}

cudaError_t launch_empty_impl(bool pdl, cudaStream_t stream) {
  return pdl ? launch_ex(empty_kernel<true>, dim3(1), dim3(32), 0, true, stream)
             : launch_ex(empty_kernel<false>, dim3(1), dim3(32), 0, false, stream);
}

}  // namespace

// ------------------------------------------------------------------------ public entry points
const char* correction_variant_name(int variant) {
  static const char* const names[kVariantCount] = {
      "marlin_only", "two_kernel_lean", "graph", "side_stream", "fused", "fused_pdl", "empty", "empty_pdl"};
  return variant >= 0 && variant < kVariantCount ? names[variant] : nullptr;
}

const char* variant_last_error_detail() { return t_detail; }

long pdl_fallback_count() { return g_pdl_fallbacks.load(); }

bool pdl_supported(int device) {
  return cached_attr(g_cc_major, cudaDevAttrComputeCapabilityMajor, device) >= 9;
}

const char* correction_problem_unsupported(const CorrectionProblem& p, int variant) {
  if (!valid_device(p.device)) return "device index out of range";
  if (p.M < 0 || p.N <= 0 || p.K <= 0 || p.G <= 0) return "empty or negative problem dimensions";
  if (p.K % p.G != 0) return "the number of groups must divide K";
  const bool tiled = variant == kVariantSideStream || variant == kVariantFused || variant == kVariantFusedPdl;
  if (!tiled) return nullptr;
  if ((p.K / p.G) % 8 != 0) return "the tiled corrections need a group size that is a multiple of 8";
  if (p.N % 8 != 0) return "the tiled corrections need N % 8 == 0";
  if (!aligned16(p.A) || !aligned16(p.C) || !aligned16(p.delta))
    return "the tiled corrections need 16-byte aligned A, C and delta";
  const TileConfig c = tile_config(p, variant != kVariantSideStream);
  if (c.smem > static_cast<size_t>(smem_optin(p.device)))
    return "too many groups for the tiled correction's shared memory";
  if (variant == kVariantSideStream && asum_config(p).smem > kSmemDefault)
    return "a_sum of one row does not fit in 48 KB of shared memory (group size too small)";
  return nullptr;
}

int run_marlin_asym_variant(int variant, const CorrectionProblem& p, const MarlinCall& mc,
                            MarlinLauncher marlin, cudaStream_t stream, cudaError_t* err) {
  *err = cudaSuccess;
  t_detail = "";
  if (!valid_device(p.device)) return *err = cudaErrorInvalidDevice, 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  switch (variant) {
    case kVariantMarlinOnly:
      return run_marlin(mc, marlin, stream, err);
    case kVariantTwoKernelLean: {
      float* a_sum = nullptr;
      const cudaError_t e = ensure_scratch(p.device, static_cast<size_t>(p.M) * p.G * sizeof(float),
                                           is_capturing(stream), &a_sum);
      if (e != cudaSuccess) return *err = e, 0;
      return seed_sequence(p, mc, marlin, a_sum, stream, err);
    }
    case kVariantGraph:
      return graph_variant(p, mc, marlin, stream, err);
    case kVariantSideStream:
      return side_stream_sequence(p, &mc, marlin, stream, err);
    case kVariantFused:
    case kVariantFusedPdl:
    case kVariantEmpty:
    case kVariantEmptyPdl: {
      const int rc = run_marlin(mc, marlin, stream, err);
      if (rc != 0 || *err != cudaSuccess) return rc;
      const bool pdl = (variant == kVariantFusedPdl || variant == kVariantEmptyPdl) && pdl_supported(p.device);
      const cudaError_t e = (variant == kVariantFused || variant == kVariantFusedPdl)
                                ? launch_tile(p, nullptr, true, pdl, stream)
                                : launch_empty_impl(pdl, stream);
      if (e != cudaSuccess) *err = e;
      return 0;
    }
    default:
      t_detail = "unknown correction variant id";
      *err = cudaErrorInvalidValue;
      return 0;
  }
}

cudaError_t run_correction_variant(int variant, const CorrectionProblem& p, cudaStream_t stream) {
  t_detail = "";
  if (!valid_device(p.device)) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(g_mutex);
  cudaError_t err = cudaSuccess;
  switch (variant) {
    case kVariantTwoKernelLean:
    case kVariantGraph: {
      float* a_sum = nullptr;
      err = ensure_scratch(p.device, static_cast<size_t>(p.M) * p.G * sizeof(float), is_capturing(stream), &a_sum);
      if (err == cudaSuccess) err = launch_a_group_sum(p.A, a_sum, p.M, p.K, p.G, stream);
      if (err == cudaSuccess)
        err = launch_correction_accum(p.C, a_sum, p.delta, p.M, p.N, p.G, p.M, p.flags, stream);
      return err;
    }
    case kVariantSideStream:
      side_stream_sequence(p, nullptr, nullptr, stream, &err);
      return err;
    case kVariantFused:
    case kVariantFusedPdl:
      return launch_tile(p, nullptr, true, variant == kVariantFusedPdl && pdl_supported(p.device), stream);
    default:
      t_detail = "this variant has no correction of its own (marlin_only, empty, empty_pdl)";
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_empty_kernel(bool pdl, int device, cudaStream_t stream) {
  return launch_empty_impl(pdl && pdl_supported(device), stream);
}

VariantScratchInfo variant_scratch_info(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!valid_device(device)) return VariantScratchInfo{nullptr, 0, 0, 0};
  const DeviceState& s = g_dev[device];
  return VariantScratchInfo{s.scratch, s.capacity, s.grow_count, static_cast<int>(s.retired.size())};
}

cudaError_t graph_cache_clear() {
  std::lock_guard<std::mutex> lock(g_mutex);
  cudaError_t first = cudaDeviceSynchronize();  // no replay of a cached graph is in flight
  while (!g_graphs->empty()) {
    const cudaError_t e = drop_entry(g_graphs->begin());
    if (first == cudaSuccess) first = e;
  }
  return first;
}

size_t graph_cache_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_graphs->size();
}

cudaError_t variant_scratch_release(int device) {
  cudaError_t first = graph_cache_clear();   // graphs may reference the buffers
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!valid_device(device)) return first;
  DeviceState& s = g_dev[device];
  for (void* p : s.retired) {
    const cudaError_t e = cudaFree(p);
    if (first == cudaSuccess) first = e;
  }
  if (s.scratch != nullptr) {
    const cudaError_t e = cudaFree(s.scratch);
    if (first == cudaSuccess) first = e;
  }
  s.retired.clear();
  s.scratch = nullptr;
  s.capacity = 0;
  s.grow_count = 0;
  return first;
}

}  // namespace harness_int4
