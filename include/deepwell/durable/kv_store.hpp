// gpKVS: a persistent key-value store of fixed-size keys and values whose
// table lives on storage (a file, many times the GPU's memory) and is read
// and written through deepwell's page cache by GPU warps (or CPU threads),
// with batched SET, GET and DELETE. Every batch that changes the table is
// one redo transaction of the write-ahead log (durable/log.hpp): when a
// batch call returns, the batch is durable; after a power cut, recovery
// gives the table as it was before or after each batch, never a part of
// one. docs/kv.md describes the format, the protocol and the tests.
//
//   auto link = deepwell::embedded_link();  // or deepwell::server_link::connect(socket): a server's dataset
//   auto cache = deepwell::make_gpu_page_cache(link, {.page_size = 4096, .capacity_bytes = 8ull << 30});
//   using namespace deepwell::durable;
//   kv_options o;
//   o.executor = gpu_kv_support();                         // GPU caches (deepwell_cuda)
//   auto kv = kv_store::create_file(cache, "t.kv", {.value_bytes = 32, .capacity = 100'000'000}, o);
//   kv.set(d_keys, d_values, n, kv_memory::device);          // durable when it returns
//   kv.get(d_keys, d_out, n, kv_memory::device, d_status);   // kv_ok / kv_not_found per key
//   kv.erase(d_keys, n, kv_memory::device);
//   ...  // after a crash, in a new process:
//   auto again = kv_store::open_file(cache, "t.kv", {.value_bytes = 32}, o);   // recovers
//
// The storage (one target: a file, or any target) holds four regions, the
// first three served as namespaces of their own:
//   [0, 64 KiB)                   the kv header (kv_format::superblock), written once at create
//   [64 KiB, + buckets x bucket)  the table: buckets of bucket_bytes (a cache page or part of
//                                 one), each an array of slots {key word, value words}
//   [log_offset, + log bytes)     the write-ahead log (one partition, log_rows rows of 1 KiB)
//   [sums_offset, + sums bytes)   a CRC-32C of each block of the table, checked on every read
//                                 of it (checksummed_target.hpp; docs/kv.md says what it covers)
//
// Keys are 64-bit integers 0 .. kv_format::max_key (2^64 - 3); a slot's key
// word holds key + 2, so that 0 is an empty slot (a new file is zeros) and 1
// a deleted one (a tombstone). A key's home bucket is a hash of it; a bucket
// is searched whole (a warp reads 32 slots at a time), then the next one
// (overflow), until a bucket with an empty slot or max_probe buckets.
//
// A batch (set / erase / a staged mix): (1) duplicates of a key collapse to
// the last op with it (scratch hash set); (2) each warp looks its keys up,
// claims a free slot for every new key (scratch set of claimed slots, so
// two new keys never take one slot), and logs the words it will change
// (new key word, value words, or a tombstone) into rows of the log it
// reserves for itself, then persists them; (3) one warp commits: the commit
// record, persisted, then the entries applied to the table through the
// cache. The table's pages are made durable at checkpoints (the log's:
// page_cache::flush, then the log's epoch advances), which run when the log
// has no room for the next batch, or on request. Recovery (at open) replays
// the committed batches since the last checkpoint.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/config.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/common/warp.hpp"
#include "deepwell/durable/log.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/targets/target.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::durable {

// ---- the on-disk format ----
namespace kv_format {
constexpr char magic[8] = {'D', 'W', 'K', 'V', 'S', 'T', 'R', '1'};
// 2: the table's blocks carry checksums (a sums region after the log).
// Version 1 files (no sums) are still opened, without table checksums.
constexpr uint32_t version = 2;
constexpr uint32_t key_bytes = 8;
constexpr uint32_t min_value_bytes = 8, max_value_bytes = 128;  // a multiple of 8
constexpr uint64_t header_bytes = 64 << 10;                       // the header region
constexpr uint64_t empty_word = 0;                                // a key word never written
constexpr uint64_t tombstone_word = 1;                            // a deleted key
constexpr uint64_t max_key = ~0ull - 2;                           // keys are 0 .. max_key

DW_HD constexpr uint64_t encode(uint64_t key) { return key + 2; }
DW_HD constexpr uint64_t decode(uint64_t word) { return word - 2; }
DW_HD constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
DW_HD inline uint64_t hash(uint64_t x, uint64_t salt = 0x5bd1e9955bd1e995ull) {
  return log_format::mix64(x ^ salt);
}

// The header (one copy, written once at create; 512 bytes at most).
struct superblock {
  char magic[8];
  uint32_t version;
  uint32_t key_bytes;
  uint32_t value_bytes;
  uint32_t slot_words;        // 1 + value_bytes / 8
  uint32_t bucket_bytes;      // a power of two, 512 .. 64 KiB
  uint32_t slots_per_bucket;  // bucket_bytes / (8 * slot_words)
  uint64_t buckets;
  uint32_t max_probe;  // buckets a key may be in: its home and the next max_probe - 1
  uint32_t log_rows;   // rows of the log's one partition
  uint64_t table_offset, table_bytes;
  uint64_t log_offset, log_bytes;
  uint64_t total_bytes;
  uint64_t nonce;  // random at create; names the log (its tag)
  uint64_t sums_offset, sums_bytes;  // the table blocks' checksums (checksummed_target.hpp); 0 in version 1
  uint32_t sum_block;                // table bytes a checksum covers
  uint32_t reserved2;
  uint8_t reserved[360];
  uint32_t reserved1;
  uint32_t checksum;  // of every byte before it
};
static_assert(sizeof(superblock) <= 512, "the kv header fits one sector");
}  // namespace kv_format

