// The beam search with CPU threads, a query a thread at a time: the
// reference the GPU kernel (search_gpu.cu) matches, result for result.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/vectors/distance.hpp"
#include "deepwell/vectors/search.hpp"

namespace deepwell::vectors {

void check_search_options(const index_header& h, const search_options& o) {
  if (o.k == 0) throw error("vector search: k must be at least 1");
  if (o.k > h.count)
    throw error("vector search: k = " + std::to_string(o.k) + " is larger than the index's " + std::to_string(h.count) +
                " vectors");
  if (o.list < o.k || o.list > 1024)
    throw error("vector search: the list (" + std::to_string(o.list) + ") must be >= k (" + std::to_string(o.k) +
                ") and at most 1024");
  if (o.width == 0 || o.width > 32) throw error("vector search: the width must be 1 to 32");
  if (o.max_expansions && o.max_expansions < o.k)
    throw error("vector search: max_expansions must be 0 (2 x list) or >= k");
  if (o.max_expansions > 8192) throw error("vector search: max_expansions at most 8192");
}

namespace {

struct entry {
  float d;
  uint32_t id;
  bool expanded;
};

}  // namespace

search_counts search_cpu(const index_view& v, const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                         float* distances, unsigned threads) {
  const index_header& h = v.h;
  check_search_options(h, o);
  if (nq && !queries) throw error("vector search: the queries are a null pointer");
  for (uint64_t i = 0; i < nq * h.dim; ++i)
    if (!std::isfinite(queries[i]))
      throw error("vector search: query " + std::to_string(i / h.dim) + " holds a NaN or an infinity");
  const uint32_t cap = o.max_expansions ? o.max_expansions : 2 * o.list;
  const uint32_t deg_at = record_degree_at(h.dim, h.type);
  search_counts total;
  std::mutex m;
  detail::parallel_for(nq, threads, [&](unsigned, uint64_t b, uint64_t e) {
    search_counts mine;
    std::vector<float> table(uint64_t(h.pq_subspaces) * pq_centroids);
    std::vector<uint8_t> rec(h.record_bytes);
    std::vector<entry> list, fresh, merged;
    std::vector<std::pair<float, uint32_t>> done;
    std::unordered_set<uint32_t> seen;
    for (uint64_t q = b; q < e; ++q) {
      const float* qv = queries + q * h.dim;
      for (uint32_t s = 0; s < h.pq_subspaces; ++s)
        for (uint32_t c = 0; c < pq_centroids; ++c)
          table[s * pq_centroids + c] = table_entry(qv, v.codebook, h.pq_sub_dim, s, c, h.distance);
      auto quantised = [&](uint32_t id) {
        ++mine.distances;
        return code_distance(table.data(), v.codes + uint64_t(id) * h.pq_subspaces, h.pq_subspaces);
      };
      const uint32_t start = uint32_t(h.entry);
      list.assign(1, entry{quantised(start), start, false});
      seen.clear();
      seen.insert(start);
      done.clear();
      uint32_t expansions = 0;
      while (expansions < cap) {
        fresh.clear();
        uint32_t picked = 0;
        for (entry& x : list) {
          if (picked == o.width || expansions == cap) break;
          if (x.expanded) continue;
          x.expanded = true;
          ++picked;
          ++expansions;
          const request_status s = v.records.read_range(rec.data(), record_offset(h, x.id), h.record_bytes);
          if (!s.ok())
            throw data_error("vector search: the record of node " + std::to_string(v.labels[x.id]) +
                             " could not be read: " + describe(s));
          done.push_back({exact_distance(qv, rec.data(), h.dim, h.type, h.distance), x.id});
          uint32_t used;
          std::memcpy(&used, rec.data() + deg_at, 4);
          if (used > h.degree) {
            ++mine.bad_ids;
            used = h.degree;
          }
          for (uint32_t j = 0; j < used; ++j) {
            uint32_t y;
            std::memcpy(&y, rec.data() + deg_at + 4 + 4 * j, 4);
            if (y >= h.count) {
              ++mine.bad_ids;
              continue;
            }
            if (seen.insert(y).second) fresh.push_back(entry{quantised(y), y, false});
          }
        }
        mine.expansions += picked;
        if (picked == 0) break;
        // The list: the `list` first of the old list and the fresh candidates, in the search's order.
        std::sort(fresh.begin(), fresh.end(), [](const entry& a, const entry& c) { return before(a.d, a.id, c.d, c.id); });
        merged.clear();
        std::merge(list.begin(), list.end(), fresh.begin(), fresh.end(), std::back_inserter(merged),
                   [](const entry& a, const entry& c) { return before(a.d, a.id, c.d, c.id); });
        if (merged.size() > o.list) merged.resize(o.list);
        list.swap(merged);
      }
      const size_t k = std::min<size_t>(o.k, done.size());
      std::partial_sort(done.begin(), done.begin() + k, done.end(), [](const auto& a, const auto& c) {
        return before(a.first, a.second, c.first, c.second);
      });
      for (uint32_t j = 0; j < o.k; ++j) {
        ids[q * o.k + j] = j < k ? v.labels[done[j].second] : no_neighbour;
        distances[q * o.k + j] = j < k ? done[j].first : std::numeric_limits<float>::infinity();
      }
    }
    std::lock_guard<std::mutex> l(m);
    total.expansions += mine.expansions;
    total.distances += mine.distances;
    total.bad_ids += mine.bad_ids;
  });
  return total;
}

}  // namespace deepwell::vectors
