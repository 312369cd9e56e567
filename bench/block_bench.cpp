// Block benchmark with CPU clients: raw I/O through the controller's queues,
// no cache (BaM's block benchmark). Random or sequential, read or write,
// 512 B to 64 KiB, client threads, queue depth per thread, queue pairs and
// poller threads; data in a null target (the controller's own cost), host
// memory, or a file (page cache or O_DIRECT). Beside it, in the same run, a
// plain io_uring loop over the same file with as many threads as the
// controller has pollers: the number to beat. Prints a table line and
// writes JSON.
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "deepwell/link/host_client.hpp"
#include "uring_loop.hpp"

using namespace deepwell;
using json = nlohmann::json;

namespace {

struct options {
  std::string location = "hostmem";  // null | hostmem | file | model
  unsigned drives = 1;                // model: modelled drives, striped
  uint64_t chunk = 4096;              // model: the stripe's chunk
  uint64_t drive_iops = 1'500'000;    // model: each drive's
  uint64_t drive_latency_ns = 80'000;
  std::string path;
  bool direct = false;
  uint64_t size = 1ull << 30;
  uint32_t block = 4096;
  unsigned threads = 4;
  unsigned depth = 32;  // commands in flight per client thread
  unsigned queues = 4;
  unsigned pollers = 1;
  unsigned queue_entries = 1024;
  std::string op = "read";        // read | write
  std::string pattern = "random";  // random | seq
  double seconds = 3.0;
  bool baseline = true;
  std::string json_path;
  std::string commit = "unknown";
  std::string backend = "auto";
  std::string server_budget;  // non-empty: server mode's command path (grants, shares) with this io_budget
  unsigned clients = 0;       // server mode: the queues belong to this many clients, round robin (0: one each)
  double latency_target = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Each client thread keeps `depth` commands in flight on its queue pair.
struct client_result {
  uint64_t requests = 0, errors = 0;
};

void client_loop(const queue_ref& q, const options& o, uint32_t nsid, uint64_t blocks, unsigned thread_index,
                 std::atomic<bool>& stop, client_result& out) {
  std::mt19937_64 rng(thread_index * 1000003ull + 17);
  const bool write = o.op == "write";
  const uint32_t per = o.block;
  uint64_t seq = (blocks / o.threads) * thread_index;
  auto next_lba = [&] { return o.pattern == "seq" ? (seq++ % blocks) : rng() % blocks; };
  std::vector<uint16_t> ids;
  const uint64_t forever = now_ns() + 3600ull * 1000000000ull;
  for (unsigned i = 0; i < o.depth; ++i) {
    uint16_t cid;
    if (!q.acquire_cid(cid, forever).ok()) break;
    ids.push_back(cid);
    const uint64_t lba = next_lba();
    q.submit(cid, write ? nvme::make_write(nsid, lba, 1, q.buffer_offset(cid))
                        : nvme::make_read(nsid, lba, 1, q.buffer_offset(cid)));
  }
  (void)per;
  size_t i = 0;
  while (!ids.empty()) {
    const uint16_t cid = ids[i];
    wait_result r = q.wait(cid, now_ns() + 30ull * 1000000000ull);
    if (r.status.code == client_code::timeout || r.status.code == client_code::controller_lost) {
      ++out.errors;
      ids.erase(ids.begin() + long(i));
      if (i >= ids.size()) i = 0;
      continue;
    }
    ++out.requests;
    if (!r.status.ok()) ++out.errors;
    if (stop.load(std::memory_order_relaxed)) {
      q.release_cid(cid);
      ids.erase(ids.begin() + long(i));
      if (i >= ids.size()) i = 0;
      continue;
    }
    const uint64_t lba = next_lba();
    q.submit(cid, write ? nvme::make_write(nsid, lba, 1, q.buffer_offset(cid))
                        : nvme::make_read(nsid, lba, 1, q.buffer_offset(cid)));
    i = (i + 1) % ids.size();
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"deepwell block benchmark (CPU clients through the controller)"};
  app.add_option("--location", o.location, "null | hostmem | file | model (modelled drives, striped)")
      ->check(CLI::IsMember({"null", "hostmem", "file", "model"}));
  app.add_option("--drives", o.drives, "with --location model: modelled drives, striped");
  app.add_option("--chunk", o.chunk, "with --location model: the stripe's chunk bytes");
  app.add_option("--drive-iops", o.drive_iops, "with --location model: each drive's IOPS");
  app.add_option("--drive-latency-ns", o.drive_latency_ns, "with --location model: each drive's latency");
  app.add_option("--path", o.path, "file for --location file (created and filled if missing or short)");
  app.add_flag("--direct", o.direct, "O_DIRECT");
  app.add_option("--size", o.size, "dataset bytes");
  app.add_option("--block", o.block, "bytes per request (512..65536)");
  app.add_option("--threads", o.threads, "client threads");
  app.add_option("--depth", o.depth, "commands in flight per client thread");
  app.add_option("--queues", o.queues, "queue pairs (client threads share them round robin)");
  app.add_option("--pollers", o.pollers, "controller poller threads");
  app.add_option("--queue-entries", o.queue_entries, "SQ and CQ entries per queue pair");
  app.add_option("--op", o.op, "read | write")->check(CLI::IsMember({"read", "write"}));
  app.add_option("--pattern", o.pattern, "random | seq")->check(CLI::IsMember({"random", "seq"}));
  app.add_option("--seconds", o.seconds, "duration of each measurement");
  app.add_option("--baseline", o.baseline, "also run the plain io_uring loop (file location)");
  app.add_option("--backend", o.backend, "auto | uring | threads")->check(CLI::IsMember({"auto", "uring", "threads"}));
  app.add_option("--json", o.json_path, "append the result as one JSON line to this file");
  app.add_option("--commit", o.commit, "commit hash to record");
  app.add_option("--server-budget", o.server_budget,
                 "serve the queues as a server does (a grant per queue pair, every queue pair a client of its own, "
                 "this io_budget in bytes, e.g. 4194304): server mode's cost per command");
  app.add_option("--latency-target", o.latency_target, "with --server-budget: the latency target (0: off)");
  app.add_option("--clients", o.clients, "with --server-budget: the queues belong to this many clients (0: one per queue)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.location == "file" && o.path.empty()) throw error("--location file needs --path");
    if (o.threads == 0 || o.depth == 0 || o.queues == 0) throw error("--threads, --depth and --queues must be > 0");
    o.size = o.size / o.block * o.block;
    controller_config cc;
    cc.pollers = o.pollers;
    if (!o.server_budget.empty()) {
      cc.io_budget_bytes = std::stoull(o.server_budget);
      cc.latency_target = o.latency_target;
    }
    cc.backend = o.backend == "uring" ? io_backend::uring : o.backend == "threads" ? io_backend::threads : io_backend::automatic;
    controller ctl(cc);
    std::shared_ptr<target> t;
    if (o.location == "null") {
      t = make_null_target(o.size);
    } else if (o.location == "hostmem") {
      t = make_host_memory_target(o.size, true);
    } else if (o.location == "model") {
      // Host memory behind a device model a drive, striped (drive_array.hpp):
      // the controller's scaling over drives, with CPU clients.
      if (o.drives == 0) throw error("--drives must be > 0");
      drive_model dm;
      dm.iops = o.drive_iops;
      dm.latency_ns = o.drive_latency_ns;
      std::vector<std::shared_ptr<target>> members;
      const uint64_t per = (o.size / o.drives + o.chunk - 1) / o.chunk * o.chunk;
      for (unsigned i = 0; i < o.drives; ++i) members.push_back(make_model_drive_target(per, dm));
      t = make_striped_target(members, o.chunk);
    } else {
      // Create and fill the file with a deterministic pattern if needed.
      int fd = open(o.path.c_str(), O_RDWR | O_CREAT, 0644);
      if (fd < 0) throw error(errno_message("open " + o.path, errno));
      off_t cur = lseek(fd, 0, SEEK_END);
      if (uint64_t(cur) < o.size) {
        std::vector<uint64_t> chunk(1 << 17);
        for (uint64_t off = uint64_t(cur) / (8 << 17) * (8 << 17); off < o.size; off += chunk.size() * 8) {
          for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = (off / 8 + i) * 0x9E3779B97F4A7C15ull;
          if (pwrite(fd, chunk.data(), chunk.size() * 8, off_t(off)) < 0) throw error(errno_message("fill " + o.path, errno));
        }
        fsync(fd);
      }
      close(fd);
      file_options fo;
      fo.direct = o.direct;
      fo.writable = o.op == "write";
      fo.length = o.size;
      t = open_file_target(o.path, fo);
    }
    const uint32_t nsid = ctl.add_namespace({t, o.block, o.op != "write"});
    std::vector<std::unique_ptr<host_queue_client>> clients;
    qp_geometry g{o.queue_entries, o.queue_entries, o.block};
    auto grants = std::make_shared<access_grants>();
    grants->set(nsid, access_grants::read | access_grants::write);
    for (unsigned i = 0; i < o.queues; ++i) {
      queue_options qo;
      if (!o.server_budget.empty()) qo = {grants, o.clients ? i % o.clients + 1 : i + 1};
      clients.push_back(std::make_unique<host_queue_client>(client_handle(ctl.create_queue_pair(g, qo))));
    }
    const uint64_t blocks = o.size / o.block;

    std::atomic<bool> stop{false};
    std::vector<client_result> results(o.threads);
    std::vector<std::thread> ts;
    const double cpu0 = process_cpu_seconds();
    const double poll0 = ctl.poller_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned i = 0; i < o.threads; ++i)
      ts.emplace_back([&, i] { client_loop(clients[i % o.queues]->ref(), o, nsid, blocks, i, stop, results[i]); });
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
    stop = true;
    for (auto& th : ts) th.join();
    const double secs = seconds_since(t0);
    const double poll_cpu = ctl.poller_cpu_seconds() - poll0;
    const double all_cpu = process_cpu_seconds() - cpu0;
    uint64_t reqs = 0, errs = 0;
    for (auto& r : results) {
      reqs += r.requests;
      errs += r.errors;
    }
    json j;
    j["benchmark"] = "block";
    j["clients"] = "cpu";
    j["commit"] = o.commit;
    j["config"] = {{"location", o.location}, {"path", o.path},     {"direct", o.direct},   {"size", o.size},
                   {"block", o.block},       {"threads", o.threads}, {"depth", o.depth},   {"queues", o.queues},
                   {"pollers", o.pollers},   {"op", o.op},           {"pattern", o.pattern}, {"seconds", o.seconds},
                   {"server_budget", o.server_budget}, {"server_clients", o.clients}, {"latency_target", o.latency_target},
                   {"backend", ctl.backend_name()}};
    if (o.location == "model")
      j["config"]["model"] = {{"drives", o.drives}, {"chunk", o.chunk}, {"drive_iops", o.drive_iops},
                              {"drive_latency_ns", o.drive_latency_ns}};
    j["metrics"] = {{"requests", reqs},
                    {"errors", errs},
                    {"iops", reqs / secs},
                    {"gbps", double(reqs) * o.block / secs / 1e9},
                    {"poller_cpu_seconds", poll_cpu},
                    {"process_cpu_seconds", all_cpu},
                    {"controller_ns_per_request", reqs ? poll_cpu / double(reqs) * 1e9 : 0.0},
                    {"requests_per_poller_second", poll_cpu > 0 ? double(reqs) / poll_cpu : 0.0}};
    ctl.stop();
    if (o.location == "file" && o.baseline && o.op == "read") {
      json b = uring_loop(o.path, o.direct, o.size, o.block, o.depth, o.pollers, o.seconds);
      j["baselines"]["uring_loop_same_cores"] = b;
      j["ratios"]["ctrl_vs_uring_same_cores"] = double(j["metrics"]["iops"]) / double(b["iops"]);
    }
    std::printf("block %s %s %s bs=%u threads=%u depth=%u queues=%u pollers=%u: %.0f IOPS %.2f GB/s, %.0f ns controller CPU/request, errors %llu",
                o.location.c_str(), o.op.c_str(), o.pattern.c_str(), o.block, o.threads, o.depth, o.queues, o.pollers,
                double(j["metrics"]["iops"]), double(j["metrics"]["gbps"]), double(j["metrics"]["controller_ns_per_request"]),
                (unsigned long long)errs);
    if (j.contains("ratios")) std::printf(", vs io_uring loop %.2f", double(j["ratios"]["ctrl_vs_uring_same_cores"]));
    std::printf("\n");
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path, std::ios::app);
      f << j.dump() << "\n";
    }
    return errs == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "block_bench: %s\n", e.what());
    return 2;
  }
}
