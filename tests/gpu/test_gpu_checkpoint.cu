// Checkpoints of device buffers through a GPU page cache
// (durable/checkpoint.hpp, src/durable/checkpoint_kernels.cu): the GPU's unit
// hashes equal the host's, buffers come back byte for byte, incremental
// saves write only the changed pages, a host cache serves device buffers
// too, a corrupt unit is named, and power cuts at random requests on a disk
// with a volatile write cache (crash_target.hpp) leave the last checkpoint
// whose save returned, or the one in progress, whole.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/checkpoint.hpp"
#include "deepwell/targets/crash_target.hpp"

using namespace deepwell;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

constexpr uint64_t R = 64 * 1024;

struct rig {
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  uint32_t ns = 0;
  std::shared_ptr<page_cache> cache;
  bool gpu_cache;
  uint32_t page;
  explicit rig(uint64_t bytes, bool gpu = true, uint32_t page_size = 4096)
      : disk(make_volatile_cache_target(bytes)), gpu_cache(gpu), page(page_size) {
    up();
  }
  ~rig() { down(); }
  void up() {
    controller_config cc;
    cc.pollers = 1;
    ctl = std::make_unique<controller>(cc);
    ns = ctl->add_namespace({disk, 512, false});
    cache_config c;
    c.page_size = page;
    c.capacity_bytes = 512ull * page;
    c.queue_pairs = 8;
    c.timeout_ns = 5ull * 1000000000ull;
    cache = gpu_cache ? make_gpu_page_cache(*ctl, c) : make_host_page_cache(*ctl, c);
  }
  void down() {
    cache.reset();
    ctl.reset();
  }
};

checkpoint_options gpu_opts() {
  checkpoint_options o;
  o.gpu = gpu_checkpoint_support();
  o.threads = 4;
  return o;
}

// Device buffers of a manifest, with host copies of what they hold.
struct device_state {
  checkpoint_manifest m;
  std::vector<void*> dev;
  std::vector<std::vector<uint8_t>> host;
  explicit device_state(checkpoint_manifest man) : m(std::move(man)) {
    for (const auto& t : m) {
      void* p = nullptr;
      if (t.bytes) cudaMalloc(&p, t.bytes);
      dev.push_back(p);
      host.emplace_back(t.bytes);
    }
  }
  ~device_state() {
    for (void* p : dev) cudaFree(p);
  }
  device_state(const device_state&) = delete;
  void upload() {
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i].bytes) cudaMemcpy(dev[i], host[i].data(), m[i].bytes, cudaMemcpyHostToDevice);
  }
  std::vector<std::vector<uint8_t>> download() const {
    std::vector<std::vector<uint8_t>> out;
    for (size_t i = 0; i < m.size(); ++i) {
      out.emplace_back(m[i].bytes);
      if (m[i].bytes) cudaMemcpy(out.back().data(), dev[i], m[i].bytes, cudaMemcpyDeviceToHost);
    }
    return out;
  }
  checkpoint_buffers buffers() const {
    checkpoint_buffers b;
    for (size_t i = 0; i < m.size(); ++i) b[m[i].name] = device_buffer(dev[i], m[i].bytes);
    return b;
  }
  void randomize(std::mt19937_64& rng, double p) {  // each 4 KiB unit changed with probability p
    for (auto& h : host)
      for (uint64_t u = 0; u < h.size(); u += 4096)
        if (double(rng() >> 11) * 0x1.0p-53 < p)
          for (uint64_t k = u; k < std::min<uint64_t>(h.size(), u + 4096); k += 1 + rng() % 97) h[k] = uint8_t(rng());
    upload();
  }
  void clear_device() {
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i].bytes) cudaMemset(dev[i], 0xEE, m[i].bytes);
  }
};

