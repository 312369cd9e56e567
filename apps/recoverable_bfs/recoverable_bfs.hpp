// A BFS that survives being killed: its state lives on a writable
// namespace (the "state file") and every level is made durable before the
// next one starts, so a restart resumes from the last level completed and
// ends with the depths an uninterrupted run gives. Written once over the
// executors (cpu_exec.hpp: CPU threads; gpu_exec.cuh: GPU warps) and graph
// views (edges.hpp) the other algorithms use; the state goes through a
// deepwell page cache (GPU or host) like any array. docs/recoverable-bfs.md
// describes the design and the tests.
//
// The state file (4-byte words; the header copies are one 512-byte sector each):
//
//   byte 0        header copy 0  } generation g lives in copy g % 2: a commit
//   byte 4096     header copy 1  } overwrites the older copy, never the newest
//   byte 65536    depth array (nodes words): a checkpoint of every node whose
//                 depth is <= the header's checkpoint_level; anything larger
//                 there is ignored (it may come from a later checkpoint that
//                 never committed)
//   log_at        the level log: one segment per level after the checkpoint,
//                 the nodes of that depth (the frontier of the next level),
//                 as a list of ids or a bitmap, whichever is smaller
//
// A level: the BFS step in executor memory (as bfs() runs it); then the new
// frontier is compacted into a segment and appended to the log by the
// warps, each persisting what it wrote (array_ref::persist: written back,
// then flushed); then the header (level + 1, the log's new end, counts and a
// checksum of the depths) is written to the older copy and persisted. Only
// what the newest valid header covers is ever read back: log bytes past its
// log_end and depth-array entries above its checkpoint_level are whatever a
// cut left there, and are ignored. When the log is full the whole depth
// array is written as a new checkpoint and the log starts again.
//
// Recovery reads both copies, takes the newest valid one, checks it is for
// this graph and source, rebuilds the depths from the checkpoint and the
// log, and checks them against the header's counts and checksum before it
// goes on. Bad states end with a deepwell::error naming the state and what
// does not match.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/csr_file.hpp"
#include "deepwell/graph/steps.hpp"
#include "deepwell/targets/target.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::graph {

// ---------------------------------------------------------------------------
// The state file's format

inline constexpr char rbfs_magic[8] = {'D', 'W', 'R', 'B', 'F', 'S', '0', '1'};
inline constexpr uint32_t rbfs_version = 1;
inline constexpr uint32_t rbfs_record_bytes = 512;   // one header copy: one sector
inline constexpr uint64_t rbfs_copy_word[2] = {0, 1024};  // bytes 0 and 4096
inline constexpr uint64_t rbfs_depth_word = 16384;          // byte 65536
inline constexpr uint64_t rbfs_align_words = 16384;         // sections start on 64 KiB
inline constexpr uint32_t rbfs_no_checkpoint = 0xFFFFFFFFu;

enum rbfs_flags : uint32_t {
  rbfs_done = 1u << 0,            // the BFS finished: no node has depth level + 1
  rbfs_depths_complete = 1u << 1, // and the depth array holds every depth (checkpoint_level = level)
};

// A header copy. checksum covers the 504 bytes before it.
struct rbfs_header {
  char magic[8];
  uint32_t version;
  uint32_t record_bytes;
  uint64_t generation;   // 1, 2, ...; copy generation % 2
  uint64_t run_id;       // random, per state created: log segments carry it
  uint64_t nodes, edges, graph_hash;  // graph_identity
  uint32_t source;
  uint32_t flags;        // rbfs_flags
  uint64_t depth_at;     // words
  uint64_t log_at;       // words
  uint64_t log_words;    // the log's capacity
  uint32_t level;        // the last level completed: every depth <= level is durable
  uint32_t checkpoint_level;  // the depth array holds the depths <= this (rbfs_no_checkpoint: none)
  uint64_t log_end;      // words of the log in use: segments checkpoint_level + 1 .. level
  uint64_t reached;      // nodes with depth <= level
  uint64_t frontier;     // nodes with depth == level
  uint64_t depth_sum;    // sum over those nodes of rbfs_depth_hash(v, depth) (mod 2^64)
  uint64_t checkpoints;  // checkpoints written (statistics)
  uint64_t segments;     // segments appended (statistics)
  uint64_t bottom_up_levels;
  uint8_t reserved[352];
  uint64_t checksum;
};
static_assert(sizeof(rbfs_header) == rbfs_record_bytes, "a header copy is one 512-byte sector");

// A log segment: 4 header words, then the payload, padded to 4 words.
enum rbfs_segment_kind : uint32_t { rbfs_list = 1, rbfs_bitmap = 2 };
inline constexpr uint32_t rbfs_segment_tag = 0x44574700u;  // "\0GWD" | kind

