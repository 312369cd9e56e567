// The file API from GPU kernels (files/gfs_ref.hpp): warps open, read and
// close many files under eviction and compare every byte with the host's
// pattern; warps write files of their own that the host then reads back
// exactly; one warp walks a directory tree; a closed or forged handle gets
// EBADF; paths outside the root get EACCES.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"

using namespace deepwell;
namespace fs = std::filesystem;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

DW_HD inline uint8_t file_byte(uint32_t file, uint64_t off) {
  uint64_t x = (uint64_t(file) << 40 | off) * 0x9E3779B97F4A7C15ull;
  return uint8_t(x >> 56);
}
DW_HD inline uint64_t file_size(uint32_t i) { return 1000 + uint64_t(i) * 7919 % 300000; }

struct tree {
  fs::path root;
  tree() {
    std::string t = (fs::temp_directory_path() / "deepwell-gpu-files-XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    root = t;
  }
  ~tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

struct rig {
  controller ctl;
  std::shared_ptr<page_cache> cache;
  std::shared_ptr<file_system> files;
  rig(const tree& t, uint64_t pages, file_system_options o = {}, uint64_t timeout_s = 20) {
    cache_config c;
    c.page_size = 4096;
    c.capacity_bytes = pages * 4096;
    c.timeout_ns = timeout_s * 1000000000ull;
    cache = make_gpu_page_cache(ctl, c);
    o.root = t.root.string();
    files = make_gpu_file_system(cache, o);
  }
};

// The file "big" under the root, `size` bytes of file 77's pattern; just
// written, so in the page cache (a direct-tier candidate when large).
void write_big_file(const tree& t, uint64_t size) {
  std::vector<uint8_t> b(size);
  for (uint64_t k = 0; k < size; ++k) b[k] = file_byte(77, k);
  std::ofstream(t.root / "big", std::ios::binary).write(reinterpret_cast<char*>(b.data()), b.size());
}

struct tallies {
  unsigned long long wrong, failed, bytes;
  int last_err;
};

__device__ void fail(tallies* t, int err) {
  atomicAdd(&t->failed, 1ull);
  t->last_err = err;
}

// Warp k reads files k, k + warps, ...: the whole file in 64 KiB pieces into
// its slice of `buf`, then checks every byte.
__global__ void read_files(gfs_ref g, const char* names, uint32_t nfiles, uint8_t* buf, tallies* t) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  uint8_t* mine = buf + uint64_t(warp) * 65536;
  gpu_warp w;
  for (uint32_t i = warp; i < nfiles; i += warps) {
    const gfile f = g.gopen(w, names + uint64_t(i) * 32, g_rdonly);
    if (!f.ok()) {
      if (w.lane() == 0) fail(t, f.err);
      continue;
    }
    for (uint64_t off = 0;; off += 65536) {
      const int64_t n = g.gread(w, f, off, mine, 65536);
      if (n < 0 && w.lane() == 0) fail(t, int(-n));
      if (n <= 0) break;
      __syncwarp();
      unsigned long long bad = 0;
      for (int64_t k = w.lane(); k < n; k += 32) bad += mine[k] != file_byte(i, off + uint64_t(k));
      if (bad) atomicAdd(&t->wrong, bad);
      if (w.lane() == 0) atomicAdd(&t->bytes, (unsigned long long)n);
      __syncwarp();
    }
    const int c = g.gclose(w, f);
    if (c && w.lane() == 0) fail(t, -c);
  }
}

// Warp k writes out/k: its bytes in 3000-byte pieces from a shared buffer.
__global__ void write_files(gfs_ref g, const char* names, uint32_t nfiles, uint8_t* buf, tallies* t, bool async) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (warp >= nfiles) return;
  gpu_warp w;
  uint8_t* mine = buf + uint64_t(warp) * 65536;
  const uint64_t size = file_size(warp) % 65536;
  for (uint64_t k = w.lane(); k < size; k += 32) mine[k] = file_byte(1000 + warp, k);
  __syncwarp();
  const gfile f = g.gopen(w, names + uint64_t(warp) * 32, g_rdwr | g_creat);
  if (!f.ok()) {
    if (w.lane() == 0) fail(t, f.err);
    return;
  }
  for (uint64_t off = 0; off < size; off += 3000) {
    const uint64_t n = size - off < 3000 ? size - off : 3000;
    if (g.gwrite(w, f, off, mine + off, n) != int64_t(n) && w.lane() == 0) fail(t, 5);
  }
  const int c = async ? g.gclose_async(w, f) : g.gclose(w, f);
  if (c && w.lane() == 0) fail(t, -c);
}