checkpoint_manifest manifest_of(uint64_t big) {
  return {{"weight", big, "float32", {int64_t(big / 4)}},
          {"bias", 4000, "float32", {1000}},
          {"step", 8, "int64", {}},
          {"empty", 0, "float16", {0}},
          {"odd", 3 * 4096 + 77, "uint8", {3 * 4096 + 77}}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(GpuCheckpoint, DeviceHashesEqualTheHosts) {
  auto g = gpu_checkpoint_support();
  std::mt19937_64 rng(1);
  std::vector<uint8_t> h(300000 + 64);
  for (auto& b : h) b = uint8_t(rng());
  uint8_t* d = nullptr;
  CUDA_OK(cudaMalloc(&d, h.size()));
  CUDA_OK(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
  for (uint32_t unit : {512u, 4096u, 65536u})
    for (uint64_t bytes : {uint64_t(1), uint64_t(15), uint64_t(16), uint64_t(17), uint64_t(511), uint64_t(4096),
                           uint64_t(70001), uint64_t(300000)})
      for (uint64_t misalign : {uint64_t(0), uint64_t(3), uint64_t(8)}) {
        const uint64_t units = (bytes + unit - 1) / unit;
        std::vector<uint64_t> got(units);
        g->hash(d + misalign, bytes, unit, got.data());
        for (uint64_t u = 0; u < units; ++u)
          ASSERT_EQ(got[u], checkpoint_hash::of(h.data() + misalign + u * unit, std::min<uint64_t>(unit, bytes - u * unit)))
              << "unit " << unit << ", bytes " << bytes << ", misaligned by " << misalign << ", unit " << u;
      }
  cudaFree(d);
}

TEST(GpuCheckpoint, DeviceBuffersComeBackByteForByte) {
  for (uint32_t page : {4096u, 65536u}) {
    const auto m = manifest_of(3 << 20);
    rig r(checkpoint_store::bytes_needed(m, page) + R, true, page);
    std::mt19937_64 rng(page);
    device_state s(m);
    s.randomize(rng, 1.0);
    auto st = checkpoint_store::create(r.cache, r.ns, m, gpu_opts());
    EXPECT_EQ(st->save(s.buffers()).generation, 1u);
    s.clear_device();
    st->load(s.buffers());
    EXPECT_EQ(s.download(), s.host) << "page " << page;
    // A new process: new controller and cache on what is durable.
    st.reset();
    r.down();
    r.disk->cut({});
    r.disk->revive();
    r.up();
    auto again = checkpoint_store::open(r.cache, r.ns, m, gpu_opts());
    EXPECT_EQ(again->generation(), 1u);
    s.clear_device();
    again->load(s.buffers(), {.verify_first = true});
    EXPECT_EQ(s.download(), s.host);
    // Host buffers through the GPU cache too (mixed).
    std::vector<uint8_t> step(8, 0);
    auto b = s.buffers();
    b["step"] = host_buffer(step.data(), 8);
    s.clear_device();
    again->load(b);
    EXPECT_EQ(step, s.host[2]);
  }
}

TEST(GpuCheckpoint, IncrementalSavesWriteOnlyChangedPages) {
  const auto m = manifest_of(1 << 20);
  rig r(checkpoint_store::bytes_needed(m, 4096) + R);
  std::mt19937_64 rng(2);
  device_state s(m);
  s.randomize(rng, 1.0);
  auto st = checkpoint_store::create(r.cache, r.ns, m, gpu_opts());
  st->save(s.buffers());
  st->save(s.buffers());
  // Change two bytes of weight (pages 10 and 200) on the device.
  CUDA_OK(cudaMemset(static_cast<uint8_t*>(s.dev[0]) + 10 * 4096 + 5, 0x5A, 1));
  CUDA_OK(cudaMemset(static_cast<uint8_t*>(s.dev[0]) + 200 * 4096 + 9, 0xA5, 1));
  s.host[0][10 * 4096 + 5] = 0x5A;
  s.host[0][200 * 4096 + 9] = 0xA5;
  const uint64_t writes_before = r.ctl->total_counters().writes;
  const save_report rep = st->save(s.buffers());
  EXPECT_TRUE(rep.incremental);
  EXPECT_EQ(rep.units_written, 2u);
  EXPECT_EQ(r.ctl->total_counters().writes - writes_before, 2u + 1 + 2)
      << "two data pages, the table's page, the superblock copy blanked and written";
  s.clear_device();
  st->load(s.buffers());
  EXPECT_EQ(s.download(), s.host);
}

TEST(GpuCheckpoint, AHostCacheServesDeviceBuffers) {
  const auto m = manifest_of(1 << 20);
  rig r(checkpoint_store::bytes_needed(m, 4096) + R, false);
  std::mt19937_64 rng(3);
  device_state s(m);
  s.randomize(rng, 1.0);
  auto st = checkpoint_store::create(r.cache, r.ns, m, gpu_opts());
  st->save(s.buffers());
  s.randomize(rng, 0.1);
  st->save(s.buffers());
  s.clear_device();
  st->load(s.buffers());
  EXPECT_EQ(s.download(), s.host);
}

TEST(GpuCheckpoint, ACorruptUnitIsNamed) {
  const auto m = manifest_of(1 << 20);
  rig r(checkpoint_store::bytes_needed(m, 4096) + R);
  std::mt19937_64 rng(4);
  device_state s(m);
  s.randomize(rng, 1.0);
  {
    auto st = checkpoint_store::create(r.cache, r.ns, m, gpu_opts());
    st->save(s.buffers());
  }
  r.down();
  auto img = r.disk->durable_image();
  // generation 1 is in slot 1; flip a byte of weight's unit 7 there
  const uint8_t* want = s.host[0].data() + 7 * 4096;
  uint64_t at = 0;
  for (uint64_t i = 0; i + 64 <= img.size(); ++i)
    if (std::memcmp(img.data() + i, want, 64) == 0) {
      at = i;
      break;
    }
  ASSERT_NE(at, 0u);
  img[at + 1] ^= 1;
  r.disk = make_volatile_cache_target(img);
  r.up();
  auto st = checkpoint_store::open(r.cache, r.ns, m, gpu_opts());
  const std::string e = error_of([&] { st->load(s.buffers()); });
  EXPECT_NE(e.find("buffer 'weight': unit 7 (bytes [28672, 32768)"), std::string::npos) << e;
}

// Power cuts at random requests during saves of changing device buffers.
TEST(GpuCheckpoint, PowerCutsLeaveOneWholeCheckpoint) {
  const auto m = manifest_of(96 * 1024);
  const uint64_t disk_bytes = checkpoint_store::bytes_needed(m, 4096) + R;
  constexpr int gens = 4;
  auto run = [&](uint64_t cut_at, power_cut how, uint64_t seed, uint64_t* requests) {
    rig r(disk_bytes);
    std::mt19937_64 rng(seed);
    device_state s(m);
    std::vector<std::vector<std::vector<uint8_t>>> data;
    s.randomize(rng, 1.0);
    data.push_back(s.host);
    if (cut_at) r.disk->cut_at_request(cut_at, how);
    uint64_t returned = 0, attempted = 0;
    {
      std::unique_ptr<checkpoint_store> st;
      try {
        st = checkpoint_store::create(r.cache, r.ns, m, gpu_opts());
        for (int g = 1; g <= gens; ++g) {
          s.randomize(rng, g % 2 ? 0.3 : 1.0);
          data.push_back(s.host);
          attempted = g;
          st->save(s.buffers());
          returned = g;
        }
        attempted = 0;
      } catch (const error& e) {
        ASSERT_TRUE(r.disk->dead()) << e.what();
      }
    }
    if (requests) *requests = r.disk->requests();
    r.down();
    r.disk->cut(how);
    r.disk->revive();
    r.up();
    std::unique_ptr<checkpoint_store> st;
    try {
      st = checkpoint_store::open(r.cache, r.ns, m, gpu_opts());
    } catch (const error& e) {
      ASSERT_EQ(returned, 0u) << e.what();
      return;
    }
    const uint64_t g = st->generation();
    if (g == 0) {
      ASSERT_EQ(returned, 0u);
      return;
    }
    ASSERT_TRUE(g == returned || (attempted && g == attempted)) << g << " " << returned << " " << attempted;
    s.clear_device();
    const std::string e = error_of([&] { st->load(s.buffers()); });
    ASSERT_EQ(e, "(no error)");
    ASSERT_TRUE(s.download() == data[g]) << "generation " << g << " loaded other bytes";
    // and it goes on
    s.randomize(rng, 0.3);
    st->save(s.buffers());
    const auto want = s.host;
    s.clear_device();
    st->load(s.buffers());
    ASSERT_TRUE(s.download() == want);
  };
  uint64_t total = 0;
  run(0, {}, 1, &total);
  ASSERT_GT(total, 10u);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 60; ++i) {
    power_cut how;
    how.mode = power_cut::mode_t(i % 3);
    how.seed = rng();
    how.keep_fraction = double(rng() % 5) / 4;
    const uint64_t at = 1 + rng() % (total + 2);
    SCOPED_TRACE("cut " + std::to_string(i) + " at request " + std::to_string(at) + " of about " + std::to_string(total));
    run(at, how, 100 + i, nullptr);
    if (::testing::Test::HasFatalFailure()) return;
  }
}