DW_HD inline uint64_t rbfs_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
DW_HD inline uint64_t rbfs_depth_hash(uint64_t v, uint32_t depth) { return rbfs_mix(rbfs_mix(v) ^ depth); }

inline uint64_t rbfs_bitmap_words(uint64_t nodes) { return (nodes + 31) / 32; }
// Payload words of a level of `count` nodes, and its kind: a list while it is
// smaller than the bitmap.
inline rbfs_segment_kind rbfs_kind_for(uint64_t count, uint64_t nodes) {
  return count < rbfs_bitmap_words(nodes) ? rbfs_list : rbfs_bitmap;
}
inline uint64_t rbfs_payload_words(rbfs_segment_kind k, uint64_t count, uint64_t nodes) {
  return k == rbfs_list ? count : rbfs_bitmap_words(nodes);
}
inline uint64_t rbfs_segment_words(rbfs_segment_kind k, uint64_t count, uint64_t nodes) {
  return 4 + (rbfs_payload_words(k, count, nodes) + 3) / 4 * 4;
}
inline uint32_t rbfs_segment_check(uint64_t run_id, uint32_t kind, uint32_t level, uint32_t count) {
  return uint32_t(rbfs_mix(run_id ^ (uint64_t(level) << 32 | count) ^ (uint64_t(kind) << 60)));
}

// 64-bit FNV-1a (header checksums).
uint64_t rbfs_checksum(const void* p, size_t bytes);
inline uint64_t rbfs_header_checksum(const rbfs_header& h) { return rbfs_checksum(&h, offsetof(rbfs_header, checksum)); }

// Where the sections go for a graph of `nodes` nodes; log_words 0: the
// default (2 x nodes + 64 Ki words: a checkpoint only after a quarter of the
// nodes' count of levels).
struct rbfs_layout {
  uint64_t depth_at, log_at, log_words, total_words;
};
rbfs_layout rbfs_layout_for(uint64_t nodes, uint64_t log_words = 0);
// Bytes the state namespace needs for a graph of `nodes` nodes.
inline uint64_t bfs_state_bytes(uint64_t nodes, uint64_t log_words = 0) {
  return rbfs_layout_for(nodes, log_words).total_words * 4;
}

// What a state says it is for. The hash covers the graph header's fields
// (nodes, edges, id width, weights, flags, seed, origin) and a sample of 64
// offsets and 64 neighbour ids, so the same graph read from a .dwg file or
// held in memory has the same identity.
struct graph_identity {
  uint64_t nodes = 0, edges = 0, hash = 0;
};
graph_identity identity_of(const csr_file& f);
graph_identity identity_of(const csr_graph& g);

// A state image read on the host (a durable image, a file's bytes): which
// header copy is in force and what it says. For tests and `--info`.
struct bfs_state_summary {
  bool valid = false;       // some copy is valid
  bool empty = false;       // no valid copy and nothing worth keeping: a fresh state
  int copy = -1;            // the copy in force
  rbfs_header header{};     // its contents
  // The other copy, when it is valid and the generation before, of the same
  // run: what a resume falls back to when the newest copy's level did not
  // land whole (a level's segment and header share one flush).
  bool older_valid = false;
  rbfs_header older{};
  std::string problem;      // why no copy is valid ("copy 0: ...; copy 1: ...")
};
bfs_state_summary inspect_bfs_state(const uint8_t* image, uint64_t bytes);

// Creates (or extends) a state file of bfs_state_bytes(nodes) and opens it
// as a writable target (O_DIRECT if asked).
std::shared_ptr<target> open_bfs_state_file(const std::string& path, uint64_t nodes, bool direct = false,
                                            uint64_t log_words = 0);

// The state namespace served through a page cache (the graph's or another):
// an array of 4-byte words. `name` goes into every error (the file's path).
class bfs_state {
 public:
  bfs_state(std::shared_ptr<page_cache> cache, uint32_t nsid, std::string name)
      : words_(std::move(cache), nsid), name_(std::move(name)) {
    if (words_.ref().read_only) throw error(name_ + ": a recoverable BFS state must be writable");
  }
  const std::string& name() const { return name_; }
  array<uint32_t>& words() { return words_; }
  page_cache& cache() const { return words_.cache(); }

 private:
  array<uint32_t> words_;
  std::string name_;
};

// ---------------------------------------------------------------------------
// The steps (steps.hpp's contract: a warp's chunk of items [v0, v0 + lanes))

// Executor memory the steps count into.
enum rbfs_counter : unsigned {
  rbfs_c_count = 0,     // nodes put into a segment / a list's cursor
  rbfs_c_sum = 1,       // sum of their rbfs_depth_hash
  rbfs_c_reached = 2,   // recovery: nodes with depth <= level
  rbfs_c_frontier = 3,  // recovery: nodes with depth == level
  rbfs_c_bad = 4,       // recovery: ids out of range or met twice
  rbfs_c_failures = 5,  // state accesses that failed
  rbfs_c_status = 6,    // the first failure's packed request_status
  rbfs_counters = 8
};

