// The checkpoint store's GPU support (checkpoint_gpu, durable/checkpoint.hpp):
// unit hashes of device memory (a warp per unit, the same value as the host's
// checkpoint_hash::of), and copies between memory and a GPU page cache
// (warps calling array_ref::write_range / read_range, a piece of at most 32
// pages each, never more warps than the cache lets pin pages at once).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/durable/checkpoint.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell {
namespace {

namespace ch = checkpoint_hash;

__device__ DW_FORCEINLINE uint64_t shfl64_full(uint64_t v, int src) {
  const uint32_t lo = __shfl_sync(0xFFFFFFFFu, uint32_t(v), src);
  const uint32_t hi = __shfl_sync(0xFFFFFFFFu, uint32_t(v >> 32), src);
  return uint64_t(hi) << 32 | lo;
}

__device__ DW_FORCEINLINE uint64_t bytes_le(const uint8_t* p, uint32_t n) {
  uint64_t v = 0;
  for (uint32_t k = 0; k < n; ++k) v |= uint64_t(p[k]) << (8 * k);
  return v;
}

// checkpoint_hash of the n bytes at b, by the whole warp (lane `lane`);
// the result in every lane.
__device__ uint64_t warp_hash(const uint8_t* b, uint64_t n, unsigned lane) {
  const bool aligned = (reinterpret_cast<uintptr_t>(b) & 15) == 0;
  {
    const uint64_t full = n / 16;
    uint64_t acc = ch::lane_seed(lane, 0);
    if (aligned) {
      const uint4* v = reinterpret_cast<const uint4*>(b);
      for (uint64_t c = lane; c < full; c += 32) {
        const uint4 x = __ldg(v + c);
        acc = ch::chunk(acc, uint64_t(x.y) << 32 | x.x, uint64_t(x.w) << 32 | x.z);
      }
    } else {
      for (uint64_t c = lane; c < full; c += 32) acc = ch::chunk(acc, bytes_le(b + c * 16, 8), bytes_le(b + c * 16 + 8, 8));
    }
    if ((n % 16) && full % 32 == lane) {
      const uint32_t rest = uint32_t(n % 16);
      const uint8_t* t = b + full * 16;
      acc = ch::chunk(acc, bytes_le(t, rest < 8 ? rest : 8), rest > 8 ? bytes_le(t + 8, rest - 8) : 0);
    }
    uint64_t h = ch::finish_begin(n, 0);
    for (int l = 0; l < 32; ++l) h = ch::finish_lane(h, shfl64_full(acc, l));
    return ch::finish_end(h);
  }
}

// out[u] = checkpoint_hash of unit u of [p, p + bytes): a warp per unit.
__global__ void hash_units(const uint8_t* p, uint64_t bytes, uint32_t unit, uint64_t units, uint64_t* out) {
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t u = warp; u < units; u += warps) {
    const uint64_t n = bytes - u * unit < unit ? bytes - u * unit : unit;
    const uint64_t h = warp_hash(p + u * unit, n, lane);
    if (lane == 0) out[u] = h;
  }
}

// out[i] = checkpoint_hash of units[i] (mem: an address): a warp per unit.
__global__ void hash_list(const checkpoint_run* units, uint64_t count, uint64_t* out) {
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t i = warp; i < count; i += warps) {
    const checkpoint_run u = units[i];
    const uint64_t h = warp_hash(reinterpret_cast<const uint8_t*>(uintptr_t(u.mem)), u.bytes, lane);
    if (lane == 0) out[i] = h;
  }
}

// Each warp moves whole pieces (at most 32 pages each) between memory and
// the cache.
__global__ void move_pieces(array_ref<uint8_t> a, uint8_t* mem, const checkpoint_run* pieces, uint64_t n, bool to_cache,
                            uint32_t* error) {
  const uint64_t warp = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = uint64_t(gridDim.x) * blockDim.x / 32;
  for (uint64_t i = warp; i < n; i += warps) {
    const checkpoint_run p = pieces[i];
    uint8_t* at = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(mem) + p.mem);  // mem null: p.mem is an address
    const request_status s = to_cache ? a.write_range(gpu_full_warp{}, at, p.disk, p.bytes)
                                      : a.read_range(gpu_full_warp{}, at, p.disk, p.bytes);
    if (!s.ok() && (threadIdx.x & 31) == 0) atomicCAS(error, 0u, s.pack());
  }
}

// The current device for the lifetime of the guard.
class on_device {
 public:
  explicit on_device(int d) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != d) check_cuda(cudaSetDevice(d), "cudaSetDevice");
    else previous_ = -1;
  }
  ~on_device() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  on_device(const on_device&) = delete;
  on_device& operator=(const on_device&) = delete;

 private:
  int previous_ = -1;
};

