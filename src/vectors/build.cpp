#include "deepwell/vectors/build.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <vector>

#include "common/file_io.hpp"
#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/vectors/index_file.hpp"
#include "deepwell/vectors/search.hpp"
#include "vectors/build_state.hpp"

namespace deepwell::vectors {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Work items handed out one at a time (the clusters differ in size).
template <class Fn>
void for_each_item(uint64_t n, unsigned threads, Fn&& fn) {
  std::atomic<uint64_t> next{0};
  const unsigned t = unsigned(std::min<uint64_t>(detail::thread_count(threads), std::max<uint64_t>(n, 1)));
  detail::parallel_for(t, t, [&](unsigned, uint64_t, uint64_t) {
    for (uint64_t i; (i = next.fetch_add(1)) < n;) fn(i);
  });
}

// Eight partial sums, so that the compiler keeps them in one vector
// register (a single running sum is a chain it may not reorder).
float l2(const float* a, const float* b, uint32_t dim) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t d = 0;
  for (; d + 8 <= dim; d += 8)
    for (uint32_t j = 0; j < 8; ++j) {
      const float x = a[d + j] - b[d + j];
      acc[j] += x * x;
    }
  float tail = 0;
  for (; d < dim; ++d) {
    const float x = a[d] - b[d];
    tail += x * x;
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// The centre (of k, `dim` floats each) nearest to x; the first among equals.
uint32_t nearest(const float* x, const float* centres, uint32_t k, uint32_t dim) {
  float best = std::numeric_limits<float>::infinity();
  uint32_t at = 0;
  for (uint32_t j = 0; j < k; ++j) {
    const float d = l2(x, centres + uint64_t(j) * dim, dim);
    if (d < best) best = d, at = j;
  }
  return at;
}

struct candidate {
  float d;
  uint32_t id;
  bool operator<(const candidate& o) const { return d < o.d || (d == o.d && id < o.id); }
  bool operator==(const candidate& o) const { return id == o.id; }
};

// Lloyd's k-means of `n` points of `dim` floats (rows `stride` apart) into
// k centres, started from evenly spaced points; empty clusters keep their centre.
std::vector<float> kmeans(const float* pts, uint64_t n, uint32_t dim, uint64_t stride, uint32_t k, unsigned iters,
                          unsigned threads) {
  std::vector<float> c(uint64_t(k) * dim);
  for (uint32_t j = 0; j < k; ++j) std::memcpy(&c[uint64_t(j) * dim], pts + (uint64_t(j) * n / k) * stride, 4ull * dim);
  std::vector<uint32_t> owner(n);
  for (unsigned it = 0; it < iters; ++it) {
    detail::parallel_for(n, threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) owner[i] = nearest(pts + i * stride, c.data(), k, dim);
    });
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

class builder {
 public:
  builder(const vector_set& data, const build_options& o) : s_(data), o_(o), dim_(data.dim), n_(data.count) {
    x_.resize(n_ * dim_);
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) row_as_float(s_, i, &x_[i * dim_]);
    });
  }
  const float* vec(uint64_t i) const { return &x_[i * dim_]; }
  float dist(uint64_t a, uint64_t b) const { return l2(vec(a), vec(b), dim_); }
  // `count` vectors spread evenly over the set, copied: what k-means trains on.
  std::vector<float> evenly_spaced(uint64_t count) const {
    std::vector<float> pts(count * dim_);
    for (uint64_t s = 0; s < count; ++s) std::memcpy(&pts[s * dim_], vec(s * n_ / count), 4ull * dim_);
    return pts;
  }

  void quantiser(uint32_t m) {
    subspaces_ = m;
    sub_dim_ = dim_ / m;
    const uint64_t sample = std::min<uint64_t>(n_, 32768);  // 128 a centroid
    const std::vector<float> pts = evenly_spaced(sample);
    codebook_.assign(uint64_t(m) * pq_centroids * sub_dim_, 0.f);
    for_each_item(m, o_.threads, [&](uint64_t sub) {
      const std::vector<float> c = kmeans(&pts[sub * sub_dim_], sample, sub_dim_, dim_, pq_centroids, 12, 1);
      std::memcpy(&codebook_[sub * pq_centroids * sub_dim_], c.data(), c.size() * 4);
    });
    codes_.resize(n_ * m);
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i)
        for (uint32_t sub = 0; sub < m; ++sub)
          codes_[i * m + sub] = uint8_t(
              nearest(vec(i) + sub * sub_dim_, &codebook_[uint64_t(sub) * pq_centroids * sub_dim_], pq_centroids, sub_dim_));
    });
  }

  // RobustPrune: from candidates sorted nearest first (unique, without p),
  // keep a candidate unless a kept one is nearer to it, by alpha, than p is.
  std::vector<uint32_t> prune(const std::vector<candidate>& c) const {
    std::vector<uint32_t> out;
    std::vector<char> gone(c.size(), 0);
    for (size_t i = 0; i < c.size() && out.size() < o_.degree; ++i) {
      if (gone[i]) continue;
      out.push_back(c[i].id);
      for (size_t j = i + 1; j < c.size(); ++j)
        if (!gone[j] && o_.alpha * dist(c[i].id, c[j].id) <= c[j].d) gone[j] = 1;
    }
    return out;
  }
  std::vector<candidate> sorted_unique(uint64_t p, std::vector<candidate> c) const {
    c.erase(std::remove_if(c.begin(), c.end(), [&](const candidate& x) { return x.id == p || x.id == no_neighbour; }),
            c.end());
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());  // equal ids have equal distances: adjacent
    return c;
  }

  // The first graph: each vector's nearest among the members of its two
  // nearest coarse clusters, pruned.
  void first_graph() {
    const uint32_t k = uint32_t(std::clamp<double>(std::round(std::sqrt(double(n_))), 1, 4096));
    const std::vector<float> pts = evenly_spaced(std::min<uint64_t>(n_, uint64_t(k) * 64));
    const uint64_t sample = pts.size() / dim_;
    const std::vector<float> centres = kmeans(pts.data(), sample, dim_, dim_, k, 8, o_.threads);
    const uint32_t ways = k > 1 ? 2 : 1;
    std::vector<uint32_t> near(n_ * ways);
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      std::vector<candidate> c(k);
      for (uint64_t i = b; i < e; ++i) {
        for (uint32_t j = 0; j < k; ++j) c[j] = {l2(vec(i), &centres[uint64_t(j) * dim_], dim_), j};
        std::partial_sort(c.begin(), c.begin() + ways, c.end());
        for (uint32_t w = 0; w < ways; ++w) near[i * ways + w] = c[w].id;
      }
    });
    std::vector<std::vector<uint32_t>> members(k);
    for (uint64_t i = 0; i < n_; ++i)
      for (uint32_t w = 0; w < ways; ++w) members[near[i * ways + w]].push_back(uint32_t(i));
    const uint32_t per = std::min<uint32_t>(2 * o_.degree, uint32_t(std::min<uint64_t>(n_ - 1, 1u << 20)));
    std::vector<candidate> cand(n_ * ways * per, candidate{std::numeric_limits<float>::infinity(), no_neighbour});
    for_each_item(k, o_.threads, [&](uint64_t j) {
      const std::vector<uint32_t>& m = members[j];
      std::vector<candidate> c;
      for (uint32_t a : m) {
        c.clear();
        for (uint32_t b : m)
          if (b != a) c.push_back({dist(a, b), b});
        const size_t keep = std::min<size_t>(per, c.size());
        std::partial_sort(c.begin(), c.begin() + keep, c.end());
        const uint32_t way = near[uint64_t(a) * ways] == j ? 0 : 1;
        std::copy(c.begin(), c.begin() + keep, cand.begin() + (uint64_t(a) * ways + way) * per);
      }
    });
    adj_.assign(n_, {});
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i) {
        std::vector<candidate> c(cand.begin() + i * ways * per, cand.begin() + (i + 1) * ways * per);
        adj_[i] = prune(sorted_unique(i, std::move(c)));
      }
    });
    add_reverse_edges();
  }

  // Each vector's list grows by the vectors that point at it, pruned again where it overflows.
  void add_reverse_edges() {
    std::vector<std::pair<uint32_t, uint32_t>> rev;  // (to, from)
    for (uint64_t u = 0; u < n_; ++u)
      for (uint32_t v : adj_[u]) rev.push_back({v, uint32_t(u)});
    std::sort(rev.begin(), rev.end());
    std::vector<uint64_t> start(n_ + 1, 0);
    for (const auto& e : rev) ++start[e.first + 1];
    for (uint64_t i = 0; i < n_; ++i) start[i + 1] += start[i];
    std::vector<std::vector<uint32_t>> next(n_);
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t v = b; v < e; ++v) {
        std::vector<candidate> c;
        for (uint32_t u : adj_[v]) c.push_back({dist(v, u), u});
        for (uint64_t r = start[v]; r < start[v + 1]; ++r) c.push_back({dist(v, rev[r].second), rev[r].second});
        c = sorted_unique(v, std::move(c));
        if (c.size() <= o_.degree) {
          for (const candidate& x : c) next[v].push_back(x.id);
        } else {
          next[v] = prune(c);
        }
      }
    });
    adj_ = std::move(next);
  }

  uint64_t medoid() const {
    std::vector<double> mean(dim_, 0.0);
    for (uint64_t i = 0; i < n_; ++i)
      for (uint32_t d = 0; d < dim_; ++d) mean[d] += x_[i * dim_ + d];
    std::vector<float> m(dim_);
    for (uint32_t d = 0; d < dim_; ++d) m[d] = float(mean[d] / double(n_));
    uint64_t best = 0;
    float bd = std::numeric_limits<float>::infinity();
    for (uint64_t i = 0; i < n_; ++i) {
      const float d = l2(vec(i), m.data(), dim_);
      if (d < bd) bd = d, best = i;
    }
    return best;
  }

  // A Vamana pass: each vector's list from a greedy search for it on the
  // graph as it was before the pass (so that the order of work does not matter).
  void pass(uint64_t entry) {
    std::vector<std::vector<uint32_t>> next(n_);
    for_each_item((n_ + 255) / 256, o_.threads, [&](uint64_t chunk) {
      struct listed {
        candidate c;
        bool expanded;
      };
      std::vector<listed> list;
      std::vector<candidate> seen_list;
      std::unordered_set<uint32_t> seen;
      for (uint64_t p = chunk * 256; p < std::min(n_, chunk * 256 + 256); ++p) {
        list.assign(1, {{dist(p, entry), uint32_t(entry)}, false});
        seen.clear();
        seen.insert(uint32_t(entry));
        seen_list.clear();
        for (;;) {
          const auto open = std::find_if(list.begin(), list.end(), [](const listed& l) { return !l.expanded; });
          if (open == list.end()) break;
          open->expanded = true;
          seen_list.push_back(open->c);
          const uint32_t x = open->c.id;  // the list's inserts below move its entries
          for (uint32_t y : adj_[x]) {
            if (!seen.insert(y).second) continue;
            const candidate c{dist(p, y), y};
            const auto pos = std::lower_bound(list.begin(), list.end(), c,
                                              [](const listed& l, const candidate& x) { return l.c < x; });
            if (size_t(pos - list.begin()) >= o_.list) continue;
            list.insert(pos, {c, false});
            if (list.size() > o_.list) list.pop_back();
          }
        }
        for (uint32_t y : adj_[p]) seen_list.push_back({dist(p, y), y});
        next[p] = prune(sorted_unique(p, std::move(seen_list)));
      }
    });
    adj_ = std::move(next);
    add_reverse_edges();
  }

  void write(const std::string& path, metric m, uint64_t entry, uint32_t page_bytes) {
    index_header h{};
    std::memcpy(h.magic, index_magic, 8);
    h.version = index_version;
    h.header_bytes = sizeof(index_header);
    h.count = n_;
    h.dim = dim_;
    h.type = s_.type;
    h.distance = m;
    h.degree = o_.degree;
    h.record_bytes = record_bytes_for(dim_, s_.type, o_.degree);
    h.page_bytes = page_bytes;
    h.records_per_page = page_bytes / h.record_bytes;
    h.pq_subspaces = subspaces_;
    h.pq_sub_dim = sub_dim_;
    h.entry = entry;
    auto up = [](uint64_t x, uint64_t a) { return (x + a - 1) / a * a; };
    const uint64_t pages = (n_ + h.records_per_page - 1) / h.records_per_page;
    h.records_at = std::max<uint64_t>(index_header_bytes, page_bytes);
    h.records_bytes = pages * page_bytes;
    h.codebook_at = h.records_at + h.records_bytes;
    h.codebook_bytes = codebook_.size() * 4;
    h.codes_at = up(h.codebook_at + h.codebook_bytes, 4096);
    h.codes_bytes = codes_.size();
    h.sums_at = up(h.codes_at + h.codes_bytes, 4096);
    const uint64_t record_sums = section_sum_count(h.records_bytes), book_sums = section_sum_count(h.codebook_bytes),
                   code_sums = section_sum_count(h.codes_bytes);
    h.sums_bytes = 4 * (record_sums + book_sums + code_sums);
    h.build_seed = o_.seed;
    h.build_list = o_.list;
    h.build_alpha = o_.alpha;
    std::vector<uint32_t> sums(record_sums + book_sums + code_sums);

    detail::replacing_file out(path);
    const uint64_t row = s_.row_bytes(), deg_at = record_degree_at(dim_, s_.type);
    std::vector<uint8_t> page(page_bytes);
    for (uint64_t pg = 0; pg < pages; ++pg) {
      std::fill(page.begin(), page.end(), 0);
      for (uint32_t r = 0; r < h.records_per_page; ++r) {
        const uint64_t node = pg * h.records_per_page + r;
        if (node >= n_) break;
        uint8_t* rec = page.data() + uint64_t(r) * h.record_bytes;
        std::memcpy(rec, s_.row(node), row);
        const uint32_t used = uint32_t(adj_[node].size());
        std::memcpy(rec + deg_at, &used, 4);
        std::vector<uint32_t> slots(o_.degree, no_neighbour);
        std::copy(adj_[node].begin(), adj_[node].end(), slots.begin());
        std::memcpy(rec + deg_at + 4, slots.data(), 4ull * o_.degree);
      }
      section_sums(page.data(), page_bytes, &sums[pg * (page_bytes / file_sum_block)], 1);
      out.write(page.data(), page_bytes, h.records_at + pg * page_bytes);
    }
    section_sums(codebook_.data(), h.codebook_bytes, &sums[record_sums], o_.threads);
    out.write(codebook_.data(), h.codebook_bytes, h.codebook_at);
    section_sums(codes_.data(), h.codes_bytes, &sums[record_sums + book_sums], o_.threads);
    out.write(codes_.data(), h.codes_bytes, h.codes_at);
    out.write(sums.data(), h.sums_bytes, h.sums_at);
    h.sums_crc = crc32c(0, sums.data(), h.sums_bytes);
    h.header_crc = header_crc(h);
    std::vector<uint8_t> head(index_header_bytes, 0);
    std::memcpy(head.data(), &h, sizeof h);
    out.write(head.data(), head.size(), 0);
    out.commit();
  }

  // A kept state's results in place of computing them.
  void restore(uint32_t subspaces, build_state& s) {
    subspaces_ = subspaces;
    sub_dim_ = dim_ / subspaces;
    codebook_ = std::move(s.codebook);
    codes_ = std::move(s.codes);
    if (s.phases >= 2) adj_ = std::move(s.adj);
  }
  void save(const std::string& file, uint64_t fingerprint, uint32_t phases) const {
    save_build_state(file, fingerprint, n_, phases, codebook_, codes_, adj_, o_.degree);
  }

  uint64_t edges() const {
    uint64_t e = 0;
    for (const auto& a : adj_) e += a.size();
    return e;
  }

 private:
  const vector_set& s_;
  build_options o_;
  uint32_t dim_;
  uint64_t n_;
  std::vector<float> x_;
  uint32_t subspaces_ = 0, sub_dim_ = 0;
  std::vector<float> codebook_;
  std::vector<uint8_t> codes_;
  std::vector<std::vector<uint32_t>> adj_;
};

}  // namespace

