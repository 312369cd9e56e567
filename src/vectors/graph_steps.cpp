#include "vectors/graph_steps.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/vectors/distance.hpp"

namespace deepwell::vectors {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// The mean's sums and the nearest row, over blocks of rows that `block_rows`
// hands out (b: the block's number, n: its rows).
template <class BlockRows>
uint64_t nearest_the_mean(uint64_t n, uint32_t width, unsigned threads, BlockRows block_rows) {
  constexpr uint64_t block = 1024;
  const uint64_t blocks = (n + block - 1) / block;
  std::vector<double> part(blocks * width, 0.0);
  std::vector<std::pair<float, uint64_t>> near(blocks);
  detail::parallel_for(blocks, threads, [&](unsigned, uint64_t b, uint64_t e) {
    std::vector<float> scratch;
    for (uint64_t k = b; k < e; ++k) {
      const uint64_t rows = std::min(n, (k + 1) * block) - k * block;
      const float* x = block_rows(k * block, rows, scratch);
      for (uint64_t i = 0; i < rows; ++i)
        for (uint32_t d = 0; d < width; ++d) part[k * width + d] += x[i * width + d];
    }
  });
  std::vector<double> mean(width, 0.0);
  for (uint64_t k = 0; k < blocks; ++k)
    for (uint32_t d = 0; d < width; ++d) mean[d] += part[k * width + d];
  std::vector<float> m(width);
  for (uint32_t d = 0; d < width; ++d) m[d] = float(mean[d] / double(n));
  detail::parallel_for(blocks, threads, [&](unsigned, uint64_t b, uint64_t e) {
    std::vector<float> scratch;
    for (uint64_t k = b; k < e; ++k) {
      const uint64_t rows = std::min(n, (k + 1) * block) - k * block;
      const float* x = block_rows(k * block, rows, scratch);
      near[k] = {std::numeric_limits<float>::infinity(), k * block};
      for (uint64_t i = 0; i < rows; ++i) {
        const float d = row_l2(x + i * width, m.data(), width);
        if (d < near[k].first) near[k] = {d, k * block + i};
      }
    }
  });
  uint64_t best = 0;
  float bd = std::numeric_limits<float>::infinity();
  for (const auto& [d, i] : near)
    if (d < bd) bd = d, best = i;
  return best;
}

}  // namespace

std::vector<float> kmeans(graph_engine& e, const float* pts, uint64_t n, uint32_t dim, uint64_t stride, uint32_t k,
                          unsigned iters) {
  std::vector<float> c(uint64_t(k) * dim);
  for (uint32_t j = 0; j < k; ++j) std::memcpy(&c[uint64_t(j) * dim], pts + (uint64_t(j) * n / k) * stride, 4ull * dim);
  std::vector<uint32_t> owner(n);
  for (unsigned it = 0; it < iters; ++it) {
    e.nearest(pts, n, dim, stride, c.data(), k, 1, owner.data());
    std::vector<double> sum(uint64_t(k) * dim, 0.0);
    std::vector<uint64_t> cnt(k, 0);
    for (uint64_t i = 0; i < n; ++i) {
      ++cnt[owner[i]];
      for (uint32_t d = 0; d < dim; ++d) sum[uint64_t(owner[i]) * dim + d] += pts[i * stride + d];
    }
    for (uint32_t j = 0; j < k; ++j)
      if (cnt[j])
        for (uint32_t d = 0; d < dim; ++d) c[uint64_t(j) * dim + d] = float(sum[uint64_t(j) * dim + d] / double(cnt[j]));
  }
  return c;
}

std::vector<float> evenly_spaced(const row_source& rows, uint64_t count) {
  const uint32_t w = rows.width();
  std::vector<float> pts(count * w);
  for (uint64_t s = 0; s < count; ++s) rows.row(s * rows.count() / count, &pts[s * w]);
  return pts;
}

uint64_t medoid(const row_source& rows, unsigned threads) {
  return nearest_the_mean(rows.count(), rows.width(), threads,
                          [&](uint64_t first, uint64_t n, std::vector<float>& scratch) {
                            return rows.rows(first, n, scratch);
                          });
}

uint64_t medoid(float_rows rows, unsigned threads) {
  return nearest_the_mean(rows.n, rows.dim, threads, [&](uint64_t first, uint64_t, std::vector<float>&) {
    return rows.x + first * rows.dim;
  });
}

adjacency first_graph(graph_engine& e, float_rows rows, const build_options& o) {
  const uint64_t n = rows.n;
  const uint32_t w = rows.dim;
  const uint32_t k = uint32_t(std::clamp<double>(std::round(std::sqrt(double(n))), 1, 4096));
  auto t = clock_type::now();
  const uint64_t sample = std::min<uint64_t>(n, uint64_t(k) * 64);
  std::vector<float> pts(sample * w);
  for (uint64_t s = 0; s < sample; ++s) std::memcpy(&pts[s * w], rows.x + (s * n / sample) * w, 4ull * w);
  const std::vector<float> centres = kmeans(e, pts.data(), sample, w, w, k, 8);
  const double centring = since(t);
  t = clock_type::now();
  const uint32_t ways = k > 1 ? 2 : 1;
  std::vector<uint32_t> near(n * ways);
  e.nearest(rows.x, n, w, w, centres.data(), k, ways, near.data());
  std::vector<std::vector<uint32_t>> members(k);
  for (uint64_t i = 0; i < n; ++i)
    for (uint32_t way = 0; way < ways; ++way) members[near[i * ways + way]].push_back(uint32_t(i));
  const double assigning = since(t);
  t = clock_type::now();
  const uint32_t per = std::min<uint32_t>(2 * o.degree, uint32_t(std::min<uint64_t>(n - 1, 1u << 20)));
  adjacency groups = e.group_graph(near, ways, members, per);
  const double grouping = since(t);
  t = clock_type::now();
  adjacency adj = e.reverse(groups);
  if (o.progress)
    std::fprintf(stderr,
                 "vectors build: first graph: %u centres %.2f s, assigned %.2f s, groups' lists %.2f s, reverse edges "
                 "%.2f s\n",
                 k, centring, assigning, grouping, since(t));
  return adj;
}

adjacency vamana_pass(graph_engine& e, const adjacency& adj, uint64_t entry, bool progress) {
  auto t = clock_type::now();
  adjacency searched = e.pass(adj, entry);
  const double searching = since(t);
  t = clock_type::now();
  adjacency next = e.reverse(searched);
  if (progress)
    std::fprintf(stderr, "vectors build: pass: searches %.2f s, reverse edges %.2f s\n", searching, since(t));
  return next;
}

}  // namespace deepwell::vectors
