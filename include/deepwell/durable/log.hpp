// A write-ahead log written from GPU warps (and CPU threads) through the
// page cache: GPM's Hierarchical Coalesced Logging (HCL), with redo or undo
// transactions, checksummed records, truncation at checkpoints and recovery
// at open. docs/log.md describes the format and the protocol.
//
// The host owner is write_ahead_log (create / open + recover / checkpoint);
// kernels and CPU threads take its log_ref by value (the cuCollections
// `ref` pattern, as array_ref):
//
//   __global__ void transfer(log_ref log, uint64_t first_txid) {
//     const gpu_warp w;
//     const uint32_t p = warp_partition();                  // this warp's own partition
//     log_tx tx = log.begin(w, p, first_txid + p);           // warp-uniform txid
//     log.append(w, tx, have, {0, index, new_value});        // redo: one entry per lane, striped
//     request_status s = log.commit(w, tx);                  // entries durable, then the commit record, then applied
//   }
//
// The layout (docs/log.md has a picture):
//   [0, 64 KiB)          header: two copies (at 0 and 4096), each with a checksum and a
//                        sequence number; an update rewrites the older copy, so a torn
//                        update leaves the other one intact
//   [64 KiB, ...)        tails: one 8-byte word per partition (volatile; tagged with the
//                        epoch so that a truncation resets them without a write)
//   [..., end)           partitions: `rows` rows each; a row is one entry per lane, 32 x 8
//                        words, striped: word j of the 32 lanes' entries is 32 consecutive
//                        words (128 bytes, one GPU cache line), so a warp's append fills
//                        whole lines of one page and needs no atomics
// Every region starts on a 64 KiB boundary (the largest page), so the
// header, which only the host writes, never shares a cache page with the
// parts kernels write.
//
// A record (8 words): kind | array << 8, txid (2 words), index (2), value
// (2), checksum. An end record (commit or abort): kind, txid, entry count,
// first row, its own row, checksum. The checksum covers the record's words,
// the log's nonce (random at create), the epoch and the record's position
// (partition, row, lane), so a torn or corrupted record, one from an
// earlier epoch and a stale one from another log all fail it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/detail/hash.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::durable {

enum class log_form : uint32_t {
  redo = 1,  // entry = location + new value; applied after the commit; recovery replays committed transactions
  undo = 2,  // entry = location + old value, durable before the in-place write; recovery rolls back the rest
};

// ---- the on-disk format ----
namespace log_format {
constexpr uint32_t lanes = 32;
constexpr uint32_t entry_words = 8;                  // one record: 32 bytes
constexpr uint32_t row_words = entry_words * lanes;  // a row: 256 words, 1 KiB
constexpr uint64_t row_bytes = uint64_t(row_words) * 4;
constexpr uint64_t region_align = 64 << 10;  // regions start on 64 KiB (the largest cache page)
constexpr uint64_t header_bytes = region_align;
constexpr uint64_t header_copy_stride = 4096;  // copy k at k * 4096
constexpr uint32_t max_arrays = 8;
constexpr uint32_t max_tag_bytes = 63;
constexpr uint32_t version = 1;
constexpr char magic[8] = {'D', 'W', 'W', 'A', 'L', 'O', 'G', '1'};

enum kind : uint32_t {
  redo_entry = 1,
  undo_entry = 2,
  commit_record = 3,  // the transaction is committed (undo: its data is durable)
  abort_record = 4,   // undo: the transaction was rolled back and its data made durable
};

DW_HD constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
DW_HD constexpr uint64_t tails_offset() { return header_bytes; }
DW_HD constexpr uint64_t partitions_offset(uint32_t partitions) {
  return tails_offset() + round_up(uint64_t(partitions) * 8, region_align);
}
// Bytes a log of this geometry needs on its namespace.
DW_HD constexpr uint64_t log_bytes(uint32_t partitions, uint32_t rows) {
  return partitions_offset(partitions) + round_up(uint64_t(partitions) * rows * row_bytes, region_align);
}
// The 4-byte word (from the log's start) holding word j of lane `lane`'s
// record in row `row` of partition p: the HCL position.
DW_HD constexpr uint64_t record_word(uint32_t partitions, uint32_t rows, uint32_t p, uint32_t row, uint32_t j,
                                     uint32_t lane) {
  return partitions_offset(partitions) / 4 + (uint64_t(p) * rows + row) * row_words + uint64_t(j) * lanes + lane;
}

// Stored in the log's rows (tags, checksums): detail/hash.hpp's frozen mixer.
DW_HD constexpr uint64_t mix64(uint64_t x) { return ::deepwell::detail::fmix64(x); }

// What a record's checksum is seeded with: the log, the epoch, the position.
DW_HD inline uint64_t record_seed(uint64_t nonce, uint64_t epoch, uint32_t partition, uint32_t row, uint32_t lane) {
  return mix64(nonce ^ mix64(epoch ^ 0x9E3779B97F4A7C15ull) ^ mix64((uint64_t(partition) << 32 | row) * 64 + lane + 1));
}

struct record {
  uint32_t w[entry_words];