namespace detail {
DW_HD inline void rbfs_add(unsigned long long* c, unsigned i, uint64_t v) {
  if (v) client_atomic<unsigned long long>(c[i]).fetch_add((unsigned long long)v, memory_order_relaxed);
}
DW_HD inline void rbfs_fail(unsigned long long* c, request_status s) {
  client_atomic<unsigned long long>(c[rbfs_c_failures]).fetch_add(1, memory_order_relaxed);
  unsigned long long expected = 0;
  client_atomic<unsigned long long>(c[rbfs_c_status]).compare_exchange_strong(expected, s.pack(), memory_order_relaxed);
}
}  // namespace detail

// Copies words [at, at + words) of the state to or from mem[0, words): items
// are chunks of `chunk` words; each warp moves its chunks with one bulk copy
// and, for persist, then makes them durable (every warp persists what it
// wrote itself, so when the step is over all of it is durable).
struct rbfs_copy_step {
  enum op_t : uint32_t { read, write, write_persist };
  array_ref<uint32_t> state{};
  uint32_t* mem = nullptr;
  uint64_t at = 0, words = 0;
  uint32_t chunk = 1024;
  op_t op = read;
  unsigned long long* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G&, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t b = v0 * chunk;
    if (b >= words) return 0;
    const uint64_t lim = (v0 + popcount32(mask)) * chunk;
    const uint64_t e = lim < words ? lim : words;
    request_status r = op == read ? state.read_range(w, mem + b, at + b, e - b) : state.write_range(w, mem + b, at + b, e - b);
    if (r.ok() && op == write_persist) r = state.persist(w, at + b, e - b);
    if (!r.ok() && w.lane() == lowest_lane(mask)) detail::rbfs_fail(c, r);
    return 0;
  }
};

// A level's segment from the depths in executor memory: the nodes of depth
// `level`, counted and hashed, and (kind) listed or set in a bitmap (out:
// zeroed first for a bitmap). Items are nodes.
struct rbfs_level_step {
  const uint32_t* depth = nullptr;
  uint64_t n = 0;
  uint32_t level = 0;
  uint32_t kind = 0;  // 0: count and hash only; rbfs_list; rbfs_bitmap
  uint32_t* out = nullptr;
  uint64_t capacity = 0;  // list entries out may hold
  unsigned long long* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G&, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t v = v0 + lane_rank(w, mask);
    const bool found = v < n && ld(depth[v]) == level;
    const unsigned hits = w.ballot(mask, found);
    if (!hits) return 0;
    const uint64_t sum = warp_total(w, mask, hits, found ? rbfs_depth_hash(v, level) : 0);
    const unsigned lead = lowest_lane(hits);
    unsigned long long base = 0;
    if (w.lane() == lead) {
      detail::rbfs_add(c, rbfs_c_sum, sum);
      base = client_atomic<unsigned long long>(c[rbfs_c_count]).fetch_add(popcount32(hits), memory_order_relaxed);
    }
    base = shfl64(w, mask, base, lead);
    if (kind == rbfs_list) {
      const uint64_t at = base + popcount32(hits & ((1u << w.lane()) - 1));
      if (found && at < capacity) st(out[at], uint32_t(v));
    } else if (kind == rbfs_bitmap) {
      // OR the bits of the lanes that share a word (all of a GPU warp's 32
      // nodes; one per CPU thread).
      const uint64_t word = v >> 5;
      uint32_t bits = 0;
      for (unsigned m = hits; m; m &= m - 1) {
        const unsigned l = lowest_lane(m);
        const uint64_t lv = shfl64(w, mask, v, l);
        if ((lv >> 5) == word) bits |= 1u << (lv & 31);
      }
      const unsigned same = w.match_any(mask, word);
      if (bits && w.lane() == lowest_lane(same & hits))
        client_atomic<uint32_t>(out[word]).fetch_or(bits, memory_order_relaxed);
    }
    return 0;
  }
};

// Recovery: a segment's payload (in executor memory) into the depths. Items
// are list entries or nodes (bitmap). A node already reached, or an id out
// of range, counts as bad (a corrupt log).
struct rbfs_apply_step {
  uint32_t* depth = nullptr;
  const uint32_t* payload = nullptr;
  uint64_t n = 0, items = 0;
  uint32_t level = 0;
  uint32_t kind = rbfs_list;
  unsigned long long* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G&, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t i = v0 + lane_rank(w, mask);
    uint32_t bad = 0;
    if (i < items) {
      uint64_t v = ~0ull;
      if (kind == rbfs_list)
        v = ld(payload[i]);
      else if ((ld(payload[i >> 5]) >> (i & 31)) & 1u)
        v = i;
      if (v != ~0ull) {
        uint32_t expect = not_reached;
        if (v >= n || !client_atomic<uint32_t>(depth[v]).compare_exchange_strong(expect, level, memory_order_relaxed))
          bad = 1;
      }
    }
    const unsigned b = w.ballot(mask, bad != 0);
    if (b && w.lane() == lowest_lane(b)) detail::rbfs_add(c, rbfs_c_bad, popcount32(b));
    return 0;
  }
};

