// Pieces the GPU benchmarks share: a CUDA event timer, the hash that picks
// random indices, the dataset pattern (64-bit word i of a dataset holds i,
// so any byte read back can be checked), and pinned host memory for the
// zero-copy baselines.
#pragma once
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/common/detail/staging_copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/link/gpu_client.hpp"

namespace deepwell::bench {

// How the controller fills staging in this process, as the controller reads
// DEEPWELL_STAGING_STORES, for the JSON lines.
inline std::string staging_stores_name() { return detail::staging_stores_name(detail::default_staging_stores()); }

// Every DEEPWELL_* setting in this process's environment ("NAME=value"),
// for the JSON lines: knobs change what a run measures.
inline std::vector<std::string> deepwell_env() {
  std::vector<std::string> out;
  for (char** e = ::environ; e && *e; ++e)
    if (std::strncmp(*e, "DEEPWELL_", 9) == 0) out.emplace_back(*e);
  std::sort(out.begin(), out.end());
  return out;
}

__host__ __device__ inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Kernel time between two events on the default stream, in seconds.
struct timer {
  cudaEvent_t a, b;
  timer() {
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  ~timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  timer(const timer&) = delete;
  timer& operator=(const timer&) = delete;
  void start() { cudaEventRecord(a); }
  double stop() {
    cudaEventRecord(b);
    check_cuda(cudaEventSynchronize(b), "kernel");
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1e-3;
  }
};

// CPU seconds the calling thread has used.
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Word i of the dataset holds i: fill `bytes` of host memory with it, on
// every core.
inline void fill_pattern(void* dst, uint64_t bytes, uint64_t first_word = 0) {
  auto* p = static_cast<uint64_t*>(dst);
  const uint64_t words = bytes / 8;
  const unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < n; ++t)
    ts.emplace_back([=] {
      for (uint64_t i = words * t / n; i < words * (t + 1) / n; ++i) p[i] = first_word + i;
    });
  for (auto& t : ts) t.join();
}

// Makes `path` hold the pattern for at least `bytes` (writes it if the file
// is shorter); the pages end up in the page cache.
inline void ensure_pattern_file(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  if (uint64_t(lseek(fd, 0, SEEK_END)) < bytes) {
    std::vector<uint64_t> chunk(1 << 20);
    for (uint64_t off = 0; off < bytes; off += chunk.size() * 8) {
      fill_pattern(chunk.data(), chunk.size() * 8, off / 8);
      if (pwrite(fd, chunk.data(), chunk.size() * 8, off_t(off)) != ssize_t(chunk.size() * 8)) {
        ::close(fd);
        throw error(errno_message("write " + path, errno));
      }
    }
    fsync(fd);
  }
  ::close(fd);
}

// Reads `bytes` of `path` once, so that its pages are in the page cache.
inline void read_through(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw error(errno_message("open " + path, errno));
  std::vector<char> buf(8 << 20);
  for (uint64_t off = 0; off < bytes;) {
    const ssize_t n = pread(fd, buf.data(), std::min<uint64_t>(buf.size(), bytes - off), off_t(off));
    if (n <= 0) break;
    off += uint64_t(n);
  }
  ::close(fd);
}

// Host memory the GPU reads directly (zero-copy, the EMOGI baseline):
// either an existing buffer registered as mapped, or a read-only mapping of
// a file registered the same way. Unregisters and unmaps on destruction.
class zero_copy_view {
 public:
  zero_copy_view(void* host, uint64_t bytes) : host_(host), bytes_(bytes) {
    const cudaError_t e = cudaHostRegister(host_, bytes_, cudaHostRegisterMapped);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      registered_ = false;  // someone else's registration: use it, leave it
    } else {
      check_cuda(e, "cudaHostRegister");
    }
    map();
  }
  zero_copy_view(const std::string& file, uint64_t bytes) : bytes_(bytes) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) throw error(errno_message("open " + file, errno));
    host_ = mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (host_ == MAP_FAILED) throw error(errno_message("mmap " + file, errno));
    mapped_file_ = true;
    check_cuda(cudaHostRegister(host_, bytes_, cudaHostRegisterMapped | cudaHostRegisterReadOnly),
               "cudaHostRegister (file mapping)");
    map();
  }
  ~zero_copy_view() {
    if (registered_) cudaHostUnregister(host_);
    if (mapped_file_) munmap(host_, bytes_);
  }
  zero_copy_view(const zero_copy_view&) = delete;
  zero_copy_view& operator=(const zero_copy_view&) = delete;
  const void* device() const { return device_; }

 private:
  void map() { check_cuda(cudaHostGetDevicePointer(&device_, host_, 0), "cudaHostGetDevicePointer"); }
  void* host_ = nullptr;
  void* device_ = nullptr;
  uint64_t bytes_ = 0;
  bool mapped_file_ = false;
  bool registered_ = true;
};

}  // namespace deepwell::bench