  DW_HD uint32_t kind_of() const { return w[0] & 0xFF; }
  DW_HD uint32_t array() const { return (w[0] >> 8) & 0xFF; }
  DW_HD uint64_t txid() const { return uint64_t(w[2]) << 32 | w[1]; }
  DW_HD uint64_t index() const { return uint64_t(w[4]) << 32 | w[3]; }  // entries
  DW_HD uint64_t value() const { return uint64_t(w[6]) << 32 | w[5]; }  // entries
  DW_HD uint32_t count() const { return w[3]; }                         // end records: entries of the transaction
  DW_HD uint32_t first_row() const { return w[4]; }                     // end records
  DW_HD uint32_t end_row() const { return w[5]; }                       // end records: its own row
  DW_HD bool is_entry() const { return kind_of() == redo_entry || kind_of() == undo_entry; }
  DW_HD bool is_end() const { return kind_of() == commit_record || kind_of() == abort_record; }

  DW_HD static uint32_t checksum(const uint32_t* w, uint64_t seed) {
    uint64_t h = seed;
    for (uint32_t j = 0; j + 1 < entry_words; ++j) h = mix64(h ^ (uint64_t(w[j]) << 8 | j));
    return uint32_t(h ^ (h >> 32));
  }
  // A record of a known kind whose checksum matches. A slot never written
  // is zeros, of kind 0: without the kind's test its checksum would match
  // by chance once in 2^32 slots, and a log has millions of them.
  DW_HD bool valid(uint64_t seed) const {
    return (is_entry() || is_end()) && checksum(w, seed) == w[entry_words - 1];
  }
  DW_HD void seal(uint64_t seed) { w[entry_words - 1] = checksum(w, seed); }

  DW_HD static record entry(uint32_t kind, uint32_t array, uint64_t txid, uint64_t index, uint64_t value,
                            uint64_t seed) {
    record r{{kind | (array & 0xFF) << 8, uint32_t(txid), uint32_t(txid >> 32), uint32_t(index),
              uint32_t(index >> 32), uint32_t(value), uint32_t(value >> 32), 0}};
    r.seal(seed);
    return r;
  }
  DW_HD static record end(uint32_t kind, uint64_t txid, uint32_t count, uint32_t first, uint32_t row, uint64_t seed) {
    record r{{kind, uint32_t(txid), uint32_t(txid >> 32), count, first, row, 0, 0}};
    r.seal(seed);
    return r;
  }
};

// One copy of the header (host-written; at most 512 bytes, so one sector).
struct header {
  char magic[8];
  uint32_t version;
  uint32_t form;  // log_form
  uint64_t nonce;
  uint64_t epoch;  // records of this epoch are live; a truncation advances it
  uint64_t seq;    // the copy with the highest valid seq is current
  uint32_t partitions;
  uint32_t rows;
  uint64_t log_bytes;
  uint32_t narrays;
  uint32_t reserved0;
  struct array_info {
    uint64_t elems;
    uint32_t elem_bytes;
    uint32_t reserved;
  } arrays[max_arrays];
  char tag[max_tag_bytes + 1];
  uint64_t checkpoints;  // truncations so far (informational)
  uint32_t reserved1;
  uint32_t checksum;  // of every byte before it
};
static_assert(sizeof(header) <= 512, "a header copy fits one sector");
}  // namespace log_format

