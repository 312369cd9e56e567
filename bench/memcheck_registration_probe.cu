// Why compute-sanitizer memcheck flags the file API's direct tier: memcheck
// does not see host memory registered while a kernel already runs. A kernel
// waits for a pointer in mapped memory; this thread maps a file read-only,
// registers it (cudaHostRegisterReadOnly, as the direct tier does on a gopen
// from a running kernel) and hands the kernel its device address; the kernel
// reads every 16-byte word and counts the wrong ones. `--when before`
// registers before the launch (the control). Run natively, both read every
// word right; under memcheck "before" is clean and "late" gets an "Invalid
// __global__ read" for every read and its kernel is stopped
// (bench/results/2026-11-27-14e6e31-h200-memcheck-direct-tier.json).
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

struct mailbox {
  volatile unsigned long long address;
  volatile unsigned ready;
};

__global__ void read_words(mailbox* m, unsigned long long words, unsigned long long* wrong,
                           unsigned long long* read) {
  while (m->ready == 0) __nanosleep(1000);
  const uint4* p = reinterpret_cast<const uint4*>(m->address);
  unsigned long long bad = 0, n = 0;
  for (unsigned long long i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words;
       i += uint64_t(gridDim.x) * blockDim.x, ++n) {
    const uint4 v = p[i];
    const uint32_t w = uint32_t(i * 4);
    bad += v.x != w || v.y != w + 1 || v.z != w + 2 || v.w != w + 3;
  }
  atomicAdd(wrong, bad);
  atomicAdd(read, n);
}

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcheck and host memory registered while a kernel runs"};
  std::string when = "late", path = "/var/tmp/deepwell-registration-probe.dat";
  uint64_t mib = 16;
  app.add_option("--when", when, "register the file mapping before the launch or late (while the kernel waits)")
      ->check(CLI::IsMember({"before", "late"}));
  app.add_option("--file", path, "scratch file (written, then mapped read-only)");
  app.add_option("--mib", mib, "file size in MiB")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  try {
    const uint64_t bytes = mib << 20;
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + path);
    std::vector<uint32_t> words(bytes / 4);
    for (uint64_t i = 0; i < words.size(); ++i) words[i] = uint32_t(i);
    if (pwrite(fd, words.data(), bytes, 0) != ssize_t(bytes)) throw std::runtime_error("cannot write " + path);
    mailbox* box = nullptr;
    ok(cudaHostAlloc(&box, sizeof(mailbox), cudaHostAllocMapped), "cudaHostAlloc");
    box->address = 0;
    box->ready = 0;
    mailbox* dbox = nullptr;
    ok(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dbox), box, 0), "cudaHostGetDevicePointer");
    unsigned long long* counts = nullptr;
    ok(cudaMalloc(&counts, 16), "cudaMalloc");
    ok(cudaMemset(counts, 0, 16), "cudaMemset");
    cudaStream_t s;
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    void* mapping = nullptr;
    auto publish = [&] {
      mapping = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (mapping == MAP_FAILED) throw std::runtime_error("cannot map " + path);
      ok(cudaHostRegister(mapping, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable | cudaHostRegisterReadOnly),
         "cudaHostRegister");
      void* dev = nullptr;
      ok(cudaHostGetDevicePointer(&dev, mapping, 0), "cudaHostGetDevicePointer");
      box->address = reinterpret_cast<unsigned long long>(dev);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      box->ready = 1;
    };
    if (when == "before") publish();
    read_words<<<264, 256, 0, s>>>(dbox, bytes / 16, counts, counts + 1);
    if (when == "late") {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      publish();
    }
    const cudaError_t e = cudaStreamSynchronize(s);
    unsigned long long host[2] = {0, 0};
    if (e == cudaSuccess) ok(cudaMemcpy(host, counts, 16, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::printf("{\"when\":\"%s\",\"kernel\":\"%s\",\"words\":%llu,\"read\":%llu,\"wrong\":%llu}\n", when.c_str(),
                cudaGetErrorString(e), (unsigned long long)(bytes / 16), host[1], host[0]);
    return e == cudaSuccess && host[0] == 0 && host[1] == bytes / 16 ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "memcheck_registration_probe: %s\n", ex.what());
    return 2;
  }
}
