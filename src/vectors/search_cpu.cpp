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
#include "deepwell/vectors/data.hpp"
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
    throw error("vector search: max_expansions must be 0 (the default) or >= k");
  if (o.max_expansions > 8192) throw error("vector search: max_expansions at most 8192");
  if (o.entry_sample > max_entry_sample)
    throw error("vector search: entry_sample at most " + std::to_string(max_entry_sample) + ", not " +
                std::to_string(o.entry_sample));
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
  check_finite_rows(queries, nq, h.dim, "vector search");
  const uint32_t cap = search_cap(o);
  std::vector<uint32_t> sample(entry_sample_size(h, o));  // the same nodes for every query
  for (uint32_t j = 0; j < sample.size(); ++j) sample[j] = entry_sample_node(h, uint32_t(sample.size()), j);
  const uint32_t deg_at = record_degree_at(h.dim, h.type);
  const uint64_t fetch_bytes = o.whole_pages ? h.page_bytes : h.record_bytes;
  search_counts total;
  std::mutex m;
  detail::parallel_for(nq, threads, [&](unsigned, uint64_t b, uint64_t e) {
    search_counts mine;
    std::vector<float> table(uint64_t(h.pq_subspaces) * pq_centroids);
    std::vector<uint8_t> hand(uint64_t(o.width) * fetch_bytes);
    std::vector<uint32_t> picks, fetched, fetched_for;  // the step's pages (or records) in fetch order, and the pick of each
    std::vector<entry> list, fresh, merged;
    std::vector<std::pair<float, uint32_t>> done;
    std::unordered_set<uint32_t> seen;
    const auto by_order = [](const entry& a, const entry& c) { return before(a.d, a.id, c.d, c.id); };
    for (uint64_t q = b; q < e; ++q) {
      const float* qv = queries + q * h.dim;
      for (uint32_t s = 0; s < h.pq_subspaces; ++s)
        for (uint32_t c = 0; c < pq_centroids; ++c)
          table[s * pq_centroids + c] = table_entry(qv, v.codebook, h.pq_sub_dim, s, c, h.distance);
      auto quantised = [&](uint32_t id) {
        ++mine.distances;
        return code_distance(table.data(), v.codes + uint64_t(id) * h.pq_subspaces, h.pq_subspaces);
      };
      // The list: the `list` first of the old list and the fresh candidates, in the search's order.
      auto merge_fresh = [&] {
        std::sort(fresh.begin(), fresh.end(), by_order);
        merged.clear();
        std::merge(list.begin(), list.end(), fresh.begin(), fresh.end(), std::back_inserter(merged), by_order);
        if (merged.size() > o.list) merged.resize(o.list);
        list.swap(merged);
        fresh.clear();
      };
      // A record in hand: where node `id`'s bytes are this step, or null.
      auto in_hand = [&](uint32_t id) -> const uint8_t* {
        const uint32_t key = o.whole_pages ? id / h.records_per_page : id;
        for (size_t f = 0; f < fetched.size(); ++f)
          if (fetched[f] == key)
            return hand.data() + f * fetch_bytes + (o.whole_pages ? uint64_t(id % h.records_per_page) * h.record_bytes : 0);
        return nullptr;
      };
      auto expand = [&](const uint8_t* rec) {
        uint32_t used;
        std::memcpy(&used, rec + deg_at, 4);
        if (used > h.degree) {
          ++mine.bad_ids;
          used = h.degree;
        }
        for (uint32_t j = 0; j < used; ++j) {
          uint32_t y;
          std::memcpy(&y, rec + deg_at + 4 + 4 * j, 4);
          if (y >= h.count) {
            ++mine.bad_ids;
            continue;
          }
          if (seen.insert(y).second) fresh.push_back(entry{quantised(y), y, false});
        }
      };
      entry first{quantised(uint32_t(h.entry)), uint32_t(h.entry), false};
      for (const uint32_t id : sample) {
        const entry x{quantised(id), id, false};
        if (by_order(x, first)) first = x;
      }
      const uint32_t start = first.id;
      list.assign(1, first);
      seen.clear();
      seen.insert(start);
      done.clear();
      uint32_t expansions = 0;
      while (expansions < cap) {
        // The first `width` candidates not yet expanded, in list order.
        picks.clear();
        for (entry& x : list) {
          if (picks.size() == o.width || expansions == cap) break;
          if (x.expanded) continue;
          x.expanded = true;
          picks.push_back(x.id);
          ++expansions;
        }
        if (picks.empty()) break;
        // Fetch them: each page once.
        fetched.clear();
        fetched_for.clear();
        for (const uint32_t p : picks) {
          const uint32_t key = o.whole_pages ? p / h.records_per_page : p;
          if (std::find(fetched.begin(), fetched.end(), key) != fetched.end()) continue;
          const uint64_t at = o.whole_pages ? uint64_t(key) * h.page_bytes : record_offset(h, p);
          const uint64_t bytes = o.whole_pages ? std::min<uint64_t>(h.records_per_page, h.count - uint64_t(key) * h.records_per_page) *
                                                     h.record_bytes
                                               : h.record_bytes;
          const request_status s = v.records.read_range(hand.data() + fetched.size() * fetch_bytes, at, bytes);
          if (!s.ok())
            throw data_error("vector search: the record of node " + std::to_string(v.labels[p]) +
                             " could not be read: " + describe(s));
          fetched.push_back(key);
          fetched_for.push_back(p);
        }
        mine.fetches += fetched.size();
        // Every record in hand (never in hand before): its exact distance, and the list if it belongs there.
        // Those not yet seen join it if nearer the query than the record picked in their page.
        for (size_t f = 0; f < fetched.size(); ++f) {
          const uint64_t first = o.whole_pages ? uint64_t(fetched[f]) * h.records_per_page : fetched[f];
          const uint64_t last = o.whole_pages ? std::min<uint64_t>(first + h.records_per_page, h.count) : first + 1;
          const float picked_d = exact_distance(qv, in_hand(fetched_for[f]), h.dim, h.type, h.distance);
          for (uint64_t id = first; id < last; ++id) {
            const float d = id == fetched_for[f] ? picked_d : exact_distance(qv, in_hand(uint32_t(id)), h.dim, h.type, h.distance);
            done.push_back({d, uint32_t(id)});
            if (seen.insert(uint32_t(id)).second && (o.all_mates || d <= picked_d))
              fresh.push_back(entry{quantised(uint32_t(id)), uint32_t(id), false});
          }
        }
        merge_fresh();
        // Expand the picks, then the records in hand the list holds unexpanded, in list order, to the cap.
        for (const uint32_t p : picks) expand(in_hand(p));
        if (o.whole_pages)
          for (entry& x : list) {
            if (expansions == cap) break;
            if (x.expanded) continue;
            if (const uint8_t* rec = in_hand(x.id)) {
              x.expanded = true;
              ++expansions;
              ++mine.page_mates;
              expand(rec);
            }
          }
        merge_fresh();
      }
      mine.expansions += expansions;
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
    total += mine;
  });
  return total;
}

}  // namespace deepwell::vectors