// Recovery: depths above `keep` become not_reached (a checkpoint's entries
// from a later checkpoint that never committed), or, with count, the nodes
// of depth <= level and == level are counted and hashed. Items are nodes.
struct rbfs_scan_step {
  uint32_t* depth = nullptr;
  uint64_t n = 0;
  bool count = false;
  uint32_t keep = 0;   // !count: entries > keep are dropped
  uint32_t level = 0;  // count: the level the header says
  unsigned long long* c = nullptr;

  template <class Warp, class G>
  DW_HD uint64_t operator()(const Warp& w, const G&, uint64_t v0) const {
    const unsigned mask = w.active();
    const uint64_t v = v0 + lane_rank(w, mask);
    if (!count) {
      if (v < n && ld(depth[v]) > keep) st(depth[v], not_reached);
      return 0;
    }
    const uint32_t d = v < n ? ld(depth[v]) : not_reached;
    const unsigned in = w.ballot(mask, d <= level);
    if (!in) return 0;
    const unsigned at = w.ballot(mask, d == level);
    const uint64_t sum = warp_total(w, mask, in, d <= level ? rbfs_depth_hash(v, d) : 0);
    if (w.lane() == lowest_lane(in)) {
      detail::rbfs_add(c, rbfs_c_reached, popcount32(in));
      detail::rbfs_add(c, rbfs_c_frontier, popcount32(at));
      detail::rbfs_add(c, rbfs_c_sum, sum);
    }
    return 0;
  }
};

// ---------------------------------------------------------------------------
// The driver

struct recoverable_bfs_options {
  uint32_t source = 0;
  bool direction_optimizing = true;
  double alpha = 15, beta = 18;  // the plain BFS's direction rule (bfs_options, algorithms.hpp)
  double bottom_up_fraction = 0;  // > 0: the old rule (bfs_options::bottom_up_fraction)
  graph_identity graph;  // required: what the state is checked against (identity_of)
  enum class start_t {
    resume_or_create,  // resume a valid state; start one when there is none
    resume,            // resume; an error when there is no state
    create,            // start over, whatever the namespace holds
  } start = start_t::resume_or_create;
  // Write the whole depth array when the BFS finishes (the state file then
  // holds the result: rbfs_depths_complete). Costs a write of 4 bytes a node.
  bool store_depths = false;
  uint64_t log_words = 0;  // a new state's log capacity (0: rbfs_layout_for's default); tests use small ones
  uint32_t max_levels = ~0u;  // stop after committing this many levels in this call (unfinished)
  // Called after each commit (a new state's level 0, each level, the end)
  // with the level now durable (tests, kill demonstrations). May throw: the
  // state stays as committed.
  std::function<void(uint32_t level)> after_commit;
  // Checked for errors before each level is committed (a level computed from
  // failed reads must not become durable): the cache the graph is read
  // through, when it is not the state's.
  const page_cache* graph_cache = nullptr;
};

struct recoverable_bfs_result {
  std::vector<uint32_t> depth;   // not_reached for nodes the source does not reach (so far, if unfinished)
  uint64_t reached = 0;
  bool finished = false;         // the BFS is complete (this call or an earlier one)
  bool created = false;          // this call started a new state
  bool resumed = false;          // this call resumed a valid state
  uint32_t resumed_from = 0;     // its level
  uint32_t level = 0;            // the last level committed
  uint64_t levels_run = 0;       // BFS levels this call ran and committed
  uint64_t segments = 0, checkpoints = 0, commits = 0;  // this call's
  uint64_t state_words_written = 0;
  unsigned bottom_up_levels = 0;  // this call's
  double persist_seconds = 0;    // building, writing and persisting segments, checkpoints and headers
  double recover_seconds = 0;    // reading and checking the state
  run_stats stats;               // seconds: everything after the buffers are allocated, results not copied out
};

namespace detail {

struct rbfs_counts {
  uint64_t v[rbfs_counters];
};

// A recoverable BFS run: the executor's buffers and the state.
template <class Exec, class G>
class rbfs_run {
 public:
  rbfs_run(Exec& x, const G& g, bfs_state& st, const recoverable_bfs_options& o)
      : x_(x), g_(g), st_(st), o_(o), n_(g.nodes()),
        depth_(x.template alloc<uint32_t>(n_)),
        seg_cap_(4 + (rbfs_bitmap_words(n_) + 3) / 4 * 4),
        seg_(x.template alloc<uint32_t>(seg_cap_)),
        hdr_(x.template alloc<rbfs_header>(2)),
        cnt_(x.template alloc<unsigned long long>(rbfs_counters)) {}