// A data array the log covers: entries name it by its position in the list
// given at create/open. Elements of 4 or 8 bytes (values are logged as 64
// bits), in the log's cache, writable.
struct log_array {
  uint32_t dataset = 0;     // the cache's dataset id
  uint32_t elem_bytes = 0;  // 4 or 8
  uint64_t n = 0;           // elements
};

// One lane's entry: element `index` of data array `array`, and a value (redo:
// the new value; undo: the old one).
struct log_entry {
  uint32_t array = 0;
  uint64_t index = 0;
  uint64_t value = 0;
};

// A warp's open transaction: every lane holds the same copy (the calls
// that take it are warp-collective). `status` is sticky: after a failure
// every call returns it, and commit writes nothing.
struct log_tx {
  uint64_t txid = 0;
  uint32_t partition = 0;
  uint32_t first = 0;    // its first row
  uint32_t next = 0;     // the row its next append (or end record) takes
  uint32_t durable = 0;  // rows before this one are persisted
  uint32_t records = 0;  // entries appended, all lanes
  bool open = false;
  request_status status{};
  DW_HD bool ok() const { return status.ok(); }
};

#if defined(__CUDACC__)
// The calling warp's index in its grid (blocks in order, warps in block
// order): a partition of its own when the log has a partition per warp of
// the launch (write_ahead_log::check_launch).
DW_DEVICE inline uint32_t warp_partition() {
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const uint32_t per_block = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
  const uint32_t t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return block * per_block + t / 32;
}
#endif

// The log as kernels and CPU threads use it, by value. Every call is
// warp-collective: the active lanes of `w` call it together with the same
// transaction (and partition / txid); each lane brings its own entry (or
// none: `have` false). On CPU threads each thread is its own warp of one
// lane (one_lane{}); tests drive real lane groups with the warp emulator.
//
// Rules the caller keeps:
//  - a partition is used by one warp at a time (warp_partition() gives each
//    warp of a launch its own), and its transactions run one after another;
//  - txids are unique in the log's epoch; transactions that touch the same
//    elements run one at a time and take increasing txids in that order
//    (recovery replays, or rolls back, in txid order);
//  - undo: persist() before the first in-place write of the logged elements
//    (commit persists those elements, then its record);
//  - every transaction ends with commit() or abort(); one whose call failed
//    (an I/O error, a power cut) is left to recovery: begin no other
//    transaction in its partition before recover() (it would reuse the
//    failed one's rows, which recovery needs);
//  - a ref is valid until the next checkpoint() / recover() (take ref()
//    again for the next launch).
class log_ref {
 public:
  DW_HD log_form form() const { return log_form(form_); }
  DW_HD uint32_t partitions() const { return partitions_; }
  DW_HD uint32_t rows() const { return rows_; }
  DW_HD uint64_t epoch() const { return epoch_; }
  DW_HD bool attached() const { return cache_.attached(); }

  // Opens transaction `txid` on partition `partition`, after the partition's
  // earlier transactions of this epoch (its tail, read through the cache).
  template <class Warp>
  DW_HD log_tx begin(const Warp& w, uint32_t partition, uint64_t txid) const {
    log_tx t;
    t.txid = txid;
    t.partition = partition;
    if (partition >= partitions_) {
      t.status = request_status::client(client_code::out_of_range);
      return t;
    }
    request_status s;
    const uint64_t v = tails().read(w, tail_index(partition), &s);
    const uint32_t row = uint32_t(v >> 32) == tail_tag() ? uint32_t(v) : 0;
    t.first = t.next = t.durable = row;
    t.status = s;
    t.open = s.ok();
    return t;
  }

