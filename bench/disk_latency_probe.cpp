// What a storage device itself does to a light reader's latency beside a
// flood, with no deepwell in between: the floor under issue 15's
// `light_client_p99_under_load_vs_alone`.
//
// One "light" thread reads random blocks one at a time (its own ring, a
// pause between reads, each read timed from submit to completion); a
// "flood" thread keeps `depth` random reads of the same size in flight on a
// ring of its own (uring_loop.hpp, the block benchmarks' plain loop). For each depth (0: the light reader alone) the light
// reader's percentiles and the flood's reads a second are printed as JSON:
// a scheduler above the device can hold the flood to a depth, but not make
// a read that arrives behind `depth` others faster than the device serves
// them.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "uring_loop.hpp"

namespace {

using clk = std::chrono::steady_clock;

struct ring_file {
  int fd = -1;
  io_uring ring{};
  ring_file(const std::string& path, bool direct, unsigned entries) {
    fd = open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    if (int rc = io_uring_queue_init(entries, &ring, 0); rc != 0) {
      close(fd);
      throw std::runtime_error(std::string("io_uring_queue_init: ") + std::strerror(-rc));
    }
  }
  ~ring_file() {
    io_uring_queue_exit(&ring);
    close(fd);
  }
};

void* block_buffer(uint32_t block) {
  void* p = aligned_alloc(4096, block);
  if (!p) throw std::bad_alloc();
  return p;
}

// The light reader: one read at a time, `pause_us` apart; latencies in ns.
std::vector<uint64_t> light(const std::string& path, bool direct, uint64_t blocks, uint32_t block, unsigned pause_us,
                            double seconds, std::atomic<bool>& failed) {
  ring_file rf(path, direct, 2);
  void* buf = block_buffer(block);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> lat;
  const auto end = clk::now() + std::chrono::duration<double>(seconds);
  while (clk::now() < end) {
    io_uring_sqe* s = io_uring_get_sqe(&rf.ring);
    io_uring_prep_read(s, rf.fd, buf, block, (rng() % blocks) * block);
    const auto t0 = clk::now();
    io_uring_submit(&rf.ring);
    io_uring_cqe* c;
    if (io_uring_wait_cqe(&rf.ring, &c) != 0) {
      failed = true;
      break;
    }
    const auto t1 = clk::now();
    if (c->res != int(block)) failed = true;
    io_uring_cqe_seen(&rf.ring, c);
    lat.push_back(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    if (pause_us) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  free(buf);
  return lat;
}

double pct_us(std::vector<uint64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return double(v[k]) / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A light reader's latency beside a flood of reads, straight on the device (io_uring)"};
  std::string path;
  std::vector<unsigned> depths{0, 1, 2, 4, 8, 16, 32, 64};
  uint32_t block = 4096;
  unsigned pause_us = 200;
  double seconds = 3;
  bool buffered = false;
  app.add_option("--file", path, "a file (or block device) to read")->required();
  app.add_option("--depths", depths, "the flood's reads in flight, one run each (0: the light reader alone)")->delimiter(',');
  app.add_option("--block", block, "bytes a read")->check(CLI::Range(512u, 1u << 24));
  app.add_option("--pause-us", pause_us, "the light reader's pause between reads");
  app.add_option("--seconds", seconds, "each run's length")->check(CLI::Range(0.1, 600.0));
  app.add_flag("--buffered", buffered, "read through the page cache (default: O_DIRECT)");
  CLI11_PARSE(app, argc, argv);

  try {
    struct stat st{};
    if (stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path + ": " + std::strerror(errno));
    int probe = open(path.c_str(), O_RDONLY);
    if (probe < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
    const off_t size = S_ISBLK(st.st_mode) ? lseek(probe, 0, SEEK_END) : st.st_size;
    close(probe);
    const uint64_t blocks = uint64_t(size) / block;
    if (blocks < 2) throw std::runtime_error(path + " holds fewer than two blocks of " + std::to_string(block));

    nlohmann::json out;
    out["what"] = "a light reader (one read at a time, a pause between) beside a flood of `depth` reads in flight";
    out["file_bytes"] = uint64_t(size);
    out["block"] = block;
    out["pause_us"] = pause_us;
    out["direct"] = !buffered;
    out["runs"] = nlohmann::json::array();
    for (unsigned d : depths) {
      // The flood: the plain io_uring loop (one thread, `d` reads in
      // flight) for as long as the light reader runs.
      std::atomic<bool> failed{false};
      nlohmann::json flood;
      std::thread f;
      if (d) f = std::thread([&] { flood = uring_loop(path, !buffered, blocks * block, block, d, 1, seconds); });
      const auto lat = light(path, !buffered, blocks, block, pause_us, seconds, failed);
      if (f.joinable()) f.join();
      if (d && !flood.value("ok", false)) failed = true;
      nlohmann::json r{{"depth", d},
                       {"light_reads", lat.size()},
                       {"p50_us", pct_us(lat, 0.5)},
                       {"p90_us", pct_us(lat, 0.9)},
                       {"p99_us", pct_us(lat, 0.99)},
                       {"max_us", pct_us(lat, 1.0)},
                       {"flood_iops", d ? flood.value("iops", 0.0) : 0.0},
                       {"ok", !failed.load()}};
      std::fprintf(stderr, "%s\n", r.dump().c_str());
      out["runs"].push_back(r);
    }
    std::printf("%s\n", out.dump().c_str());
    for (auto& r : out["runs"])
      if (!r["ok"].get<bool>()) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "disk_latency_probe: %s\n", e.what());
    return 2;
  }
}
