// The baseline a program without deepwell uses to gather rows of a large
// dataset into GPU memory (and what KvikIO does without GPUDirect): CPU
// threads read rows (`pread`, or memcpy from host memory) into pinned
// buffers, double-buffered, and each thread's buffers go to the GPU with
// cudaMemcpyAsync on its own stream while the thread fills the other one.
#pragma once
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.cuh"
#include "deepwell/common/error.hpp"

namespace deepwell::bench {

class tiling_gatherer {
 public:
  // Rows come from `host` (host memory) when it is not null, else from fd
  // (pread; O_DIRECT works: buffers are page-aligned, rows a multiple of
  // 4 KiB then). chunk_rows rows per buffer.
  tiling_gatherer(const void* host, int fd, uint32_t row_bytes, unsigned threads, unsigned chunk_rows)
      : host_(static_cast<const uint8_t*>(host)), fd_(fd), row_(row_bytes), chunk_(chunk_rows) {
    for (unsigned t = 0; t < threads; ++t) workers_.emplace_back(new worker);
    for (auto& w : workers_) {
      for (auto& b : w->buf) check_cuda(cudaHostAlloc(&b, size_t(chunk_) * row_, cudaHostAllocDefault), "cudaHostAlloc");
      check_cuda(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "cudaStreamCreate");
      for (auto& e : w->done) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    }
    for (unsigned t = 0; t < threads; ++t) threads_.emplace_back([this, t] { run(t); });
  }
  ~tiling_gatherer() {
    {
      std::lock_guard<std::mutex> g(m_);
      quit_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    for (auto& w : workers_) {
      for (auto b : w->buf) cudaFreeHost(b);
      for (auto e : w->done) cudaEventDestroy(e);
      cudaStreamDestroy(w->stream);
    }
  }
  tiling_gatherer(const tiling_gatherer&) = delete;
  tiling_gatherer& operator=(const tiling_gatherer&) = delete;

  // Row idx[j] of the dataset lands at out + j * row_bytes (GPU memory), for
  // j < n; returns when all of it is on the GPU. False if a read failed.
  bool gather(const uint64_t* idx, uint64_t n, void* out) {
    std::unique_lock<std::mutex> g(m_);
    idx_ = idx;
    n_ = n;
    out_ = static_cast<uint8_t*>(out);
    pending_ = unsigned(workers_.size());
    failed_ = false;
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(g, [&] { return pending_ == 0; });
    return !failed_;
  }

  // CPU seconds the worker threads have used (their own thread clocks,
  // including the time they spin in cudaEventSynchronize).
  double cpu_seconds() const { return cpu_ns_.load() * 1e-9; }
  unsigned threads() const { return unsigned(workers_.size()); }

 private:
  struct worker {
    void* buf[2]{};
    cudaEvent_t done[2]{};
    bool busy[2]{};
    cudaStream_t stream{};
  };

  void run(unsigned t) {
    worker& w = *workers_[t];
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> g(m_);
      cv_.wait(g, [&] { return generation_ != seen; });
      seen = generation_;
      if (quit_) return;
      const uint64_t* idx = idx_;
      const uint64_t n = n_;
      uint8_t* out = out_;
      g.unlock();
      const double c0 = thread_cpu_seconds();
      const bool ok = gather_share(w, t, idx, n, out);
      cpu_ns_ += uint64_t((thread_cpu_seconds() - c0) * 1e9);
      g.lock();
      if (!ok) failed_ = true;
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }

  // Worker t's contiguous share of the batch, in chunks, two buffers.
  bool gather_share(worker& w, unsigned t, const uint64_t* idx, uint64_t n, uint8_t* out) {
    const uint64_t begin = n * t / workers_.size(), end = n * (t + 1) / workers_.size();
    bool ok = true;
    unsigned b = 0;
    for (uint64_t j0 = begin; j0 < end; j0 += chunk_, b ^= 1) {
      const uint64_t rows = std::min<uint64_t>(chunk_, end - j0);
      if (w.busy[b]) check_cuda(cudaEventSynchronize(w.done[b]), "cudaEventSynchronize");
      uint8_t* dst = static_cast<uint8_t*>(w.buf[b]);
      for (uint64_t j = 0; j < rows; ++j) {
        const uint64_t off = idx[j0 + j] * row_;
        if (host_) {
          std::memcpy(dst + j * row_, host_ + off, row_);
        } else if (pread(fd_, dst + j * row_, row_, off_t(off)) != ssize_t(row_)) {
          ok = false;
        }
      }
      check_cuda(cudaMemcpyAsync(out + j0 * row_, dst, rows * row_, cudaMemcpyHostToDevice, w.stream),
                 "cudaMemcpyAsync");
      check_cuda(cudaEventRecord(w.done[b], w.stream), "cudaEventRecord");
      w.busy[b] = true;
    }
    check_cuda(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize");
    w.busy[0] = w.busy[1] = false;
    return ok;
  }

  const uint8_t* host_;
  int fd_;
  uint32_t row_;
  unsigned chunk_;
  std::vector<std::unique_ptr<worker>> workers_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  uint64_t generation_ = 0;
  bool quit_ = false, failed_ = false;
  const uint64_t* idx_ = nullptr;
  uint64_t n_ = 0;
  uint8_t* out_ = nullptr;
  unsigned pending_ = 0;
  std::atomic<uint64_t> cpu_ns_{0};
};

}  // namespace deepwell::bench