  // Appends one entry per lane that has one (redo: the new value; undo: the
  // old one, or use append_old), all in the transaction's next row: lane l
  // writes the l-th word of each of the row's 8 lines. A call where no lane
  // has an entry takes no row. out_of_range: an entry names an unknown array
  // or element, or the partition's rows are used up (a transaction needs one
  // row per call plus one for its end record; a checkpoint frees them).
  template <class Warp>
  DW_HD request_status append(const Warp& w, log_tx& t, bool have, const log_entry& e) const {
    if (!t.status.ok()) return t.status;
    if (!t.open) return request_status::client(client_code::invalid_argument);
    const unsigned mask = w.active();
    const bool bad = have && !(e.array < narrays_ && e.index < arrays_[e.array].n);
    const unsigned any = w.ballot(mask, have);
    if (w.ballot(mask, bad)) return t.status = request_status::client(client_code::out_of_range);
    if (!any) return {};
    if (t.next + 1 >= rows_) return t.status = request_status::client(client_code::out_of_range);
    const uint32_t kind = form_ == uint32_t(log_form::redo) ? log_format::redo_entry : log_format::undo_entry;
    const log_format::record r =
        log_format::record::entry(kind, e.array, t.txid, e.index, e.value, seed(t.partition, t.next, w.lane()));
    const request_status s = write_row(w, t.partition, t.next, have, r);
    if (!s.ok()) return t.status = s;
    t.records += popcount32(any);
    t.next += 1;
    return {};
  }

  // Redo logs: a warp of one lane (a CPU thread) appends n entries (at
  // most 32) into lanes 0 .. n-1 of the transaction's next row: one row for
  // the call, as append takes, with every entry in it (append would give
  // each entry a row of its own, one lane of it used). A one-lane warp's
  // commit applies every lane of its rows (for_own_entries).
  template <class Warp>
  DW_HD request_status append_row(const Warp& w, log_tx& t, const log_entry* e, uint32_t n) const {
    if (!t.status.ok()) return t.status;
    if (!t.open || n > log_format::lanes || form_ != uint32_t(log_form::redo) || popcount32(w.active()) != 1)
      return request_status::client(client_code::invalid_argument);
    if (n == 0) return {};
    for (uint32_t k = 0; k < n; ++k)
      if (!(e[k].array < narrays_ && e[k].index < arrays_[e[k].array].n))
        return t.status = request_status::client(client_code::out_of_range);
    if (t.next + 1 >= rows_) return t.status = request_status::client(client_code::out_of_range);
    for (uint32_t k = 0; k < n; ++k) {
      const log_format::record r = log_format::record::entry(log_format::redo_entry, e[k].array, t.txid, e[k].index,
                                                             e[k].value, seed(t.partition, t.next, k));
      const request_status s = write_row(w, t.partition, t.next, true, r, k);
      if (!s.ok()) return t.status = s;
    }
    t.records += n;
    t.next += 1;
    return {};
  }

  // Undo: logs the current value of element `index` of `array` (read
  // through the cache) as the lane's entry.
  template <class Warp>
  DW_HD request_status append_old(const Warp& w, log_tx& t, bool have, uint32_t array, uint64_t index) const {
    if (!t.status.ok()) return t.status;
    request_status s;
    const uint64_t old = read(w, have, array, index, &s);
    const request_status u = uniform(w, w.active(), have ? s : request_status{});
    if (!u.ok()) return t.status = u;
    return append(w, t, have, log_entry{array, index, old});
  }

  // Makes the entries appended so far durable (the rows the transaction
  // wrote since the last persist; one flush, shared with other warps').
  // Undo: call it before writing the logged elements in place.
  template <class Warp>
  DW_HD request_status persist(const Warp& w, log_tx& t) const {
    if (!t.status.ok()) return t.status;
    if (t.durable >= t.next) return {};
    w.sync(w.active());
    const request_status s = words().persist(w, row_word(t.partition, t.durable), uint64_t(t.next - t.durable) * log_format::row_words);
    if (!s.ok()) return t.status = s;
    t.durable = t.next;
    return {};
  }

