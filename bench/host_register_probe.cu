// What registering a file's page-cache mapping with CUDA costs, and whether
// it can happen beside a running kernel: the facts the file API's direct
// tier rests on (docs/files.md). A kernel waits on a flag in mapped memory
// while this thread maps a resident file, checks it with mincore,
// registers it read-only and hands the kernel its device address; the
// kernel checks a word per 4 KiB page. Then cudaHostUnregister is timed
// while the kernel still runs (it spins, up to --kernel-seconds, on a quit
// flag). Also: register+unregister of small mappings, the link's rate
// reading the mapping from warps and with cudaMemcpy, against cudaMemcpy
// from pinned memory. One JSON line.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct mailbox {
  volatile unsigned long long data;  // the mapping's device address
  volatile int go, done, quit;
  volatile unsigned long long wrong;
};

__global__ void waiter(mailbox* m, unsigned long long words, long long limit_cycles) {
  const long long start = clock64();
  while (!m->go)
    if (clock64() - start > limit_cycles) return void(m->done = -1);
  const unsigned long long* p = reinterpret_cast<const unsigned long long*>(m->data);
  unsigned long long bad = 0;
  for (unsigned long long i = 0; i < words; i += 512) bad += p[i] != i;
  m->wrong = bad;
  __threadfence_system();
  m->done = 1;
  while (!m->quit)
    if (clock64() - start > limit_cycles) return void(m->done = 2);
}