// Write-once output (g_gwronce): one warp opens it, every warp of the next
// kernel writes interleaved 100-byte pieces, one warp closes it.
__global__ void open_write_once(gfs_ref g, const char* name, gfile* out) {
  gpu_warp w;
  const gfile f = g.gopen(w, name, g_wronly | g_gwronce);
  if (w.lane() == 0) *out = f;
}
__global__ void write_pieces(gfs_ref g, gfile f, uint64_t size, uint8_t* buf, tallies* t) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  gpu_warp w;
  uint8_t* mine = buf + uint64_t(warp) * 128;
  for (uint64_t off = uint64_t(warp) * 100; off < size; off += uint64_t(warps) * 100) {
    const uint64_t n = size - off < 100 ? size - off : 100;
    for (uint64_t k = w.lane(); k < n; k += 32) mine[k] = file_byte(7, off + k);
    __syncwarp();
    if (g.gwrite(w, f, off, mine, n) != int64_t(n) && w.lane() == 0) fail(t, 5);
    __syncwarp();
  }
}
__global__ void close_file(gfs_ref g, gfile f, tallies* t) {
  gpu_warp w;
  const int c = g.gclose(w, f);
  if (c && w.lane() == 0) fail(t, -c);
}

// Every warp opens file `name` (file_byte's file 77), reads 64 KiB chunks
// warp, warp + warps, ... and checks every byte, then closes it.
__global__ void read_chunks(gfs_ref g, const char* name, uint64_t size, uint8_t* buf, tallies* t) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  uint8_t* mine = buf + uint64_t(warp) * 65536;
  gpu_warp w;
  const gfile f = g.gopen(w, name, g_rdonly);
  if (!f.ok()) {
    if (w.lane() == 0) fail(t, f.err);
    return;
  }
  for (uint64_t off = uint64_t(warp) * 65536; off < size; off += uint64_t(warps) * 65536) {
    const int64_t n = g.gread(w, f, off, mine, 65536);
    const int64_t want = size - off < 65536 ? int64_t(size - off) : 65536;
    if (n != want) {
      if (w.lane() == 0) fail(t, n < 0 ? int(-n) : 5);
      continue;
    }
    __syncwarp();
    unsigned long long bad = 0;
    for (int64_t k = w.lane(); k < n; k += 32) bad += mine[k] != file_byte(77, off + uint64_t(k));
    if (bad) atomicAdd(&t->wrong, bad);
    if (w.lane() == 0) atomicAdd(&t->bytes, (unsigned long long)n);
    __syncwarp();
  }
  const int c = g.gclose(w, f);
  if (c && w.lane() == 0) fail(t, -c);
}

// One warp opens `name` and closes it: a large resident file's mapping is
// registered at the open and kept after the close, until sync().
__global__ void open_and_close(gfs_ref g, const char* name, tallies* t) {
  gpu_warp w;
  const gfile f = g.gopen(w, name, g_rdonly);
  if (!f.ok()) {
    if (w.lane() == 0) fail(t, f.err);
    return;
  }
  const int c = g.gclose(w, f);
  if (c && w.lane() == 0) fail(t, -c);
}

// One warp lists the root: how many regular files.
__global__ void count_entries(gfs_ref g, unsigned* files, tallies* t) {
  gpu_warp w;
  __shared__ gdirent e;
  const gdir d = g.gopendir(w, "");
  if (!d.ok()) {
    if (w.lane() == 0) fail(t, d.err);
    return;
  }
  int n;
  while ((n = g.greaddir(w, d, &e)) == 1)
    if (w.lane() == 0 && e.type == 8) ++*files;
  if (n < 0 && w.lane() == 0) fail(t, -n);
  g.gclosedir(w, d);
}