  // Commits. Redo: the entries are made durable, then the commit record is
  // written and made durable, then the entries are applied to the data
  // (through the cache; a checkpoint makes them durable). Undo: the entries
  // are made durable, then the elements they name (written in place by the
  // caller), then the commit record. Returns ok once the transaction is
  // durable (and, redo, applied). On failure the transaction may or may not
  // be durable: recovery decides by the commit record.
  template <class Warp>
  DW_HD request_status commit(const Warp& w, log_tx& t) const {
    if (!t.status.ok()) return t.status;
    if (!t.open) return request_status::client(client_code::invalid_argument);
    request_status s = persist(w, t);
    if (!s.ok()) return s;
    const bool redo = form_ == uint32_t(log_form::redo);
    if (!redo && !(s = persist_data(w, t)).ok()) return t.status = s;
    const uint32_t entries_end = t.next;
    if (!(s = end(w, t, log_format::commit_record)).ok()) return s;
    if (redo) {
      s = for_own_entries(w, t, t.first, entries_end, false, [&](bool mine, const log_format::record& r) {
        return write(w, mine, r.array(), r.index(), r.value());
      });
      if (!s.ok()) return t.status = s;
    }
    return {};
  }

  // Gives the transaction up. Redo: nothing was applied; its entries stay
  // in the log without a commit record (ignored). Undo: the logged old
  // values are written back in place (newest first), made durable, and an
  // abort record is written and made durable (recovery then leaves the
  // transaction alone).
  template <class Warp>
  DW_HD request_status abort(const Warp& w, log_tx& t) const {
    if (!t.open) return request_status::client(client_code::invalid_argument);
    if (form_ == uint32_t(log_form::redo)) {
      t.open = false;
      if (!t.status.ok()) return t.status;
      return set_tail(w, t.partition, t.next);
    }
    if (!t.status.ok()) return t.status;
    request_status s = persist(w, t);
    if (!s.ok()) return s;
    s = for_own_entries(w, t, t.first, t.next, true, [&](bool mine, const log_format::record& r) {
      return write(w, mine, r.array(), r.index(), r.value());
    });
    if (!s.ok()) return t.status = s;
    if (!(s = persist_data(w, t)).ok()) return t.status = s;
    return end(w, t, log_format::abort_record);
  }

  // ---- the data arrays, through the log's cache ----

  // Reads element `index` of data array `array` (lanes with `have`).
  template <class Warp>
  DW_HD uint64_t read(const Warp& w, bool have, uint32_t array, uint64_t index, request_status* status) const {
    const bool in = have && array < narrays_ && index < arrays_[array].n;
    const log_array d = in ? arrays_[array] : log_array{};
    const uint64_t byte = index * d.elem_bytes;
    const warp_pin p = cache_.acquire(w, in, make_key(d.dataset, byte >> cache_.page_shift()));
    const request_status s = in ? p.status : have ? request_status::client(client_code::out_of_range) : request_status{};
    uint64_t v = 0;
    if (in && s.ok()) {
      const uint8_t* q = cache_.page_data(p.slot) + (byte & (cache_.page_size() - 1));
      v = d.elem_bytes == 8 ? *reinterpret_cast<const uint64_t*>(q) : *reinterpret_cast<const uint32_t*>(q);
    }
    cache_.release(w, p, false);
    cache_.set_error(s);
    if (status) *status = s;
    return v;
  }

  // Writes element `index` of data array `array` (lanes with `have`); a
  // 4-byte array takes the value's low 32 bits.
  template <class Warp>
  DW_HD request_status write(const Warp& w, bool have, uint32_t array, uint64_t index, uint64_t v) const {
    const bool in = have && array < narrays_ && index < arrays_[array].n;
    const log_array d = in ? arrays_[array] : log_array{};
    const uint64_t byte = index * d.elem_bytes;
    const warp_pin p = cache_.acquire(w, in, make_key(d.dataset, byte >> cache_.page_shift()));
    const request_status s = in ? p.status : have ? request_status::client(client_code::out_of_range) : request_status{};
    if (in && s.ok()) {
      uint8_t* q = cache_.page_data(p.slot) + (byte & (cache_.page_size() - 1));
      if (d.elem_bytes == 8)
        *reinterpret_cast<uint64_t*>(q) = v;
      else
        *reinterpret_cast<uint32_t*>(q) = uint32_t(v);
    }
    cache_.release(w, p, in && s.ok());
    cache_.set_error(s);
    return s;
  }

