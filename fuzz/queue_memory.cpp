// Fuzzes the controller against a tenant that owns its queue pairs' memory,
// not just the commands in it: every byte of the mapping (header fields,
// SQ slots, doorbells, CQ entries, staging) is the client's to rewrite at
// any moment, while the poller reads it. Each input is a small program run
// against one controller in server mode (grants as in command_path.cpp:
// namespace 1 read-write, 2 read-only, 3 another tenant's canary) on one
// or two queue pairs of that tenant:
//   write bytes at any offset of a queue pair's mapping (or one field),
//   ring the SQ tail doorbell / write the CQ head doorbell with any value,
//   fill the SQ with valid reads and ring it (the CQ fills: completions
//   that cannot be posted), flip an SQ slot between a valid and a hostile
//   command while the poller may be copying it, let the poller run,
//   delete a queue pair (whatever state it is in) and make a new one,
//   submit a valid read or write through the host client.
// After the program every queue pair is deleted, and:
//   - namespace 3 is unchanged, namespace 2 too, and no staging we looked
//     at held the other tenant's bytes (the program never writes 0xC3 into
//     staging or namespace 1, so eight of them in a row are the canary's);
//   - the controller still serves: a fresh queue pair reads namespace 1
//     with the right bytes within a few seconds;
//   - every queue pair is gone: queue_pair_count() is 0 and the poller
//     dropped them (each is a memfd: the count of open descriptors in
//     /proc/self/fd is back where it was before the input) within seconds.
// A crash, a leak (ASan), a hang (libFuzzer's -timeout) or a broken
// invariant (abort) fails the run.
//
//   scripts/fuzz   (builds this with clang -fsanitize=fuzzer,address and runs it)
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/controller/controller.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/targets/target.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t ns_bytes = 64 * 1024;
constexpr uint32_t block = 512;
constexpr uint8_t canary = 0xC3;
constexpr uint64_t canary_word = 0xC3C3C3C3C3C3C3C3ull;
constexpr size_t max_ops = 64;
constexpr uint64_t op_timeout_ns = 30'000'000;  // a client call in the program: its queue may be wrecked

uint64_t now() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Open descriptors: each queue pair holds one (its memfd) until the poller
// drops it and the last reference goes.
int open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // opendir's own
}

// What the open descriptors are, for a report.
std::string fd_list() {
  std::string s;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return s;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) < 0) continue;
    s += std::string("  ") + e->d_name + " -> " + target + "\n";
  }
  closedir(d);
  return s;
}

// The input, read front to back; zeros once it runs out.
struct reader {
  const uint8_t* p;
  size_t n;
  bool empty() const { return n == 0; }
  uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return uint16_t(u8() | u8() << 8); }
  uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
};

// One queue pair of the tenant: the controller's object (kept only for
// its id), the client over it.
struct tenant_queue {
  std::shared_ptr<queue_pair> qp;
  std::unique_ptr<host_queue_client> client;
  qp_geometry g;
  qp_layout l{};
  uint8_t* base = nullptr;
  size_t bytes = 0;
};

struct rig {
  std::unique_ptr<controller> ctl;
  std::shared_ptr<target> mine, shared_ro, theirs;
  std::shared_ptr<access_grants> grants;

  rig() {
    controller_config cc;
    cc.pollers = 2;  // two queue pairs of one client on two pollers: one account, two servers
    cc.io_budget_bytes = 64 * 1024;  // server mode: shares and grants on
    cc.backend = io_backend::threads;
    ctl = std::make_unique<controller>(cc);
    mine = make_host_memory_target(ns_bytes, true);
    shared_ro = make_host_memory_target(ns_bytes, true);
    theirs = make_host_memory_target(ns_bytes, true);
    // Namespace 1 never holds 0xC3 (the program's writes are masked too).
    auto* m = static_cast<uint8_t*>(mine->host_pointer());
    for (uint64_t i = 0; i < ns_bytes; ++i) m[i] = uint8_t((i * 7 + i / 512) % 0xC0);
    std::memset(theirs->host_pointer(), canary, ns_bytes);
    std::memset(shared_ro->host_pointer(), 0x11, ns_bytes);
    ctl->add_namespace({mine, block, false});
    ctl->add_namespace({shared_ro, block, false});
    ctl->add_namespace({theirs, block, false});
    grants = std::make_shared<access_grants>();
    grants->set(1, access_grants::read | access_grants::write);
    grants->set(2, access_grants::read);
  }