__global__ void bad_handles(gfs_ref g, int* out) {
  gpu_warp w;
  __shared__ uint8_t b[16];
  uint64_t on_my_stack = 0;
  out[0] = g.gopen(w, "../outside", g_rdonly).err;
  out[1] = g.gopen(w, "missing", g_rdonly).err;
  gfile forged;
  forged.err = 0;
  forged.fd = 3;
  forged.window = 12345;
  forged.tag = 12345;
  out[2] = int(g.gread(w, forged, 0, b, 16));
  const gfile f = g.gopen(w, "f0", g_rdonly);
  out[3] = f.err;
  // A whole warp reading into one thread's stack: refused, not scattered.
  out[6] = int(g.gread(w, f, 0, &on_my_stack, 8));
  out[7] = int(g.gread(w, f, 0, b, 16));  // the same file into shared memory
  out[4] = g.gclose(w, f);
  out[5] = int(g.gread(w, f, 0, b, 16));
}

std::vector<char> name_table(const std::string& prefix, uint32_t n) {
  std::vector<char> names(uint64_t(n) * 32, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const std::string s = prefix + std::to_string(i);
    std::memcpy(names.data() + uint64_t(i) * 32, s.c_str(), s.size() + 1);
  }
  return names;
}

template <class T>
T* device_copy(const std::vector<T>& v) {
  T* d = nullptr;
  if (cudaMalloc(&d, v.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

}  // namespace

TEST(GpuFiles, WarpsReadManyFilesUnderEvictionByteForByte) {
  tree t;
  constexpr uint32_t nfiles = 200;
  uint64_t total = 0;
  for (uint32_t i = 0; i < nfiles; ++i) {
    std::vector<uint8_t> b(file_size(i));
    for (uint64_t k = 0; k < b.size(); ++k) b[k] = file_byte(i, k);
    std::ofstream(t.root / ("f" + std::to_string(i)), std::ios::binary).write(reinterpret_cast<char*>(b.data()), b.size());
    total += b.size();
  }
  rig r(t, 4096);  // 16 MiB of cache for about 30 MiB of files
  check_launch(*r.cache, read_files, 32, 128);
  char* names = device_copy(name_table("f", nfiles));
  uint8_t* buf = nullptr;
  tallies* tl = nullptr;
  CUDA_OK(cudaMalloc(&buf, 32ull * 4 * 65536));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reopens unchanged files: windows kept
    std::memset(tl, 0, sizeof *tl);
    read_files<<<32, 128>>>(r.files->ref(), names, nfiles, buf, tl);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(tl->failed, 0u) << "last errno " << tl->last_err;
    EXPECT_EQ(tl->wrong, 0u);
    EXPECT_EQ(tl->bytes, total);
  }
  const auto st = r.files->stats();
  EXPECT_EQ(st.open_files, 0u);
  EXPECT_EQ(st.files_opened, 2u * nfiles);
  EXPECT_EQ(st.windows_reused, uint64_t(nfiles));
  cudaFree(names);
  cudaFree(buf);
  cudaFree(tl);
}

// A large file in the page cache, read by 128 warps at once through the
// direct tier (each miss copied from the file's registered mapping, no
// controller round trip) under eviction, byte for byte. The warps open it
// together: one registration, whichever open made it. A second pass
// reopens it (window and registration kept); sync() unpins it, and a third
// pass registers it again.
TEST(GpuFiles, WarpsReadALargeResidentFileThroughTheDirectTier) {
  tree t;
  const uint64_t size = (48ull << 20) + 1234;  // a partial last page
  write_big_file(t, size);  // just written: in the page cache
  rig r(t, 4096);  // 16 MiB of cache: the file evicts itself
  check_launch(*r.cache, read_chunks, 32, 128);
  char* name = device_copy(std::vector<char>{'b', 'i', 'g', 0});
  uint8_t* buf = nullptr;
  tallies* tl = nullptr;
  CUDA_OK(cudaMalloc(&buf, 32ull * 4 * 65536));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 2) {
      r.files->sync();
      EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u) << "sync() unpins files no longer open";
    }
    std::memset(tl, 0, sizeof *tl);
    r.cache->reset_stats();
    read_chunks<<<32, 128>>>(r.files->ref(), name, size, buf, tl);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(tl->failed, 0u) << "pass " << pass << ", last errno " << tl->last_err;
    EXPECT_EQ(tl->wrong, 0u) << "pass " << pass;
    EXPECT_EQ(tl->bytes, size) << "pass " << pass;
    const cache_stats cs = r.cache->stats();
    EXPECT_GT(cs.direct_fills, 0u) << "pass " << pass;
    // Reopened with its registration kept, every miss comes from the
    // mapping. Where the tier is made (passes 0 and 2), warps that opened
    // the file while another open registered it read their first pages
    // through the controller.
    if (pass == 1) EXPECT_EQ(cs.direct_fills, cs.misses) << "every miss from the mapping";
    const auto st = r.files->stats();
    EXPECT_EQ(st.direct_tier_opens, st.files_opened) << "pass " << pass;
    EXPECT_EQ(st.direct_tier_bytes, size) << "pass " << pass << ": kept after the close until sync()";
  }
  r.files->sync();
  EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u);
  cudaFree(name);
  cudaFree(buf);
  cudaFree(tl);
}

