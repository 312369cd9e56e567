#include "deepwell/vectors/build.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "common/file_io.hpp"
#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/vectors/index_file.hpp"
#include "deepwell/vectors/distance.hpp"
#include "deepwell/vectors/search.hpp"
#include "vectors/build_state.hpp"
#include "vectors/graph_engine.hpp"
#include "vectors/graph_steps.hpp"
#include "vectors/row_source.hpp"
#include "vectors/shards.hpp"

namespace deepwell::vectors {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// The build's state between phases: the quantiser, the graph (in memory on
// the whole set, or a shard at a time: shards.hpp), the file.
class builder {
 public:
  // `shard_vectors` 0: every row held and one graph over them all.
  builder(const vector_set& data, metric m, const build_options& o, const engine_factory& make, uint64_t shard_vectors)
      : s_(data), o_(o), make_(make), rows_(data, m, o.threads), dim_(data.dim), row_(rows_.width()), n_(data.count),
        shard_vectors_(shard_vectors) {
    if (!shard_vectors_) {
      rows_.hold_all();
      engine_ = make(float_rows{rows_.held(), n_, row_}, shape_of(o_));
    } else {
      // Sharded: the engine of the quantiser and the shards' assignment
      // holds the quantiser's sample alone.
      sample_ = evenly_spaced(rows_, quantiser_sample());
      engine_ = make(float_rows{sample_.data(), sample_.size() / row_, row_}, shape_of(o_));
    }
  }
  uint64_t quantiser_sample() const { return std::min<uint64_t>(n_, 32768); }  // 128 a centroid

