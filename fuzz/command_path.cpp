// Fuzzes the controller's command path as a hostile tenant would drive it:
// every input is a run of raw 64-byte NVMe commands (any opcode, namespace,
// LBA, buffer offset, flags) that a client with grants on namespaces 1
// (read-write) and 2 (read) submits on its queue pair, waiting for each
// completion. Namespace 3 belongs to another tenant and holds a canary:
// no byte of it may ever reach this client's staging memory, and no write
// may change it. A crash, a hang (libFuzzer's -timeout), a leak (ASan), a
// canary in our staging or a changed namespace 3 fails the run.
//
//   scripts/fuzz [runs]   (builds this with clang -fsanitize=fuzzer,address and runs it)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "deepwell/controller/controller.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/targets/target.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t ns_bytes = 64 * 1024;
constexpr uint8_t canary = 0xC3;

struct rig {
  std::unique_ptr<controller> ctl;
  std::shared_ptr<target> mine, shared_ro, theirs;
  std::unique_ptr<host_queue_client> client;
  uint64_t execs = 0;

  rig() {
    controller_config cc;
    cc.pollers = 1;
    cc.io_budget_bytes = 64 * 1024;  // server mode: shares and grants on
    cc.backend = io_backend::threads;
    ctl = std::make_unique<controller>(cc);
    mine = make_host_memory_target(ns_bytes, true);
    shared_ro = make_host_memory_target(ns_bytes, true);
    theirs = make_host_memory_target(ns_bytes, true);
    std::memset(theirs->host_pointer(), canary, ns_bytes);
    std::memset(shared_ro->host_pointer(), 0x11, ns_bytes);
    ctl->add_namespace({mine, 512, false});
    ctl->add_namespace({shared_ro, 512, false});
    ctl->add_namespace({theirs, 512, false});
    auto g = std::make_shared<access_grants>();
    g->set(1, access_grants::read | access_grants::write);
    g->set(2, access_grants::read);
    client = std::make_unique<host_queue_client>(
        client_handle(ctl->create_queue_pair({16, 16, 8192}, queue_options{g, 1})));
  }

  void check_staging() const {
    const auto* p = static_cast<const uint8_t*>(client->pair().base());
    const qp_header* h = client->pair().header();
    const uint8_t* staging = p + h->staging_offset;
    // Eight canary bytes in a row: the other tenant's data (our namespaces
    // never hold 0xC3 unless we wrote it there, and 8 aligned ones only
    // come from a copy of theirs... or our own writes: those we clear).
    for (uint64_t i = 0; i + 8 <= h->staging_bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, staging + i, 8);
      if (w == 0xC3C3C3C3C3C3C3C3ull) {
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rig& r = the_rig();
  // Our staging is ours to fill: anything that looks like the canary in it
  // must have come from the other tenant, so clear what we could have put there.
  auto* base = static_cast<uint8_t*>(r.client->pair().base());
  const qp_header* h = r.client->pair().header();
  std::memset(base + h->staging_offset, 0, h->staging_bytes);
  for (size_t at = 0; at + sizeof(nvme::command) <= size && at < 64 * sizeof(nvme::command);
       at += sizeof(nvme::command)) {
    nvme::command c;
    std::memcpy(&c, data + at, sizeof c);
    // Writes of canary-looking data into our own namespace would read back
    // as "leaks": our writes carry whatever staging holds (zeros).
    const wait_result w = r.client->raw(c, /*keep_prp1=*/true, nullptr, 0, nullptr, 0, 2'000'000'000ull);
    if (w.status.code == client_code::timeout || w.status.code == client_code::controller_lost) {
      std::fprintf(stderr, "HANG or LOST: %s\n", describe(w.status).c_str());
      std::abort();
    }
  }
  r.check_staging();
  if (++r.execs % 256 == 0) r.check_namespaces();
  return 0;
}