  recoverable_bfs_result run() {
    recoverable_bfs_result r;
    const auto t0 = std::chrono::steady_clock::now();
    open(r);
    r.recover_seconds = seconds_since(t0);
    if (r.created && o_.after_commit) o_.after_commit(h_.level);
    uint64_t frontier = h_.frontier;
    bfs_direction dir(o_.direction_optimizing, o_.alpha, o_.beta, o_.bottom_up_fraction);
    while (!(h_.flags & rbfs_done) && r.levels_run < o_.max_levels) {
      const uint32_t level = h_.level;
      bfs_step s;
      s.depth = depth_.data();
      s.level = level;
      s.bottom_up = dir.choose(x_, g_, depth_.data(), level, frontier);
      s.c = x_.counters();
      x_.reset_counters();
      r.stats.edges_looked += x_.run(g_, s, n_);
      const step_counters c = x_.read_counters();
      dir.record(c);
      if (c.bad_ids)
        throw error(st_.name() + ": level " + std::to_string(level) + " met " + std::to_string(c.bad_ids) +
                    " neighbour ids out of range (a corrupt graph): not committed");
      check_caches("level " + std::to_string(level + 1));
      r.bottom_up_levels += s.bottom_up;
      ++r.stats.iterations;
      const auto tp = std::chrono::steady_clock::now();
      commit_level(level, c.changed, s.bottom_up, r);
      r.persist_seconds += seconds_since(tp);
      frontier = c.changed;
      if (c.changed) ++r.levels_run;
      if (o_.after_commit) o_.after_commit(h_.level);
    }
    r.stats.seconds = seconds_since(t0);
    r.finished = (h_.flags & rbfs_done) != 0;
    r.level = h_.level;
    r.reached = h_.reached;
    r.state_words_written = written_;
    r.depth = x_.download(depth_.data(), n_);
    return r;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  std::string where() const { return st_.name() + ": "; }

  void reset() { x_.fill(cnt_.data(), rbfs_counters, 0ull); }
  rbfs_counts counts() {
    const std::vector<unsigned long long> v = x_.download(cnt_.data(), rbfs_counters);
    rbfs_counts c{};
    for (unsigned i = 0; i < rbfs_counters; ++i) c.v[i] = v[i];
    return c;
  }
  void check_failures(const rbfs_counts& c, const std::string& what) {
    if (c.v[rbfs_c_failures])
      throw error(where() + what + " failed: " + describe(request_status::unpack(uint32_t(c.v[rbfs_c_status]))) +
                  " (" + std::to_string(c.v[rbfs_c_failures]) + " accesses)");
  }
  void check_caches(const std::string& what) {
    for (const page_cache* pc : {static_cast<const page_cache*>(&st_.cache()), o_.graph_cache}) {
      if (!pc) continue;
      const request_status e = pc->last_error();
      if (!e.ok()) throw error(where() + "the cache reported an error before " + what + " was committed: " + describe(e));
    }
  }

  // Moves state words [at, at + words) to / from mem.
  void copy(uint32_t* mem, uint64_t at, uint64_t words, rbfs_copy_step::op_t op, const std::string& what) {
    if (!words) return;
    reset();
    rbfs_copy_step s;
    s.state = st_.words().ref();
    s.mem = mem;
    s.at = at;
    s.words = words;
    s.chunk = 1024;
    s.op = op;
    s.c = cnt_.data();
    x_.run(g_, s, (words + s.chunk - 1) / s.chunk);
    check_failures(counts(), what);
    if (op != rbfs_copy_step::read) written_ += words;
  }

  // Reads both copies and decides: resume h_, or start a new state.
  void open(recoverable_bfs_result& r) {
    if (o_.graph.nodes != n_)
      throw error(where() + "the options' graph identity says " + std::to_string(o_.graph.nodes) +
                  " nodes, the graph view has " + std::to_string(n_) + " (set options.graph = identity_of(the graph))");
    ::deepwell::graph::detail::check_source(o_.source, n_);
    const uint64_t have = st_.words().size();
    uint32_t* hw = reinterpret_cast<uint32_t*>(hdr_.data());
    copy(hw, rbfs_copy_word[0], 128, rbfs_copy_step::read, "reading header copy 0");
    copy(hw + 128, rbfs_copy_word[1], 128, rbfs_copy_step::read, "reading header copy 1");
    const std::vector<rbfs_header> hs = x_.download(hdr_.data(), 2);
    std::vector<uint8_t> image(2 * 4096, 0);
    std::memcpy(image.data(), &hs[0], sizeof(rbfs_header));
    std::memcpy(image.data() + 4096, &hs[1], sizeof(rbfs_header));
    const bfs_state_summary sum = inspect_bfs_state(image.data(), image.size());
    const bool all_zero = is_zero(hs[0]) && is_zero(hs[1]);
    // A level's segment and its header reach the medium under one flush
    // (commit), so a cut may leave the newest header without its segment:
    // its recovery then fails, and the older copy (the level before, whose
    // flush completed) is in force. A failed first commit (generation 1,
    // nothing older) is a state that never got past its creation.
    bool never_created = false;
    if (o_.start != recoverable_bfs_options::start_t::create && sum.valid) {
      h_ = sum.header;
      check_matches(have);
      try {
        recover();
      } catch (const error&) {
        if (sum.older_valid) {
          h_ = sum.older;
          recover();  // a failure here is a corrupt state: report the older copy's problem
        } else if (sum.header.generation == 1) {
          never_created = true;
        } else {
          throw;
        }
      }
      if (!never_created) {
        r.resumed = true;
        r.resumed_from = h_.level;
        return;
      }
    }
    if (o_.start == recoverable_bfs_options::start_t::resume)
      throw error(where() + "no recoverable BFS state to resume" +
                  (never_created ? " (its creation was cut short)" : sum.problem.empty() ? "" : " (" + sum.problem + ")"));
    if (o_.start == recoverable_bfs_options::start_t::resume_or_create && !sum.empty && !never_created)
      throw error(where() + "not a recoverable BFS state, or a corrupt one: no valid header (" + sum.problem +
                  "); start over (a new state) to overwrite it");
    const rbfs_layout l = rbfs_layout_for(n_, o_.log_words);
    if (l.total_words > have)
      throw error(where() + "too small for the recoverable BFS state of a graph of " + std::to_string(n_) + " nodes: " +
                  std::to_string(have * 4) + " bytes, " + std::to_string(l.total_words * 4) + " needed");
    if (!all_zero) {  // nothing of the old state may outlive a crash in what follows
      x_.fill(hw, 256, 0u);
      copy(hw, rbfs_copy_word[0], 128, rbfs_copy_step::write_persist, "clearing header copy 0");
      copy(hw + 128, rbfs_copy_word[1], 128, rbfs_copy_step::write_persist, "clearing header copy 1");
    }
    create(l);
    r.created = true;
  }

  static bool is_zero(const rbfs_header& h) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&h);
    for (size_t i = 0; i < sizeof h; ++i)
      if (p[i]) return false;
    return true;
  }