// The same reads with the file's mapping registered before the reading
// kernel starts (one launch opens and closes the file, the next reads it),
// so that compute-sanitizer memcheck, which scripts/gpu-check runs over this
// test, checks that every direct-tier read stays inside the mapping.
// (memcheck does not see memory registered while a kernel already runs: it
// flags that kernel's every read of it and stops the kernel, which is why
// the test above cannot run under it; bench/memcheck_registration_probe.cu.)
// Eight blocks and a 120 s deadline: under memcheck, 32 blocks' warps ran
// past the usual 20 s deadline (0.5 s without it).
TEST(GpuFiles, DirectTierReadsStayInsideAMappingRegisteredBeforeTheLaunch) {
  tree t;
  const uint64_t size = (12ull << 20) + 1234;  // a partial last page
  write_big_file(t, size);
  rig r(t, 1024, {}, 120);  // 4 MiB of cache: the file evicts itself
  char* name = device_copy(std::vector<char>{'b', 'i', 'g', 0});
  uint8_t* buf = nullptr;
  tallies* tl = nullptr;
  CUDA_OK(cudaMalloc(&buf, 8ull * 4 * 65536));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  std::memset(tl, 0, sizeof *tl);
  open_and_close<<<1, 32>>>(r.files->ref(), name, tl);
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(tl->failed, 0u) << "last errno " << tl->last_err;
  ASSERT_EQ(r.files->stats().direct_tier_bytes, size) << "the mapping is registered and kept after the close";
  r.cache->reset_stats();
  read_chunks<<<8, 128>>>(r.files->ref(), name, size, buf, tl);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(tl->failed, 0u) << "last errno " << tl->last_err;
  EXPECT_EQ(tl->wrong, 0u);
  EXPECT_EQ(tl->bytes, size);
  const cache_stats cs = r.cache->stats();
  EXPECT_GT(cs.misses, 0u);
  EXPECT_EQ(cs.direct_fills, cs.misses) << "every miss from the mapping";
  r.files->sync();
  EXPECT_EQ(r.files->stats().direct_tier_bytes, 0u);
  cudaFree(name);
  cudaFree(buf);
  cudaFree(tl);
}

class GpuFilesClose : public ::testing::TestWithParam<bool> {};

// gclose, and gclose_async (the host finishes the closes; sync() waits).
TEST_P(GpuFilesClose, WarpsWriteFilesTheHostReadsBackExactly) {
  const bool async = GetParam();
  tree t;
  fs::create_directories(t.root / "out");
  constexpr uint32_t nfiles = 64;
  rig r(t, 4096);
  char* names = device_copy(name_table("out/", nfiles));
  uint8_t* buf = nullptr;
  tallies* tl = nullptr;
  CUDA_OK(cudaMalloc(&buf, uint64_t(nfiles) * 65536));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  std::memset(tl, 0, sizeof *tl);
  write_files<<<nfiles / 4, 128>>>(r.files->ref(), names, nfiles, buf, tl, async);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(tl->failed, 0u) << "last errno " << tl->last_err;
  r.files->sync();
  EXPECT_EQ(r.files->stats().background_closes, async ? uint64_t(nfiles) : 0u);
  EXPECT_EQ(r.files->stats().open_files, 0u);
  for (uint32_t i = 0; i < nfiles; ++i) {
    std::ifstream in(t.root / "out" / std::to_string(i), std::ios::binary);
    const std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), {});
    const uint64_t size = file_size(i) % 65536;
    ASSERT_EQ(got.size(), size) << i;
    for (uint64_t k = 0; k < size; ++k) ASSERT_EQ(got[k], file_byte(1000 + i, k)) << i << " at " << k;
  }
  cudaFree(names);
  cudaFree(buf);
  cudaFree(tl);
}

