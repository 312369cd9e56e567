// NVMe passthrough (deepwell/targets/nvme_passthrough.hpp) against real NVMe
// namespaces: built static and run in a QEMU guest with emulated drives by
// tests/qemu/run, which names them in the environment:
//   DEEPWELL_NVME_RW  a writable namespace's /dev/ngXnY
//   DEEPWELL_NVME_RO  a read-only namespace's /dev/ngXnY, filled with
//                     test::fill_pattern(seed DEEPWELL_NVME_RO_SEED)
//   DEEPWELL_NVME_POLL=1  the driver was loaded with poll queues
//   DEEPWELL_NVME_REQUIRED=1  a missing device fails instead of skipping
// Everything goes through the real controller with CPU clients and is
// checked byte for byte, at the end also through the block device with
// O_DIRECT. `--write-pattern FILE BYTES SEED` writes the read-only drive's
// image (the runner calls it on the host).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "../common/pattern.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/protocol/nvme.hpp"
#include "deepwell/targets/nvme_passthrough.hpp"
#include "targets/nvme_ring.hpp"

using namespace deepwell;

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool required() { return env("DEEPWELL_NVME_REQUIRED") != nullptr; }

#define NEED_DEVICE(var, name)                                           \
  const char* var = env(name);                                           \
  if (!var) {                                                            \
    if (required()) FAIL() << name << " is not set";                     \
    GTEST_SKIP() << name << " is not set (tests/qemu/run sets it)";      \
  }

struct aligned_buffer {
  uint8_t* p;
  size_t n;
  explicit aligned_buffer(size_t bytes) : p(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes))), n(bytes) {
    std::memset(p, 0, bytes);
  }
  ~aligned_buffer() { std::free(p); }
};

// The whole block device, read with O_DIRECT: a path that shares nothing
// with passthrough but the drive.
std::vector<uint8_t> read_block_device(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  aligned_buffer b(bytes);
  uint64_t done = 0;
  while (fd >= 0 && done < bytes) {
    const ssize_t r = pread(fd, b.p + done, bytes - done, off_t(done));
    if (r <= 0) break;
    done += uint64_t(r);
  }
  EXPECT_EQ(done, bytes);
  if (fd >= 0) ::close(fd);
  return std::vector<uint8_t>(b.p, b.p + bytes);
}

uint64_t block_device_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  uint64_t bytes = 0;
  if (fd >= 0) {
    if (ioctl(fd, BLKGETSIZE64, &bytes) != 0) bytes = 0;
    ::close(fd);
  }
  return bytes;
}

// A target's request run to its end on an engine of the test's own.
int64_t run(io_engine& io, const std::function<void(io_callback)>& start) {
  struct box {
    bool done = false;
    int64_t r = 0;
  } b;
  start({[](void* c, int64_t r) {
           static_cast<box*>(c)->done = true;
           static_cast<box*>(c)->r = r;
         },
         &b});
  for (int i = 0; !b.done && i < 100000; ++i) {
    io.submit();
    io.wait(1'000'000);
    io.reap();
  }
  EXPECT_TRUE(b.done) << "the request never completed";
  return b.r;
}

struct mode {
  const char* name;
  nvme_options::polling poll;
  io_backend backend;
};

class Passthrough : public testing::TestWithParam<mode> {};

}  // namespace

TEST(Namespace, SysfsAgreesWithTheDevice) {
  NEED_DEVICE(rw, "DEEPWELL_NVME_RW");
  const nvme_namespace_info ns = nvme_namespace(rw);
  EXPECT_EQ(ns.char_path, rw);
  EXPECT_GE(ns.nsid, 1u);
  EXPECT_GE(ns.lba_bytes, 512u);
  EXPECT_GT(ns.lbas, 0u);
  EXPECT_FALSE(ns.read_only);
  EXPECT_EQ(ns.lbas * ns.lba_bytes, block_device_bytes(ns.block_path));
  EXPECT_GE(ns.max_transfer, ns.lba_bytes);
  if (env("DEEPWELL_NVME_POLL")) EXPECT_TRUE(ns.poll_queues) << "the driver was loaded with poll queues";
  auto t = open_nvme_passthrough(rw, {.writable = true});
  EXPECT_EQ(t->size(), ns.lbas * ns.lba_bytes);
  EXPECT_EQ(t->io_alignment(), ns.lba_bytes);
  const std::string d = t->describe();
  EXPECT_NE(d.find("nvme passthrough " + ns.char_path), std::string::npos) << d;
  if (env("DEEPWELL_NVME_POLL")) EXPECT_NE(d.find("IOPOLL"), std::string::npos) << d;
}