uint32_t default_pq_subspaces(uint32_t dim) {
  const uint32_t target = std::clamp<uint32_t>(dim / 4, 1, 64);
  for (uint32_t m = target; m > 1; --m)
    if (dim % m == 0) return m;
  return 1;
}

build_report build_index(const vector_set& data, metric m, const std::string& path, const build_options& o) {
  const std::string what = "vector index " + path;
  if (!data.data || data.count == 0) throw error(what + ": no vectors to index");
  if (data.count >= no_neighbour) throw error(what + ": at most 2^32 - 2 vectors");
  if (data.dim == 0 || data.dim > max_dim) throw error(what + ": dimension " + std::to_string(data.dim) + " (1 to 4096)");
  if (uint32_t(m) > 1) throw error(what + ": unknown metric");
  if (o.degree == 0 || o.degree > max_degree) throw error(what + ": degree " + std::to_string(o.degree) + " (1 to 256)");
  if (o.list < o.degree) throw error(what + ": the build list (" + std::to_string(o.list) + ") must be >= the degree");
  if (!(o.alpha >= 1.0f && o.alpha <= 4.0f)) throw error(what + ": alpha " + std::to_string(o.alpha) + " (1 to 4)");
  const uint32_t sub = o.pq_subspaces ? o.pq_subspaces : default_pq_subspaces(data.dim);
  if (sub > data.dim || data.dim % sub != 0)
    throw error(what + ": " + std::to_string(sub) + " quantiser subspaces do not divide dimension " +
                std::to_string(data.dim));
  if (sub > 256) throw error(what + ": at most 256 quantiser subspaces");
  const uint32_t record = record_bytes_for(data.dim, data.type, o.degree);
  uint32_t page = o.page_bytes;
  if (!page) {
    page = 4096;
    while (page < record) page *= 2;
  }
  if (page < 4096 || (page & (page - 1)) || page < record)
    throw error(what + ": page size " + std::to_string(page) + " (a power of two >= 4096 holding a " +
                std::to_string(record) + "-byte record)");
  check_finite(data, what);

  build_report r;
  r.vectors = data.count;
  r.pq_subspaces = sub;
  auto say = [&](const char* s) {
    if (o.progress) std::fprintf(stderr, "vectors build: %s\n", s);
  };
  const std::string state_file = path + ".build";
  const uint64_t fingerprint = build_fingerprint(data, m, o, sub);
  build_state kept;
  if (o.resume) kept = load_build_state(state_file, fingerprint, data.count, o.degree);
  if (kept.phases > 2 + o.passes) kept = build_state{};  // more passes than this build wants: start over
  r.resumed_phases = kept.phases;
  auto t = clock_type::now();
  builder b(data, o);
  if (kept.phases) b.restore(sub, kept);
  auto done = [&](uint32_t phases, const char* name) {
    if (o.resume) b.save(state_file, fingerprint, phases);
    if (o.keep_going && !o.keep_going())
      throw error(what + ": stopped after " + name + " (kept in " + state_file + "; build again to resume)");
  };
  if (kept.phases < 1) {
    say("quantiser");
    b.quantiser(sub);
    done(1, "the quantiser");
  }
  r.quantiser_seconds = since(t);
  t = clock_type::now();
  if (kept.phases < 2) {
    say("first graph");
    b.first_graph();
    done(2, "the first graph");
  }
  const uint64_t entry = b.medoid();
  for (uint32_t p = kept.phases > 2 ? kept.phases - 2 : 0; p < o.passes; ++p) {
    say("pass");
    b.pass(entry);
    done(3 + p, "a Vamana pass");
  }
  r.graph_seconds = since(t);
  r.edges = b.edges();
  t = clock_type::now();
  say("write");
  b.write(path, m, entry, page);
  r.write_seconds = since(t);
  if (o.resume) ::unlink(state_file.c_str());
  return r;
}

}  // namespace deepwell::vectors
