// The algorithms over a graph file's arrays, checked: each runs over
// arrays.view() and throws if the page cache refused a read meanwhile (an
// I/O error, a read past a section), which the plain drivers cannot see:
// the cache records the first error (last_error()) and the steps go on.
//
//   deepwell::graph::graph_arrays arrays(ctl, cache, file);
//   auto r = deepwell::graph::bfs(x, arrays, {.source = 0});  // throws rather than return a wrong answer
//
// An error recorded before the run (and not cleared: clear_error()) is
// reported too: the answer cannot be told apart from one it spoiled.
#pragma once
#include <string>

#include "deepwell/common/error.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/protocol/status.hpp"
#include "deepwell/targets/file_sums.hpp"

namespace deepwell::graph {

namespace detail {
// A guard check error is a block that did not match its checksum.
inline const char* corruption_hint(const request_status& e) {
  return corrupt_block(e) ? ": a block of the file does not match its checksum, the file is corrupt" : "";
}

template <class Run>
auto checked_run(const graph_arrays& a, const char* algorithm, Run&& run) {
  auto r = run(a.view());
  if (const request_status e = a.cache().last_error(); !e.ok())
    throw error(a.path() + ": " + algorithm + ": the page cache could not serve a read of the graph (" +
                describe(e) + corruption_hint(e) + "); the answer is not trustworthy");
  return r;
}
}  // namespace detail

template <class Exec>
bfs_result bfs(Exec& x, const graph_arrays& a, const bfs_options& o) {
  return detail::checked_run(a, "bfs", [&](const cached_graph& g) { return bfs(x, g, o); });
}
template <class Exec>
cc_result connected_components(Exec& x, const graph_arrays& a, uint32_t flags) {
  return detail::checked_run(a, "connected components",
                             [&](const cached_graph& g) { return connected_components(x, g, flags); });
}
template <class Exec>
pagerank_result pagerank(Exec& x, const graph_arrays& a, const pagerank_options& o) {
  return detail::checked_run(a, "pagerank", [&](const cached_graph& g) { return pagerank(x, g, o); });
}
template <class Exec>
sssp_result sssp(Exec& x, const graph_arrays& a, uint32_t source) {
  return detail::checked_run(a, "sssp", [&](const cached_graph& g) { return sssp(x, g, source); });
}

}  // namespace deepwell::graph