  tenant_queue open(const qp_geometry& g) {
    tenant_queue t;
    t.g = g;
    t.l = compute_layout(g);
    t.qp = ctl->create_queue_pair(g, queue_options{grants, 1});
    t.client = std::make_unique<host_queue_client>(client_handle(t.qp));
    t.base = static_cast<uint8_t*>(t.client->pair().base());
    t.bytes = t.client->pair().bytes();
    return t;
  }

  // The client goes first (its handle holds a reference), then the
  // controller is told; the poller drops it when it may.
  void close(tenant_queue& t) {
    check_staging(t);
    const uint32_t id = t.qp->id();
    t.client.reset();
    t.qp.reset();
    ctl->delete_queue_pair(id);
  }

  static void check_staging(const tenant_queue& t) {
    const uint8_t* s = t.base + t.l.staging_offset;
    for (uint64_t i = 0; i + 8 <= t.l.staging_bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w == canary_word) {
        std::fprintf(stderr, "LEAK: the other tenant's bytes in our staging at %llu\n", (unsigned long long)i);
        std::abort();
      }
    }
  }

  void check_namespaces() const {
    const auto* t = static_cast<const uint8_t*>(theirs->host_pointer());
    for (uint64_t i = 0; i < ns_bytes; ++i)
      if (t[i] != canary) {
        std::fprintf(stderr, "WRITE: the other tenant's namespace changed at %llu\n", (unsigned long long)i);
        std::abort();
      }
    const auto* ro = static_cast<const uint8_t*>(shared_ro->host_pointer());
    for (uint64_t i = 0; i < ns_bytes; ++i)
      if (ro[i] != 0x11) {
        std::fprintf(stderr, "WRITE: a read-only grant's namespace changed at %llu\n", (unsigned long long)i);
        std::abort();
      }
  }
};

rig& the_rig() {
  static rig r;
  return r;
}

// Small geometries (a full CQ is a few commands away), chosen by one byte.
qp_geometry geometry_from(uint8_t b) {
  static const uint32_t entries[] = {2, 4, 8, 16};
  qp_geometry g;
  g.sq_entries = entries[b & 3];
  g.cq_entries = entries[(b >> 2) & 3];
  g.slot_bytes = 512 * (1 + ((b >> 4) & 7));  // 512 B to 4 KiB
  return g;
}

// The attacker's own stores: plain bytes, except that staging never gets a
// 0xC3 (so a canary word there can only be the other tenant's data).
void attacker_write(tenant_queue& t, uint64_t off, const uint8_t* src, size_t n) {
  if (off >= t.bytes) return;
  if (n > t.bytes - off) n = t.bytes - off;
  for (size_t i = 0; i < n; ++i) {
    uint8_t v = src[i];
    const uint64_t at = off + i;
    if (v == canary && at >= t.l.staging_offset) v = canary - 1;
    t.base[at] = v;
  }
}

void attacker_store32(tenant_queue& t, uint64_t off, uint32_t v) {
  if (off + 4 > t.bytes || off % 4 != 0) return;
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  if (off >= t.l.staging_offset) {
    attacker_write(t, off, b, 4);
    return;
  }
  shared_store_release(reinterpret_cast<uint32_t*>(t.base + off), v);  // a doorbell, as a client rings it
}

// Offsets of the header's fields, the ones the poller reads first.
const uint64_t header_fields[] = {
    offsetof(qp_header, magic),          offsetof(qp_header, version),
    offsetof(qp_header, qid),            offsetof(qp_header, sq_entries),
    offsetof(qp_header, cq_entries),     offsetof(qp_header, depth),
    offsetof(qp_header, slot_bytes),     offsetof(qp_header, reserved),
    offsetof(qp_header, sq_offset),      offsetof(qp_header, sq_offset) + 4,
    offsetof(qp_header, cq_offset),      offsetof(qp_header, staging_offset),
    offsetof(qp_header, staging_bytes),  offsetof(qp_header, total_bytes),
    offsetof(qp_header, sq_tail_doorbell), offsetof(qp_header, cq_head_doorbell),
    offsetof(qp_header, state),          offsetof(qp_header, failure),
};
constexpr size_t n_header_fields = sizeof(header_fields) / sizeof(header_fields[0]);

