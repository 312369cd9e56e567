// The GPU executor for algorithms.hpp: state arrays in device memory, each
// step a kernel in which every warp takes chunks of 32 consecutive nodes
// (grid-stride), on one stream. run() returns when the kernel has finished,
// so the drivers' timings cover the GPU work.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/link/gpu_client.hpp"  // check_cuda
#include "deepwell/graph/steps.hpp"

namespace deepwell::graph {

template <class G, class Step>
__global__ void __launch_bounds__(256, 2) step_kernel(G g, Step s, uint64_t n, unsigned long long* edges) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  uint64_t looked = 0;
  // The whole warp runs every step (grid-stride bounds are warp-uniform), so
  // the steps take the full mask rather than __activemask(), which can see a
  // split warp after a lane's divergent loop (warp.hpp).
  for (uint64_t v0 = warp * 32; v0 < n; v0 += warps * 32) looked += s(gpu_full_warp{}, g, v0);
  if ((threadIdx.x & 31) == 0 && looked) atomicAdd(edges, (unsigned long long)looked);
}

template <class T>
__global__ void fill_kernel(T* p, uint64_t n, T v) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}
__global__ inline void iota_kernel(uint32_t* p, uint64_t n) {
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = uint32_t(i);
}

class gpu_exec {
 public:
  // blocks: of 256 threads; 0 picks two per SM (the launch bound's occupancy).
  explicit gpu_exec(unsigned blocks = 0) {
    int dev = 0, sms = 0;
    check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    blocks_ = blocks ? blocks : unsigned(2 * sms);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(&c_, sizeof(step_counters)), "cudaMalloc(counters)");
    // The edge count and the long-list queue's head side by side: one copy reads both.
    check_cuda(cudaMalloc(&edges_, 2 * sizeof(unsigned long long)), "cudaMalloc(edge counter)");
    lists_.head = edges_ + 1;
    check_cuda(cudaMalloc(&lists_.lists, sizeof(long_list) * lists_.capacity), "cudaMalloc(long-list queue)");
  }
  ~gpu_exec() {
    cudaFree(lists_.lists);
    cudaFree(c_);
    cudaFree(edges_);
    cudaStreamDestroy(stream_);
  }
  gpu_exec(const gpu_exec&) = delete;
  gpu_exec& operator=(const gpu_exec&) = delete;

  unsigned blocks() const { return blocks_; }
  unsigned warps() const { return blocks_ * 8; }
  cudaStream_t stream() const { return stream_; }

  template <class T>
  class buffer {
   public:
    explicit buffer(uint64_t n) {
      check_cuda(cudaMalloc(&p_, (n ? n : 1) * sizeof(T)), "cudaMalloc(algorithm state)");
    }
    ~buffer() { cudaFree(p_); }
    buffer(buffer&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    buffer(const buffer&) = delete;
    T* data() { return p_; }

   private:
    T* p_ = nullptr;
  };
  template <class T>
  buffer<T> alloc(uint64_t n) {
    return buffer<T>(n);
  }
  template <class T>
  void fill(T* p, uint64_t n, T v) {
    fill_kernel<<<1024, 256, 0, stream_>>>(p, n, v);
    check_cuda(cudaGetLastError(), "fill kernel");
  }
  void iota(uint32_t* p, uint64_t n) {
    iota_kernel<<<1024, 256, 0, stream_>>>(p, n);
    check_cuda(cudaGetLastError(), "iota kernel");
  }
  template <class T>
  void set(T* p, T v) {
    check_cuda(cudaMemcpyAsync(p, &v, sizeof(T), cudaMemcpyHostToDevice, stream_), "cudaMemcpy(set)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  template <class T>
  std::vector<T> download(const T* p, uint64_t n) {
    std::vector<T> v(n);
    check_cuda(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy(results)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return v;
  }
  step_counters* counters() { return c_; }
  void reset_counters() {
    check_cuda(cudaMemsetAsync(c_, 0, sizeof(step_counters), stream_), "cudaMemset(counters)");
  }
  step_counters read_counters() {
    step_counters h;
    check_cuda(cudaMemcpyAsync(&h, c_, sizeof(h), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy(counters)");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return h;
  }

  // Lists longer than `threshold` entries are shared by the grid in chunks
  // of `chunk` (steps.hpp: long lists; 0: a quarter of the threshold, at
  // most 2048); threshold 0 turns that off.
  void set_long_lists(uint64_t threshold, uint32_t chunk = 0) {
    if (!chunk) chunk = long_list_queue::default_chunk(threshold);
    if (threshold && chunk > threshold) throw error("long lists: the chunk must not be longer than the threshold");
    lists_.threshold = threshold;
    lists_.chunk = chunk;
  }

  template <class G, class Step>
  uint64_t run(const G& g, const Step& step, uint64_t n) {
    check_cuda(cudaMemsetAsync(edges_, 0, 2 * sizeof(unsigned long long), stream_), "cudaMemset");
    Step s = step;
    if constexpr (splits_long_lists<Step>) {
      if (lists_.threshold) s.lists = lists_;
    }
    step_kernel<<<blocks_, 256, 0, stream_>>>(g, s, n, edges_);
    check_cuda(cudaGetLastError(), "graph step kernel launch");
    unsigned long long got[2] = {0, 0};  // edges, the queue's head
    check_cuda(cudaMemcpyAsync(got, edges_, sizeof(got), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy(edges)");
    check_cuda(cudaStreamSynchronize(stream_), "graph step kernel");
    if constexpr (splits_long_lists<Step>) {
      const long_list_step<Step> ls = long_list_step<Step>::after(s, lists_, got[1]);
      if (ls.count) {
        step_kernel<<<blocks_, 256, 0, stream_>>>(g, ls, ls.chunks * 32, edges_);
        check_cuda(cudaGetLastError(), "long-list kernel launch");
        check_cuda(cudaMemcpyAsync(got, edges_, sizeof(got[0]), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy(edges)");
        check_cuda(cudaStreamSynchronize(stream_), "long-list kernel");
      }
    }
    return got[0];
  }

 private:
  unsigned blocks_ = 0;
  cudaStream_t stream_{};
  step_counters* c_ = nullptr;
  unsigned long long* edges_ = nullptr;  // [0]: edges looked at; [1]: lists_.head
  long_list_queue lists_{nullptr, nullptr, 1u << 16, 2048, 8192};
};

}  // namespace deepwell::graph