  void check_matches(uint64_t have) {
    const graph_identity& g = o_.graph;
    if (h_.nodes != g.nodes || h_.edges != g.edges || h_.graph_hash != g.hash) {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "the recoverable BFS state is for another graph (%llu nodes, %llu edges, identity %016llx; this graph: %llu nodes, %llu edges, "
                    "identity %016llx)",
                    (unsigned long long)h_.nodes, (unsigned long long)h_.edges, (unsigned long long)h_.graph_hash,
                    (unsigned long long)g.nodes, (unsigned long long)g.edges, (unsigned long long)g.hash);
      throw error(where() + buf);
    }
    if (h_.source != o_.source)
      throw error(where() + "the recoverable BFS state is for source " + std::to_string(h_.source) + ", not " +
                  std::to_string(o_.source) + " (start over to replace it)");
    if (h_.depth_at != rbfs_depth_word || h_.log_at < h_.depth_at + n_ || h_.log_at + h_.log_words > have ||
        h_.log_end > h_.log_words)
      throw error(where() + "the recoverable BFS state's layout (depth array at word " + std::to_string(h_.depth_at) + ", log at word " +
                  std::to_string(h_.log_at) + ", " + std::to_string(h_.log_words) + " words, " +
                  std::to_string(h_.log_end) + " used) does not fit this graph and a namespace of " +
                  std::to_string(have) + " words");
    if (h_.reached > n_ || h_.frontier > h_.reached ||
        (h_.checkpoint_level != rbfs_no_checkpoint && h_.checkpoint_level > h_.level))
      throw error(where() + "the recoverable BFS state's header has impossible counts (level " + std::to_string(h_.level) + ", " +
                  std::to_string(h_.reached) + " reached, " + std::to_string(h_.frontier) + " in the frontier)");
  }

  // Rebuilds the depths from the checkpoint and the log, then checks them.
  void recover() {
    uint32_t* d = depth_.data();
    if (h_.checkpoint_level != rbfs_no_checkpoint) {
      copy(d, h_.depth_at, n_, rbfs_copy_step::read, "reading the depth checkpoint");
      rbfs_scan_step s;  // a later checkpoint's entries that never committed
      s.depth = d;
      s.n = n_;
      s.keep = h_.checkpoint_level;
      x_.run(g_, s, n_);
    } else {
      x_.fill(d, n_, not_reached);
    }
    uint64_t pos = 0;
    uint32_t next = h_.checkpoint_level == rbfs_no_checkpoint ? 0 : h_.checkpoint_level + 1;
    uint32_t* seg = seg_.data();
    while (pos < h_.log_end) {
      const std::string at = "the log segment at word " + std::to_string(pos) + " (level " + std::to_string(next) + ")";
      if (h_.log_end - pos < 4) throw error(where() + at + " is cut short by the log's end");
      copy(seg, h_.log_at + pos, 4, rbfs_copy_step::read, "reading " + at);
      const std::vector<uint32_t> sh = x_.download(seg, 4);
      const uint32_t kind = sh[0] & 0xFFu;
      if ((sh[0] & ~0xFFu) != rbfs_segment_tag || (kind != rbfs_list && kind != rbfs_bitmap) || sh[1] != next ||
          sh[3] != rbfs_segment_check(h_.run_id, kind, sh[1], sh[2]))
        throw error(where() + at + " is corrupt (tag " + std::to_string(sh[0]) + ", level " + std::to_string(sh[1]) + ")");
      const rbfs_segment_kind k = rbfs_segment_kind(kind);
      if (sh[2] > n_ || (k == rbfs_list && sh[2] >= rbfs_bitmap_words(n_) && sh[2] > 1))
        throw error(where() + at + " is corrupt (" + std::to_string(sh[2]) + " nodes)");
      const uint64_t words = rbfs_segment_words(k, sh[2], n_);
      if (words > h_.log_end - pos) throw error(where() + at + " runs past the log's end");
      const uint64_t payload = rbfs_payload_words(k, sh[2], n_);
      copy(seg + 4, h_.log_at + pos + 4, payload, rbfs_copy_step::read, "reading " + at);
      reset();
      rbfs_apply_step a;
      a.depth = d;
      a.payload = seg + 4;
      a.n = n_;
      a.items = k == rbfs_list ? sh[2] : n_;
      a.level = next;
      a.kind = k;
      a.c = cnt_.data();
      x_.run(g_, a, a.items);
      if (const uint64_t bad = counts().v[rbfs_c_bad])
        throw error(where() + at + " names " + std::to_string(bad) + " nodes out of range or reached before");
      pos += words;
      ++next;
    }
    if (next != h_.level + 1)
      throw error(where() + "the log ends at level " + std::to_string(int64_t(next) - 1) + ", the header says level " +
                  std::to_string(h_.level));
    reset();
    rbfs_scan_step s;
    s.depth = d;
    s.n = n_;
    s.count = true;
    s.level = h_.level;
    s.c = cnt_.data();
    x_.run(g_, s, n_);
    const rbfs_counts c = counts();
    if (c.v[rbfs_c_reached] != h_.reached || c.v[rbfs_c_frontier] != h_.frontier || c.v[rbfs_c_sum] != h_.depth_sum)
      throw error(where() + "the depths read back do not match the header (" + std::to_string(c.v[rbfs_c_reached]) +
                  " nodes reached, " + std::to_string(c.v[rbfs_c_frontier]) + " at level " + std::to_string(h_.level) +
                  "; the header says " + std::to_string(h_.reached) + " and " + std::to_string(h_.frontier) +
                  (c.v[rbfs_c_sum] != h_.depth_sum ? ", and the checksum differs" : "") + ")");
  }

  // A new state: level 0 is the source, in the log's first segment.
  void create(const rbfs_layout& l) {
    std::memset(&h_, 0, sizeof h_);
    std::memcpy(h_.magic, rbfs_magic, sizeof rbfs_magic);
    h_.version = rbfs_version;
    h_.record_bytes = rbfs_record_bytes;
    h_.generation = 0;
    std::random_device rd;
    h_.run_id = (uint64_t(rd()) << 32 | rd()) ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    h_.nodes = o_.graph.nodes;
    h_.edges = o_.graph.edges;
    h_.graph_hash = o_.graph.hash;
    h_.source = o_.source;
    h_.depth_at = l.depth_at;
    h_.log_at = l.log_at;
    h_.log_words = l.log_words;
    h_.checkpoint_level = rbfs_no_checkpoint;
    x_.fill(depth_.data(), n_, not_reached);
    x_.set(depth_.data() + o_.source, 0u);
    append(0, 1, rbfs_list);
    h_.level = 0;
    h_.reached = 1;
    h_.frontier = 1;
    h_.depth_sum = rbfs_depth_hash(o_.source, 0);
    commit();
  }

  // The segment of the nodes at depth `level` (count of them) written at
  // the log's end (made durable by the commit that follows, with its
  // header); the header is not touched.
  uint64_t append(uint32_t level, uint64_t count, rbfs_segment_kind k) {
    const uint64_t words = rbfs_segment_words(k, count, n_);
    uint32_t* seg = seg_.data();
    x_.fill(seg, words, 0u);
    const uint64_t sum = build(level, k, seg + 4, count);
    const uint32_t head[4] = {rbfs_segment_tag | k, level, uint32_t(count),
                              rbfs_segment_check(h_.run_id, k, level, uint32_t(count))};
    for (unsigned i = 0; i < 4; ++i) x_.set(seg + i, head[i]);
    copy(seg, h_.log_at + h_.log_end, words, rbfs_copy_step::write, "writing level " + std::to_string(level));
    h_.log_end += words;
    ++h_.segments;
    return sum;
  }

  // Counts and hashes the nodes at depth `level` (and lists or maps them into out).
  uint64_t build(uint32_t level, uint32_t kind, uint32_t* out, uint64_t expect) {
    reset();
    rbfs_level_step s;
    s.depth = depth_.data();
    s.n = n_;
    s.level = level;
    s.kind = kind;
    s.out = out;
    s.capacity = kind == rbfs_list ? expect : 0;
    s.c = cnt_.data();
    x_.run(g_, s, n_);
    const rbfs_counts c = counts();
    if (c.v[rbfs_c_count] != expect)
      throw error(where() + "level " + std::to_string(level) + " has " + std::to_string(c.v[rbfs_c_count]) +
                  " nodes, the BFS step counted " + std::to_string(expect));
    return c.v[rbfs_c_sum];
  }

  // The level after `level` (with `found` nodes) made durable.
  void commit_level(uint32_t level, uint64_t found, bool bottom_up, recoverable_bfs_result& r) {
    h_.bottom_up_levels += bottom_up;
    if (!found) {
      h_.flags |= rbfs_done;
      if (o_.store_depths) {
        checkpoint(level);
        h_.flags |= rbfs_depths_complete;
        ++r.checkpoints;
      }
      commit();
      ++r.commits;
      return;
    }
    const uint32_t next = level + 1;
    const rbfs_segment_kind k = rbfs_kind_for(found, n_);
    uint64_t sum = 0;
    if (h_.log_end + rbfs_segment_words(k, found, n_) > h_.log_words) {
      sum = build(next, 0, nullptr, found);
      checkpoint(next);
      ++r.checkpoints;
    } else {
      sum = append(next, found, k);
      ++r.segments;
    }
    h_.level = next;
    h_.reached += found;
    h_.frontier = found;
    h_.depth_sum += sum;
    commit();
    ++r.commits;
  }

  // Every depth <= `level` (all the executor holds) written to the depth
  // array and persisted; the log starts again. Entries the old header does
  // not cover (> its checkpoint level) are ignored by its recovery, so
  // overwriting the array keeps it valid until the new header commits.
  void checkpoint(uint32_t level) {
    copy(depth_.data(), h_.depth_at, n_, rbfs_copy_step::write_persist, "persisting the depth checkpoint");
    h_.checkpoint_level = level;
    h_.log_end = 0;
    ++h_.checkpoints;
  }

  // The next generation of the header into the older copy, then one flush
  // for it and the segment written before it (per-warp persists of the
  // segment, then the header's, took three or four flushes a level). The
  // cache's flush writes every dirty page back, then flushes each writable
  // dataset: other writable datasets of the same cache are made durable
  // too, which costs time, not correctness.
  void commit() {
    ++h_.generation;
    h_.checksum = rbfs_header_checksum(h_);
    x_.set(hdr_.data(), h_);
    const std::string what = "committing level " + std::to_string(h_.level);
    copy(reinterpret_cast<uint32_t*>(hdr_.data()), rbfs_copy_word[h_.generation % 2], 128, rbfs_copy_step::write, what);
    if (const request_status e = st_.cache().flush(); !e.ok()) throw error(where() + what + " failed: " + describe(e));
  }

  Exec& x_;
  const G& g_;
  bfs_state& st_;
  const recoverable_bfs_options& o_;
  uint64_t n_;
  decltype(std::declval<Exec&>().template alloc<uint32_t>(0)) depth_;
  uint64_t seg_cap_;
  decltype(std::declval<Exec&>().template alloc<uint32_t>(0)) seg_;
  decltype(std::declval<Exec&>().template alloc<rbfs_header>(0)) hdr_;
  decltype(std::declval<Exec&>().template alloc<unsigned long long>(0)) cnt_;
  rbfs_header h_{};
  uint64_t written_ = 0;
};

}  // namespace detail

// Runs (or resumes) a BFS whose state is `st`; returns when the BFS is
// finished (or max_levels levels were committed). Throws deepwell::error
// for a state of another graph or source, a corrupt state, and any failed
// access to the state (a level is only ever committed whole).
template <class Exec, class G>
recoverable_bfs_result recoverable_bfs(Exec& x, const G& g, bfs_state& st, const recoverable_bfs_options& o) {
  detail::rbfs_run<Exec, G> run(x, g, st, o);
  return run.run();
}

}  // namespace deepwell::graph