  void quantiser(uint32_t m) {
    subspaces_ = m;
    sub_dim_ = dim_ / m;
    std::vector<float> own;
    if (sample_.empty()) own = evenly_spaced(rows_, quantiser_sample());
    const std::vector<float>& pts = sample_.empty() ? own : sample_;
    const uint64_t sample = pts.size() / row_;
    codebook_.assign(uint64_t(m) * pq_centroids * sub_dim_, 0.f);
    for (uint32_t sub = 0; sub < m; ++sub) {
      const std::vector<float> c = kmeans(*engine_, &pts[sub * sub_dim_], sample, sub_dim_, row_, pq_centroids, 12);
      std::memcpy(&codebook_[uint64_t(sub) * pq_centroids * sub_dim_], c.data(), c.size() * 4);
    }
    codes_.resize(n_ * m);
    // Held rows in one step; otherwise a block of rows at a time.
    const uint64_t chunk = rows_.held() ? n_ : uint64_t(1) << 18;
    std::vector<uint32_t> code;
    std::vector<float> scratch, part;
    for (uint64_t first = 0; first < n_; first += chunk) {
      const uint64_t count = std::min(chunk, n_ - first);
      const float* x = rows_.rows(first, count, scratch, o_.threads);
      code.resize(count);
      for (uint32_t sub = 0; sub < m; ++sub) {
        const float* pts = x + sub * sub_dim_;
        uint64_t stride = row_;
        if (!rows_.held()) {  // the subspace's columns alone: what a GPU engine copies
          part.resize(count * sub_dim_);
          detail::parallel_for(count, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
            for (uint64_t i = b; i < e; ++i) std::memcpy(&part[i * sub_dim_], x + i * row_ + sub * sub_dim_, 4ull * sub_dim_);
          });
          pts = part.data();
          stride = sub_dim_;
        }
        engine_->nearest(pts, count, sub_dim_, stride, &codebook_[uint64_t(sub) * pq_centroids * sub_dim_],
                         pq_centroids, 1, code.data());
        detail::parallel_for(count, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
          for (uint64_t i = b; i < e; ++i) codes_[(first + i) * m + sub] = uint8_t(code[i]);
        });
      }
    }
  }

  void first_graph() { adj_ = vectors::first_graph(*engine_, float_rows{rows_.held(), n_, row_}, o_); }
  uint64_t medoid() const { return vectors::medoid(rows_, o_.threads); }
  void pass(uint64_t entry) { adj_ = vamana_pass(*engine_, adj_, entry, o_.progress); }

  // The sharded graph: built once the quantiser is done (its assignment
  // needs the engine), then a shard a phase.
  uint32_t shards() {
    if (!sharded_) sharded_ = std::make_unique<sharded_graph>(rows_, o_, make_, *engine_, shard_vectors_);
    return sharded_->shards();
  }
  void merge_shard(uint32_t s) {
    if (adj_.size() != n_) adj_.resize(n_);
    sharded_->merge_shard(s, adj_);
  }

  // The order records are laid out in: rows[i] is the row stored as node i.
  // by_row keeps the rows' order; neighbourhoods starts each page with the
  // first row not yet placed, in breadth-first order from the entry, and
  // fills it with that row's neighbours, then theirs, nearest first (a
  // page a node and its neighbourhood: a search that reads it for one step
  // finds the records of its next steps already in the cache).
  std::vector<uint32_t> layout(uint64_t entry, uint32_t per_page) const {
    std::vector<uint32_t> rows;
    rows.reserve(n_);
    if (o_.layout == record_layout::by_row) {
      for (uint64_t i = 0; i < n_; ++i) rows.push_back(uint32_t(i));
      return rows;
    }
    std::vector<uint32_t> bfs;
    bfs.reserve(n_);
    std::vector<char> seen(n_, 0), placed(n_, 0);
    // Breadth-first from the entry, then from each row it does not reach.
    auto visit = [&](uint64_t root) {
      if (seen[root]) return;
      seen[root] = 1;
      size_t q = bfs.size();
      bfs.push_back(uint32_t(root));
      for (; q < bfs.size(); ++q)
        for (const uint32_t v : adj_[bfs[q]])
          if (!seen[v]) seen[v] = 1, bfs.push_back(v);
    };
    visit(entry);
    for (uint64_t root = 0; root < n_; ++root) visit(root);
    for (const uint32_t u : bfs) {
      if (placed[u]) continue;
      const size_t start = rows.size();
      placed[u] = 1;
      rows.push_back(u);
      for (size_t q = start; q < rows.size() && rows.size() - start < per_page; ++q)
        for (const uint32_t v : adj_[rows[q]]) {
          if (rows.size() - start >= per_page) break;
          if (!placed[v]) placed[v] = 1, rows.push_back(v);
        }
    }
    return rows;
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
    const auto t = clock_type::now();
    const std::vector<uint32_t> rows = layout(entry, h.records_per_page);
    layout_seconds_ = since(t);
    std::vector<uint32_t> node_of(n_);
    for (uint64_t i = 0; i < n_; ++i) node_of[rows[i]] = uint32_t(i);
    h.entry = node_of[entry];
    auto up = [](uint64_t x, uint64_t a) { return (x + a - 1) / a * a; };
    const uint64_t pages = (n_ + h.records_per_page - 1) / h.records_per_page;
    h.records_at = std::max<uint64_t>(index_header_bytes, page_bytes);
    h.records_bytes = pages * page_bytes;
    h.codebook_at = h.records_at + h.records_bytes;
    h.codebook_bytes = codebook_.size() * 4;
    h.codes_at = up(h.codebook_at + h.codebook_bytes, 4096);
    h.codes_bytes = codes_.size();
    h.labels_at = up(h.codes_at + h.codes_bytes, 4096);
    h.labels_bytes = 4 * n_;
    h.sums_at = up(h.labels_at + h.labels_bytes, 4096);
    const uint64_t record_sums = section_sum_count(h.records_bytes), book_sums = section_sum_count(h.codebook_bytes),
                   code_sums = section_sum_count(h.codes_bytes), label_sums = section_sum_count(h.labels_bytes);
    h.sums_bytes = 4 * (record_sums + book_sums + code_sums + label_sums);
    h.build_seed = o_.seed;
    h.build_list = o_.list;
    h.build_alpha = o_.alpha;
    std::vector<uint32_t> sums(record_sums + book_sums + code_sums + label_sums);

    detail::replacing_file out(path);
    const uint64_t row = s_.row_bytes(), deg_at = record_degree_at(dim_, s_.type);
    // The records a batch of pages at a time (16 MiB): pages filled and
    // summed on the build's threads, each batch one write.
    const uint64_t batch = std::max<uint64_t>(1, (16ull << 20) / page_bytes);
    std::vector<uint8_t> buf(std::min(batch, pages) * page_bytes);
    for (uint64_t first = 0; first < pages; first += batch) {
      const uint64_t count = std::min(batch, pages - first);
      detail::parallel_for(count, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
        for (uint64_t k = b; k < e; ++k) {
          const uint64_t pg = first + k;
          uint8_t* page = buf.data() + k * page_bytes;
          std::memset(page, 0, page_bytes);
          for (uint32_t r = 0; r < h.records_per_page; ++r) {
            const uint64_t node = pg * h.records_per_page + r;
            if (node >= n_) break;
            const uint32_t at = rows[node];
            uint8_t* rec = page + uint64_t(r) * h.record_bytes;
            std::memcpy(rec, s_.row(at), row);
            const uint32_t used = uint32_t(adj_[at].size());
            std::memcpy(rec + deg_at, &used, 4);
            for (uint32_t j = 0; j < o_.degree; ++j) {
              const uint32_t slot = j < used ? node_of[adj_[at][j]] : no_neighbour;
              std::memcpy(rec + deg_at + 4 + 4ull * j, &slot, 4);
            }
          }
          section_sums(page, page_bytes, &sums[pg * (page_bytes / file_sum_block)], 1);
        }
      });
      out.write(buf.data(), count * page_bytes, h.records_at + first * page_bytes);
    }
    std::vector<uint8_t> codes(codes_.size());
    detail::parallel_for(n_, o_.threads, [&](unsigned, uint64_t b, uint64_t e) {
      for (uint64_t i = b; i < e; ++i)
        std::memcpy(&codes[i * subspaces_], &codes_[uint64_t(rows[i]) * subspaces_], subspaces_);
    });
    section_sums(codebook_.data(), h.codebook_bytes, &sums[record_sums], o_.threads);
    out.write(codebook_.data(), h.codebook_bytes, h.codebook_at);
    section_sums(codes.data(), h.codes_bytes, &sums[record_sums + book_sums], o_.threads);
    out.write(codes.data(), h.codes_bytes, h.codes_at);
    section_sums(rows.data(), h.labels_bytes, &sums[record_sums + book_sums + code_sums], o_.threads);
    out.write(rows.data(), h.labels_bytes, h.labels_at);
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

  double layout_seconds() const { return layout_seconds_; }
  uint64_t redone_nodes() const { return engine_->redone_nodes() + (sharded_ ? sharded_->redone_nodes() : 0); }

  uint64_t edges() const {
    uint64_t e = 0;
    for (const auto& a : adj_) e += a.size();
    return e;
  }

 private:
  const vector_set& s_;
  build_options o_;
  engine_factory make_;
  row_source rows_;
  uint32_t dim_, row_;  // the vectors' dimension; the graph's rows' (one more for the inner product)
  uint64_t n_;
  uint64_t shard_vectors_;
  std::vector<float> sample_;  // sharded: the quantiser's sample rows, the engine's
  std::unique_ptr<graph_engine> engine_;
  std::unique_ptr<sharded_graph> sharded_;
  uint32_t subspaces_ = 0, sub_dim_ = 0;
  std::vector<float> codebook_;
  std::vector<uint8_t> codes_;
  std::vector<std::vector<uint32_t>> adj_;
  double layout_seconds_ = 0;
};

}  // namespace