// Per-op results (status arrays of set, erase, get and staged batches).
enum kv_status : uint8_t {
  kv_ok = 0,         // set: stored (or superseded by a later op on the key in the batch); erase: erased; get: found
  kv_not_found = 1,  // erase, get: no such key
  kv_full = 2,       // set: no free slot in the key's max_probe buckets (nothing changed)
  kv_bad_key = 3,    // a key above kv_format::max_key, or an unknown op (nothing changed)
  kv_failed = 4,     // I/O failed (the call throws)
};

enum kv_op : uint8_t { kv_op_set = 0, kv_op_erase = 1 };

enum class kv_memory : uint32_t { host, device };

// ---- the table as kernels and CPU threads read it ----

struct kv_probe {
  request_status status{};
  bool found = false;   // find: the key is there; claim: a slot was claimed
  uint64_t slot = 0;    // global slot number (bucket * slots_per_bucket + slot in bucket)
};

namespace kv_detail {
// Claims global slot g in the batch's set of claimed slots (an open
// addressing table of `mask + 1` words, zeroed per batch); false if another
// op holds it.
DW_HD inline bool try_claim(uint64_t* claims, uint64_t mask, uint64_t g) {
  const uint64_t v = g + 1;
  for (uint64_t h = kv_format::hash(v, 0x2545F4914F6CDD1Dull) & mask;; h = (h + 1) & mask) {
    client_atomic<uint64_t> a(claims[h]);
    uint64_t cur = a.load(memory_order_relaxed);
    if (cur == 0 && a.compare_exchange_strong(cur, v, memory_order_relaxed)) return true;
    if (cur == v) return false;
  }
}
DW_HD inline unsigned rank_in(unsigned mask, unsigned lane) { return popcount32(mask & ((1u << lane) - 1)); }
}  // namespace kv_detail

// By value, as array_ref. Every call is warp-collective (the active lanes
// of `w` call it together, each with its own key or none); on CPU threads a
// thread is a warp of one lane. Reads are not ordered with a batch that
// changes the table at the same time: run gets between batches.
struct kv_ref {
  array_ref<uint64_t> table{};  // the table's words
  uint64_t buckets = 0;
  uint32_t bucket_words = 0, slots_per_bucket = 0, slot_words = 0, value_words = 0, max_probe = 0;

  DW_HD uint32_t value_bytes() const { return value_words * 8; }
  DW_HD uint64_t slots() const { return buckets * slots_per_bucket; }
  DW_HD uint64_t home(uint64_t enc) const { return kv_format::hash(enc) % buckets; }
  // The table word of global slot g's key (its value follows).
  DW_HD uint64_t slot_word(uint64_t g) const {
    return (g / slots_per_bucket) * bucket_words + (g % slots_per_bucket) * slot_words;
  }
  DW_HD uint64_t bucket_page(uint64_t b) const { return (b * bucket_words * 8) >> table.cache.page_shift(); }

