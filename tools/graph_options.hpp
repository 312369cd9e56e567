// Options of the `deepwell graph <algorithm>` commands, shared by the CPU
// and GPU runners.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/server_link.hpp"

namespace deepwell::tools {

struct graph_run_options {
  std::string algo;            // bfs, cc, pagerank, sssp
  std::string file;
  int64_t source = -1;         // -1: the node with the largest degree
  std::string mode = "deepwell";  // deepwell, memory (all in GPU memory), zerocopy (pinned host memory, EMOGI)
  bool baselines = false;      // also run memory and zerocopy, and the H2D ceiling, in the same process
  uint64_t cache_bytes = 0;    // 0: an eighth of the edge (and weight) bytes, at least 512 MiB on a GPU
  uint32_t page_size = 4096;
  std::string location = "pagecache";  // pagecache (buffered file) or odirect
  std::string tier = "direct";         // direct (registered file mapping when resident) or controller
  bool offsets_in_cache = false;       // offsets through deepwell too (default: copied to device memory)
  bool checksums = true;               // a version-2 file's block sums checked (--no-checksums: what they cost)
  bool top_down_only = false;          // BFS without bottom-up levels
  uint64_t long_lists = 8192;          // lists longer than this many entries are shared by all warps (0: off)
  bool stream = true;                  // one-touch reads (bottom-up BFS) straight from the direct tier
  uint32_t pin_free_strides = 4;       // cached_graph::pin_free_strides (0: every list page pinned)
  bool keep_cache = false;             // repeats start from the last one's cache (not cleared)
  unsigned iterations = 20;            // PageRank
  unsigned pollers = 0;         // controller poller threads; 0: the library's default (DEEPWELL_POLLERS)
  std::string server;          // deepwell mode: misses served by a `deepwell serve` at this socket
  unsigned repeat = 1;
  bool check = false;          // against the CPU reference (small graphs)
  bool cold = false;           // drop the file from the page cache first (posix_fadvise DONTNEED, checked with mincore)
  bool cpu = false;            // CPU threads as clients (a host page cache), no GPU
  unsigned threads = 0;        // CPU clients
  std::string json;            // append a JSON line per run
  std::string commit = "unknown";
};

// The link deepwell mode's cache uses: the server's (--server), or a
// controller of its own in this process with o.pollers pollers.
std::shared_ptr<controller_link> graph_link(const graph_run_options& o);

int run_graph_gpu(const graph_run_options& o);  // graph_run_gpu.cu (or a stub without CUDA)
int run_graph_cpu(const graph_run_options& o);  // graph_run_cpu.cpp

inline std::shared_ptr<controller_link> graph_link(const graph_run_options& o) {
  if (!o.server.empty()) return server_link::connect(o.server, "deepwell graph " + o.algo);
  controller_config cc;
  if (o.pollers) cc.pollers = o.pollers;
  return embedded_link(cc);
}

}  // namespace deepwell::tools
