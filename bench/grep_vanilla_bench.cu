// Issue 17's "vanilla GPU" grep, the baseline GPUfs measured its grep
// against: the host reads every file with pread into one pinned buffer (on
// all cores), copies it to the GPU, and the same word-counting code as
// `deepwell grep` (files/grep.hpp: grep_scan_chunk, grep_emit) runs over it
// with no file API; the output lines go to a GPU buffer, come back, and the
// host writes them to a file. Timed from the first pread to the output
// written, in phases. Prints one JSON line. With --fsync the output is also
// made durable (fdatasync) before the clock stops, as `deepwell grep`'s
// gclose makes its output.
//   grep_vanilla_bench ROOT --dict DICT --out FILE [--fsync]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "grep/grep_run.hpp"
#include "deepwell/link/gpu_client.hpp"

using namespace deepwell;

namespace {

struct vanilla_job {
  grep_dict_ref dict;
  const uint8_t* data = nullptr;       // every file back to back
  const uint64_t* offsets = nullptr;   // file i at [offsets[i], offsets[i + 1])
  const char* paths = nullptr;         // npaths x grep_path_stride
  uint32_t npaths = 0;
  unsigned long long* next = nullptr;  // the next file to take
  char* out = nullptr;                 // output lines
  uint64_t out_cap = 0;
  unsigned long long* out_cursor = nullptr;
  unsigned long long* overflow = nullptr;
  grep_scratch* scratch = nullptr;
  grep_counters* counters = nullptr;
};

// The warp's text buffer into the GPU output buffer.
struct buffer_sink {
  const vanilla_job& j;
  template <class Warp>
  __device__ void operator()(const Warp& w, unsigned mask, grep_scratch& s) const {
    const uint32_t n = s.text_used;
    if (n == 0) return;
    unsigned long long at = 0;
    if (w.lane() == lowest_lane(mask)) at = atomicAdd(j.out_cursor, (unsigned long long)n);
    at = shfl64(w, mask, at, lowest_lane(mask));
    if (at + n <= j.out_cap) {
      for (uint32_t k = w.lane(); k < n; k += 32) j.out[at + k] = s.text[k];
    } else if (w.lane() == lowest_lane(mask)) {
      atomicAdd(j.overflow, 1ull);
    }
    w.sync(mask);
    if (w.lane() == lowest_lane(mask)) s.text_used = 0;
    w.sync(mask);
  }
};

__global__ void vanilla_grep_kernel(const vanilla_job* jp) {
  const vanilla_job& j = *jp;
  const gpu_full_warp w;
  const unsigned mask = w.active();
  const uint32_t worker = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  grep_scratch& s = j.scratch[worker];
  const buffer_sink sink{j};
  const uint32_t tail = j.dict.max_len < 255 ? j.dict.max_len + 1 : 256;
  for (;;) {
    unsigned long long p = 0;
    if (w.lane() == 0) p = atomicAdd(j.next, 1ull);
    p = shfl64(w, mask, p, 0);
    if (p >= j.npaths) break;
    const char* path = j.paths + p * grep_path_stride;
    uint32_t path_len = 0;
    while (path_len < grep_path_stride && path[path_len]) ++path_len;
    const uint8_t* file = j.data + j.offsets[p];
    const uint64_t size = j.offsets[p + 1] - j.offsets[p];
    unsigned long long found = 0;
    for (uint64_t off = 0; off < size; off += grep_chunk) {
      const uint64_t from = off ? off - 1 : 0;
      const uint64_t avail = size - from;
      const uint32_t lead = uint32_t(off - from);
      const uint32_t end = uint32_t(avail < lead + grep_chunk + tail ? avail : lead + grep_chunk + tail);
      const uint32_t stop = end < lead + grep_chunk ? end : lead + grep_chunk;
      found += detail::grep_scan_chunk(j.dict, s, file + from, lead, stop, end, w.lane(), 32);
      __syncwarp(mask);
      uint32_t used = w.lane() == 0 ? s.used : 0;
      used = w.shfl(mask, used, 0);
      if (used > grep_table / 2) detail::grep_emit(w, mask, j.dict, j.counters, s, path, path_len, sink);
    }
    if (found) atomicAdd(&j.counters->matches, found);
    detail::grep_emit(w, mask, j.dict, j.counters, s, path, path_len, sink);
    if (w.lane() == 0) {
      atomicAdd(&j.counters->files, 1ull);
      atomicAdd(&j.counters->bytes, (unsigned long long)size);
    }
  }
  sink(w, mask, s);
}

template <class T>
T* device_copy(const void* src, size_t bytes, std::vector<void*>& owned) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  owned.push_back(p);
  if (bytes && src) check_cuda(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  else check_cuda(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset");
  return static_cast<T*>(p);
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"vanilla GPU grep: pread everything, copy, count"};
  std::string root, dict_path = "/usr/share/dict/words", out_path = "vanilla.out";
  unsigned threads = std::thread::hardware_concurrency();
  bool durable = false;
  app.add_option("root", root, "the tree to search")->required();
  app.add_option("--dict", dict_path, "word list");
  app.add_option("--out", out_path, "output file");
  app.add_option("--threads", threads, "host threads reading the files");
  app.add_flag("--fsync", durable, "fdatasync the output before the clock stops");
  CLI11_PARSE(app, argc, argv);

  const grep_dictionary d = load_grep_dictionary(dict_path);
  const std::vector<std::string> files = list_grep_files(root);
  std::vector<uint64_t> offsets(files.size() + 1, 0);
  for (size_t i = 0; i < files.size(); ++i) {
    struct stat st {};
    if (::stat((root + "/" + files[i]).c_str(), &st) != 0) throw error(errno_message("stat " + files[i], errno));
    offsets[i + 1] = offsets[i] + uint64_t(st.st_size);
  }
  const uint64_t total = offsets.back();
  const std::vector<char> paths = grep_path_table(files);
  std::vector<void*> owned;
  vanilla_job j;
  j.dict = {device_copy<uint8_t>(d.blob.data(), d.blob.size(), owned),
            device_copy<uint32_t>(d.offs.data(), d.offs.size() * 4, owned),
            device_copy<uint32_t>(d.table.data(), d.table.size() * 4, owned), uint32_t(d.table.size() - 1), d.max_len};
  int dev = 0, sms = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  const uint32_t blocks = uint32_t(sms) * 4, block_threads = 128, warps = blocks * block_threads / 32;
  uint8_t* host = nullptr;
  check_cuda(cudaMallocHost(&host, total ? total : 1), "cudaMallocHost");
  uint8_t* data = device_copy<uint8_t>(nullptr, total, owned);
  j.offsets = device_copy<uint64_t>(offsets.data(), offsets.size() * 8, owned);
  j.paths = device_copy<char>(paths.data(), paths.size(), owned);
  j.npaths = uint32_t(files.size());
  j.next = device_copy<unsigned long long>(nullptr, 8, owned);
  j.out_cap = std::max<uint64_t>(256ull << 20, total);
  j.out = device_copy<char>(nullptr, j.out_cap, owned);
  j.out_cursor = device_copy<unsigned long long>(nullptr, 8, owned);
  j.overflow = device_copy<unsigned long long>(nullptr, 8, owned);
  j.scratch = device_copy<grep_scratch>(nullptr, uint64_t(warps) * sizeof(grep_scratch), owned);
  j.counters = device_copy<grep_counters>(nullptr, sizeof(grep_counters), owned);
  j.data = data;
  auto* dj = device_copy<vanilla_job>(&j, sizeof j, owned);
  check_cuda(cudaDeviceSynchronize(), "setup");

  // Timed: read, copy, count, copy back, write.
  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> failed{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < std::max(1u, threads); ++t)
    ts.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        const int fd = ::open((root + "/" + files[i]).c_str(), O_RDONLY);
        if (fd < 0) { failed.fetch_add(1); continue; }
        const uint64_t want = offsets[i + 1] - offsets[i];
        uint64_t got = 0;
        while (got < want) {
          const ssize_t n = ::pread(fd, host + offsets[i] + got, want - got, off_t(got));
          if (n <= 0) break;
          got += uint64_t(n);
        }
        if (got != want) failed.fetch_add(1);
        ::close(fd);
      }
    });
  for (auto& t : ts) t.join();
  const double t_read = since(t0);
  check_cuda(cudaMemcpy(data, host, total, cudaMemcpyHostToDevice), "cudaMemcpy of the files");
  const double t_copy = since(t0);
  vanilla_grep_kernel<<<blocks, block_threads>>>(dj);
  check_cuda(cudaDeviceSynchronize(), "vanilla grep kernel");
  const double t_kernel = since(t0);
  unsigned long long out_bytes = 0, overflow = 0;
  cudaMemcpy(&out_bytes, j.out_cursor, 8, cudaMemcpyDeviceToHost);
  cudaMemcpy(&overflow, j.overflow, 8, cudaMemcpyDeviceToHost);
  if (overflow) throw error("vanilla grep: the output buffer overflowed");
  std::vector<char> out(out_bytes);
  cudaMemcpy(out.data(), j.out, out_bytes, cudaMemcpyDeviceToHost);
  const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw error(errno_message("open " + out_path, errno));
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      throw error(errno_message("write " + out_path, e));
    }
    done += size_t(n);
  }
  const double t_written = since(t0);
  if (durable && ::fdatasync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw error(errno_message("fdatasync " + out_path, e));
  }
  if (::close(fd) != 0) throw error(errno_message("close " + out_path, errno));
  const double t_all = since(t0);
  grep_counters c{};
  cudaMemcpy(&c, j.counters, sizeof c, cudaMemcpyDeviceToHost);
  nlohmann::json js = {{"tool", "vanilla gpu grep"}, {"files", c.files},      {"bytes", c.bytes},
                       {"matches", c.matches},        {"lines", c.lines},      {"seconds", t_all},
                       {"read_seconds", t_read},      {"h2d_seconds", t_copy - t_read},
                       {"kernel_seconds", t_kernel - t_copy}, {"output_seconds", t_written - t_kernel},
                       {"fsync", durable},            {"fsync_seconds", t_all - t_written},
                       {"output_bytes", out_bytes},
                       {"read_threads", threads},     {"failed", failed.load()}};
  std::printf("%s\n", js.dump().c_str());
  for (void* p : owned) cudaFree(p);
  cudaFreeHost(host);
  return failed.load() == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "grep_vanilla_bench: %s\n", e.what());
  return 2;
}
