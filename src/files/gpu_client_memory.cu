// client_memory for GPU clients (files/client_memory.hpp): device memory for
// their private tables, pinned mapped host memory for what the host and the
// GPU share; and make_gpu_file_system, which takes it.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/files/client_memory.hpp"
#include "deepwell/files/file_system.hpp"

namespace deepwell {
namespace {

class gpu_client_memory final : public client_memory {
 public:
  gpu_client_memory() {
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    // Non-blocking: its copies do not wait for kernels on the legacy default
    // stream, and need no SM, so the file service can clear a table entry
    // while a kernel that waits on the service runs.
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMallocHost(&bounce_, bounce_bytes), "cudaMallocHost");
    check_cuda(cudaMallocHost(&zeros_, zero_bytes), "cudaMallocHost");
    std::memset(zeros_, 0, zero_bytes);
  }
  ~gpu_client_memory() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    for (void* p : device_blocks_) cudaFree(p);
    for (void* p : host_blocks_) cudaFreeHost(p);
    cudaFreeHost(bounce_);
    cudaFreeHost(zeros_);
    cudaStreamDestroy(stream_);
  }

  void* alloc_private(uint64_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc of file-system tables");
    device_blocks_.push_back(p);
    check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemset");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return p;
  }
  void* alloc_shared(uint64_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    check_cuda(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable),
               "cudaHostAlloc of file-system request slots");
    std::memset(p, 0, bytes);
    host_blocks_.push_back(p);
    return p;
  }
  void* client_address(void* shared) const override {
    void* dev = nullptr;
    check_cuda(cudaHostGetDevicePointer(&dev, shared, 0), "cudaHostGetDevicePointer");
    return dev;
  }
  void read_private(void* dst, const void* src, uint64_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaSetDevice(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void write_private(void* dst, const void* src, uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaSetDevice(device_);
    for (uint64_t off = 0; off < bytes; off += bounce_bytes) {
      const uint64_t n = bytes - off < bounce_bytes ? bytes - off : bounce_bytes;
      std::memcpy(bounce_, static_cast<const uint8_t*>(src) + off, n);
      check_cuda(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + off, bounce_, n, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpy");
      check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
  }
  // The copy is queued, not waited for: a synchronous copy per close
  // (about 15 us, under the service's lock) had bounded the file API's
  // closes to some 50,000 a second.
  uint64_t zero_private_async(void* dst, uint32_t bytes) override {
    if (bytes > zero_bytes) throw error("client memory: zero_private_async of more than 64 bytes");
    std::lock_guard<std::mutex> lock(mutex_);
    cudaSetDevice(device_);
    check_cuda(cudaMemcpyAsync(dst, zeros_, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    return ++issued_;
  }
  void wait_private(uint64_t ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket <= done_) return;
    cudaSetDevice(device_);
    const uint64_t upto = issued_;  // the stream runs its copies in order
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    done_ = upto;
  }
  bool on_gpu() const override { return true; }

 private:
  static constexpr uint32_t zero_bytes = 64;
  void* zeros_ = nullptr;   // pinned zeros, the source of zero_private_async
  uint64_t issued_ = 0;     // zero_private_async copies queued
  uint64_t done_ = 0;       // of those, known to be done
  static constexpr uint64_t bounce_bytes = 64 * 1024;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  void* bounce_ = nullptr;  // pinned: an asynchronous copy from it does not wait for the device
  mutable std::mutex mutex_;
  std::vector<void*> device_blocks_, host_blocks_;
};

}  // namespace

std::unique_ptr<client_memory> make_gpu_client_memory() { return std::make_unique<gpu_client_memory>(); }

std::shared_ptr<file_system> make_gpu_file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts) {
  if (cache && !cache->on_gpu())
    throw error("make_gpu_file_system: the cache is a CPU cache (use make_host_file_system)");
  return std::make_shared<file_system>(std::move(cache), opts, make_gpu_client_memory());
}

}  // namespace deepwell