  // ---- the format's positions (tests, benchmarks) ----
  DW_HD uint64_t row_word(uint32_t p, uint32_t row) const {
    return log_format::record_word(partitions_, rows_, p, row, 0, 0);
  }
  DW_HD uint64_t seed(uint32_t p, uint32_t row, uint32_t lane) const {
    return log_format::record_seed(nonce_, epoch_, p, row, lane);
  }
  // The log's words as an array (its namespace through the cache).
  DW_HD array_ref<uint32_t> words() const {
    array_ref<uint32_t> a;
    a.cache = cache_;
    a.dataset = log_dataset_;
    a.n = log_words_;
    return a;
  }

 private:
  friend class write_ahead_log;

  page_cache_ref cache_{};
  uint32_t log_dataset_ = 0;
  uint32_t form_ = 0;
  uint64_t log_words_ = 0;
  uint32_t partitions_ = 0;
  uint32_t rows_ = 0;
  uint64_t nonce_ = 0;
  uint64_t epoch_ = 0;
  uint32_t narrays_ = 0;
  log_array arrays_[log_format::max_arrays] = {};

  DW_HD array_ref<uint64_t> tails() const {
    array_ref<uint64_t> a;
    a.cache = cache_;
    a.dataset = log_dataset_;
    a.n = log_words_ / 2;
    return a;
  }
  DW_HD static uint64_t tail_index(uint32_t p) { return log_format::tails_offset() / 8 + p; }
  // A tail holds tag << 32 | next row; a tail of another epoch (or log)
  // reads as row 0, so a truncation needs no write to the tails.
  DW_HD uint32_t tail_tag() const { return uint32_t(log_format::mix64(nonce_ ^ epoch_)); }

  // The status of the lowest lane that failed, in every lane.
  template <class Warp>
  DW_HD static request_status uniform(const Warp& w, unsigned mask, request_status s) {
    const unsigned bad = w.ballot(mask, !s.ok());
    if (!bad) return {};
    return request_status::unpack(w.shfl(mask, s.pack(), lowest_lane(bad)));
  }

  // The lowest lane stores the word: every lane would store the same
  // value, which on CPU threads (emulated warps) is a data race.
  template <class Warp>
  DW_HD request_status set_tail(const Warp& w, uint32_t p, uint32_t row) const {
    const unsigned mask = w.active();
    page_handle<uint64_t> h = tails().page(w, tail_index(p));
    if (h.ok() && w.lane() == lowest_lane(mask)) h.write(tail_index(p), uint64_t(tail_tag()) << 32 | row);
    const request_status s = h.status();
    h.release();
    return uniform(w, mask, s);
  }

  // Lanes with `have` write their record into row `row` of partition p (the
  // pages the row spans, pinned once per warp each).
  // `at_lane`: a one-lane warp writing another lane's position.
  template <class Warp>
  DW_HD request_status write_row(const Warp& w, uint32_t p, uint32_t row, bool have, const log_format::record& r,
                                 uint32_t at_lane = ~0u) const {
    return for_row_words(w, p, row, at_lane, [&](page_handle<uint32_t>& h, uint64_t i, uint32_t j) {
      if (have) h.write(i, r.w[j]);
    });
  }

  template <class Warp>
  DW_HD request_status read_row(const Warp& w, uint32_t p, uint32_t row, log_format::record& r,
                                uint32_t at_lane = ~0u) const {
    return for_row_words(w, p, row, at_lane, [&](page_handle<uint32_t>& h, uint64_t i, uint32_t j) { r.w[j] = h[i]; });
  }

  // fn(page, index, j) for each word j of the lane's record in row `row` of
  // partition p, the row's pages pinned once per warp each (line j of the
  // row, the 32 lanes' word j, lies in one page). Stops at the first page
  // the warp could not pin: its status, in every lane.
  template <class Warp, class Fn>
  DW_HD request_status for_row_words(const Warp& w, uint32_t p, uint32_t row, uint32_t at_lane, Fn&& fn) const {
    const array_ref<uint32_t> lg = words();
    const unsigned mask = w.active();
    const uint32_t lane = (at_lane == ~0u ? w.lane() : at_lane) % log_format::lanes;
    for (uint32_t j = 0; j < log_format::entry_words;) {
      page_handle<uint32_t> h = lg.page(w, log_format::record_word(partitions_, rows_, p, row, j, lane));
      const request_status s = uniform(w, mask, h.status());
      if (!s.ok()) {
        h.release();
        return s;
      }
      for (; j < log_format::entry_words; ++j) {
        const uint64_t i = log_format::record_word(partitions_, rows_, p, row, j, lane);
        if (!h.contains(i)) break;
        fn(h, i, j);
      }
      h.release();
    }
    return {};
  }

