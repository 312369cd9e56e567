// The plain io_uring loop that deepwell's controller is measured against:
// `threads` threads, each with its own ring and `depth` random reads (or
// writes) of `block` bytes in flight over the same file, no controller in
// between.
#pragma once
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

inline nlohmann::json uring_loop(const std::string& path, bool direct, uint64_t size, uint32_t block, unsigned depth,
                                 unsigned threads, double seconds, bool write = false) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> total{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      int fd = open(path.c_str(), (write ? O_RDWR : O_RDONLY) | (direct ? O_DIRECT : 0));
      io_uring ring;
      if (fd < 0 || io_uring_queue_init(depth * 2, &ring, 0) != 0) {
        failed = 1;
        if (fd >= 0) close(fd);
        return;
      }
      std::vector<void*> bufs(depth);
      for (auto& b : bufs) {
        b = aligned_alloc(4096, block);
        std::memset(b, 0x5A, block);
      }
      std::mt19937_64 rng(t * 31 + 5);
      const uint64_t blocks = size / block;
      auto prep = [&](io_uring_sqe* s, unsigned i) {
        const uint64_t off = (rng() % blocks) * block;
        if (write)
          io_uring_prep_write(s, fd, bufs[i], block, off);
        else
          io_uring_prep_read(s, fd, bufs[i], block, off);
      };
      uint64_t n = 0;
      for (unsigned i = 0; i < depth; ++i) {
        io_uring_sqe* s = io_uring_get_sqe(&ring);
        prep(s, i);
        io_uring_sqe_set_data64(s, i);
      }
      io_uring_submit(&ring);
      unsigned inflight = depth;
      while (inflight) {
        io_uring_cqe* c;
        if (io_uring_wait_cqe(&ring, &c) != 0) break;
        const unsigned i = unsigned(io_uring_cqe_get_data64(c));
        if (c->res != int(block)) failed = 1;
        io_uring_cqe_seen(&ring, c);
        ++n;
        if (stop.load(std::memory_order_relaxed)) {
          --inflight;
          continue;
        }
        io_uring_sqe* s = io_uring_get_sqe(&ring);
        prep(s, i);
        io_uring_sqe_set_data64(s, i);
        io_uring_submit(&ring);
      }
      total += n;
      io_uring_queue_exit(&ring);
      for (auto b : bufs) free(b);
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json j;
  j["what"] = write ? "plain io_uring write loop, one ring per thread" : "plain io_uring loop, one ring per thread";
  j["threads"] = threads;
  j["depth_per_thread"] = depth;
  j["requests"] = total.load();
  j["iops"] = double(total.load()) / secs;
  j["gbps"] = double(total.load()) * block / secs / 1e9;
  j["ok"] = failed.load() == 0;
  return j;
}