  // Looks up `key` (every lane of `w` the same one): found and its slot.
  // The lane with `mine` copies the value into `value` (value_words words)
  // when found.
  template <class Warp>
  DW_HD kv_probe find(const Warp& w, uint64_t key, bool mine = false, uint64_t* value = nullptr) const {
    const uint64_t enc = kv_format::encode(key);
    kv_probe out;
    const uint64_t hb = home(enc);
    for (uint32_t p = 0; p < max_probe; ++p) {
      const uint64_t b = (hb + p) % buckets;
      int32_t hit = -1;
      bool empty = false;
      out.status = visit(w, b, [&](const uint64_t* base, unsigned mask, unsigned rank, unsigned lanes) {
        for (uint32_t r = 0; r < slots_per_bucket; r += lanes) {
          const uint32_t s = r + rank;
          const bool in = s < slots_per_bucket;
          const uint64_t k = in ? base[uint64_t(s) * slot_words] : 0;
          const unsigned m = w.ballot(mask, in && k == enc);
          if (w.ballot(mask, in && k == kv_format::empty_word)) empty = true;
          if (m) {
            hit = int32_t(r + kv_detail::rank_in(mask, lowest_lane(m)));
            break;
          }
        }
        if (hit >= 0 && mine && value)
          for (uint32_t j = 0; j < value_words; ++j) value[j] = base[uint64_t(hit) * slot_words + 1 + j];
      });
      if (!out.status.ok()) return out;
      if (hit >= 0) {
        out.found = true;
        out.slot = b * slots_per_bucket + uint32_t(hit);
        return out;
      }
      if (empty) return out;  // the chain ends at a bucket that was never full
    }
    return out;
  }

  // Claims a free slot (empty or deleted) for a new key whose home bucket is
  // `hb` (every lane the same), the first one along the key's buckets that
  // no other op of the batch holds. found = false: none (the table is full
  // there).
  template <class Warp>
  DW_HD kv_probe claim(const Warp& w, uint64_t hb, uint64_t* claims, uint64_t claims_mask) const {
    kv_probe out;
    for (uint32_t p = 0; p < max_probe; ++p) {
      const uint64_t b = (hb + p) % buckets;
      out.status = visit(w, b, [&](const uint64_t* base, unsigned mask, unsigned rank, unsigned lanes) {
        for (uint32_t r = 0; r < slots_per_bucket && !out.found; r += lanes) {
          const uint32_t s = r + rank;
          const bool in = s < slots_per_bucket;
          const uint64_t k = in ? base[uint64_t(s) * slot_words] : ~0ull;
          for (unsigned f = w.ballot(mask, in && k <= kv_format::tombstone_word); f; f &= f - 1) {
            const unsigned l = lowest_lane(f);
            const uint64_t g = b * slots_per_bucket + r + kv_detail::rank_in(mask, l);
            const bool won = w.lane() == l && kv_detail::try_claim(claims, claims_mask, g);
            if (w.ballot(mask, won)) {
              out.found = true;
              out.slot = g;
              break;
            }
          }
        }
      });
      if (!out.status.ok() || out.found) return out;
    }
    return out;
  }

  // One key per lane (`have`): kv_ok with its value copied into `value`
  // (value_words words of the lane's own memory), or kv_not_found (value
  // zeroed), kv_bad_key, kv_failed (`io` says why; the cache's error flag
  // is set).
  template <class Warp>
  DW_HD kv_status get(const Warp& w, bool have, uint64_t key, uint64_t* value, request_status* io = nullptr) const {
    const unsigned mask = w.active();
    const bool valid = have && key <= kv_format::max_key;
    if (valid) table.cache.prefetch(make_key(table.dataset, bucket_page(home(kv_format::encode(key)))), w.queue_hint());
    kv_status st = have ? (valid ? kv_not_found : kv_bad_key) : kv_ok;
    request_status s{};
    for (unsigned t = w.ballot(mask, valid); t; t &= t - 1) {
      const unsigned q = lowest_lane(t);
      const kv_probe r = find(w, shfl64(w, mask, key, q), w.lane() == q, value);
      if (w.lane() == q) {
        s = r.status;
        st = !r.status.ok() ? kv_failed : r.found ? kv_ok : kv_not_found;
      }
    }
    if (have && st != kv_ok && value)
      for (uint32_t j = 0; j < value_words; ++j) value[j] = 0;
    if (io) *io = s;
    return st;
  }

  // Pins bucket b's page for the whole warp and calls f(bucket words, mask,
  // rank, lanes) in every lane.
  template <class Warp, class F>
  DW_HD request_status visit(const Warp& w, uint64_t b, F&& f) const {
    const unsigned mask = w.active();
    const uint64_t byte = b * bucket_words * 8;
    const page_cache_ref& c = table.cache;
    const warp_pin pin = c.acquire(w, true, make_key(table.dataset, byte >> c.page_shift()));
    if (pin.status.ok())
      f(reinterpret_cast<const uint64_t*>(c.page_data(pin.slot) + (byte & (c.page_size() - 1))), mask,
        kv_detail::rank_in(mask, w.lane()), popcount32(mask));
    c.release(w, pin, false);
    c.set_error(pin.status);
    return pin.status;
  }
};

// ---- SET and DELETE from user kernels: ops staged for the next batch ----