uint32_t default_pq_subspaces(uint32_t dim, metric m) {
  // The inner product ranks by a sum whose errors do not shrink with the
  // distance as L2's do: its searches need finer codes for the same recall
  // (20,000 x 40 float16 at list 64: 0.83 with 4 dims a byte, 0.97 with 2).
  const uint32_t target = std::clamp<uint32_t>(dim / (m == metric::inner_product ? 2 : 4), 1, 64);
  for (uint32_t m = target; m > 1; --m)
    if (dim % m == 0) return m;
  return 1;
}

build_report build_index(const vector_set& data, metric m, const std::string& path, const build_options& o) {
  return build_index_with(data, m, path, o, make_cpu_graph_engine);
}

build_report build_index_with(const vector_set& data, metric m, const std::string& path, const build_options& o,
                              const engine_factory& make) {
  const std::string what = "vector index " + path;
  if (!data.data || data.count == 0) throw error(what + ": no vectors to index");
  if (data.count >= no_neighbour) throw error(what + ": at most 2^32 - 2 vectors");
  if (data.dim == 0 || data.dim > max_dim) throw error(what + ": dimension " + std::to_string(data.dim) + " (1 to 4096)");
  if (uint32_t(m) > 1) throw error(what + ": unknown metric");
  if (o.degree == 0 || o.degree > max_degree) throw error(what + ": degree " + std::to_string(o.degree) + " (1 to 256)");
  if (o.list < o.degree) throw error(what + ": the build list (" + std::to_string(o.list) + ") must be >= the degree");
  if (!(o.alpha >= 1.0f && o.alpha <= 4.0f)) throw error(what + ": alpha " + std::to_string(o.alpha) + " (1 to 4)");
  const uint32_t sub = o.pq_subspaces ? o.pq_subspaces : default_pq_subspaces(data.dim, m);
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
  // 64 KiB at most: the largest record fits, and an index opens only with
  // pages up to that.
  if (page < 4096 || page > 65536 || (page & (page - 1)) || page < record)
    throw error(what + ": page size " + std::to_string(page) + " (a power of two from 4096 to 65536 holding a " +
                std::to_string(record) + "-byte record)");
  if (o.passes > max_build_passes)
    throw error(what + ": " + std::to_string(o.passes) + " Vamana passes (at most " + std::to_string(max_build_passes) +
                ")");
  check_finite(data, what);

  if (o.shard_vectors && o.shard_vectors < min_shard_vectors)
    throw error(what + ": shard_vectors " + std::to_string(o.shard_vectors) + " (0, or at least " +
                std::to_string(min_shard_vectors) + ")");
  // Shards only where the set is larger than one.
  const uint64_t shard_vectors = o.shard_vectors < data.count ? o.shard_vectors : 0;

  build_report r;
  r.vectors = data.count;
  r.pq_subspaces = sub;
  auto say = [&](const char* s) {
    if (o.progress) std::fprintf(stderr, "vectors build: %s\n", s);
  };
  const std::string state_file = path + ".build";
  const uint64_t fingerprint = build_fingerprint(data, m, o, sub, shard_vectors);
  build_state kept;
  if (o.resume) kept = load_build_state(state_file, fingerprint, data.count, o.degree);
  auto t = clock_type::now();
  builder b(data, m, o, make, shard_vectors);
  // A state save writes the whole graph so far. After a shard (there may be
  // thousands) it is skipped while the work since the last save is under
  // ten times that save's cost: saves stay under a tenth of the build, and a
  // crash loses at most ten saves' worth of shards. A stop always saves.
  auto last_saved = clock_type::now();
  double last_save_seconds = 0;
  auto done = [&](uint32_t phases, const char* name, bool may_skip = false) {
    const bool stop = o.keep_going && !o.keep_going();
    if (o.resume && (stop || !may_skip || since(last_saved) >= 10 * last_save_seconds)) {
      const auto saving = clock_type::now();
      b.save(state_file, fingerprint, phases);
      last_save_seconds = since(saving);
      r.state_seconds += last_save_seconds;
      last_saved = clock_type::now();
    }
    if (stop) throw error(what + ": stopped after " + name + " (kept in " + state_file + "; build again to resume)");
  };
  // In memory the phases are the quantiser, the first graph and the
  // passes; sharded, the quantiser and the shards.
  if (!shard_vectors && kept.phases > 2 + o.passes) kept = build_state{};  // more passes than this build wants
  if (kept.phases) {
    r.resumed_phases = kept.phases;
    b.restore(sub, kept);
  }
  if (kept.phases < 1) {
    say("quantiser");
    b.quantiser(sub);
    done(1, "the quantiser");
  }
  r.quantiser_seconds = since(t);
  t = clock_type::now();
  const uint64_t entry = b.medoid();
  if (shard_vectors) {
    r.shards = b.shards();
    for (uint32_t s = kept.phases > 1 ? kept.phases - 1 : 0; s < r.shards; ++s) {
      const auto step = clock_type::now();
      b.merge_shard(s);
      r.passes_seconds += since(step);
      done(2 + s, "a shard", true);
    }
  } else {
    if (kept.phases < 2) {
      say("first graph");
      const auto step = clock_type::now();
      b.first_graph();
      r.first_graph_seconds = since(step);
      done(2, "the first graph");
    }
    for (uint32_t p = kept.phases > 2 ? kept.phases - 2 : 0; p < o.passes; ++p) {
      say("pass");
      const auto step = clock_type::now();
      b.pass(entry);
      r.passes_seconds += since(step);
      done(3 + p, "a Vamana pass");
    }
  }
  r.graph_seconds = since(t);
  r.edges = b.edges();
  r.redone_nodes = b.redone_nodes();
  t = clock_type::now();
  say("write");
  b.write(path, m, entry, page);
  r.write_seconds = since(t);
  r.layout_seconds = b.layout_seconds();
  if (o.resume) ::unlink(state_file.c_str());
  return r;
}

}  // namespace deepwell::vectors
