#include "vectors/shards.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/vectors/distance.hpp"
#include "vectors/graph_steps.hpp"

namespace deepwell::vectors {

graph_shape shape_of(const build_options& o) {
  graph_shape g;
  g.degree = o.degree;
  g.list = o.list;
  g.alpha = o.alpha;
  g.threads = o.threads;
  return g;
}

sharded_graph::sharded_graph(const row_source& rows, const build_options& o, const engine_factory& make,
                             graph_engine& sample_engine, uint64_t most)
    : rows_(rows), o_(o), make_(make) {
  const uint64_t n = rows.count();
  const uint32_t w = rows.width();
  // Each row is in two shards: 2n memberships over shards three quarters
  // full on average, so that k-means' uneven clusters mostly fit whole.
  const uint32_t k = uint32_t(std::max<uint64_t>(2, (2 * n + most * 3 / 4 - 1) / (most * 3 / 4)));
  const uint64_t sample = std::min<uint64_t>(n, uint64_t(k) * 256);
  const std::vector<float> pts = evenly_spaced(rows, sample);
  const std::vector<float> centres = kmeans(sample_engine, pts.data(), sample, w, w, k, 10);
  std::vector<std::vector<uint32_t>> members(k);
  std::vector<uint32_t> near;
  std::vector<float> scratch;
  constexpr uint64_t chunk = 1 << 18;
  for (uint64_t first = 0; first < n; first += chunk) {
    const uint64_t c = std::min(chunk, n - first);
    near.resize(2 * c);
    sample_engine.nearest(rows.rows(first, c, scratch, o.threads), c, w, w, centres.data(), k, 2, near.data());
    for (uint64_t i = 0; i < c; ++i)
      for (uint32_t way = 0; way < 2; ++way) members[near[2 * i + way]].push_back(uint32_t(first + i));
  }
  // A cluster past `most` rows is cut into even pieces in id order: each
  // piece still samples its cluster, and each row is still in two shards.
  for (auto& m : members) {
    if (m.empty()) continue;
    const uint64_t pieces = (m.size() + most - 1) / most;
    for (uint64_t p = 0; p < pieces; ++p)
      shards_.emplace_back(m.begin() + p * m.size() / pieces, m.begin() + (p + 1) * m.size() / pieces);
  }
}

void sharded_graph::merge_shard(uint32_t s, adjacency& adj) {
  using clock_type = std::chrono::steady_clock;
  const auto t = clock_type::now();
  const std::vector<uint32_t>& ids = shards_[s];
  const uint64_t m = ids.size();
  const uint32_t w = rows_.width();
  std::vector<float> x(m * w);
  rows_.gather(ids.data(), m, x.data(), o_.threads);
  const float_rows local{x.data(), m, w};
  adjacency part;
  {
    std::unique_ptr<graph_engine> e = make_(local, shape_of(o_));
    part = first_graph(*e, local, o_);
    const uint64_t entry = medoid(local, o_.threads);
    for (uint32_t p = 0; p < o_.passes; ++p) part = vamana_pass(*e, part, entry, o_.progress);
    redone_ += e->redone_nodes();
  }
  const double built = std::chrono::duration<double>(clock_type::now() - t).count();
  // A row's first shard gives its list; its second, the union of both
  // lists, pruned by exact distance where it holds more than the degree.
  detail::parallel_for(m, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
    std::vector<candidate> c;
    std::vector<float> near;  // the row, then each candidate's row
    for (uint64_t i = b; i < e; ++i) {
      const uint32_t g = ids[i];
      std::vector<uint32_t>& list = adj[g];
      if (list.empty()) {
        for (const uint32_t v : part[i]) list.push_back(ids[v]);
        continue;
      }
      c.clear();
      for (const uint32_t v : list) c.push_back({0.f, v});
      for (const uint32_t v : part[i]) c.push_back({0.f, ids[v]});
      near.resize((1 + c.size()) * w);
      rows_.row(g, near.data());
      for (size_t j = 0; j < c.size(); ++j) {
        rows_.row(c[j].id, &near[(1 + j) * w]);
        c[j].d = row_l2(near.data(), &near[(1 + j) * w], w);
      }
      // Where each id's row is in `near`, for the prune's distances.
      std::vector<std::pair<uint32_t, uint32_t>> at(c.size());
      for (size_t j = 0; j < c.size(); ++j) at[j] = {c[j].id, uint32_t(1 + j)};
      std::sort(at.begin(), at.end());
      auto row_of = [&](uint32_t id) {
        return &near[uint64_t(std::lower_bound(at.begin(), at.end(), std::make_pair(id, 0u))->second) * w];
      };
      c = sorted_unique(g, std::move(c));
      list.clear();
      if (c.size() <= o_.degree) {
        for (const candidate& x : c) list.push_back(x.id);
      } else {
        list = robust_prune(c, o_.degree, o_.alpha,
                            [&](uint32_t a, uint32_t b) { return row_l2(row_of(a), row_of(b), w); });
      }
    }
  });
  if (o_.progress)
    std::fprintf(stderr, "vectors build: shard %u of %zu: %llu rows, built %.2f s, merged %.2f s\n", s + 1,
                 shards_.size(), (unsigned long long)m, built,
                 std::chrono::duration<double>(clock_type::now() - t).count() - built);
}

}  // namespace deepwell::vectors