// A buffer of ops in the store's memory (device memory for a GPU cache):
// threads of any kernel add ops; the host makes them one durable batch
// (kv_store::commit_staged). Ops on one key staged in one batch: the one
// staged last wins (which one that is among concurrent threads is up to
// the hardware).
struct kv_stage_ref {
  uint64_t* keys = nullptr;
  uint64_t* values = nullptr;  // value_words per op
  uint8_t* ops = nullptr;
  unsigned long long* count = nullptr;
  uint64_t capacity = 0;
  uint32_t value_words = 0;

  // false: the buffer is full (the op is dropped; commit_staged reports how many were).
  DW_HD bool set(uint64_t key, const uint64_t* value) const {
    const uint64_t i = client_atomic<unsigned long long>(*count).fetch_add(1, memory_order_relaxed);
    if (i >= capacity) return false;
    keys[i] = key;
    ops[i] = kv_op_set;
    for (uint32_t j = 0; j < value_words; ++j) values[i * value_words + j] = value[j];
    return true;
  }
  DW_HD bool erase(uint64_t key) const {
    const uint64_t i = client_atomic<unsigned long long>(*count).fetch_add(1, memory_order_relaxed);
    if (i >= capacity) return false;
    keys[i] = key;
    ops[i] = kv_op_erase;
    return true;
  }
};

// What a batch's ops did, each op counted once: the phases count them
// (kv_detail::counters) and a batch's result carries them.
struct kv_op_counts {
  unsigned long long inserted = 0, updated = 0, erased = 0;  // set, erase
  unsigned long long found = 0;                              // get
  unsigned long long not_found = 0;                          // erase, get
  unsigned long long full = 0, bad_key = 0;
  unsigned long long superseded = 0;  // ops overridden by a later op on the same key in the batch
};