  // Calls f(mine, record) for rows [first, last) of the transaction's
  // partition (newest first with `reverse`); `mine`: the lane's record in
  // that row is its entry of this transaction (checksum, kind and txid
  // checked).
  template <class Warp, class F>
  DW_HD request_status for_own_entries(const Warp& w, const log_tx& t, uint32_t first, uint32_t last, bool reverse,
                                       F&& f) const {
    const unsigned mask = w.active();
    const uint32_t lane = w.lane() % log_format::lanes;
    const uint32_t kind = form_ == uint32_t(log_form::redo) ? log_format::redo_entry : log_format::undo_entry;
    // A warp of one lane (a CPU thread) reads on along the row from lane 0
    // while the records are its own: append_row puts several there, in
    // lanes 0, 1, ...; append puts one, in lane 0.
    const bool one = popcount32(mask) == 1;
    for (uint32_t k = 0; first + k < last; ++k) {
      const uint32_t row = reverse ? last - 1 - k : first + k;
      for (uint32_t l = 0; l < (one ? log_format::lanes : 1u); ++l) {
        const uint32_t at = one ? l : lane;
        log_format::record r{};
        request_status s = read_row(w, t.partition, row, r, one ? l : ~0u);
        if (!s.ok()) return s;
        const bool mine = r.valid(seed(t.partition, row, at)) && r.kind_of() == kind && r.txid() == t.txid;
        if (one && !mine && l > 0) break;
        s = uniform(w, mask, f(mine, r));
        if (!s.ok()) return s;
      }
    }
    return {};
  }

  // Makes the elements the transaction's entries name durable (one persist
  // per row: each lane its own element's page).
  template <class Warp>
  DW_HD request_status persist_data(const Warp& w, const log_tx& t) const {
    w.sync(w.active());
    return for_own_entries(w, t, t.first, t.next, false, [&](bool mine, const log_format::record& r) {
      const bool in = mine && r.array() < narrays_ && r.index() < arrays_[r.array()].n;
      const log_array d = in ? arrays_[r.array()] : log_array{};
      const uint64_t page = (r.index() * d.elem_bytes) >> cache_.page_shift();
      return cache_.persist(w, in ? d.dataset : ~0u, in ? page : 1, in ? page : 0);
    });
  }

  // Writes the end record (every lane a copy) in the transaction's next
  // row, makes it durable, and moves the partition's tail past it.
  template <class Warp>
  DW_HD request_status end(const Warp& w, log_tx& t, uint32_t kind) const {
    if (t.next >= rows_) return t.status = request_status::client(client_code::out_of_range);
    const log_format::record r =
        log_format::record::end(kind, t.txid, t.records, t.first, t.next, seed(t.partition, t.next, w.lane() % 32));
    request_status s = write_row(w, t.partition, t.next, true, r);
    if (!s.ok()) return t.status = s;
    t.next += 1;
    if (!(s = persist(w, t)).ok()) return s;
    t.open = false;
    if (!(s = set_tail(w, t.partition, t.next)).ok()) return t.status = s;
    return {};
  }
};

// Host-side configuration of a new log.
struct log_config {
  log_form form = log_form::redo;
  // Partitions: one per warp that may hold a transaction at once (a kernel's
  // (block, warp) slots; warp_partition()). CPU threads: one per thread.
  uint32_t partitions = 1;
  // Rows per partition (1 KiB each: one entry per lane). A transaction takes
  // one row per append call and one for its end record; rows are freed by a
  // checkpoint.
  uint32_t rows = 64;
  // What the log belongs to (at most 63 bytes), checked at open.
  std::string tag;
};

