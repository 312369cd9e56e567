// The server's configuration: `deepwell serve --config datasets.toml`.
// Parsed with toml++; every error names the file, the line and the key.
// docs/server.md shows a whole file; in short:
//
//   [server]
//   socket = "/run/deepwell/deepwell.sock"  # default: $XDG_RUNTIME_DIR/deepwell.sock
//   metrics = "127.0.0.1:9464"               # Prometheus text endpoint (default: none; loopback only
//   metrics_remote = false                   #   unless this is true)
//   metrics_detail = false                   # per-client and per-dataset series (default: totals only)
//   pollers = 8                               # default: the library's (half the cores, 2 to 8; DEEPWELL_POLLERS)
//   io_budget = "4MiB"                        # storage bytes in flight, shared by weight (a lone
//                                             # client goes above it while that pays: latency_target)
//   max_queue_pairs = 128                     # per client
//   max_staging = "2GiB"                      # per client: queue pair memory
//   max_clients_per_uid = 64                  # connections one uid may hold at once
//   max_queue_pairs_per_uid = 512             # queue pairs of all of one uid's connections
//   max_staging_per_uid = "8GiB"              # queue pair memory of all of one uid's connections
//   max_staging_total = "64GiB"               # queue pair memory of every client (default: half of RAM)
//   max_sections_per_uid = 64                 # sections (of datasets, as namespaces) one uid may have made
//   max_trees_per_uid = 16                    # tree sessions (the file API) one uid may have open
//   max_tree_files_per_uid = 32768            # files one uid's tree sessions may hold open together
//   max_tree_dirs_per_uid = 4096              # and directories
//   max_section_sums_per_uid = "256MiB"       # the server memory their block sums take
//   host_cache = "8GiB"                       # the shared host-memory tier (default: none)
//   host_cache_page = "64KiB"                 # its pages (default 4 KiB): a client reads the
//                                             # tier itself where its cache's pages are this size
//   latency_target = 2                        # while clients share, hold the budget back to 2x the storage's floor latency (0: off)
//   poller_spin_us = 1000                     # pollers busy-poll this long after their last work, then sleep
//
//   [[dataset]]
//   name = "features"
//   file = "/data/features.bin"   # or device = "/dev/nvme0n1", or memory = "4GiB", or tree = "/data/src" (a directory
//                                 # the file API opens files beneath; writable: opens for writing allowed)
//   writable = false
//   block_size = 4096
//   direct = false                # O_DIRECT
//   offset = 0                    # the dataset starts here in the file
//   length = 0                    # 0: to the end
//
//   [[grant]]
//   dataset = "features"          # or "*": every dataset
//   uid = 1000                    # or user = "alice", gid = 100, group = "ml", everyone = true
//   access = "read"               # or "read-write"
//   widen = false                 # a root server refuses a grant that lets someone read (or
//                                 # write) a file they could not open themselves, unless true
//
//   [[operator]]                  # who may see every client and dataset (stats, dump);
//   user = "admin"                # root and the server's own user always may
//
//   [[share]]
//   user = "alice"                # who (as in a grant)
//   weight = 3                    # share of the I/O budget against other clients
//   rate = "500MiB"               # bytes per second at most (0 or absent: no limit)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell::server {

// A malformed or inconsistent configuration. what(): "FILE:LINE: KEY: problem"
// (the line is left out where there is none, as for a missing section).
class config_error : public error {
 public:
  using error::error;
};

struct dataset_config {
  std::string name;  // how clients ask for it; unique; letters, digits, '-', '_', '.'
  // tree: a directory whose files clients open through the file API
  // (files/file_system.hpp, tree.hpp), beneath it, as their grant allows;
  // not a namespace of its own.
  // stripe, mirror: an array of files or devices as one dataset
  // (targets/drive_array.hpp), the members in `members`.
  // nvme: a namespace's /dev/ngXnY through NVMe passthrough, or its block
  // device where that is unavailable (targets/nvme_passthrough.hpp).
  enum class kind_t { file, device, nvme, memory, tree, stripe, mirror } kind = kind_t::file;
  std::string path;           // file, device, nvme, or the tree's root directory
  std::vector<std::string> members;  // stripe, mirror: the member files or devices, in order
  uint64_t chunk = defaults::builtin::stripe_chunk;  // stripe: bytes of the dataset a member takes in turn
  uint64_t memory_bytes = 0;  // memory: its size (zeroed at start)
  bool writable = false;
  uint32_t block_size = 4096;  // power of two, 512 to 65536
  bool direct = false;         // O_DIRECT (file or device)
  uint64_t offset = 0;         // file or device
  uint64_t length = 0;         // 0: to the end
  int line = 0;                // where it was declared (for messages)
};

// Who a grant or share applies to: exactly one of uid, gid, everyone.
struct principal {
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  bool everyone = false;
  // Whether a peer with this uid and these groups (its primary gid first)
  // is meant.
  bool matches(uint32_t peer_uid, const std::vector<uint32_t>& peer_gids) const;
  std::string describe() const;  // "uid 1000", "gid 100", "everyone"
};

struct grant_config {
  std::string dataset;  // a dataset's name, or "*"
  principal who;
  bool write = false;   // read is always granted by a grant; write with access = "read-write"
  bool widen = false;   // the operator knows the grant gives more than the file's own permissions
  int line = 0;
};