// ---- a batch's phases (the store runs them on GPU warps or CPU threads) ----
namespace kv_detail {

enum plan_kind : uint32_t { none = 0, insert = 1, update = 2, remove = 3 };

struct counters {
  uint32_t rows;   // log rows the batch's entries took
  uint32_t error;  // the first failure (request_status::pack), 0 if none
  unsigned long long entries;
  kv_op_counts ops;
};

// Everything a phase reads; pointers are in the store's memory (device
// memory for a GPU cache).
struct batch {
  kv_ref kv;
  log_ref log;
  const uint64_t* keys = nullptr;
  const uint64_t* values = nullptr;  // set: value_words per op; get: the output
  const uint8_t* ops = nullptr;      // nullptr: every op is `op`
  uint8_t op = kv_op_set;
  uint64_t n = 0;
  uint8_t* status = nullptr;
  uint64_t* dedup_keys = nullptr;  // mask + 1 words each
  uint32_t* dedup_win = nullptr;
  uint64_t dedup_mask = 0;
  uint64_t* claims = nullptr;
  uint64_t claims_mask = 0;
  counters* count = nullptr;
  uint64_t txid = 0;
  uint32_t first_row = 0;  // the log partition's tail: the batch's rows start here
  // Each warp persists the rows it appended (many warps: their flushes are
  // shared); else the commit persists them all (CPU threads of one lane,
  // whose entries take a row each: one persist instead of one per op).
  bool warps_persist = true;
};

DW_HD inline void fail(counters* c, request_status s) {
  if (s.ok()) return;
  uint32_t expected = 0;
  client_atomic<uint32_t>(c->error).compare_exchange_strong(expected, s.pack(), memory_order_relaxed);
}
// Whether some op of the batch has failed already (the warp agrees): later
// ops stop rather than each meet the same failure, e.g. a full cache that a
// full disk keeps from evicting, each after the cache's timeout.
template <class Warp>
DW_HD inline bool failed_already(const Warp& w, const counters* c) {
  const bool f = client_atomic<uint32_t>(const_cast<uint32_t&>(c->error)).load(memory_order_relaxed) != 0;
  return w.ballot(w.active(), f) != 0;
}
DW_HD inline void add(unsigned long long& c, uint64_t v) {
  if (v) client_atomic<unsigned long long>(c).fetch_add(v, memory_order_relaxed);
}

// The dedup table's entry of encoded key `enc` (inserted if absent).
DW_HD inline uint64_t dedup_entry(const batch& b, uint64_t enc) {
  for (uint64_t h = kv_format::hash(enc, 0x9E3779B97F4A7C15ull) & b.dedup_mask;; h = (h + 1) & b.dedup_mask) {
    client_atomic<uint64_t> a(b.dedup_keys[h]);
    uint64_t cur = a.load(memory_order_relaxed);
    if (cur == enc) return h;
    if (cur == 0) {
      if (a.compare_exchange_strong(cur, enc, memory_order_relaxed) || cur == enc) return h;
    }
  }
}

// Phase 1, per op: the last op of each key wins (dedup_win = its index + 1).
DW_HD inline void dedup_op(const batch& b, uint64_t i) {
  const uint64_t key = b.keys[i];
  const uint8_t op = b.ops ? b.ops[i] : b.op;
  if (key > kv_format::max_key || op > kv_op_erase) return;
  const uint64_t h = dedup_entry(b, kv_format::encode(key));
  client_atomic<uint32_t> win(b.dedup_win[h]);
  uint32_t cur = win.load(memory_order_relaxed);
  while (cur < uint32_t(i + 1) && !win.compare_exchange_weak(cur, uint32_t(i + 1), memory_order_relaxed)) {
  }
}

// Phase 2, per warp: lane `rank` of `w` (a full warp, or one lane) plans op
// i (have), then the warp logs the words its ops change into rows of its
// own and persists them. The lanes of `w` must be lanes 0 .. lanes-1.
template <class Warp>
DW_HD void plan_and_log(const Warp& w, const batch& b, uint64_t i, bool have) {
  if (failed_already(w, b.count)) return;  // the batch fails anyway; nothing of it is committed
  const unsigned mask = w.active();
  const unsigned lanes = popcount32(mask);
  const unsigned lane = w.lane();
  const kv_ref& kv = b.kv;
  const uint64_t key = have ? b.keys[i] : 0;
  const uint8_t op = have ? (b.ops ? b.ops[i] : b.op) : 0;
  const bool bad = have && (key > kv_format::max_key || op > kv_op_erase);
  const uint64_t enc = kv_format::encode(key);
  const bool winner = have && !bad && b.dedup_win[dedup_entry(b, enc)] == uint32_t(i + 1);
  const uint64_t hb = kv.home(enc);
  if (winner) kv.table.cache.prefetch(make_key(kv.table.dataset, kv.bucket_page(hb)), w.queue_hint());

  // Look every winner up, one key at a time, the whole warp scanning.
  request_status io{};
  bool found = false;
  uint64_t slot = 0;
  for (unsigned t = w.ballot(mask, winner); t; t &= t - 1) {
    const unsigned q = lowest_lane(t);
    const kv_probe r = kv.find(w, shfl64(w, mask, key, q));
    if (lane == q) {
      io = r.status;
      found = r.found;
      slot = r.slot;
    }
    if (w.ballot(mask, !r.status.ok())) break;
  }
  uint32_t kind = none;
  kv_status st = bad ? kv_bad_key : kv_ok;
  if (winner && io.ok()) {
    if (op == kv_op_set)
      kind = found ? update : insert;
    else if (found)
      kind = remove;
    else
      st = kv_not_found;
  }
  // New keys claim free slots.
  if (!w.ballot(mask, !io.ok()))
    for (unsigned t = w.ballot(mask, kind == insert); t; t &= t - 1) {
      const unsigned q = lowest_lane(t);
      const kv_probe r = kv.claim(w, shfl64(w, mask, hb, q), b.claims, b.claims_mask);
      if (lane == q) {
        io = r.status;
        slot = r.slot;
        if (r.status.ok() && !r.found) {
          kind = none;
          st = kv_full;
        }
      }
      if (w.ballot(mask, !r.status.ok())) break;
    }
  if (!io.ok()) {
    fail(b.count, io);
    st = kv_failed;
  }
  if (have) b.status[i] = st;
  {  // counts, one atomic per counter per warp
    const unsigned leader = lowest_lane(mask);
    const uint64_t ins = popcount32(w.ballot(mask, kind == insert)), upd = popcount32(w.ballot(mask, kind == update)),
                   era = popcount32(w.ballot(mask, kind == remove)),
                   nf = popcount32(w.ballot(mask, st == kv_not_found)), full = popcount32(w.ballot(mask, st == kv_full)),
                   bk = popcount32(w.ballot(mask, st == kv_bad_key)),
                   sup = popcount32(w.ballot(mask, have && !bad && !winner));
    if (lane == leader) {
      add(b.count->ops.inserted, ins);
      add(b.count->ops.updated, upd);
      add(b.count->ops.erased, era);
      add(b.count->ops.not_found, nf);
      add(b.count->ops.full, full);
      add(b.count->ops.bad_key, bk);
      add(b.count->ops.superseded, sup);
    }
  }
  if (w.ballot(mask, !io.ok())) return;  // the batch fails: nothing is logged

  // The warp's entries, packed: lane l of row r logs entry r * lanes + l of
  // the warp's list (op by op in lane order, each op's words in order).
  const uint32_t vw = kv.value_words;
  const uint32_t e = kind == insert ? 1 + vw : kind == update ? vw : kind == remove ? 1 : 0;
  uint32_t incl = e;  // inclusive prefix sum over lanes
  for (unsigned d = 1; d < lanes; d <<= 1) {
    const uint32_t y = w.shfl(mask, incl, lane >= d ? lane - d : lane);
    if (lane >= d) incl += y;
  }
  const uint32_t total = w.shfl(mask, incl, lanes - 1);
  if (total == 0) return;
  if (lanes == 1) {  // a CPU thread: its op's entries (at most 17) in one row
    log_entry ents[1 + kv_format::max_value_bytes / 8];
    const uint64_t at = kv.slot_word(slot);
    for (uint32_t j = 0; j < e; ++j) {
      if (kind == insert)
        ents[j] = {0, at + j, j == 0 ? kv_format::encode(key) : b.values[i * vw + j - 1]};
      else if (kind == update)
        ents[j] = {0, at + 1 + j, b.values[i * vw + j]};
      else
        ents[j] = {0, at, kv_format::tombstone_word};
    }
    log_tx tx;
    tx.txid = b.txid;
    tx.partition = 0;
    tx.first = tx.next = tx.durable =
        b.first_row + client_atomic<uint32_t>(b.count->rows).fetch_add(1, memory_order_relaxed);
    tx.open = true;
    add(b.count->entries, e);
    request_status s = b.log.append_row(w, tx, ents, e);
    if (s.ok() && b.warps_persist) s = b.log.persist(w, tx);
    if (!s.ok()) fail(b.count, s);
    return;
  }
  const uint32_t rows = (total + lanes - 1) / lanes;
  uint32_t base = 0;
  if (lane == 0) {
    base = client_atomic<uint32_t>(b.count->rows).fetch_add(rows, memory_order_relaxed);
    add(b.count->entries, total);
  }
  base = w.shfl(mask, base, 0);
  log_tx tx;
  tx.txid = b.txid;
  tx.partition = 0;
  tx.first = tx.next = tx.durable = b.first_row + base;
  tx.open = true;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint32_t f = r * lanes + lane;
    unsigned o = 0;  // the lane whose op holds entry f: lanes whose prefix ends at or before f
    for (unsigned l = 0; l < lanes; ++l) o += w.shfl(mask, incl, l) <= f ? 1u : 0u;
    const bool mine = f < total;
    const unsigned src = mine ? o : 0;
    const uint32_t first_o = w.shfl(mask, incl - e, src);
    const uint32_t kind_o = w.shfl(mask, kind, src);
    const uint64_t slot_o = shfl64(w, mask, slot, src);
    const uint64_t op_o = shfl64(w, mask, i, src);
    log_entry ent{};
    if (mine) {
      const uint32_t j = f - first_o;
      const uint64_t at = kv.slot_word(slot_o);
      if (kind_o == insert) {
        ent.index = at + j;
        ent.value = j == 0 ? kv_format::encode(b.keys[op_o]) : b.values[op_o * vw + j - 1];
      } else if (kind_o == update) {
        ent.index = at + 1 + j;
        ent.value = b.values[op_o * vw + j];
      } else {
        ent.index = at;
        ent.value = kv_format::tombstone_word;
      }
    }
    const request_status s = b.log.append(w, tx, mine, ent);
    if (!s.ok()) {
      if (lane == 0) fail(b.count, s);
      return;
    }
  }
  if (!b.warps_persist) return;
  const request_status s = b.log.persist(w, tx);
  if (!s.ok() && lane == 0) fail(b.count, s);
}