TEST(Namespace, NotAnNvmeNameIsRefusedByName) {
  try {
    nvme_namespace("/dev/sda");
    FAIL() << "no error";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/sda: not an NVMe namespace"), std::string::npos) << e.what();
  }
}

TEST_P(Passthrough, RandomReadsAndWritesFromThreadsMatchByteForByte) {
  NEED_DEVICE(rw, "DEEPWELL_NVME_RW");
  const mode m = GetParam();
  auto t = open_nvme_passthrough(rw, {.writable = true, .poll = m.poll});
  const nvme_namespace_info ns = nvme_namespace(rw);
  if (m.poll == nvme_options::polling::on)
    EXPECT_NE(t->describe().find("IOPOLL"), std::string::npos) << t->describe();
  else
    EXPECT_NE(t->describe().find("interrupt completions"), std::string::npos) << t->describe();
  const uint32_t block = 4096;
  const uint64_t bytes = t->size() / block * block;
  std::vector<uint8_t> ref = read_block_device(ns.block_path, bytes);

  controller_config cfg;
  cfg.pollers = 2;
  cfg.backend = m.backend;
  controller ctl(cfg);
  const uint32_t nsid = ctl.add_namespace({t, block, false});
  // Slots larger than one NVMe command moves: the biggest requests are split.
  const uint32_t slot = std::max<uint32_t>(2 * ns.max_transfer, 64 * 1024);
  const unsigned threads = 4;
  const uint64_t region = bytes / threads / block * block;  // each thread's own blocks
  std::vector<std::thread> pool;
  std::atomic<unsigned> bad{0};
  for (unsigned th = 0; th < threads; ++th)
    pool.emplace_back([&, th] {
      host_queue_client c(ctl.create_queue_pair({64, 64, slot}));
      std::mt19937_64 rng(th + 1);
      const uint64_t first = th * region / block, blocks = region / block;
      std::vector<uint8_t> buf(slot);
      for (int op = 0; op < 100; ++op) {
        // Mostly small requests, sometimes one as large as a slot.
        const uint32_t n = rng() % 8 == 0 ? slot / block : uint32_t(1 + rng() % 8);
        const uint64_t lba = first + rng() % (blocks - n + 1);
        uint8_t* at = ref.data() + lba * block;
        if (rng() % 2) {
          for (uint32_t i = 0; i < n * block; ++i) buf[i] = uint8_t(rng());
          const request_status s = c.write(nsid, lba, n, block, buf.data());
          if (!s.ok()) ++bad, ADD_FAILURE() << "write: " << describe(s);
          std::memcpy(at, buf.data(), size_t(n) * block);
        } else {
          const request_status s = c.read(nsid, lba, n, block, buf.data());
          if (!s.ok() || std::memcmp(buf.data(), at, size_t(n) * block) != 0)
            ++bad, ADD_FAILURE() << "read of " << n << " blocks at " << lba << ": " << describe(s);
        }
        if (op == 50) EXPECT_TRUE(c.flush(nsid).ok());
      }
      EXPECT_TRUE(c.flush(nsid).ok());
    });
  for (auto& p : pool) p.join();
  EXPECT_EQ(bad.load(), 0u);
  // Every byte again through passthrough, then through the block device.
  host_queue_client c(ctl.create_queue_pair({64, 64, slot}));
  std::vector<uint8_t> back(slot);
  for (uint64_t off = 0; off < bytes; off += slot) {
    const uint32_t n = uint32_t(std::min<uint64_t>(slot, bytes - off) / block);
    ASSERT_TRUE(c.read(nsid, off / block, n, block, back.data()).ok());
    ASSERT_EQ(std::memcmp(back.data(), ref.data() + off, size_t(n) * block), 0) << "at byte " << off;
  }
  const std::vector<uint8_t> disk = read_block_device(ns.block_path, bytes);
  for (uint64_t i = 0; i < bytes; ++i)
    ASSERT_EQ(disk[i], ref[i]) << "byte " << i << " of " << ns.block_path << " after flush";
  // The engine registers staging and the ring registers it too, in pieces
  // no longer than a command (Linux 6.1 refused a whole staging region
  // with EINVAL: it counts every page to the registration's end as a
  // segment of the command): the commands use them.
  const std::string d = t->describe();
  std::printf("%s\n", d.c_str());
  if (m.backend == io_backend::uring) {
    EXPECT_EQ(d.find("refused"), std::string::npos) << d;
    EXPECT_EQ(d.find("fixed buffers for 0 of"), std::string::npos) << d;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, Passthrough,
                         testing::Values(mode{"polled_uring", nvme_options::polling::on, io_backend::uring},
                                         mode{"polled_threads", nvme_options::polling::on, io_backend::threads},
                                         mode{"interrupts_uring", nvme_options::polling::off, io_backend::uring},
                                         mode{"interrupts_threads", nvme_options::polling::off, io_backend::threads}),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(BadRequests, PastTheEndAndUnalignedAreRefused) {
  NEED_DEVICE(rw, "DEEPWELL_NVME_RW");
  auto t = open_nvme_passthrough(rw, {.writable = true});
  const nvme_namespace_info ns = nvme_namespace(rw);
  const uint32_t lba = ns.lba_bytes;
  const uint64_t size = t->size();
  auto io = make_io_engine(io_backend::uring);
  aligned_buffer b(4 * lba);
  // The target refuses before any command is sent.
  EXPECT_EQ(run(*io, [&](io_callback d) { t->read(*io, b.p, lba, 1, d); }), -EINVAL);
  EXPECT_EQ(run(*io, [&](io_callback d) { t->read(*io, b.p, lba - 1, 0, d); }), -EINVAL);
  EXPECT_EQ(run(*io, [&](io_callback d) { t->write(*io, b.p, lba, size, false, d); }), -EINVAL);
  EXPECT_EQ(run(*io, [&](io_callback d) { t->write(*io, b.p, 2 * lba, size - lba, false, d); }), -EINVAL);
  // Reads past the end give zeros for the part beyond it (target.hpp).
  std::memset(b.p, 0xAB, 4 * lba);
  EXPECT_EQ(run(*io, [&](io_callback d) { t->read(*io, b.p, 2 * lba, size - lba, d); }), int64_t(2 * lba));
  for (uint32_t i = lba; i < 2 * lba; ++i) ASSERT_EQ(b.p[i], 0) << i;
  // The device itself refuses an LBA past its capacity, with LBA Out of Range.
  const int fd = ::open(rw, O_RDONLY);
  ASSERT_GE(fd, 0);
  {
    detail::nvme_ring ring(fd, 4, false);
    detail::nvme_io cmd;
    cmd.opcode = nvme::op_read;
    cmd.nsid = ns.nsid;
    cmd.buf = b.p;
    cmd.len = lba;
    cmd.slba = ns.lbas;
    cmd.nlb = 1;
    const int64_t r = ring.run_one(cmd, 10'000'000'000ull);
    EXPECT_EQ(nvme::status(uint16_t(r)), nvme::sc::lba_out_of_range) << "status " << r;
  }
  ::close(fd);
  // Through the controller: LBA Out of Range, and nothing reaches the device.
  controller ctl(controller_config{});
  const uint32_t nsid = ctl.add_namespace({t, 4096, false});
  host_queue_client c(ctl.create_queue_pair({16, 16, 16384}));
  const uint64_t blocks = size / 4096;
  std::vector<uint8_t> buf(16384);
  for (auto s : {c.read(nsid, blocks, 1, 4096, buf.data()), c.read(nsid, blocks - 1, 2, 4096, buf.data()),
                 c.write(nsid, blocks, 1, 4096, buf.data()), c.read(nsid, ~0ull - 1, 2, 4096, buf.data())})
    EXPECT_EQ(s.nvme, nvme::sc::lba_out_of_range) << describe(s);
}

TEST(ReadOnly, ServesReadsAndRefusesWrites) {
  NEED_DEVICE(ro, "DEEPWELL_NVME_RO");
  const nvme_namespace_info ns = nvme_namespace(ro);
  EXPECT_TRUE(ns.read_only);
  try {
    open_nvme_passthrough(ro, {.writable = true});
    ADD_FAILURE() << "opened a read-only namespace for writing";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("is read-only"), std::string::npos) << e.what();
  }
  auto t = open_nvme_passthrough(ro);
  EXPECT_FALSE(t->writable());
  const uint64_t seed = std::strtoull(env("DEEPWELL_NVME_RO_SEED") ? env("DEEPWELL_NVME_RO_SEED") : "0", nullptr, 0);
  controller ctl(controller_config{});
  const uint32_t nsid = ctl.add_namespace({t, 4096, true});
  host_queue_client c(ctl.create_queue_pair({16, 16, 65536}));
  std::vector<uint8_t> buf(65536);
  const uint64_t bytes = t->size() / 65536 * 65536;
  for (uint64_t off = 0; off < bytes; off += 65536) {
    ASSERT_TRUE(c.read(nsid, off / 4096, 16, 4096, buf.data()).ok());
    ASSERT_EQ(test::check_pattern(buf.data(), 65536, off, seed), -1) << "at byte " << off;
  }
  EXPECT_EQ(c.write(nsid, 0, 1, 4096, buf.data()).nvme, nvme::sc::write_to_read_only);
  auto io = make_io_engine(io_backend::uring);
  EXPECT_EQ(run(*io, [&](io_callback d) { t->write(*io, buf.data(), 4096, 0, false, d); }), -EROFS);
  // The target's refusal is what protects a namespace marked read-only by
  // the kernel alone: a write sent on the generic device bypasses the block
  // device's read-only flag. (QEMU's readonly=on drive refuses it itself.)
  const int fd = ::open(ro, O_RDWR);
  ASSERT_GE(fd, 0);
  aligned_buffer b(ns.lba_bytes);
  detail::nvme_ring ring(fd, 4, false);
  detail::nvme_io cmd;
  cmd.opcode = nvme::op_write;
  cmd.nsid = ns.nsid;
  cmd.buf = b.p;
  cmd.len = ns.lba_bytes;
  cmd.nlb = 1;
  const int64_t r = ring.run_one(cmd, 10'000'000'000ull);
  EXPECT_NE(r, 0) << "the drive took a write";
  std::printf("a raw write to the read-only drive: %s\n",
              r > 0 ? nvme::status_name(nvme::status(uint16_t(r))) : std::strerror(int(-r)));
  ::close(fd);
}

TEST(Fallback, NoGenericDeviceFallsBackToTheBlockDeviceAndSaysWhy) {
  NEED_DEVICE(rw, "DEEPWELL_NVME_RW");
  const nvme_namespace_info ns = nvme_namespace(rw);
  // A directory with the block device's node and no /dev/ng*: as on a
  // kernel before 5.13.
  char dir[] = "/tmp/dw-nvme-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct stat st {};
  ASSERT_EQ(stat(ns.block_path.c_str(), &st), 0);
  const std::string name = ns.block_path.substr(ns.block_path.rfind('/') + 1);
  const std::string block = std::string(dir) + "/" + name;
  ASSERT_EQ(mknod(block.c_str(), S_IFBLK | 0600, st.st_rdev), 0) << std::strerror(errno);
  const std::string missing = std::string(dir) + "/ng" + name.substr(4);
  try {
    open_nvme_passthrough(missing);
    ADD_FAILURE() << "passthrough without a generic device";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("no generic NVMe device"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_nvme_target(missing, {.fallback = false}), error);
  auto t = make_nvme_target(missing);
  const std::string d = t->describe();
  EXPECT_NE(d.find(block), std::string::npos) << d;
  EXPECT_NE(d.find("nvme passthrough unavailable"), std::string::npos) << d;
  // Same bytes as the passthrough route.
  auto p = open_nvme_passthrough(rw);
  ASSERT_EQ(t->size(), p->size());
  auto io = make_io_engine(io_backend::uring);
  aligned_buffer a(65536), b(65536);
  EXPECT_EQ(run(*io, [&](io_callback dn) { t->read(*io, a.p, 65536, 0, dn); }), 65536);
  EXPECT_EQ(run(*io, [&](io_callback dn) { p->read(*io, b.p, 65536, 0, dn); }), 65536);
  EXPECT_EQ(std::memcmp(a.p, b.p, 65536), 0);
  unlink(block.c_str());
  rmdir(dir);
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--write-pattern") {
    const uint64_t bytes = std::strtoull(argv[3], nullptr, 0), seed = std::strtoull(argv[4], nullptr, 0);
    std::ofstream f(argv[2], std::ios::binary | std::ios::trunc);
    std::vector<uint8_t> chunk(1 << 20);
    for (uint64_t off = 0; off < bytes; off += chunk.size()) {
      const size_t n = size_t(std::min<uint64_t>(chunk.size(), bytes - off));
      test::fill_pattern(chunk.data(), n, off, seed);
      f.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(n));
    }
    return f ? 0 : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