struct share_config {
  principal who;
  double weight = 1;        // > 0
  uint64_t rate_bytes = 0;  // per second; 0: no limit
  int line = 0;
};

struct server_config {
  std::string source;       // the file it came from ("<string>" for parse_config without a name)
  std::string socket_path;  // default_socket_path() when not given
  std::string metrics;      // "HOST:PORT", empty: none
  // The library's rule, as for a controller in a program (defaults.hpp:
  // half the cores, 2 to 8, or DEEPWELL_POLLERS), so that a program served
  // by the server has the pollers it would have had in process.
  uint32_t pollers = defaults::pollers();
  uint64_t io_budget_bytes = 4ull << 20;
  // controller_config::latency_target: 0 off, else a factor. On by default:
  // it acts only while two clients or more are busy. On the H100 machine's
  // disk a light client's p99 beside a flood fell from 14-217x alone to
  // 5-18x, the flood keeping 0.47-0.77 of its throughput; the rest was the
  // GPU's time slices between the two processes: under MPS, 1.0-1.7x on
  // the H200 machine (docs/server.md).
  double latency_target = 2;
  // controller_config::spin_us for the server's pollers. A light client's
  // miss after a pause found a sleeping poller with the embedded default
  // (100 us): its median miss was 270-296 us on the H200 machine against
  // 191-200 us with 1000 (docs/server.md). Absent from the file:
  // DEEPWELL_POLLER_SPIN_US where set, else 1000.
  std::optional<uint32_t> poller_spin_us;
  uint32_t max_queue_pairs = 128;
  uint64_t max_staging_bytes = 2ull << 30;
  // Per uid, over all its connections: one user cannot take the server's
  // descriptors, memory or attention from the others by connecting often.
  uint32_t max_clients_per_uid = 64;
  uint32_t max_queue_pairs_per_uid = 512;
  uint64_t max_staging_per_uid = 8ull << 30;
  // Queue pair memory of every client together: the server's memory (its
  // memfds), which a client's reads fill. 0: half the machine's memory.
  uint64_t max_staging_total = 0;
  // Sections a uid's clients made (controller_link::open_section), kept at
  // once. A section stays after its connections have gone, so that clients
  // that open the same one again (a store reopened, a graph run again)
  // share it; past this limit (or the sums' below, or the server's
  // namespaces) the ones no connection holds are reclaimed, the longest
  // idle first. A read-only section is shared by every client that asks
  // for it and counts for each uid whose connections hold it (once none
  // do, for the last); a writable one is the uid's own. The sums of checked sections are held in the server's
  // memory: bytes / sum block x 4 (x 3 for fixed sums: three copies are held).
  uint32_t max_sections_per_uid = 64;
  // Tree sessions (the file API, controller_link::open_tree) open at once
  // over all of a uid's connections, and the files and directories its
  // sessions may hold open together (each session reserves what it asks
  // for: the file API its max_open plus its request slots), so that one
  // user cannot take the server's descriptors. A session takes a namespace
  // of the server's, reused once the session ends.
  uint32_t max_trees_per_uid = 16;
  uint32_t max_tree_files_per_uid = 32768;
  uint32_t max_tree_dirs_per_uid = 4096;
  uint64_t max_section_sums_per_uid = 256ull << 20;
  // The metrics endpoint shows what every client does: loopback only
  // unless metrics_remote, and server-wide totals only unless metrics_detail.
  bool metrics_remote = false;
  bool metrics_detail = false;
  uint64_t host_cache_bytes = 0;  // the shared host-memory tier over file and device datasets; 0: none
  // The tier's page: what a miss reads from storage, and the page size a
  // client's cache must have to copy the tier's pages itself (else its
  // reads are commands, served from the tier). Larger pages suit scans
  // (fewer checks a byte), smaller ones random reads (less read a miss).
  uint32_t host_cache_page = 4096;
  std::vector<dataset_config> datasets;
  std::vector<grant_config> grants;
  std::vector<share_config> shares;
  std::vector<principal> operators;  // besides root and the server's own uid

  const dataset_config* find(std::string_view name) const;
};

// Parses TOML text; `source` names it in messages. Checks: unknown keys
// and sections are errors (a typo must not silently drop a grant), types,
// ranges, byte sizes ("4GiB", "512M", 4096), unique dataset names, exactly
// one of file/device/memory/tree per dataset, grants and shares naming
// existing datasets and exactly one principal, users and groups that
// exist on this machine. Does not open any dataset.
server_config parse_config(std::string_view text, const std::string& source = "<string>");
// Reads and parses a file (a missing or unreadable file is a config_error).
server_config load_config(const std::string& path);

// $XDG_RUNTIME_DIR/deepwell.sock, else /tmp/deepwell-UID/deepwell.sock (a
// directory the user creates, 0711, so nobody else can put a socket there).
std::string default_socket_path();

// Grants that let a principal read (or write) a file or device that it
// could not open itself, checked as that principal would be (a child
// process with its uid and groups calls access(2)); only a server running
// as root can be such a deputy, so elsewhere this returns nothing. Grants
// with widen = true are left out. Each entry: "FILE:LINE: grant[i]: ..."
std::vector<std::string> widening_grants(const server_config& cfg);

// Bytes from a size: an integer, or a string with an optional unit
// (K, KiB, M, MiB, G, GiB, T, TiB; powers of 1024). Throws config_error
// with `where` as its prefix.
uint64_t parse_bytes(std::string_view text, const std::string& where);

}  // namespace deepwell::server
