// The taxi queries on the host: CPU-thread clients, the shared setup, and
// the plain reference (taxi_run.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "taxi/taxi_run.hpp"
#include "deepwell/link/server_link.hpp"

namespace deepwell::table {

void check_taxi_columns(const column_file& f, int query) {
  if (query < 0 || query >= taxi_queries)
    throw error("taxi query Q" + std::to_string(query) + " does not exist (Q0 to Q5)");
  for (int c = 0; c <= query; ++c) f.column(taxi_query_columns[c], column_type::decimal32);
}

namespace detail {
namespace {

// Namespaces of the query's columns (sections of the file's dataset) on
// the link, in query order. A version-2 file's columns are checked
// sections (file_sums.hpp): every page the cache reads is checked against
// the column's sums, and the direct tier maps a column only once all of it
// has been checked.
std::vector<uint32_t> add_taxi_namespaces(controller_link& link, const column_file& f, int query, bool odirect) {
  check_taxi_columns(f, query);
  const uint32_t file = link.open_dataset({f.path(), false, odirect, 4096});
  std::vector<uint32_t> ns;
  for (int c = 0; c <= query; ++c) {
    const column_info& ci = f.column(taxi_query_columns[c]);
    section_request q;
    q.dataset = file;
    q.offset = ci.offset;
    q.bytes = ci.bytes;
    q.block_size = 4096;
    if (f.checksummed()) {
      q.sums = sums_kind::fixed;
      q.sums_offset = f.column_sums_at(ci);
      q.sums_bytes = 4 * section_sum_count(ci.bytes);
      q.sum_block = file_sum_block;
    }
    ns.push_back(link.open_section(q));
  }
  return ns;
}

}  // namespace

std::shared_ptr<controller_link> taxi_link(const taxi_query_options& o) {
  if (!o.server.empty()) return server_link::connect(o.server, "taxi query");
  controller_config c;
  if (o.cache.pollers) c.pollers = o.cache.pollers;
  return embedded_link(c);
}

taxi_route_report route_taxi_query(const column_file& f, const taxi_query_options& o, bool gpu) {
  const cache_config cc = o.cache.applied_to(cache_config{});
  taxi_route_settings s;
  s.mode = o.route;
  s.profile = o.profile;
  s.page_bytes = cc.page_size;
  // Page reads in flight: a GPU cache's queue entries, or one a CPU
  // worker; at most what the controller's pollers take at once.
  const uint64_t clients = gpu ? uint64_t(cc.queue_pairs ? cc.queue_pairs : defaults::gpu_queue_pairs()) *
                                     (cc.queue_entries - 1)
                               : deepwell::detail::thread_count(o.workers);
  const uint64_t controller = uint64_t(o.cache.pollers ? o.cache.pollers : defaults::pollers()) * defaults::io_depth();
  s.in_flight = uint32_t(std::max<uint64_t>(1, std::min(clients, controller)));
  if (o.cache.odirect) s.no_bulk = "O_DIRECT asked for (reads past the page cache)";
  else if (!o.server.empty()) s.no_bulk = "the columns are a server's dataset (its controller reads them)";
  return route_taxi_columns(f, o.query, s);
}

taxi_columns open_taxi_columns(std::shared_ptr<controller_link> link, const column_file& f,
                               const taxi_query_options& o, page_cache_maker make) {
  const std::vector<uint32_t> ns = add_taxi_namespaces(*link, f, o.query, o.cache.odirect);
  const auto t0 = std::chrono::steady_clock::now();
  cache_config cc = o.cache.applied_to(cache_config{});
  // The direct tier only where every page of a column is in the page cache
  // (a column on storage is read through the controller either way).
  cc.direct_tier = o.direct_tier && !o.cache.odirect;
  cc.direct_files = cache_config::file_tier::resident;
  taxi_columns t;
  t.cache = make(std::move(link), cc);
  t.cache_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (uint32_t n : ns) t.arrays.emplace_back(t.cache, n);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

void finish_taxi_report(taxi_query_report& rep, const column_file& f, const taxi_columns& t,
                        const taxi_query_options& o, const cache_stats* first_run) {
  rep.rows = f.rows();
  rep.setup_seconds = t.seconds + rep.route.look_seconds;
  rep.setup_cache_seconds = t.cache_seconds;
  const cache_stats s = first_run ? *first_run : t.cache->stats();
  rep.misses = s.misses;
  rep.hits = s.hits;
  for (size_t c = 0; c < t.arrays.size(); ++c) {
    const bool direct = t.cache->dataset(t.arrays[c].ref().dataset).source.mapped() != nullptr;
    rep.direct_columns += direct;
    if (c < rep.route.columns.size()) rep.route.columns[c].cache_route = t.cache->route(t.arrays[c].ref().dataset);
    // Values read alone (read_sparse): the selected rows of each further direct column.
    if (c > 0 && direct && o.sparse_gather) rep.sparse_reads += rep.result.selected;
  }
  rep.bytes_read = s.misses * t.cache->page_size() + rep.sparse_reads * 32;
  rep.bytes_needed = rep.rows * 4 + rep.result.selected * 4 * uint64_t(o.query);
  rep.bytes_tiling = rep.rows * 4 * uint64_t(o.query + 1);
  if (auto e = t.cache->last_error(); !e.ok()) {
    if (rep.result.failed == 0) rep.result.failed = 1;
    rep.error = f.path() + ": the page cache could not serve a read of a column (" + describe(e) +
                (corrupt_block(e) ? ": a block of the file does not match its checksum, the file is corrupt" : "") +
                ")";
  }
}

}  // namespace detail

taxi_query_report run_taxi_query_cpu(const column_file& f, const taxi_query_options& o) {
  taxi_query_report rep;
  rep.route = detail::route_taxi_query(f, o, false);
  const detail::taxi_columns t = detail::open_taxi_columns(
      detail::taxi_link(o), f, o,
      [](std::shared_ptr<controller_link> l, const cache_config& cc) { return make_host_page_cache(std::move(l), cc); });
  std::vector<array_ref<int32_t>> cols;
  for (auto& a : t.arrays) cols.push_back(a.ref());
  const unsigned workers = deepwell::detail::thread_count(o.workers);
  t.cache->reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  deepwell::detail::parallel_for(workers, workers, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t w = b; w < e; ++w)
      taxi_query_worker(one_lane{}, cols.data(), o.query, w, workers, &rep.result, o.sparse_gather);
  });
  rep.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.seconds = rep.route.seconds + rep.run_seconds;
  detail::finish_taxi_report(rep, f, t, o);
  return rep;
}