// Phase 3, one warp: the batch's transaction (rows [first_row, first_row +
// rows), `entries` entries) committed: its rows persisted (unless the warps
// did), then its commit record written and persisted, then the entries
// applied to the table.
template <class Warp>
DW_HD void commit(const Warp& w, const batch& b, uint32_t rows, uint64_t entries) {
  log_tx tx;
  tx.txid = b.txid;
  tx.partition = 0;
  tx.first = b.first_row;
  tx.next = b.first_row + rows;
  tx.durable = b.warps_persist ? tx.next : tx.first;
  tx.records = uint32_t(entries);
  tx.open = true;
  const request_status s = b.log.commit(w, tx);
  if (!s.ok() && w.lane() == lowest_lane(w.active())) fail(b.count, s);
}

// GET, per warp: each lane its op; values go to b.values (an output here).
template <class Warp>
DW_HD void get_ops(const Warp& w, const batch& b, uint64_t i, bool have) {
  if (failed_already(w, b.count)) return;  // the call throws
  uint64_t* out = const_cast<uint64_t*>(b.values) + i * b.kv.value_words;
  request_status io{};
  const kv_status st = b.kv.get(w, have, have ? b.keys[i] : 0, have ? out : nullptr, &io);
  const unsigned mask = w.active();
  if (have) b.status[i] = st;
  if (!io.ok()) fail(b.count, io);
  const uint64_t fo = popcount32(w.ballot(mask, have && st == kv_ok)),
                 nf = popcount32(w.ballot(mask, have && st == kv_not_found)),
                 bk = popcount32(w.ballot(mask, have && st == kv_bad_key));
  if (w.lane() == lowest_lane(mask)) {
    add(b.count->ops.found, fo);
    add(b.count->ops.not_found, nf);
    add(b.count->ops.bad_key, bk);
  }
}

}  // namespace kv_detail