// A 32-bit value: often small (near the rings' sizes), sometimes anything.
uint32_t value_from(reader& r) {
  const uint8_t mode = r.u8();
  if (mode < 160) return mode % 20;
  if (mode < 224) return uint32_t(-int32_t(mode % 4) - 1);  // 0xFFFFFFFF..FFFFFFFC
  return r.u32();
}

// A valid read (or write) of namespace 1 or 2 into the staging slot of cid.
nvme::command valid_command(const tenant_queue& t, uint8_t b, uint16_t cid) {
  const uint32_t max_blocks = t.g.slot_bytes / block;
  const uint32_t nblocks = 1 + (b % max_blocks);
  const uint64_t lba = (uint64_t(b) * 3) % (ns_bytes / block - nblocks + 1);
  const uint32_t nsid = (b & 0x40) ? 2 : 1;
  nvme::command c = (b & 0x80) && nsid == 1 ? nvme::make_write(nsid, lba, nblocks, uint64_t(cid) * t.g.slot_bytes)
                                            : nvme::make_read(nsid, lba, nblocks, uint64_t(cid) * t.g.slot_bytes);
  c.cid = cid;
  return c;
}

void run_op(rig& r, std::vector<tenant_queue>& qs, reader& in) {
  const uint8_t op = in.u8();
  tenant_queue& t = qs[(op >> 4) % qs.size()];
  switch (op % 12) {
    case 0: {  // bytes at any offset of the mapping, header included
      const uint64_t off = in.u32() % t.bytes;
      const size_t n = 1 + in.u8() % 64;
      uint8_t buf[64];
      for (size_t i = 0; i < n; ++i) buf[i] = in.u8();
      attacker_write(t, off, buf, n);
      break;
    }
    case 1: {  // one header field
      const uint64_t off = header_fields[in.u8() % n_header_fields];
      attacker_store32(t, off, value_from(in));
      break;
    }
    case 2:  // the SQ tail doorbell: any value
      attacker_store32(t, offsetof(qp_header, sq_tail_doorbell), value_from(in));
      break;
    case 3:  // the CQ head doorbell: any value
      attacker_store32(t, offsetof(qp_header, cq_head_doorbell), value_from(in));
      break;
    case 4: {  // one dword of an SQ slot or a CQ entry
      const uint8_t which = in.u8();
      const uint32_t v = value_from(in);
      if (which & 1) {
        const uint64_t slot = (which >> 1) % t.g.sq_entries;
        attacker_store32(t, t.l.sq_offset + slot * 64 + 4 * (in.u8() % 16), v);
      } else {
        const uint64_t e = (which >> 1) % t.g.cq_entries;
        attacker_store32(t, t.l.cq_offset + e * 16 + 4 * (in.u8() % 4), v);
      }
      break;
    }
    case 5: {  // a valid command in an SQ slot, not rung
      const uint8_t slot = in.u8();
      const nvme::command c = valid_command(t, in.u8(), uint16_t(in.u8() % t.g.depth()));
      attacker_write(t, t.l.sq_offset + uint64_t(slot % t.g.sq_entries) * 64, reinterpret_cast<const uint8_t*>(&c),
                     sizeof c);
      break;
    }
    case 6: {  // fill the SQ with valid commands and ring; the CQ head stays
      const uint8_t b = in.u8();
      for (uint32_t s = 0; s < t.g.sq_entries; ++s) {
        const nvme::command c = valid_command(t, uint8_t(b + s), uint16_t(s % t.g.depth()));
        attacker_write(t, t.l.sq_offset + uint64_t(s) * 64, reinterpret_cast<const uint8_t*>(&c), sizeof c);
      }
      attacker_store32(t, offsetof(qp_header, sq_tail_doorbell), in.u8() % t.g.sq_entries);
      break;
    }
    case 7: {  // an SQ slot flips between a valid and a hostile command while rung
      const uint64_t slot_off = t.l.sq_offset + uint64_t(in.u8() % t.g.sq_entries) * 64;
      const nvme::command good = valid_command(t, in.u8(), uint16_t(in.u8() % t.g.depth()));
      nvme::command bad;
      uint8_t raw[64];
      for (auto& x : raw) x = in.u8();
      std::memcpy(&bad, raw, sizeof bad);
      const uint32_t rounds = 1 + in.u8() * 4;
      const uint32_t tail = in.u8() % t.g.sq_entries;
      for (uint32_t i = 0; i < rounds; ++i) {
        attacker_write(t, slot_off, reinterpret_cast<const uint8_t*>(i & 1 ? &bad : &good), 64);
        if (i == 0) attacker_store32(t, offsetof(qp_header, sq_tail_doorbell), tail);
      }
      break;
    }
    case 8: {  // let the poller run
      const uint8_t b = in.u8();
      if (b < 64)
        sched_yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(10 * (b - 63)));  // up to 1.9 ms
      break;
    }
    case 9: {  // close a queue pair, whatever state it is in, and open another
      const qp_geometry g = geometry_from(in.u8());
      r.close(t);
      t = r.open(g);
      break;
    }
    case 10:
    case 11: {  // a valid read or write through the host client
      const uint8_t b = in.u8();
      const uint32_t max_blocks = t.g.slot_bytes / block;
      const uint32_t nblocks = 1 + in.u8() % max_blocks;
      const uint64_t lba = in.u16() % (ns_bytes / block - nblocks + 1);
      static const uint32_t nsids[] = {1, 2, 3, 1};
      const uint32_t nsid = nsids[b & 3];
      std::vector<uint8_t> buf(size_t(nblocks) * block);
      if (op % 12 == 10) {
        (void)t.client->read(nsid, lba, nblocks, block, buf.data(), op_timeout_ns);
        for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
          uint64_t w;
          std::memcpy(&w, buf.data() + i, 8);
          if (w == canary_word) {
            std::fprintf(stderr, "LEAK: a read of namespace %u returned the other tenant's bytes\n", nsid);
            std::abort();
          }
        }
      } else {
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t((b + i) % 0xC0);  // never 0xC3
        (void)t.client->write(nsid, lba, nblocks, block, buf.data(), op_timeout_ns);
      }
      break;
    }
  }
}

