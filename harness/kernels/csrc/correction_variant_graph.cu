// Correction variants two_kernel_lean and graph: the seed's sequence (memset C, Marlin,
// a_group_sum, correction_accum: the kernels of correction.cu) issued from one host call,
// and that sequence captured once per (pointers, shape) into a CUDA graph and replayed
// (inside an outer capture it is launched directly: the outer graph already holds it).
// The instantiated graphs live in an LRU cache of at most kGraphCacheMax entries.
// Shared internals: correction_variants.cuh.
#include "correction_variants.cuh"

#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

namespace harness_int4 {
namespace corr_detail {
namespace {

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

}  // namespace

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

}  // namespace corr_detail

using namespace corr_detail;

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

}  // namespace harness_int4