// ---- executors: GPU support (deepwell_cuda), or warps emulated in tests ----

enum class kv_phase : uint32_t { dedup, plan_and_log, commit, get };

// What runs a batch's phases and holds the store's scratch memory. A GPU
// cache needs one: gpu_kv_support() (deepwell_cuda; the current CUDA
// device) runs the phases as kernels on full warps. A host cache runs them
// on CPU threads (one lane each) unless given one (tests give it warps of
// 32 emulated lanes). Every call is synchronous.
class kv_executor {
 public:
  virtual ~kv_executor() = default;
  // Lanes of its warps (32; the log packs a warp's entries 32 to a row).
  virtual uint32_t lanes() const = 0;
  virtual void* alloc(uint64_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void zero(void* p, uint64_t bytes) = 0;
  virtual void to_device(void* dst, const void* src, uint64_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, uint64_t bytes) = 0;
  virtual void device_copy(void* dst, const void* src, uint64_t bytes) = 0;
  // Throws deepwell::error naming `what` unless its warps can read and
  // write p (device memory of the current device, managed or mapped memory).
  virtual void check_device_pointer(const void* p, const char* what) = 0;
  // Runs a phase over b.n ops (commit: one warp, the batch's rows and
  // entries) through `cache` and waits for it.
  virtual void run(const page_cache& cache, kv_phase phase, const kv_detail::batch& b, uint32_t rows,
                   uint64_t entries) = 0;
};
std::shared_ptr<kv_executor> gpu_kv_support();

// ---- the host owner ----

// What the store throws: deepwell::error for bad arguments (a configuration,
// a batch too large, memory of the wrong kind, a shape that does not match
// the store's), and this subclass when the storage is wrong (not a store, a
// corrupted header or log, truncated, a file that cannot be opened) or its
// I/O failed (a batch, a checkpoint, recovery). Messages name the store.
class kv_io_error : public data_error {
 public:
  using data_error::data_error;
};

// The shape of a new store.
struct kv_config {
  uint32_t value_bytes = 32;     // 8 .. 128, a multiple of 8
  uint64_t capacity = 1 << 20;   // keys the table is sized for (about 75% of its slots), unless buckets is set
  uint64_t buckets = 0;          // the table's buckets; 0: from capacity
  uint32_t bucket_bytes = 4096;  // a power of two, 512 .. 64 KiB; the cache's page must be a multiple of it
  uint32_t max_probe = 16;       // buckets a key may be in (its home and the next ones); at most buckets
  uint32_t log_rows = 65536;     // rows of the log (1 KiB each): bounds the batch size and the checkpoint interval
  // A CRC-32C of every block of the table, checked on each read from
  // storage (docs/kv.md). false: a format-1 file, whose table damage goes
  // undetected (measuring what the checks cost, or files older builds read).
  bool table_checksums = true;
};

// What open expects (0: anything; else it must match the header).
struct kv_expect {
  uint32_t key_bytes = 0;
  uint32_t value_bytes = 0;
};

struct kv_options {
  std::shared_ptr<kv_executor> executor;  // needed with a GPU cache: gpu_kv_support()
  uint64_t max_batch = 1 << 16;  // ops per call
  unsigned cpu_threads = 0;      // a host cache's threads; 0: cores, at most 16
  uint32_t block_size = 4096;    // the namespaces' block size (at most the cache's page size)
  bool direct = false;           // create_file / open_file: O_DIRECT
};

// What a batch did (counts over its ops).
struct kv_batch_result : kv_op_counts {
  uint64_t ops = 0;
  uint64_t dropped = 0;     // commit_staged: ops that did not fit the stage
  uint64_t log_rows = 0;    // log rows the batch took (entries plus its commit record)
  bool checkpointed = false;  // a checkpoint ran first (the log had no room)
};

struct kv_info {
  uint32_t key_bytes = 0, value_bytes = 0;
  uint32_t bucket_bytes = 0, slots_per_bucket = 0, max_probe = 0, log_rows = 0;
  uint64_t buckets = 0, slots = 0;
  uint64_t total_bytes = 0;
  uint64_t max_batch = 0;  // ops per call with these options and this log
  bool gpu = false;  // the cache is a GPU cache
  uint32_t lanes = 1;  // of the executor's warps
  bool table_checksums = false;  // the table's blocks are checked on read (format 2)
  uint32_t sum_block = 0;        // table bytes a checksum covers
  std::string name;  // "kv store file /data/t.kv"
};

// The host owner. Calls are not concurrent with each other (one thread at a
// time), nor with kernels that use ref() or stage(). Every failure throws
// deepwell::error naming the store; after a failed batch the store refuses
// further batches (the batch may or may not be durable): open it again,
// which recovers.
class kv_store {
 public:
  static uint64_t bytes_needed(const kv_config& cfg);