// A fresh queue pair reads namespace 1 and gets its bytes, within seconds.
void check_usable(rig& r, uint8_t b) {
  tenant_queue t = r.open({16, 16, 8192});
  const uint32_t nblocks = 1 + b % 16;
  const uint64_t lba = (uint64_t(b) * 5) % (ns_bytes / block - nblocks + 1);
  std::vector<uint8_t> got(size_t(nblocks) * block);
  const uint64_t deadline = now() + 5'000'000'000ull;
  for (;;) {
    const uint64_t left = deadline > now() ? deadline - now() : 1;
    const request_status s = t.client->read(1, lba, nblocks, block, got.data(), left);
    // The input's deleted queues may still have writes of namespace 1 in
    // flight: a mismatch counts only once it persists.
    const auto* want = static_cast<const uint8_t*>(r.mine->host_pointer()) + lba * block;
    if (s.ok() && std::memcmp(got.data(), want, got.size()) == 0) break;
    if (now() > deadline) {
      std::fprintf(stderr, "UNUSABLE: a fresh queue pair's read of namespace 1 %s: %s\n%s\n",
                   s.ok() ? "returned the wrong bytes" : "failed", describe(s).c_str(), r.ctl->dump().c_str());
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.close(t);
}

// Every queue pair deleted is dropped by its poller: none is counted and
// their memfds are closed.
void check_reclaimed(rig& r, int fds_before) {
  const uint64_t deadline = now() + 3'000'000'000ull;
  for (;;) {
    const uint32_t count = r.ctl->queue_pair_count();
    const int fds = open_fds();
    if (count == 0 && fds == fds_before) return;
    if (now() > deadline) {
      std::fprintf(stderr,
                   "NOT RECLAIMED: %u queue pairs counted, %d descriptors open (%d before the input): the poller "
                   "kept deleted queue pairs\n%s\nopen descriptors now:\n%s",
                   count, fds, fds_before, r.ctl->dump().c_str(), fd_list().c_str());
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rig& r = the_rig();
  const int fds_before = open_fds();
  reader in{data, size};
  const uint8_t first = in.u8();
  std::vector<tenant_queue> qs;
  qs.push_back(r.open(geometry_from(in.u8())));
  if (first & 1) qs.push_back(r.open(geometry_from(in.u8())));
  for (size_t i = 0; i < max_ops && !in.empty(); ++i) run_op(r, qs, in);
  for (auto& t : qs) r.close(t);
  qs.clear();
  r.check_namespaces();
  check_usable(r, first);
  check_reclaimed(r, fds_before);
  return 0;
}
