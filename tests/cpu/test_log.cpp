// The write-ahead log (durable/log.hpp) on CPU threads and emulated warps:
// the HCL layout, checksums, the header's checks (tag, truncation,
// corruption, arrays), truncation at checkpoints, and crash tests: a
// workload of transactions over a data array, each moving amounts between
// random elements (the sum is invariant), on a disk with a volatile write
// cache cut at random requests in every power-cut mode; after each cut the
// disk is revived, a new controller and cache open the log and recover, and
// the data must equal the result of a prefix of the transaction history
// that holds every transaction whose commit returned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/log.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
using namespace deepwell::durable;
namespace lf = deepwell::durable::log_format;

namespace {

// [offset, offset + length) of another target: the log and the data as two
// namespaces of one disk, so that one power cut takes both at one instant
// (and a flush of either flushes the disk, as on a real one).
class window_target final : public target {
 public:
  window_target(std::shared_ptr<target> inner, uint64_t offset, uint64_t length)
      : inner_(std::move(inner)), offset_(offset), length_(length) {}
  uint64_t size() const override { return length_; }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override {
    return "bytes " + std::to_string(offset_) + "+" + std::to_string(length_) + " of " + inner_->describe();
  }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    inner_->read(io, buf, len, offset_ + offset, done);
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inner_->write(io, buf, len, offset_ + offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

 private:
  std::shared_ptr<target> inner_;
  uint64_t offset_, length_;
};

controller_config quiet_controller() {
  controller_config c;
  c.pollers = 1;
  c.spin_us = 20;
  return c;
}

// A disk holding a log (first) and a data array of 8-byte words, and the
// controller and cache that serve them while the power is on.
struct rig {
  uint32_t partitions, rows;
  uint64_t log_bytes, data_words;
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  uint32_t log_ns = 0, data_ns = 0;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<array<uint64_t>> data;

  uint32_t page_size = 4096;