taxi_query_result taxi_reference(const column_file& f, int query) {
  check_taxi_columns(f, query);
  // The plain scan reads the file itself: its columns' sums first.
  for (int c = 0; c <= query; ++c) f.verify(taxi_query_columns[c]);
  const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw error(errno_message("open " + f.path(), errno));
  taxi_query_result r{};
  constexpr uint64_t chunk = 1 << 20;
  std::vector<int32_t> d(chunk), v(chunk);
  auto read_at = [&](const std::string& col, uint64_t row, uint64_t n, int32_t* out) {
    const column_info& c = f.column(col);
    uint64_t done = 0;
    while (done < n * 4) {
      const ssize_t k = ::pread(fd, reinterpret_cast<char*>(out) + done, n * 4 - done, off_t(c.offset + row * 4 + done));
      if (k <= 0) {
        ::close(fd);
        throw error(f.path() + ": short read of column '" + col + "'");
      }
      done += uint64_t(k);
    }
  };
  for (uint64_t row = 0; row < f.rows(); row += chunk) {
    const uint64_t n = std::min(chunk, f.rows() - row);
    read_at(taxi_query_columns[0], row, n, d.data());
    std::vector<long long> net(n, 0);
    for (int c = 1; c <= query; ++c) {
      read_at(taxi_query_columns[c], row, n, v.data());
      for (uint64_t i = 0; i < n; ++i) net[i] += c == 1 ? v[i] : -(long long)v[i];
    }
    for (uint64_t i = 0; i < n; ++i)
      if (d[i] >= taxi_long_trip) {
        ++r.selected;
        r.distance += d[i];
        r.net += net[i];
      }
  }
  ::close(fd);
  return r;
}

}  // namespace deepwell::table