INSTANTIATE_TEST_SUITE_P(Close, GpuFilesClose, ::testing::Values(false, true),
                         [](const auto& i) { return std::string(i.param ? "Async" : "Waiting"); });

// 8 warps write a 4 MiB write-once file through a 1 MiB cache: pages are
// written back, evicted and written again, and the host merges them.
TEST(GpuFiles, WarpsWriteAWriteOnceFileNeverReadingIt) {
  tree t;
  { std::ofstream(t.root / "once") << "old bytes, emptied at open"; }
  rig r(t, 256);
  check_launch(*r.cache, write_pieces, 2, 128);
  char* name = device_copy(std::vector<char>{'o', 'n', 'c', 'e', 0});
  gfile* f = nullptr;
  uint8_t* buf = nullptr;
  tallies* tl = nullptr;
  CUDA_OK(cudaMallocManaged(&f, sizeof(gfile)));
  CUDA_OK(cudaMalloc(&buf, 2ull * 4 * 128));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  std::memset(tl, 0, sizeof *tl);
  const uint64_t size = (4ull << 20) + 77;
  open_write_once<<<1, 32>>>(r.files->ref(), name, f);
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(f->ok()) << f->err;
  const uint64_t read_before = r.cache->stats().bytes_read;
  write_pieces<<<2, 128>>>(r.files->ref(), *f, size, buf, tl);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(r.cache->stats().bytes_read, read_before) << "no page of a write-once file is read";
  close_file<<<1, 32>>>(r.files->ref(), *f, tl);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(tl->failed, 0u) << "last errno " << tl->last_err;
  std::ifstream in(t.root / "once", std::ios::binary);
  const std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(got.size(), size);
  for (uint64_t k = 0; k < size; ++k) ASSERT_EQ(got[k], file_byte(7, k)) << "at " << k;
  cudaFree(name);
  cudaFree(f);
  cudaFree(buf);
  cudaFree(tl);
}

TEST(GpuFiles, AWarpListsADirectoryAndBadHandlesGetErrors) {
  tree t;
  for (int i = 0; i < 37; ++i) std::ofstream(t.root / ("f" + std::to_string(i))) << i;
  fs::create_directories(t.root / "sub");
  rig r(t, 1024);
  unsigned* n = nullptr;
  tallies* tl = nullptr;
  int* out = nullptr;
  CUDA_OK(cudaMallocManaged(&n, sizeof(unsigned)));
  CUDA_OK(cudaMallocManaged(&tl, sizeof(tallies)));
  CUDA_OK(cudaMallocManaged(&out, 8 * sizeof(int)));
  *n = 0;
  std::memset(tl, 0, sizeof *tl);
  count_entries<<<1, 32>>>(r.files->ref(), n, tl);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(tl->failed, 0u) << tl->last_err;
  EXPECT_EQ(*n, 37u);
  bad_handles<<<1, 32>>>(r.files->ref(), out);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(out[0], EACCES);
  EXPECT_EQ(out[1], ENOENT);
  EXPECT_EQ(out[2], -EBADF);
  EXPECT_EQ(out[3], 0);
  EXPECT_EQ(out[4], 0);
  EXPECT_EQ(out[5], -EBADF);
  EXPECT_EQ(out[6], -EFAULT);
  EXPECT_EQ(out[7], 1) << "f0 holds one byte";
  cudaFree(n);
  cudaFree(tl);
  cudaFree(out);
}