class gpu_support final : public checkpoint_gpu {
 public:
  gpu_support() {
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&error_), sizeof(uint32_t)), "cudaMalloc");
  }
  ~gpu_support() override {
    on_device g(device_);
    cudaStreamSynchronize(stream_);
    cudaFree(error_);
    cudaFree(scratch_.p);
    cudaFree(staging_.p);
    cudaFree(pieces_.p);
    cudaStreamDestroy(stream_);
  }

  void hash(const void* p, uint64_t bytes, uint32_t unit, uint64_t* out) override {
    std::lock_guard<std::mutex> l(m_);
    on_device g(device_);
    const uint64_t units = (bytes + unit - 1) / unit;
    if (!units) return;
    auto* d = static_cast<uint64_t*>(grow(scratch_, units * 8));
    const uint64_t blocks = std::min<uint64_t>((units + 7) / 8, 4096);
    hash_units<<<unsigned(blocks), 256, 0, stream_>>>(static_cast<const uint8_t*>(p), bytes, unit, units, d);
    check_cuda(cudaGetLastError(), "checkpoint hash kernel launch");
    check_cuda(cudaMemcpyAsync(out, d, units * 8, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy of unit hashes");
    check_cuda(cudaStreamSynchronize(stream_), "checkpoint hash kernel");
  }

  void hash_pieces(const std::vector<checkpoint_run>& units, uint64_t* out) override {
    std::lock_guard<std::mutex> l(m_);
    on_device g(device_);
    if (units.empty()) return;
    const uint64_t n = units.size();
    auto* d = static_cast<uint64_t*>(grow(scratch_, n * 8));
    auto* list = static_cast<checkpoint_run*>(grow(pieces_, n * sizeof(checkpoint_run)));
    check_cuda(cudaMemcpyAsync(list, units.data(), n * sizeof(checkpoint_run), cudaMemcpyHostToDevice, stream_),
               "cudaMemcpy of the units to hash");
    const uint64_t blocks = std::min<uint64_t>((n + 7) / 8, 4096);
    hash_list<<<unsigned(blocks), 256, 0, stream_>>>(list, n, d);
    check_cuda(cudaGetLastError(), "checkpoint hash kernel launch");
    check_cuda(cudaMemcpyAsync(out, d, n * 8, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy of unit hashes");
    check_cuda(cudaStreamSynchronize(stream_), "checkpoint hash kernel");
  }

  request_status write(page_cache& cache, const array_ref<uint8_t>& a, const void* p, bool on_dev,
                       const std::vector<checkpoint_run>& runs) override {
    return move(cache, a, const_cast<void*>(p), on_dev, runs, true);
  }
  request_status read(page_cache& cache, const array_ref<uint8_t>& a, void* p, bool on_dev,
                      const std::vector<checkpoint_run>& runs) override {
    return move(cache, a, p, on_dev, runs, false);
  }

  // Both on this object's stream, waited for. A plain cudaMemcpy from
  // pageable memory to the device may return before the bytes have landed
  // (CUDA stages them and returns), and the hash kernel that checks a load
  // runs on this non-blocking stream, which is not ordered after the legacy
  // stream's copy: it read the old bytes now and then and called a good
  // checkpoint corrupt (GpuCheckpoint.AHostCacheServesDeviceBuffers).
  void to_host(void* dst, const void* src, uint64_t bytes) override {
    on_device g(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy to the host");
    check_cuda(cudaStreamSynchronize(stream_), "cudaMemcpy to the host");
  }
  void to_device(void* dst, const void* src, uint64_t bytes) override {
    on_device g(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy to the device");
    check_cuda(cudaStreamSynchronize(stream_), "cudaMemcpy to the device");
  }
  void* alloc(uint64_t bytes) override {
    on_device g(device_);
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes), "cudaMalloc of checkpoint scratch");
    return p;
  }
  void free(void* p) override {
    on_device g(device_);
    cudaFree(p);
  }
  void check_device_pointer(const void* p, const std::string& what) override {
    on_device g(device_);
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw error(what + ": not memory CUDA knows (" + cudaGetErrorString(e) + ")");
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      throw error(what + " is not device memory (said to be on the device)");
    if (attr.type == cudaMemoryTypeDevice && attr.device != device_)
      throw error(what + " is memory of CUDA device " + std::to_string(attr.device) + "; the checkpoint's GPU work runs on device " +
                  std::to_string(device_));
  }

 private:
  int device_ = 0;
  cudaStream_t stream_{};
  uint32_t* error_ = nullptr;
  // Device memory kept between calls, grown (never shrunk) as calls need.
  struct device_buffer {
    void* p = nullptr;
    uint64_t bytes = 0;
  };
  device_buffer scratch_, staging_, pieces_;
  std::mutex m_;

  static constexpr uint64_t staging_limit = 64ull << 20;

  void* grow(device_buffer& buf, uint64_t want) {
    if (want <= buf.bytes) return buf.p;
    check_cuda(cudaStreamSynchronize(stream_), "checkpoint stream");
    cudaFree(buf.p);
    buf = {};
    check_cuda(cudaMalloc(&buf.p, want), "cudaMalloc of checkpoint scratch");
    buf.bytes = want;
    return buf.p;
  }

  // Runs cut at 32-page boundaries of the namespace, so that one warp's
  // read_range/write_range call pins each page once.
  static void cut(const std::vector<checkpoint_run>& runs, uint64_t span, std::vector<checkpoint_run>& out) {
    for (const checkpoint_run& r : runs) {
      uint64_t o = 0;
      while (o < r.bytes) {
        const uint64_t d = r.disk + o;
        const uint64_t end = std::min<uint64_t>(r.bytes - o, (d / span + 1) * span - d);
        out.push_back({r.mem + o, d, end});
        o += end;
      }
    }
  }

  request_status launch(page_cache& cache, const array_ref<uint8_t>& a, uint8_t* mem,
                        const std::vector<checkpoint_run>& pieces, bool to_cache) {
    if (pieces.empty()) return {};
    auto* dp = static_cast<checkpoint_run*>(grow(pieces_, pieces.size() * sizeof(checkpoint_run)));
    check_cuda(cudaMemcpyAsync(dp, pieces.data(), pieces.size() * sizeof(checkpoint_run), cudaMemcpyHostToDevice, stream_),
               "cudaMemcpy of checkpoint runs");
    check_cuda(cudaMemsetAsync(error_, 0, sizeof(uint32_t), stream_), "cudaMemsetAsync");
    // No more warps than can each pin a warp's pages at once (forward
    // progress), and half of that, so that slots whose write-back is in
    // flight leave the claimers room.
    const uint64_t max_warps = std::max<uint64_t>(1, cache.slots() / pages_per_warp / 2);
    const uint64_t per_block = std::min<uint64_t>(8, max_warps);
    const uint64_t blocks = std::max<uint64_t>(
        1, std::min<uint64_t>({(pieces.size() + per_block - 1) / per_block, max_warps / per_block, 65535}));
    move_pieces<<<unsigned(blocks), unsigned(per_block * 32), 0, stream_>>>(a, mem, dp, pieces.size(), to_cache, error_);
    check_cuda(cudaGetLastError(), "checkpoint copy kernel launch");
    uint32_t packed = 0;
    check_cuda(cudaMemcpyAsync(&packed, error_, sizeof packed, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    check_cuda(cudaStreamSynchronize(stream_), "checkpoint copy kernel");
    return request_status::unpack(packed);
  }

  request_status move(page_cache& cache, const array_ref<uint8_t>& a, void* p, bool on_dev,
                      const std::vector<checkpoint_run>& runs, bool to_cache) {
    std::lock_guard<std::mutex> l(m_);
    on_device g(device_);
    if (!cache.on_gpu()) throw error("checkpoint GPU support: the page cache is not a GPU cache");
    const uint64_t span = uint64_t(cache.page_size()) * pages_per_warp;
    std::vector<checkpoint_run> pieces;
    if (on_dev) {
      cut(runs, span, pieces);
      return launch(cache, a, static_cast<uint8_t*>(p), pieces, to_cache);
    }
    // Host memory: through device staging, a batch of runs at a time.
    auto* host = static_cast<uint8_t*>(p);
    uint64_t total = 0;
    for (const checkpoint_run& r : runs) total += r.bytes;
    auto* stage = static_cast<uint8_t*>(grow(staging_, std::min(total, staging_limit)));
    std::vector<checkpoint_run> batch;   // mem: offsets in staging
    std::vector<uint64_t> host_at;       // where each batch run's bytes are in host memory
    uint64_t used = 0;
    auto flush = [&]() -> request_status {
      if (batch.empty()) return {};
      if (to_cache)
        for (size_t i = 0; i < batch.size(); ++i)
          check_cuda(cudaMemcpyAsync(stage + batch[i].mem, host + host_at[i], batch[i].bytes, cudaMemcpyHostToDevice, stream_),
                     "cudaMemcpy to checkpoint staging");
      pieces.clear();
      cut(batch, span, pieces);
      const request_status s = launch(cache, a, stage, pieces, to_cache);
      if (s.ok() && !to_cache) {
        for (size_t i = 0; i < batch.size(); ++i)
          check_cuda(cudaMemcpyAsync(host + host_at[i], stage + batch[i].mem, batch[i].bytes, cudaMemcpyDeviceToHost, stream_),
                     "cudaMemcpy from checkpoint staging");
        check_cuda(cudaStreamSynchronize(stream_), "checkpoint staging copy");
      }
      batch.clear();
      host_at.clear();
      used = 0;
      return s;
    };
    for (const checkpoint_run& r : runs)
      for (uint64_t o = 0; o < r.bytes;) {
        if (used == staging_.bytes) {
          const request_status s = flush();
          if (!s.ok()) return s;
        }
        const uint64_t n = std::min(r.bytes - o, staging_.bytes - used);
        batch.push_back({used, r.disk + o, n});
        host_at.push_back(r.mem + o);
        used = std::min(staging_.bytes, (used + n + 255) / 256 * 256);  // runs start 256-aligned in staging
        o += n;
      }
    return flush();
  }
};

}  // namespace

std::shared_ptr<checkpoint_gpu> gpu_checkpoint_support() { return std::make_shared<gpu_support>(); }

}  // namespace deepwell