  // A new store on `dataset` (a namespace of the cache's link, writable,
  // at least bytes_needed bytes), in three sections of it (the header, the
  // table with its checksums, the log) that the link makes: the table is
  // zeroed (skipped with table_zeroed: a new file reads as zeros), the log
  // created, then the header written and flushed. Under a server, the
  // dataset is one it grants this client for writing.
  static kv_store create(std::shared_ptr<page_cache> cache, uint32_t dataset, const kv_config& cfg,
                         const kv_options& opts = {}, bool table_zeroed = false);
  // Opens the store on `dataset`: checks the header (magic, version,
  // checksum, sizes; `expect`), then recovers (replays the log's committed
  // batches since the last checkpoint, makes them durable, truncates it).
  static kv_store open(std::shared_ptr<page_cache> cache, uint32_t dataset, const kv_expect& expect = {},
                       const kv_options& opts = {});
  // The same on a file: create_file makes it (created, or truncated and
  // sized) and then asks the link for it, so it needs a controller in this
  // process; open_file asks the link for the file by path (under a server:
  // a dataset it grants this client for writing, by name or path).
  static kv_store create_file(std::shared_ptr<page_cache> cache, const std::string& path, const kv_config& cfg,
                              const kv_options& opts = {});
  static kv_store open_file(std::shared_ptr<page_cache> cache, const std::string& path, const kv_expect& expect = {},
                            const kv_options& opts = {});

  // Batches of n ops (n <= max_batch). keys, values, status: host memory or
  // device memory of the cache's GPU (`where`; a host cache takes host
  // memory only). values: n x value_bytes bytes, 8-byte aligned. status
  // (optional): a kv_status per op. set / erase / apply return once the
  // batch is durable. Ops on one key in one batch: the last one wins.
  kv_batch_result set(const uint64_t* keys, const void* values, uint64_t n, kv_memory where = kv_memory::host,
                      uint8_t* status = nullptr);
  kv_batch_result erase(const uint64_t* keys, uint64_t n, kv_memory where = kv_memory::host, uint8_t* status = nullptr);
  // A mix: ops[i] is kv_op_set or kv_op_erase (values of erase ops are ignored).
  kv_batch_result apply(const uint8_t* ops, const uint64_t* keys, const void* values, uint64_t n,
                        kv_memory where = kv_memory::host, uint8_t* status = nullptr);
  // values: n x value_bytes (zeros where not found); status: kv_ok (found) / kv_not_found.
  kv_batch_result get(const uint64_t* keys, void* values, uint64_t n, kv_memory where = kv_memory::host,
                      uint8_t* status = nullptr);

  // Ops staged by kernels (stage()), as one batch; the stage is emptied.
  // status: host memory, one per op in stage order (optional).
  kv_batch_result commit_staged(uint8_t* status = nullptr);
  // The stage (max_batch ops, made at the first call); valid until the store closes.
  kv_stage_ref stage();

  // The table's pages made durable and the log truncated.
  void checkpoint();
  // For user kernels (gets): valid until the next batch or checkpoint.
  kv_ref ref() const;

  // Every (key, value) in the table, read from storage after a checkpoint
  // (tests, tools; the whole table comes through host memory). values:
  // value_bytes per key, in the order of keys.
  void contents(std::vector<uint64_t>& keys, std::vector<uint8_t>& values);

  kv_info info() const;
  const recovery_result& last_recovery() const;  // what open's recovery did
  uint64_t batches() const;                        // batches committed since open
  uint64_t checkpoints() const;                    // since open

  kv_store(kv_store&&) noexcept;
  kv_store& operator=(kv_store&&) noexcept;
  ~kv_store();

 private:
  struct impl;
  explicit kv_store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace deepwell::durable
