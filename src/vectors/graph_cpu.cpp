// The index build's graph steps on CPU threads (graph_engine.hpp). Every
// node's result depends on the input only, never on which thread ran it.
#include <algorithm>
#include <atomic>
#include <limits>
#include <unordered_set>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/vectors/distance.hpp"
#include "vectors/graph_engine.hpp"

namespace deepwell::vectors {

namespace {

class cpu_engine final : public graph_engine {
 public:
  cpu_engine(float_rows r, const graph_shape& s) : r_(r), s_(s) {}

  void nearest(const float* pts, uint64_t n, uint32_t dim, uint64_t stride, const float* centres, uint32_t k,
               uint32_t ways, uint32_t* out) override {
    detail::parallel_for(n, s_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      std::vector<candidate> c(k);
      for (uint64_t i = b; i < e; ++i) {
        if (ways == 1) {  // k-means' assignment: the nearest alone
          float best = std::numeric_limits<float>::infinity();
          uint32_t at = 0;
          for (uint32_t j = 0; j < k; ++j) {
            const float d = row_l2(pts + i * stride, centres + uint64_t(j) * dim, dim);
            if (d < best) best = d, at = j;
          }
          out[i] = at;
          continue;
        }
        for (uint32_t j = 0; j < k; ++j) c[j] = {row_l2(pts + i * stride, centres + uint64_t(j) * dim, dim), j};
        std::partial_sort(c.begin(), c.begin() + ways, c.end());
        for (uint32_t w = 0; w < ways; ++w) out[i * ways + w] = c[w].id;
      }
    });
  }

  adjacency group_graph(const std::vector<uint32_t>& near, uint32_t ways,
                        const std::vector<std::vector<uint32_t>>& members, uint32_t per) override {
    std::vector<candidate> cand(r_.n * ways * per, candidate{std::numeric_limits<float>::infinity(), no_neighbour});
    detail::parallel_items(members.size(), s_.threads, [&](uint64_t j) {
      const std::vector<uint32_t>& m = members[j];
      std::vector<candidate> c;
      for (uint32_t a : m) {
        c.clear();
        for (uint32_t b : m)
          if (b != a) c.push_back({dist(a, b), b});
        const size_t keep = std::min<size_t>(per, c.size());
        std::partial_sort(c.begin(), c.begin() + keep, c.end());
        uint32_t way = 0;
        while (near[uint64_t(a) * ways + way] != j) ++way;
        std::copy(c.begin(), c.begin() + keep, cand.begin() + (uint64_t(a) * ways + way) * per);
      }
    });
    adjacency adj(r_.n);
    detail::parallel_for(r_.n, s_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) {
        std::vector<candidate> c(cand.begin() + i * ways * per, cand.begin() + (i + 1) * ways * per);
        adj[i] = prune(sorted_unique(i, std::move(c)));
      }
    });
    return adj;
  }

  adjacency pass(const adjacency& adj, uint64_t entry) override {
    adjacency next(r_.n);
    detail::parallel_items((r_.n + 255) / 256, s_.threads, [&](uint64_t chunk) {
      pass_worker w(*this, adj, entry);
      for (uint64_t p = chunk * 256; p < std::min(r_.n, chunk * 256 + 256); ++p) next[p] = w.run(p);
    });
    return next;
  }

  // One node's list in a pass, its buffers kept from node to node.
  class pass_worker {
   public:
    pass_worker(const cpu_engine& e, const adjacency& adj, uint64_t entry) : e_(e), adj_(adj), entry_(entry) {}
    std::vector<uint32_t> run(uint64_t p) {
      list_.assign(1, {{e_.dist(p, entry_), uint32_t(entry_)}, false});
      seen_.clear();
      seen_.insert(uint32_t(entry_));
      seen_list_.clear();
      for (;;) {
        const auto open = std::find_if(list_.begin(), list_.end(), [](const listed& l) { return !l.expanded; });
        if (open == list_.end()) break;
        open->expanded = true;
        seen_list_.push_back(open->c);
        const uint32_t x = open->c.id;  // the list's inserts below move its entries
        for (uint32_t y : adj_[x]) {
          if (!seen_.insert(y).second) continue;
          const candidate c{e_.dist(p, y), y};
          const auto pos = std::lower_bound(list_.begin(), list_.end(), c,
                                            [](const listed& l, const candidate& x) { return l.c < x; });
          if (size_t(pos - list_.begin()) >= e_.s_.list) continue;
          list_.insert(pos, {c, false});
          if (list_.size() > e_.s_.list) list_.pop_back();
        }
      }
      for (uint32_t y : adj_[p]) seen_list_.push_back({e_.dist(p, y), y});
      return e_.prune(sorted_unique(p, std::move(seen_list_)));
    }

   private:
    struct listed {
      candidate c;
      bool expanded;
    };
    const cpu_engine& e_;
    const adjacency& adj_;
    uint64_t entry_;
    std::vector<listed> list_;
    std::vector<candidate> seen_list_;
    std::unordered_set<uint32_t> seen_;
  };

  adjacency reverse(const adjacency& adj) override {
    std::vector<std::pair<uint32_t, uint32_t>> rev;  // (to, from)
    for (uint64_t u = 0; u < r_.n; ++u)
      for (uint32_t v : adj[u]) rev.push_back({v, uint32_t(u)});
    std::sort(rev.begin(), rev.end());
    std::vector<uint64_t> start(r_.n + 1, 0);
    for (const auto& e : rev) ++start[e.first + 1];
    for (uint64_t i = 0; i < r_.n; ++i) start[i + 1] += start[i];
    adjacency next(r_.n);
    detail::parallel_for(r_.n, s_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t v = b; v < e; ++v) {
        std::vector<candidate> c;
        for (uint32_t u : adj[v]) c.push_back({dist(v, u), u});
        for (uint64_t r = start[v]; r < start[v + 1]; ++r) c.push_back({dist(v, rev[r].second), rev[r].second});
        c = sorted_unique(v, std::move(c));
        if (c.size() <= s_.degree) {
          for (const candidate& x : c) next[v].push_back(x.id);
        } else {
          next[v] = prune(c);
        }
      }
    });
    return next;
  }

 private:
  float dist(uint64_t a, uint64_t b) const { return row_l2(r_.x + a * r_.dim, r_.x + b * r_.dim, r_.dim); }

  std::vector<uint32_t> prune(const std::vector<candidate>& c) const {
    return robust_prune(c, s_.degree, s_.alpha, [&](uint32_t a, uint32_t b) { return dist(a, b); });
  }

  float_rows r_;
  graph_shape s_;
};

}  // namespace

std::unique_ptr<graph_engine> make_cpu_graph_engine(float_rows rows, const graph_shape& shape) {
  return std::make_unique<cpu_engine>(rows, shape);
}

std::vector<uint32_t> pass_node(float_rows rows, const graph_shape& shape, const adjacency& adj, uint64_t entry,
                                uint64_t p) {
  const cpu_engine e(rows, shape);
  return cpu_engine::pass_worker(e, adj, entry).run(p);
}

}  // namespace deepwell::vectors