  rig(uint32_t parts, uint32_t rows_, uint64_t words, uint64_t slots = 32, uint32_t page = 4096)
      : partitions(parts), rows(rows_), log_bytes(write_ahead_log::bytes_needed(parts, rows_)), data_words(words),
        page_size(page) {
    disk = make_volatile_cache_target(log_bytes + words * 8);
    power_on(slots);
  }
  void power_on(uint64_t slots = 32) {
    ctl = std::make_unique<controller>(quiet_controller());
    log_ns = ctl->add_namespace({std::make_shared<window_target>(disk, 0, log_bytes), 512, false});
    data_ns = ctl->add_namespace({std::make_shared<window_target>(disk, log_bytes, data_words * 8), 512, false});
    cache = make_host_page_cache(*ctl, test::small_cache(slots, page_size));
    data = std::make_unique<array<uint64_t>>(cache, data_ns);
  }
  void power_off() {
    data.reset();
    cache.reset();
    ctl.reset();
  }
  // Cut (if the disk is still up), revive, new controller and cache.
  void crash_and_reboot(const power_cut& how = {}, uint64_t slots = 32) {
    if (!disk->dead()) disk->cut(how);
    power_off();
    disk->revive();
    power_on(slots);
  }
  write_ahead_log create(log_form form, const std::string& tag = "accounts") {
    log_config c;
    c.form = form;
    c.partitions = partitions;
    c.rows = rows;
    c.tag = tag;
    return write_ahead_log::create(cache, log_ns, {*data}, c);
  }
  write_ahead_log open(const std::string& tag = "accounts") { return write_ahead_log::open(cache, log_ns, {*data}, tag); }
  uint64_t durable_data(uint64_t i) const {
    const auto img = disk->durable_image();
    uint64_t v;
    std::memcpy(&v, img.data() + log_bytes + i * 8, 8);
    return v;
  }
  lf::record durable_record(const log_ref& r, uint32_t p, uint32_t row, uint32_t lane) const {
    const auto img = disk->durable_image();
    lf::record rec;
    for (uint32_t j = 0; j < lf::entry_words; ++j)
      std::memcpy(&rec.w[j], img.data() + lf::record_word(partitions, rows, p, row, j, lane) * 4, 4);
    (void)r;
    return rec;
  }
  // Flips bit `bit` of the durable byte at `offset` (the disk must be up; a
  // revive then reads the medium).
  void corrupt(uint64_t offset, unsigned bit) {
    auto img = disk->durable_image();
    img[offset] ^= uint8_t(1u << bit);
    power_off();
    disk = make_volatile_cache_target(std::move(img));
    power_on();
  }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// ---------------------------------------------------------------------------
// Layout

// Word j of the 32 lanes' entries of a row are 32 consecutive words (one
// 128-byte line); a row is 1 KiB; a partition's rows follow each other;
// every position is distinct and inside the log.
TEST(Log, LayoutIsHierarchicalAndCoalesced) {
  const uint32_t parts = 5, rows = 7;
  EXPECT_EQ(lf::partitions_offset(parts) % lf::region_align, 0u);
  EXPECT_EQ(lf::log_bytes(parts, rows) % lf::region_align, 0u);
  EXPECT_GE(lf::partitions_offset(parts), lf::header_bytes + parts * 8);
  std::set<uint64_t> seen;
  for (uint32_t p = 0; p < parts; ++p)
    for (uint32_t row = 0; row < rows; ++row) {
      const uint64_t row0 = lf::record_word(parts, rows, p, row, 0, 0);
      EXPECT_EQ(row0 * 4, lf::partitions_offset(parts) + (uint64_t(p) * rows + row) * 1024);
      for (uint32_t j = 0; j < lf::entry_words; ++j) {
        EXPECT_EQ(lf::record_word(parts, rows, p, row, j, 0) % 32, 0u);  // a line starts at lane 0
        for (uint32_t lane = 0; lane < 32; ++lane) {
          const uint64_t wd = lf::record_word(parts, rows, p, row, j, lane);
          EXPECT_EQ(wd, row0 + j * 32 + lane);
          EXPECT_LT(wd * 4 + 4, lf::log_bytes(parts, rows) + 1);
          EXPECT_TRUE(seen.insert(wd).second);
        }
      }
    }
  EXPECT_EQ(seen.size(), uint64_t(parts) * rows * 256);
}

// A warp of 32 emulated lanes appends one entry per lane: the row holds
// them striped (lane l's word j at row + 32 j + l), each with a valid
// checksum, and the partition's other rows and the other partitions are
// untouched.
TEST(Log, AWarpsAppendFillsOneStripedRow) {
  rig r(4, 8, 4096);
  write_ahead_log log = r.create(log_form::redo);
  const log_ref ref = log.ref();
  std::atomic<int> failures{0};
  test::run_warp(0xFFFFFFFFu, 2, [&](test::emulated_warp w) {
    log_tx t = ref.begin(w, 2, 77);
    if (!ref.append(w, t, true, {0, 100u + w.lane(), 5000u + w.lane()}).ok()) ++failures;
    if (!ref.persist(w, t).ok()) ++failures;
    if (t.next != 1 || t.records != 32) ++failures;
  });
  EXPECT_EQ(failures.load(), 0);
  const auto img = r.disk->durable_image();
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const lf::record rec = r.durable_record(ref, 2, 0, lane);
    EXPECT_TRUE(rec.valid(ref.seed(2, 0, lane))) << lane;
    EXPECT_EQ(rec.kind_of(), uint32_t(lf::redo_entry));
    EXPECT_EQ(rec.txid(), 77u);
    EXPECT_EQ(rec.index(), 100u + lane);
    EXPECT_EQ(rec.value(), 5000u + lane);
  }
  // Nothing else of the partition area was written.
  uint64_t nonzero = 0;
  const uint64_t row0 = lf::record_word(4, 8, 2, 0, 0, 0);
  for (uint64_t wd = lf::partitions_offset(4) / 4; wd < lf::log_bytes(4, 8) / 4; ++wd) {
    uint32_t v;
    std::memcpy(&v, img.data() + wd * 4, 4);
    if (wd >= row0 && wd < row0 + 256) continue;
    nonzero += v != 0;
  }
  EXPECT_EQ(nonzero, 0u);
}

// Lanes without an entry leave their column alone; a call where no lane
// has one takes no row.
TEST(Log, LanesWithoutEntriesAndEmptyAppends) {
  rig r(1, 8, 4096);
  write_ahead_log log = r.create(log_form::redo);
  const log_ref ref = log.ref();
  std::atomic<int> failures{0};
  test::run_warp(0x0000FFFFu, 0, [&](test::emulated_warp w) {
    log_tx t = ref.begin(w, 0, 5);
    if (!ref.append(w, t, false, {}).ok() || t.next != 0) ++failures;
    if (!ref.append(w, t, w.lane() % 3 == 0, {0, w.lane(), 1}).ok() || t.next != 1) ++failures;
    if (t.records != 6) ++failures;  // lanes 0, 3, 6, 9, 12, 15
    if (!ref.commit(w, t).ok()) ++failures;
  });
  EXPECT_EQ(failures.load(), 0);
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const lf::record rec = r.durable_record(ref, 0, 0, lane);
    EXPECT_EQ(rec.valid(ref.seed(0, 0, lane)), lane < 16 && lane % 3 == 0) << lane;
    const lf::record end = r.durable_record(ref, 0, 1, lane);
    EXPECT_EQ(end.valid(ref.seed(0, 1, lane)), lane < 16) << lane;  // each active lane writes a copy
    if (lane < 16) {
      EXPECT_EQ(end.kind_of(), uint32_t(lf::commit_record));
      EXPECT_EQ(end.count(), 6u);
    }
  }
  // Applied after the commit: in the cache, not yet durable.
  EXPECT_EQ(r.data->ref()[3], 1u);
  EXPECT_EQ(r.durable_data(3), 0u);
}

// ---------------------------------------------------------------------------
// Checksums

// Every single-bit flip of a record is detected, and a record is valid only
// at its own position, epoch and log.
TEST(Log, ChecksumDetectsEveryBitFlipAndMisplacedRecords) {
  const uint64_t seed = lf::record_seed(0x1234, 3, 1, 2, 3);
  const lf::record r = lf::record::entry(lf::redo_entry, 1, 99, 12345, 0xDEADBEEFCAFEull, seed);
  ASSERT_TRUE(r.valid(seed));
  for (uint32_t j = 0; j < lf::entry_words; ++j)
    for (unsigned b = 0; b < 32; ++b) {
      lf::record c = r;
      c.w[j] ^= 1u << b;
      EXPECT_FALSE(c.valid(seed)) << "word " << j << " bit " << b;
    }
  EXPECT_FALSE(r.valid(lf::record_seed(0x1234, 4, 1, 2, 3)));  // another epoch
  EXPECT_FALSE(r.valid(lf::record_seed(0x1235, 3, 1, 2, 3)));  // another log
  EXPECT_FALSE(r.valid(lf::record_seed(0x1234, 3, 2, 2, 3)));  // another partition
  EXPECT_FALSE(r.valid(lf::record_seed(0x1234, 3, 1, 3, 3)));  // another row
  EXPECT_FALSE(r.valid(lf::record_seed(0x1234, 3, 1, 2, 4)));  // another lane
  lf::record zero{};
  EXPECT_FALSE(zero.valid(seed));
  // A slot never written (zeros, kind 0) whose checksum matches by chance,
  // as one slot in 2^32 does: still no record (recovery once failed on one).
  lf::record chance{};
  chance.seal(seed);
  EXPECT_FALSE(chance.valid(seed));
}

// A corrupted entry of a committed transaction makes recovery fail, naming
// the transaction; a corrupted entry of one that never committed is only
// ignored.
TEST(Log, RecoveryDetectsACorruptedCommittedRecord) {
  rig r(2, 8, 4096);
  log_ref ref;
  {
    write_ahead_log log = r.create(log_form::redo);
    ref = log.ref();
    log_tx t = ref.begin(one_lane{}, 0, 1);
    ASSERT_TRUE(ref.append(one_lane{}, t, true, {0, 10, 111}).ok());
    ASSERT_TRUE(ref.append(one_lane{}, t, true, {0, 11, 222}).ok());
    ASSERT_TRUE(ref.commit(one_lane{}, t).ok());
    log_tx u = ref.begin(one_lane{}, 1, 2);  // never committed
    ASSERT_TRUE(ref.append(one_lane{}, u, true, {0, 12, 333}).ok());
    ASSERT_TRUE(ref.persist(one_lane{}, u).ok());
  }
  const uint64_t committed_word = lf::record_word(2, 8, 0, 1, 5, 0);  // the value of the second entry
  const uint64_t uncommitted_word = lf::record_word(2, 8, 1, 0, 3, 0);
  {
    rig copy(2, 8, 4096);
    copy.disk = make_volatile_cache_target(r.disk->durable_image());
    copy.power_off();
    copy.power_on();
    copy.corrupt(uncommitted_word * 4, 0);
    write_ahead_log log = copy.open();
    const recovery_result res = log.recover();
    EXPECT_EQ(res.committed, 1u);
    EXPECT_EQ(res.replayed, 1u);
    EXPECT_EQ(res.discarded, 0u);  // its only record is unreadable: nothing of it is left
    EXPECT_EQ(copy.durable_data(11), 222u);
    EXPECT_EQ(copy.durable_data(12), 0u);
  }
  r.corrupt(committed_word * 4 + 1, 6);
  write_ahead_log log = r.open();
  const std::string e = error_of([&] { log.recover(); });
  EXPECT_NE(e.find("transaction 1"), std::string::npos) << e;
  EXPECT_NE(e.find("corrupted"), std::string::npos) << e;
  EXPECT_NE(e.find("namespace"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------
// The header

TEST(Log, OpeningWithAnotherTagIsRefused) {
  rig r(1, 4, 1024);
  { write_ahead_log log = r.create(log_form::undo, "bank-A"); }
  const std::string e = error_of([&] { r.open("bank-B"); });
  EXPECT_NE(e.find("'bank-A'"), std::string::npos) << e;
  EXPECT_NE(e.find("'bank-B'"), std::string::npos) << e;
  EXPECT_NE(e.find("namespace " + std::to_string(r.log_ns)), std::string::npos) << e;
  write_ahead_log ok = r.open("bank-A");
  EXPECT_EQ(ok.form(), log_form::undo);
  EXPECT_EQ(ok.tag(), "bank-A");
}

TEST(Log, OpeningWithOtherArraysIsRefused) {
  rig r(1, 4, 1024);
  { write_ahead_log log = r.create(log_form::redo); }
  const std::string e = error_of([&] { write_ahead_log::open(r.cache, r.log_ns, {}, "accounts"); });
  EXPECT_NE(e.find("[1024 x 8 B]"), std::string::npos) << e;
  array<uint32_t> as_words(r.cache, r.data_ns);
  const std::string e2 = error_of([&] { write_ahead_log::open(r.cache, r.log_ns, {as_words}, "accounts"); });
  EXPECT_NE(e2.find("[2048 x 4 B]"), std::string::npos) << e2;
}

// A log file cut short (its header says more bytes than the file has) is
// refused with the file's name; so is a file too small for a header.
TEST(Log, ATruncatedLogFileIsRefused) {
  test::scratch_file f;
  const uint64_t need = write_ahead_log::bytes_needed(4, 16);
  controller ctl(quiet_controller());
  const uint32_t data_ns = ctl.add_namespace({make_host_memory_target(1 << 16, true), 512, false});
  {
    file_options o;
    o.writable = true;
    o.create = true;
    o.create_size = need;
    const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 512, false});
    auto cache = make_host_page_cache(ctl, test::small_cache(16));
    array<uint64_t> data(cache, data_ns);
    log_config c;
    c.partitions = 4;
    c.rows = 16;
    c.tag = "t";
    write_ahead_log::create(cache, ns, {data}, c);
  }
  ASSERT_EQ(::truncate(f.path().c_str(), off_t(need - 4096)), 0);
  file_options o;
  o.writable = true;
  const uint32_t ns = ctl.add_namespace({open_file_target(f.path(), o), 512, false});
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  array<uint64_t> data(cache, data_ns);
  const std::string e = error_of([&] { write_ahead_log::open(cache, ns, {data}, "t"); });
  EXPECT_NE(e.find(f.path()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(need)), std::string::npos) << e;

  ASSERT_EQ(::truncate(f.path().c_str(), 4096), 0);
  const uint32_t ns2 = ctl.add_namespace({open_file_target(f.path(), o), 512, false});
  const std::string e2 = error_of([&] { write_ahead_log::open(cache, ns2, {data}, "t"); });
  EXPECT_NE(e2.find(f.path()), std::string::npos) << e2;
  EXPECT_NE(e2.find("too few to hold a log header"), std::string::npos) << e2;
}

// One corrupted header copy is survived (the other is used); both, or no
// header at all, are refused.
TEST(Log, CorruptedHeaderIsRefused) {
  rig r(1, 4, 1024);
  const std::string none = error_of([&] { r.open(); });
  EXPECT_NE(none.find("not a deepwell log"), std::string::npos) << none;
  { write_ahead_log log = r.create(log_form::redo); }
  r.corrupt(40, 3);  // copy 0
  {
    write_ahead_log log = r.open();
    EXPECT_EQ(log.recover().new_epoch, 2u);
  }
  r.corrupt(lf::header_copy_stride + 40, 3);  // now copy 1 (the one recovery wrote) too
  write_ahead_log log2 = r.open();  // copy 0 was rewritten whole by recovery's header update: fine
  log2.recover();
  r.corrupt(44, 1);
  r.corrupt(lf::header_copy_stride + 44, 1);
  const std::string both = error_of([&] { r.open(); });
  EXPECT_NE(both.find("corrupted header"), std::string::npos) << both;
  EXPECT_NE(both.find("namespace"), std::string::npos) << both;
}

TEST(Log, BadConfigurationsAreRefused) {
  rig r(1, 4, 1024);
  log_config c;
  c.partitions = 2;  // more than the namespace holds
  c.rows = 100;
  EXPECT_NE(error_of([&] { write_ahead_log::create(r.cache, r.log_ns, {*r.data}, c); }).find("needs"), std::string::npos);
  c.partitions = 1;
  c.rows = 1;
  EXPECT_NE(error_of([&] { write_ahead_log::create(r.cache, r.log_ns, {*r.data}, c); }).find("rows"), std::string::npos);
  c.rows = 4;
  c.tag = std::string(64, 'x');
  EXPECT_NE(error_of([&] { write_ahead_log::create(r.cache, r.log_ns, {*r.data}, c); }).find("tag"), std::string::npos);
  c.tag = "";
  write_ahead_log log = write_ahead_log::create(r.cache, r.log_ns, {*r.data}, c);
  EXPECT_NE(error_of([&] { log.check_launch(2); }).find("2 warps"), std::string::npos);
  write_ahead_log opened = write_ahead_log::open(r.cache, r.log_ns, {*r.data}, "");
  EXPECT_NE(error_of([&] { opened.ref(); }).find("recover()"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Transactions, truncation, recovery (single thread, deterministic)

// A partition runs out of rows; a checkpoint makes the applied data durable
// and frees them (the epoch advances; old records no longer count).
TEST(Log, CheckpointTruncates) {
  rig r(1, 6, 1024);
  write_ahead_log log = r.create(log_form::redo);
  log_ref ref = log.ref();
  const one_lane w;
  uint64_t txid = 1;
  for (;; ++txid) {  // two entries + a commit row each: 6 rows hold two
    log_tx t = ref.begin(w, 0, txid);
    request_status s = ref.append(w, t, true, {0, txid, txid * 10});
    if (s.ok()) s = ref.append(w, t, true, {0, txid + 100, txid * 20});
    if (!s.ok()) {
      EXPECT_EQ(s.code, client_code::out_of_range);
      EXPECT_TRUE(ref.abort(w, t).code == client_code::out_of_range);
      break;
    }
    ASSERT_TRUE(ref.commit(w, t).ok());
  }
  EXPECT_EQ(txid, 3u);
  EXPECT_EQ(r.durable_data(1), 0u);  // applied in the cache only
  const uint64_t e0 = log.epoch();
  log.checkpoint();
  EXPECT_EQ(log.epoch(), e0 + 1);
  EXPECT_EQ(r.durable_data(1), 10u);
  EXPECT_EQ(r.durable_data(102), 40u);
  ref = log.ref();
  log_tx t = ref.begin(w, 0, txid);
  EXPECT_EQ(t.next, 0u);  // the rows are free again
  ASSERT_TRUE(ref.append(w, t, true, {0, 7, 70}).ok());
  ASSERT_TRUE(ref.commit(w, t).ok());
  // A crash now: recovery sees only the new epoch's transaction.
  r.crash_and_reboot();
  write_ahead_log again = r.open();
  const recovery_result res = again.recover();
  EXPECT_EQ(res.epoch, e0 + 1);
  EXPECT_EQ(res.committed, 1u);
  EXPECT_EQ(res.replayed, 1u);
  EXPECT_EQ(res.elements_written, 1u);
  EXPECT_EQ(r.durable_data(7), 70u);
  EXPECT_EQ(r.durable_data(1), 10u);
}

// Redo: committed transactions are replayed in txid order (the later one
// wins an element they share), uncommitted ones and aborted ones are not.
TEST(Log, RedoRecoveryReplaysCommittedTransactionsInOrder) {
  rig r(3, 8, 1024);
  write_ahead_log log = r.create(log_form::redo);
  const log_ref ref = log.ref();
  const one_lane w;
  log_tx a = ref.begin(w, 0, 10);
  ASSERT_TRUE(ref.append(w, a, true, {0, 5, 1}).ok());
  ASSERT_TRUE(ref.commit(w, a).ok());
  log_tx b = ref.begin(w, 1, 11);
  ASSERT_TRUE(ref.append(w, b, true, {0, 5, 2}).ok());
  ASSERT_TRUE(ref.append(w, b, true, {0, 6, 2}).ok());
  ASSERT_TRUE(ref.commit(w, b).ok());
  log_tx c = ref.begin(w, 2, 12);  // persisted, never committed
  ASSERT_TRUE(ref.append(w, c, true, {0, 6, 3}).ok());
  ASSERT_TRUE(ref.persist(w, c).ok());
  log_tx d = ref.begin(w, 0, 13);  // aborted
  ASSERT_TRUE(ref.append(w, d, true, {0, 7, 4}).ok());
  ASSERT_TRUE(ref.persist(w, d).ok());
  ASSERT_TRUE(ref.abort(w, d).ok());
  EXPECT_EQ(r.data->ref()[5], 2u);
  EXPECT_EQ(r.data->ref()[7], 0u);
  r.crash_and_reboot();
  EXPECT_EQ(r.durable_data(5), 0u);
  write_ahead_log again = r.open();
  const recovery_result res = again.recover();
  EXPECT_EQ(res.committed, 2u);
  EXPECT_EQ(res.replayed, 2u);
  EXPECT_EQ(res.discarded, 2u);
  EXPECT_EQ(res.elements_written, 3u);
  EXPECT_EQ(r.durable_data(5), 2u);
  EXPECT_EQ(r.durable_data(6), 2u);
  EXPECT_EQ(r.durable_data(7), 0u);
  // Recovery truncated: a second recovery finds nothing.
  r.crash_and_reboot();
  write_ahead_log third = r.open();
  const recovery_result res2 = third.recover();
  EXPECT_EQ(res2.records, 0u);
  EXPECT_EQ(r.durable_data(5), 2u);
}

// Undo: a transaction without an end record is rolled back (its in-place
// writes undone, an element logged twice ends with its oldest value); a
// committed one and an aborted one are left alone.
TEST(Log, UndoRecoveryRollsBackUnfinishedTransactions) {
  rig r(2, 8, 1024);
  write_ahead_log log = r.create(log_form::undo);
  const log_ref ref = log.ref();
  const one_lane w;
  log_tx a = ref.begin(w, 0, 1);
  ASSERT_TRUE(ref.append_old(w, a, true, 0, 5).ok());
  ASSERT_TRUE(ref.persist(w, a).ok());
  ASSERT_TRUE(ref.write(w, true, 0, 5, 50).ok());
  ASSERT_TRUE(ref.commit(w, a).ok());
  EXPECT_EQ(r.durable_data(5), 50u);  // undo commits make the data durable
  log_tx ab = ref.begin(w, 0, 2);
  ASSERT_TRUE(ref.append_old(w, ab, true, 0, 8).ok());
  ASSERT_TRUE(ref.persist(w, ab).ok());
  ASSERT_TRUE(ref.write(w, true, 0, 8, 80).ok());
  ASSERT_TRUE(ref.abort(w, ab).ok());
  EXPECT_EQ(r.data->ref()[8], 0u);
  log_tx b = ref.begin(w, 1, 3);  // in flight at the crash
  ASSERT_TRUE(ref.append_old(w, b, true, 0, 5).ok());
  ASSERT_TRUE(ref.append_old(w, b, true, 0, 6).ok());
  ASSERT_TRUE(ref.persist(w, b).ok());
  ASSERT_TRUE(ref.write(w, true, 0, 5, 51).ok());
  ASSERT_TRUE(ref.write(w, true, 0, 6, 61).ok());
  ASSERT_TRUE(ref.append_old(w, b, true, 0, 5).ok());  // logged again: 51
  ASSERT_TRUE(ref.persist(w, b).ok());
  ASSERT_TRUE(ref.write(w, true, 0, 5, 52).ok());
  ASSERT_TRUE(r.data->persist_all().ok());  // the in-place writes reach the disk
  EXPECT_EQ(r.durable_data(5), 52u);
  r.crash_and_reboot();
  write_ahead_log again = r.open();
  const recovery_result res = again.recover();
  EXPECT_EQ(res.committed, 1u);
  EXPECT_EQ(res.aborted, 1u);
  EXPECT_EQ(res.rolled_back, 1u);
  EXPECT_EQ(res.elements_written, 3u);
  EXPECT_EQ(r.durable_data(5), 50u);
  EXPECT_EQ(r.durable_data(6), 0u);
  EXPECT_EQ(r.durable_data(8), 0u);
}

// ---------------------------------------------------------------------------
// The protocol's order, checked at every write that reaches the disk

namespace {

// Sits in front of the disk and checks every write that reaches it:
//  - a write holding a commit record finds every entry the record counts
//    durable already (an entry's persist completes before the commit
//    record is written), and, undo, the elements the transaction wrote in
//    place;
//  - a data write that changes an element to v (the workload writes its
//    txid) finds, redo: transaction v's commit record durable (entries are
//    applied only after the commit); undo: transaction v's entry for that
//    element durable (logged before the in-place write).
class order_checker final : public target {
 public:
  order_checker(std::shared_ptr<volatile_cache_target> disk, uint32_t parts, uint32_t rows, uint64_t data_offset,
                log_form form)
      : disk_(std::move(disk)), parts_(parts), rows_(rows), data_offset_(data_offset), form_(form) {}
  void watch(const log_ref& r) {
    std::lock_guard g(mu_);
    ref_ = r;
  }
  uint64_t commits_seen() const {
    std::lock_guard g(mu_);
    return commits_;
  }
  std::vector<std::string> violations() const {
    std::lock_guard g(mu_);
    return bad_;
  }
  uint64_t size() const override { return disk_->size(); }
  bool writable() const override { return true; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override { return disk_->describe(); }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    disk_->read(io, buf, len, offset, done);
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inspect(static_cast<const uint8_t*>(buf), len, offset);
    disk_->write(io, buf, len, offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { disk_->flush(io, done); }

 private:
  lf::record at(const uint8_t* base, uint64_t base_word, uint32_t p, uint32_t row, uint32_t lane) const {
    lf::record r;
    for (uint32_t j = 0; j < lf::entry_words; ++j)
      std::memcpy(&r.w[j], base + (lf::record_word(parts_, rows_, p, row, j, lane) - base_word) * 4, 4);
    return r;
  }
  // Whether the durable image holds a valid record of `kind` for txid
  // (and, for entries, element `index`).
  bool durable_record(const std::vector<uint8_t>& img, uint32_t kind, uint64_t txid, uint64_t index) const {
    for (uint32_t p = 0; p < parts_; ++p)
      for (uint32_t row = 0; row < rows_; ++row)
        for (uint32_t lane = 0; lane < (kind == lf::commit_record ? 1u : 32u); ++lane) {
          const lf::record r = at(img.data(), 0, p, row, lane);
          if (r.valid(ref_.seed(p, row, lane)) && r.kind_of() == kind && r.txid() == txid &&
              (kind == lf::commit_record || r.index() == index))
            return true;
        }
    return false;
  }
  void inspect_data(const uint8_t* buf, uint32_t len, uint64_t offset) {
    const auto img = disk_->durable_image();
    for (uint64_t b = 0; b + 8 <= len; b += 8) {
      uint64_t now, before;
      std::memcpy(&now, buf + b, 8);
      std::memcpy(&before, img.data() + offset + b, 8);
      if (now == before || now == 0) continue;
      const uint64_t i = (offset + b - data_offset_) / 8;
      const bool ok = form_ == log_form::redo ? durable_record(img, lf::commit_record, now, 0)
                                              : durable_record(img, lf::undo_entry, now, i);
      ++data_checked_;
      if (!ok)
        bad_.push_back("element " + std::to_string(i) + " was written with transaction " + std::to_string(now) +
                       "'s value before " + (form_ == log_form::redo ? "its commit record" : "its undo entry") +
                       " was durable");
    }
  }
  void inspect(const uint8_t* buf, uint32_t len, uint64_t offset) {
    std::lock_guard g(mu_);
    if (!ref_.attached()) return;
    if (offset >= data_offset_) return inspect_data(buf, len, offset);
    const uint64_t first = lf::partitions_offset(parts_), end = first + uint64_t(parts_) * rows_ * lf::row_bytes;
    for (uint64_t row_off = std::max(first, offset - offset % lf::row_bytes); row_off + lf::row_bytes <= std::min(end, offset + len);
         row_off += lf::row_bytes) {
      if (row_off < offset) continue;
      const uint64_t idx = (row_off - first) / lf::row_bytes;
      const uint32_t p = uint32_t(idx / rows_), row = uint32_t(idx % rows_);
      const lf::record c = at(buf - offset, 0, p, row, 0);
      if (!c.valid(ref_.seed(p, row, 0)) || c.kind_of() != lf::commit_record) continue;
      ++commits_;
      const auto img = disk_->durable_image();
      uint32_t durable = 0;
      for (uint32_t e = c.first_row(); e < row; ++e)
        for (uint32_t lane = 0; lane < 32; ++lane) {
          const lf::record r = at(img.data(), 0, p, e, lane);
          durable += r.valid(ref_.seed(p, e, lane)) && r.is_entry() && r.txid() == c.txid();
        }
      if (durable != c.count())
        bad_.push_back("the commit record of transaction " + std::to_string(c.txid()) + " was written with " +
                       std::to_string(durable) + " of its " + std::to_string(c.count()) + " entries durable");
      // Undo: the transaction's in-place writes are durable before its commit record.
      for (uint32_t e = c.first_row(); form_ == log_form::undo && e < row; ++e)
        for (uint32_t lane = 0; lane < 32; ++lane) {
          const lf::record r = at(img.data(), 0, p, e, lane);
          if (!r.valid(ref_.seed(p, e, lane)) || !r.is_entry() || r.txid() != c.txid()) continue;
          uint64_t v;
          std::memcpy(&v, img.data() + data_offset_ + r.index() * 8, 8);
          if (v != c.txid())
            bad_.push_back("the commit record of transaction " + std::to_string(c.txid()) + " was written before its element " +
                           std::to_string(r.index()) + " was durable");
        }
    }
  }
  std::shared_ptr<volatile_cache_target> disk_;
  uint32_t parts_, rows_;
  uint64_t data_offset_;
  log_form form_;
  mutable std::mutex mu_;
  log_ref ref_;
  uint64_t commits_ = 0;
  uint64_t data_checked_ = 0;

 public:
  uint64_t data_checked() const {
    std::lock_guard g(mu_);
    return data_checked_;
  }

 private:
  std::vector<std::string> bad_;
};

void check_order(log_form form) {
  const uint32_t parts = 2, rows = 128;
  const uint64_t log_bytes = write_ahead_log::bytes_needed(parts, rows), words = 4096;
  auto disk = make_volatile_cache_target(log_bytes + words * 8);
  auto checker = std::make_shared<order_checker>(disk, parts, rows, log_bytes, form);
  controller ctl(quiet_controller());
  const uint32_t log_ns = ctl.add_namespace({std::make_shared<window_target>(checker, 0, log_bytes), 512, false});
  const uint32_t data_ns = ctl.add_namespace({std::make_shared<window_target>(checker, log_bytes, words * 8), 512, false});
  auto cache = make_host_page_cache(ctl, test::small_cache(8, 1024));  // evictions write data back often
  array<uint64_t> data(cache, data_ns);
  log_config c;
  c.form = form;
  c.partitions = parts;
  c.rows = rows;
  write_ahead_log log = write_ahead_log::create(cache, log_ns, {data}, c);
  const log_ref ref = log.ref();
  checker->watch(ref);
  const one_lane w;
  std::mt19937_64 rng(5);
  for (uint64_t txid = 1; txid <= 60; ++txid) {
    log_tx t = ref.begin(w, uint32_t(txid % parts), txid);
    const unsigned k = 1 + unsigned(txid % 4);
    std::vector<uint64_t> idx;
    while (idx.size() < k) {
      const uint64_t i = rng() % words;
      if (std::find(idx.begin(), idx.end(), i) == idx.end()) idx.push_back(i);
    }
    for (uint64_t i : idx)
      ASSERT_TRUE((form == log_form::redo ? ref.append(w, t, true, {0, i, txid}) : ref.append_old(w, t, true, 0, i)).ok());
    if (form == log_form::undo) {
      ASSERT_TRUE(ref.persist(w, t).ok());
      for (uint64_t i : idx) ASSERT_TRUE(ref.write(w, true, 0, i, txid).ok());
    }
    ASSERT_TRUE(ref.commit(w, t).ok());
  }
  ASSERT_TRUE(data.persist_all().ok());
  EXPECT_GE(checker->commits_seen(), 60u);
  EXPECT_GT(checker->data_checked(), 60u);
  for (const std::string& v : checker->violations()) ADD_FAILURE() << v;
}

}  // namespace

TEST(LogProtocol, RedoWritesReachTheDiskInProtocolOrder) { check_order(log_form::redo); }
TEST(LogProtocol, UndoWritesReachTheDiskInProtocolOrder) { check_order(log_form::undo); }

// ---------------------------------------------------------------------------
// Crash tests

namespace {

constexpr uint64_t initial_value = 1000;

struct tx_record {
  uint64_t txid;
  std::vector<std::pair<uint64_t, uint64_t>> writes;  // element, new value (empty: aborted)
};

// The transactions one run performs, in txid order (the lock makes it the
// serialization order), and how far commits had returned.
struct history {
  std::vector<tx_record> txs;
  size_t returned = 0;  // txs[0, returned) all had their commit return ok
};

// Elements a transaction touches and the amounts it moves, from its txid
// and the values it reads: moving an amount that depends on the values makes
// transactions not commute, so a state that skipped one is caught.
std::vector<std::pair<uint64_t, uint64_t>> plan(uint64_t txid, uint64_t words, unsigned k,
                                                const std::function<uint64_t(uint64_t)>& value) {
  std::mt19937_64 rng(txid * 7919);
  std::vector<uint64_t> idx;
  while (idx.size() < k) {
    const uint64_t i = rng() % words;
    if (std::find(idx.begin(), idx.end(), i) == idx.end()) idx.push_back(i);
  }
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t i : idx) out.emplace_back(i, value(i));
  // Move from each element to the next a share of it.
  for (unsigned j = 0; j < k; ++j) {
    auto& from = out[j];
    auto& to = out[(j + 1) % k];
    const uint64_t amount = from.second / 3 + (txid % 5);
    const uint64_t a = std::min(amount, from.second);
    from.second -= a;
    to.second += a;
  }
  return out;
}

struct crash_params {
  log_form form;
  unsigned threads = 2;        // CPU threads (one partition each)
  unsigned lanes = 1;          // >1: each worker is an emulated warp of this many lanes, one element per lane
  unsigned txs = 24;           // transactions per run
  unsigned max_k = 4;          // elements per transaction (2..max_k)
  uint32_t rows = 24;          // rows per partition: small, so checkpoints happen
  uint64_t words = 4096;       // data elements (8 pages)
  uint64_t slots = 24;         // cache pages: evictions write back at random moments
  uint32_t page_size = 1024;   // a row per page: a transaction's rows are separate writes the cut may split
};

// One run: a fresh disk, the log and the data set up and flushed, then the
// workload with a cut armed at request `cut_at` (0: none; the run ends with
// a cut if the armed one never fired). Returns what recovery must honour.
struct run_result {
  history h;
  uint64_t requests = 0;  // write and flush requests the workload made
  std::string failure;    // a check that failed
  recovery_result rec;
  bool cut_in_workload = false;  // the power went while the workload ran (any of its writes or flushes)
};

class crash_run {
 public:
  explicit crash_run(const crash_params& p) : p_(p), r_(p.threads, p.rows, p.words, p.slots, p.page_size) {}

  // cut_after: cut the power the moment the commit (or abort) of the
  // cut_after-th transaction returns (0: never): what returned must be durable.
  run_result run(uint64_t cut_at, const power_cut& how, uint64_t cut_after = 0) {
    cut_after_ = cut_after;
    how_ = how;
    run_result out;
    {
      write_ahead_log log = r_.create(p_.form);
      const array_ref<uint64_t> d = r_.data->ref();
      std::vector<uint64_t> init(p_.words, initial_value);
      if (!d.write_range(init.data(), 0, p_.words).ok() || !r_.data->persist_all().ok()) {
        out.failure = "set-up failed";
        return out;
      }
      const uint64_t base = r_.disk->requests();
      if (cut_at) r_.disk->cut_at_request(cut_at, how);
      workload(log, out.h);
      out.requests = r_.disk->requests() - base;
      out.cut_in_workload = r_.disk->dead();
    }
    r_.crash_and_reboot(how, p_.slots);
    try {
      write_ahead_log log = r_.open();
      out.rec = log.recover();
      out.failure = check(out.h);
      // The recovered log takes new transactions.
      if (out.failure.empty()) {
        const log_ref ref = log.ref();
        const one_lane w;
        log_tx t = ref.begin(w, 0, 1u << 30);
        request_status s = p_.form == log_form::redo ? ref.append(w, t, true, {0, 0, 4242})
                                                     : ref.append_old(w, t, true, 0, 0);
        if (s.ok() && p_.form == log_form::undo) s = ref.persist(w, t);
        if (s.ok() && p_.form == log_form::undo) s = ref.write(w, true, 0, 0, 4242);
        if (s.ok()) s = ref.commit(w, t);
        if (!s.ok() || t.first != 0 || r_.data->ref()[0] != 4242)
          out.failure = "a transaction after recovery failed: " + describe(s);
      }
    } catch (const error& e) {
      out.failure = std::string("recovery failed: ") + e.what();
    }
    return out;
  }

 private:
  crash_params p_;
  rig r_;
  uint64_t cut_after_ = 0;
  power_cut how_;

  struct shared {
    std::mutex lock;
    uint64_t next_txid = 1;
    bool stop = false;
    log_ref ref;
  };

  // What a worker's lane 0 plans for its warp (the lanes read it after a
  // warp barrier).
  struct plan_slot {
    uint64_t txid = 0;
    bool go = false, abort = false;
    log_ref ref;
    std::vector<std::pair<uint64_t, uint64_t>> writes;
  };

  // The workload: `threads` workers, each its own partition, transactions
  // one at a time under one lock (they share elements); a checkpoint when
  // a partition runs short of rows. Stops at the first failure (the cut).
  void workload(write_ahead_log& log, history& h) {
    shared sh;
    sh.ref = log.ref();
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < p_.threads; ++t)
      ts.emplace_back([&, t] {
        plan_slot slot;
        if (p_.lanes == 1)
          worker(one_lane{}, t, log, h, sh, slot);
        else
          test::run_warp(p_.lanes == 32 ? 0xFFFFFFFFu : (1u << p_.lanes) - 1, t,
                         [&](test::emulated_warp w) { worker(w, t, log, h, sh, slot); });
      });
    for (auto& t : ts) t.join();
  }

  // One worker: lane 0 takes the lock, plans the next transaction (and
  // checkpoints when the partition is short of rows), the warp runs it,
  // lane 0 records whether its commit (or abort) returned, and lets go.
  template <class Warp>
  void worker(const Warp& w, unsigned partition, write_ahead_log& log, history& h, shared& sh, plan_slot& slot) {
    const unsigned lanes = popcount32(w.active());
    const unsigned lane = w.lane();
    for (;;) {
      std::unique_lock<std::mutex> held;
      if (lane == 0) {
        held = std::unique_lock<std::mutex>(sh.lock);
        slot.go = !sh.stop && sh.next_txid <= p_.txs;
        if (slot.go) plan_next(partition, lanes, log, h, sh, slot);
      }
      w.sync(w.active());
      if (!slot.go) break;
      bool ok;
      if constexpr (std::is_same_v<Warp, one_lane>)
        ok = transact(w, partition, slot);
      else
        ok = transact_lanes(w, partition, slot);
      w.sync(w.active());
      if (lane == 0) {
        if (!ok)
          sh.stop = true;
        else if (!sh.stop)
          h.returned = h.txs.size();
        if (ok && h.returned == cut_after_) r_.disk->cut(how_);
      }
      w.sync(w.active());
    }
  }

  void plan_next(unsigned partition, unsigned lanes, write_ahead_log& log, history& h, shared& sh, plan_slot& slot) {
    slot.txid = sh.next_txid++;
    const unsigned k = std::min<unsigned>(lanes > 1 ? lanes : p_.max_k, 2 + unsigned(slot.txid % (p_.max_k - 1)));
    slot.abort = slot.txid % 7 == 3;
    // Room for the entry rows (one when the lanes share it) and the end record.
    const uint32_t need = (lanes > 1 ? 1 : k) + 1;
    const log_tx probe = sh.ref.begin(one_lane{}, partition, slot.txid);
    if (!probe.ok()) {
      sh.stop = true;
      slot.go = false;
      return;
    }
    if (probe.next + need > p_.rows) {
      try {
        log.checkpoint();
        sh.ref = log.ref();
      } catch (const error&) {
        sh.stop = true;
        slot.go = false;
        return;
      }
    }
    slot.ref = sh.ref;
    const array_ref<uint64_t> d = r_.data->ref();
    bool read_ok = true;
    slot.writes = plan(slot.txid, p_.words, k, [&](uint64_t i) {
      request_status s;
      const uint64_t v = d.try_read(i, &s);
      read_ok &= s.ok();
      return v;
    });
    if (!read_ok) {
      sh.stop = true;
      slot.go = false;
      return;
    }
    h.txs.push_back({slot.txid, slot.abort ? std::vector<std::pair<uint64_t, uint64_t>>{} : slot.writes});
  }

  template <class P>
  bool transact(const one_lane& w, unsigned partition, const P& s) {
    const log_ref& ref = s.ref;
    log_tx t = ref.begin(w, partition, s.txid);
    if (!t.ok()) return false;
    if (p_.form == log_form::redo) {
      for (const auto& [i, v] : s.writes)
        if (!ref.append(w, t, true, {0, i, v}).ok()) return false;
      if (s.abort) return ref.abort(w, t).ok();
      return ref.commit(w, t).ok();
    }
    for (const auto& [i, v] : s.writes)
      if (!ref.append_old(w, t, true, 0, i).ok()) return false;
    if (!ref.persist(w, t).ok()) return false;
    for (const auto& [i, v] : s.writes)
      if (!ref.write(w, true, 0, i, s.abort ? v ^ 0x5555 : v).ok()) return false;
    if (s.abort) return ref.abort(w, t).ok();
    return ref.commit(w, t).ok();
  }

  // Emulated warp: lane l handles element l of the plan (lanes past it have none).
  template <class P>
  bool transact_lanes(const test::emulated_warp& w, unsigned partition, const P& s) {
    const log_ref& ref = s.ref;
    const unsigned lane = w.lane();
    const bool have = lane < s.writes.size();
    const uint64_t i = have ? s.writes[lane].first : 0, v = have ? s.writes[lane].second : 0;
    log_tx t = ref.begin(w, partition, s.txid);
    if (!t.ok()) return false;
    if (p_.form == log_form::redo) {
      if (!ref.append(w, t, have, {0, i, v}).ok()) return false;
      if (s.abort) return ref.abort(w, t).ok();
      return ref.commit(w, t).ok();
    }
    if (!ref.append_old(w, t, have, 0, i).ok()) return false;
    if (!ref.persist(w, t).ok()) return false;
    if (!ref.write(w, have, 0, i, s.abort ? v ^ 0x5555 : v).ok()) return false;
    if (s.abort) return ref.abort(w, t).ok();
    return ref.commit(w, t).ok();
  }

  // The recovered data against the history's prefixes.
  std::string check(const history& h) {
    std::vector<uint64_t> now(p_.words);
    const request_status s = r_.data->ref().read_range(now.data(), 0, p_.words);
    if (!s.ok()) return "reading the recovered data failed: " + describe(s);
    uint64_t sum = 0;
    for (uint64_t v : now) sum += v;
    if (sum != initial_value * p_.words) return "the sum is " + std::to_string(sum) + ", not " + std::to_string(initial_value * p_.words);
    std::vector<uint64_t> state(p_.words, initial_value);
    for (size_t k = 0; k <= h.txs.size(); ++k) {
      if (k) for (const auto& [i, v] : h.txs[k - 1].writes) state[i] = v;
      if (k >= h.returned && state == now) return "";
    }
    // Diagnose: the longest prefix it equals, if any.
    std::vector<uint64_t> st(p_.words, initial_value);
    for (size_t k = 0; k <= h.txs.size(); ++k) {
      if (k) for (const auto& [i, v] : h.txs[k - 1].writes) st[i] = v;
      if (st == now)
        return "the data is the state after " + std::to_string(k) + " transactions, but " + std::to_string(h.returned) +
               " had returned from commit (a lost commit)";
    }
    return "the data equals no prefix of the " + std::to_string(h.txs.size()) + " transactions (" +
           std::to_string(h.returned) + " returned): a partial transaction is visible";
  }
};

void crash_suite(const crash_params& p, unsigned cuts, unsigned after_cuts, uint64_t seed) {
  // A run with no cut: how many requests the workload makes.
  uint64_t requests;
  {
    crash_run c(p);
    const run_result r = c.run(0, {});
    ASSERT_EQ(r.failure, "");
    ASSERT_EQ(r.h.returned, r.h.txs.size());
    ASSERT_EQ(r.h.txs.size(), p.txs);
    requests = r.requests;
    ASSERT_GT(requests, 20u);
  }
  std::mt19937_64 rng(seed);
  unsigned fired = 0;
  uint64_t replayed = 0, rolled_back = 0;
  for (unsigned i = 0; i < cuts; ++i) {
    power_cut how;
    how.mode = power_cut::mode_t(i % 3);
    how.seed = rng();
    how.keep_fraction = double(rng() % 1000) / 1000.0;
    // The first cut falls in the workload's first quarter, so that even the
    // smallest run (3 cuts under ThreadSanitizer) recovers from a cut in
    // the middle of it (with emulated warps, a run may take fewer requests
    // than the run that counted them: one cut in 25 runs at the first half
    // fell past the end); the others anywhere, and some past its end.
    const uint64_t at = 1 + rng() % (i == 0 ? requests / 4 : requests + requests / 8);
    crash_run c(p);
    const run_result r = c.run(at, how);
    // Inside the workload: the power went while it ran, in a transaction's
    // writes or in those around them (a checkpoint, a write-back of a page
    // evicted by a plan's read), after which no transaction returns.
    fired += r.cut_in_workload;
    replayed += r.rec.replayed;
    rolled_back += r.rec.rolled_back;
    ASSERT_EQ(r.failure, "") << "cut " << i << " at request " << at << " of " << requests << ", mode " << how.mode
                             << ", seed " << how.seed << ", keep " << how.keep_fraction;
  }
  // Cuts the moment a commit (or abort) returns.
  for (unsigned i = 0; i < after_cuts; ++i) {
    power_cut how;
    how.mode = power_cut::mode_t(i % 3);
    how.seed = rng();
    how.keep_fraction = double(rng() % 1000) / 1000.0;
    const uint64_t after = 1 + rng() % p.txs;
    crash_run c(p);
    const run_result r = c.run(0, how, after);
    replayed += r.rec.replayed;
    rolled_back += r.rec.rolled_back;
    ASSERT_GE(r.h.returned, after);
    ASSERT_EQ(r.failure, "") << "cut " << i << " after transaction " << after << " returned, mode " << how.mode
                             << ", seed " << how.seed << ", keep " << how.keep_fraction;
  }
  // Many cuts fell inside the workload (at least a third: where the
  // emulated warps' requests are counted in one run and cut in another,
  // the count moves with scheduling, and a cut past it never comes), and
  // recovery had work.
  EXPECT_GE(fired * 3, cuts);
  if (p.form == log_form::redo)
    EXPECT_GT(replayed, 0u);
  else
    EXPECT_GT(rolled_back, 0u);
  std::printf("[ crash ] %u cuts at random requests (of %llu; %u inside the workload) and %u as a commit returned; "
              "%llu transactions replayed, %llu rolled back\n",
              cuts, (unsigned long long)requests, fired, after_cuts, (unsigned long long)replayed,
              (unsigned long long)rolled_back);
}

}  // namespace

TEST(LogCrash, RedoRandomCuts) {
  crash_params p;
  p.form = log_form::redo;
  crash_suite(p, 210 / test::scale_div, 60 / test::scale_div, 16001);
}

TEST(LogCrash, UndoRandomCuts) {
  crash_params p;
  p.form = log_form::undo;
  crash_suite(p, 210 / test::scale_div, 60 / test::scale_div, 16002);
}

// The same with emulated warps of 8 lanes: a transaction is one striped row.
TEST(LogCrash, RedoEmulatedWarps) {
  crash_params p;
  p.form = log_form::redo;
  p.lanes = 8;
  p.txs = 12;
  p.max_k = 8;
  crash_suite(p, 30 / test::scale_div, 10 / test::scale_div, 16003);
}

TEST(LogCrash, UndoEmulatedWarps) {
  crash_params p;
  p.form = log_form::undo;
  p.lanes = 8;
  p.txs = 12;
  p.max_k = 8;
  crash_suite(p, 30 / test::scale_div, 10 / test::scale_div, 16004);
}