__global__ void sum_words(const uint4* p, unsigned long long n, unsigned long long* out) {
  unsigned long long s = 0;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    s += v.x ^ v.w;
  }
  if (s == 42) *out = s;  // never, but the loads stay
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"registering a page-cache file mapping with CUDA beside a running kernel"};
  std::string path = "/var/tmp/deepwell-register-probe.bin";
  double gib = 4, kernel_seconds = 5;
  app.add_option("--file", path, "made here (word i holds i), then read back so it is resident");
  app.add_option("--gib", gib, "the file's size");
  app.add_option("--kernel-seconds", kernel_seconds, "how long the waiting kernel spins at most");
  CLI11_PARSE(app, argc, argv);
  const uint64_t bytes = uint64_t(gib * (1ull << 30)) >> 12 << 12;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  {
    std::vector<unsigned long long> buf(1 << 17);
    for (uint64_t off = 0; off < bytes; off += buf.size() * 8) {
      const uint64_t n = std::min<uint64_t>(buf.size() * 8, bytes - off);
      for (uint64_t k = 0; k < n / 8; ++k) buf[k] = off / 8 + k;
      if (::pwrite(fd, buf.data(), n, off_t(off)) != ssize_t(n)) throw std::runtime_error("write failed");
    }
  }
  nlohmann::json j;
  j["file_bytes"] = bytes;
  int dev = 0, rate_khz = 0;
  ok(cudaGetDevice(&dev), "cudaGetDevice");
  ok(cudaDeviceGetAttribute(&rate_khz, cudaDevAttrClockRate, dev), "clock rate");
  mailbox* m = nullptr;
  ok(cudaHostAlloc(&m, sizeof *m, cudaHostAllocMapped), "cudaHostAlloc");
  *m = {};
  mailbox* dm = nullptr;
  ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dm), m, 0), "device pointer");
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  waiter<<<1, 1, 0, s>>>(dm, bytes / 8, (long long)(kernel_seconds * rate_khz * 1e3));
  ok(cudaGetLastError(), "launch");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  const double t0 = now();
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) throw std::runtime_error("mmap failed");
  std::vector<unsigned char> in(bytes >> 12);
  ::mincore(map, bytes, in.data());
  uint64_t resident = 0;
  for (unsigned char v : in) resident += v & 1;
  const double t1 = now();
  ok(cudaHostRegister(map, bytes, cudaHostRegisterMapped | cudaHostRegisterReadOnly), "cudaHostRegister");
  const double t2 = now();
  void* dp = nullptr;
  ok(cudaHostGetDevicePointer(&dp, map, 0), "device pointer of the mapping");
  j["kernel_running_during_register"] = m->done == 0;
  j["resident_share"] = double(resident) / double(in.size());
  j["mmap_mincore_s"] = t1 - t0;
  j["register_s"] = t2 - t1;
  j["register_gbps"] = bytes / (t2 - t1) / 1e9;
  m->data = reinterpret_cast<unsigned long long>(dp);
  __sync_synchronize();
  m->go = 1;
  const double w0 = now();
  while (m->done == 0 && now() - w0 < kernel_seconds + 5) std::this_thread::sleep_for(std::chrono::microseconds(50));
  j["kernel_read_the_mapping"] = m->done == 1;
  j["kernel_wrong_words"] = m->wrong;
  const double u0 = now();
  ok(cudaHostUnregister(map), "cudaHostUnregister");
  const double u1 = now();
  j["unregister_s"] = u1 - u0;
  j["kernel_still_running_after_unregister"] = m->done == 1;
  j["unregister_waited_for_the_kernel"] = m->done != 1;
  m->quit = 1;
  ok(cudaStreamSynchronize(s), "the waiting kernel");

  for (uint64_t kib : {64ull, 1024ull, 16384ull, 262144ull}) {
    const uint64_t n = std::min<uint64_t>(kib << 10, bytes);
    const double a = now();
    for (int i = 0; i < 20; ++i) {
      ok(cudaHostRegister(map, n, cudaHostRegisterMapped | cudaHostRegisterReadOnly), "cudaHostRegister");
      ok(cudaHostUnregister(map), "cudaHostUnregister");
    }
    j["register_unregister_us"][std::to_string(kib) + "KiB"] = (now() - a) / 20 * 1e6;
  }

  ok(cudaHostRegister(map, bytes, cudaHostRegisterMapped | cudaHostRegisterReadOnly), "cudaHostRegister");
  ok(cudaHostGetDevicePointer(&dp, map, 0), "device pointer of the mapping");
  unsigned long long* out = nullptr;
  ok(cudaMalloc(&out, 8), "cudaMalloc");
  int sms = 0;
  ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SMs");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float ms = 0;
  cudaEventRecord(e0);
  sum_words<<<sms * 4, 1024>>>(static_cast<const uint4*>(dp), bytes / 16, out);
  cudaEventRecord(e1);
  ok(cudaEventSynchronize(e1), "sum_words");
  cudaEventElapsedTime(&ms, e0, e1);
  j["warps_read_mapping_gbps"] = bytes / (ms / 1e3) / 1e9;
  const uint64_t chunk = std::min<uint64_t>(1ull << 30, bytes);
  void *pinned = nullptr, *dbuf = nullptr;
  ok(cudaMallocHost(&pinned, chunk), "cudaMallocHost");
  ok(cudaMalloc(&dbuf, chunk), "cudaMalloc");
  ok(cudaMemcpy(dbuf, pinned, chunk, cudaMemcpyHostToDevice), "warm-up copy");
  cudaEventRecord(e0);
  for (int i = 0; i < 4; ++i) cudaMemcpy(dbuf, pinned, chunk, cudaMemcpyHostToDevice);
  cudaEventRecord(e1);
  ok(cudaEventSynchronize(e1), "h2d");
  cudaEventElapsedTime(&ms, e0, e1);
  j["h2d_gbps"] = 4.0 * chunk / (ms / 1e3) / 1e9;
  cudaEventRecord(e0);
  cudaMemcpy(dbuf, map, chunk, cudaMemcpyHostToDevice);
  cudaEventRecord(e1);
  ok(cudaEventSynchronize(e1), "h2d from the mapping");
  cudaEventElapsedTime(&ms, e0, e1);
  j["memcpy_from_mapping_gbps"] = chunk / (ms / 1e3) / 1e9;
  j["ratios"]["warps_read_mapping_vs_h2d"] = double(j["warps_read_mapping_gbps"]) / double(j["h2d_gbps"]);
  cudaHostUnregister(map);
  ::munmap(map, bytes);
  ::close(fd);
  ::unlink(path.c_str());
  std::printf("%s\n", j.dump().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "host_register_probe: %s\n", e.what());
  return 1;
}