// What recovery found and did.
struct recovery_result {
  uint64_t epoch = 0;            // the epoch whose records were read
  uint64_t new_epoch = 0;        // the epoch after the truncation
  uint64_t records = 0;          // valid records of that epoch (entries and end-record copies)
  uint64_t committed = 0;        // transactions with a commit record
  uint64_t aborted = 0;          // undo: with an abort record (already rolled back)
  uint64_t replayed = 0;         // redo: committed transactions applied again
  uint64_t discarded = 0;        // redo: transactions without a commit record (ignored)
  uint64_t rolled_back = 0;      // undo: transactions without an end record, rolled back
  uint64_t elements_written = 0; // data elements written
  // One header copy failed its checksum (a torn header write, or damage).
  // When the log holds records of the epoch after the good copy's, the
  // damaged copy was the newer one: recovery read that epoch instead
  // (header_epoch_inferred) and both copies are rewritten.
  bool header_copy_damaged = false;
  bool header_epoch_inferred = false;
};

// A data array for create/open: any array<T> with 4- or 8-byte elements in
// the log's cache.
struct log_data {
  page_cache* cache = nullptr;
  log_array desc{};
  template <class T>
  log_data(const array<T>& a)  // NOLINT: implicit on purpose ({a, b} lists)
      : cache(&a.cache()), desc{a.ref().dataset, uint32_t(sizeof(T)), a.size()} {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "a logged array has 4- or 8-byte elements");
  }
};

// The host owner: writes and reads the header, recovers, truncates. None of
// its calls may run while a kernel (or thread) uses the log or its cache,
// except ref() and the accessors.
class write_ahead_log {
 public:
  // Bytes a log of this geometry needs (the namespace may be larger).
  static uint64_t bytes_needed(uint32_t partitions, uint32_t rows) { return log_format::log_bytes(partitions, rows); }

  // Writes a new, empty log on namespace `log_nsid` (through `cache`'s
  // controller link): a new nonce, epoch 1, both header copies, flushed.
  // `data`: the arrays entries may name (in `cache`, writable). Throws
  // deepwell::error naming the namespace for a namespace too small, a bad
  // geometry, tag or array.
  static write_ahead_log create(std::shared_ptr<page_cache> cache, uint32_t log_nsid, const std::vector<log_data>& data,
                                const log_config& cfg);
  // Opens the log on `log_nsid`: checks the header (magic, version, checksum
  // of at least one copy, the tag, the namespace's size, the arrays'
  // number, element sizes and lengths). Throws deepwell::error naming the
  // namespace and what does not match. recover() must follow before ref().
  static write_ahead_log open(std::shared_ptr<page_cache> cache, uint32_t log_nsid, const std::vector<log_data>& data,
                              const std::string& tag);

  // Recovery: reads every record of the current epoch, replays committed
  // transactions (redo, in txid order) or rolls back those with no end
  // record (undo, newest first), writes the data and makes it durable, then
  // truncates (the epoch advances). The cache is emptied first (flushed),
  // so that no page of it is stale afterwards; the data is written through
  // the controller (a GPU cache's pages are not reachable from the host).
  // Throws deepwell::error if a committed transaction's entries cannot all
  // be read (a corrupted log) or I/O fails.
  recovery_result recover();

  // Checkpoint and truncation: every dirty page of the cache is written
  // back and flushed (page_cache::flush: the data the committed
  // transactions applied), then the header's epoch advances (written and
  // flushed), which frees every row. Take ref() again afterwards. Throws
  // deepwell::error on failure (the log is then unchanged).
  void checkpoint();

  // Throws deepwell::error unless every warp of a launch can have its own
  // partition (warp_partition()).
  void check_launch(uint64_t warps) const;

  // The kernels' view. Throws if the log was opened and not yet recovered.
  log_ref ref() const;

  log_form form() const;
  uint32_t partitions() const;
  uint32_t rows() const;
  uint64_t epoch() const;
  const std::string& tag() const;
  // "namespace 3 (file /data/x.log)": how messages name the log.
  std::string name() const;

  write_ahead_log(write_ahead_log&&) noexcept;
  write_ahead_log& operator=(write_ahead_log&&) noexcept;
  ~write_ahead_log();

 private:
  struct impl;
  explicit write_ahead_log(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace deepwell::durable
