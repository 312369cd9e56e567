// Running the taxi queries (taxi_queries.hpp) over a column file through
// deepwell: each column the query reads is a dataset of its own (its
// section of the file), served by an embedded controller through one page
// cache, with CPU threads (here) or GPU warps (deepwell_cuda) as clients.
// Reports the answer, the time, and the bytes brought from storage against
// the bytes the query needs (its I/O amplification).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/cache_options.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/table/column_file.hpp"
#include "taxi/taxi_queries.hpp"
#include "taxi/taxi_route.hpp"

namespace deepwell::table {

struct taxi_query_options {
  int query = 5;             // 0..5
  unsigned workers = 0;      // CPU threads (0: every core); GPU: warps (0: 4 blocks of 256 per SM, fewer where the cache could not hold the pages they pin)
  // The page cache (cache_options.hpp); its odirect reads the file with
  // O_DIRECT (a cold read, past the page cache), its pollers are the
  // in-process controller's.
  cache_options cache;
  // GPU: columns wholly in the page cache are read through a registered
  // read-only mapping of their sections (the direct tier: warps copy the
  // pages they miss, no controller round trip); false, or with odirect,
  // every miss goes through the controller, as for data on storage.
  bool direct_tier = true;
  // The selected rows' values of a direct-tier column read alone from host
  // memory (array_ref::read_sparse), not by bringing their pages in.
  bool sparse_gather = true;
  // GPU: the query again this many times over the same cache, its pages
  // now in HBM (a cache that holds them: cache_bytes), the best of them in
  // warm_seconds. What the cache costs over data already in GPU memory.
  unsigned warm_runs = 0;
  // A deepwell server's socket: the columns are sections of its dataset
  // (the file, by name or path, granted to this client) and its controller
  // serves the misses. Empty: a controller in this process.
  std::string server;
  // How columns not wholly in the page cache are read from storage
  // (taxi_route.hpp): the model's choice by the device's profile, page by
  // page, or whole; the profile given, cached or measured.
  taxi_route_mode route = taxi_route_mode::automatic;
  device_profile_options profile;
};

struct taxi_query_report {
  taxi_query_result result{};
  // The query: its columns' routes (route.seconds: the bulk reads before
  // the clients start) and the clients' run (run_seconds); the cache and
  // controller are set up between the two and not counted (setup_seconds,
  // with the routes' residency look, route.look_seconds).
  double seconds = 0;
  double run_seconds = 0;
  taxi_route_report route;
  double setup_seconds = 0;  // the cache and the columns' datasets (mapping registration included), the routes' look
  double setup_cache_seconds = 0;  // of which making the cache (queue pairs, memory, metadata)
  double warm_seconds = 0;   // the best of the warm runs (taxi_query_options::warm_runs), 0 if none
  bool warm_agrees = true;   // every warm run gave the first run's answer
  uint32_t direct_columns = 0;  // columns the direct tier serves
  uint64_t rows = 0;
  // Pages brought into the cache, and 32 bytes (a sector, the smallest
  // read of host memory from a GPU) for each value read alone.
  uint64_t bytes_read = 0;
  uint64_t sparse_reads = 0; // values read alone from host memory (sparse_gather)
  uint64_t bytes_needed = 0; // the scan column in full, and each further column's selected values
  uint64_t bytes_tiling = 0; // what moving whole columns moves: rows x 4 x (query + 1)
  uint64_t misses = 0, hits = 0;
  // When accesses failed: the cache's first error, naming the file ("a block
  // ... does not match its checksum" for a corrupt version-2 file).
  std::string error;
  double io_amplification() const { return bytes_needed ? double(bytes_read) / double(bytes_needed) : 0; }
};

// Q5's answer from a result: dollars a mile.
inline double taxi_dollars_per_mile(const taxi_query_result& r) {
  return r.distance ? double(r.net) / double(r.distance) : 0.0;
}

// Checks that the file has the query's columns as decimal32 (throws naming
// the file and the column otherwise).
void check_taxi_columns(const column_file& f, int query);

taxi_query_report run_taxi_query_cpu(const column_file& f, const taxi_query_options& o);
// deepwell_cuda (apps/taxi/taxi_query_gpu.cu); throws where there is no CUDA.
taxi_query_report run_taxi_query_gpu(const column_file& f, const taxi_query_options& o);

// The same answer by a plain scan of the file on the host (pread).
taxi_query_result taxi_reference(const column_file& f, int query);

namespace detail {
// What the CPU and GPU runners share (apps/taxi/taxi_query_host.cpp).
// The link the query's misses go through: the server's (o.server), or a
// controller of its own in this process (o.pollers).
std::shared_ptr<controller_link> taxi_link(const taxi_query_options& o);
// The columns' routes for a run with these options (`gpu`: GPU warps as
// clients, many reads in flight; else a synchronous read a CPU thread).
taxi_route_report route_taxi_query(const column_file& f, const taxi_query_options& o, bool gpu);
// The query's columns as arrays on one cache (made by `make` from the
// options), in query order; `seconds`: making the cache and adding the
// datasets (mapping registration included); `cache_seconds`: the first part.
struct taxi_columns {
  std::shared_ptr<page_cache> cache;
  std::vector<array<int32_t>> arrays;
  double seconds = 0;
  double cache_seconds = 0;
};
using page_cache_maker = std::shared_ptr<page_cache> (*)(std::shared_ptr<controller_link>, const cache_config&);
taxi_columns open_taxi_columns(std::shared_ptr<controller_link> link, const column_file& f,
                               const taxi_query_options& o, page_cache_maker make);
// The report's rows, counters and byte accounting, after a run whose
// answer is in rep.result (the cache's statistics reset before the run;
// `first_run`: those statistics, taken before later runs added to them).
void finish_taxi_report(taxi_query_report& rep, const column_file& f, const taxi_columns& t,
                        const taxi_query_options& o, const cache_stats* first_run = nullptr);
}  // namespace detail

}  // namespace deepwell::table
