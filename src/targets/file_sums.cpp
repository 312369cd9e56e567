// Block sums of read-only files' sections (include/deepwell/targets/file_sums.hpp).
#include "deepwell/targets/file_sums.hpp"
#include "deepwell/common/defaults.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell {

namespace {

// Block b of a section: its own bytes, the last one completed with zeros.
uint32_t sum_of_block(const uint8_t* data, uint64_t bytes, uint64_t b) {
  const uint64_t at = b * file_sum_block;
  if (bytes - at >= file_sum_block) return block_sum(data + at, file_sum_block);
  uint8_t last[file_sum_block] = {};
  std::memcpy(last, data + at, bytes - at);
  return block_sum(last, file_sum_block);
}

// Progress is reported in steps of this many blocks (16 MiB), not per block.
constexpr uint64_t advance_blocks = 4096;

}  // namespace

void section_sums(const void* data, uint64_t bytes, uint32_t* out, unsigned threads) {
  const auto* p = static_cast<const uint8_t*>(data);
  detail::parallel_for(section_sum_count(bytes), threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t i = b; i < e; ++i) out[i] = sum_of_block(p, bytes, i);
  });
}

uint64_t first_bad_block(const void* data, uint64_t bytes, const uint32_t* sums, unsigned threads,
                         const std::function<void(uint64_t)>& advance) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::atomic<uint64_t> first{UINT64_MAX};
  detail::parallel_for(section_sum_count(bytes), threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t i = b; i < e; ++i) {
      // Threads past a bad block found by another stop early; the one
      // before it goes on, so the lowest bad block is the one reported.
      if (i > first.load(std::memory_order_relaxed)) return;
      if (sum_of_block(p, bytes, i) != sums[i]) {
        uint64_t seen = first.load(std::memory_order_relaxed);
        while (i < seen && !first.compare_exchange_weak(seen, i, std::memory_order_relaxed)) {
        }
        return;
      }
      if (advance && (i - b + 1) % advance_blocks == 0) advance(advance_blocks * file_sum_block);
    }
  });
  return first.load();
}

void verify_section(const std::string& file, const std::string& section, uint64_t file_offset, const void* data,
                    uint64_t bytes, const uint32_t* sums, unsigned threads,
                    const std::function<void(uint64_t)>& advance) {
  const uint64_t bad = first_bad_block(data, bytes, sums, threads, advance);
  if (bad == UINT64_MAX) return;
  const uint64_t from = file_offset + bad * file_sum_block;
  const uint64_t to = file_offset + std::min<uint64_t>(bytes, (bad + 1) * file_sum_block);
  throw data_error(file + ": " + section + ": bytes [" + std::to_string(from) + ", " + std::to_string(to) +
              ") of the file do not match their checksum (a corrupt file, or its sums section is)");
}

namespace {

// A checked section: the checksummed target over the section, with the
// direct tier's mapping (map_readonly) verified whole before it is handed
// out. Of the two ways to keep the direct tier honest (verify the mapping
// once, or refuse it so every read goes through the controller), this one
// keeps the direct tier's speed for files in the page cache, where the
// check runs at memory speed; a section that is not wholly resident gets no
// mapping (checking it would read all of it from storage at setup), and a
// section that fails its check gets none either, so its reads go through
// the controller, where the bad block fails with a guard check error that
// reaches the caller. A file rewritten in place after the check is outside
// what the check covers (as for any reader of a mapping).
// A read of part of a block (checked_section_target::read).
struct sub_block_read {
  void* buf;
  uint32_t len, skip;  // the bytes asked for, and where they start in the bounce buffer
  io_callback done;
  uint8_t* bounce;

  static void finish(void* ctx, int64_t result) {
    auto* r = static_cast<sub_block_read*>(ctx);
    int64_t got = result;
    if (result >= 0) {  // a short read of the blocks is a short read of the part
      got = std::clamp<int64_t>(result - int64_t(r->skip), 0, int64_t(r->len));
      std::memcpy(r->buf, r->bounce + r->skip, size_t(got));
    }
    const io_callback done = r->done;
    std::free(r->bounce);
    delete r;
    done(got);
  }
};

class checked_section_target final : public checksummed_target {
 public:
  checked_section_target(std::shared_ptr<target> data, std::shared_ptr<checksummed_target> checked,
                         std::vector<uint32_t> sums)
      : data_(std::move(data)), checked_(std::move(checked)), sums_(std::move(sums)) {}

  uint64_t size() const override { return checked_->size(); }
  bool writable() const override { return false; }
  // Reads of part of a block go through a bounce buffer (read()), so the
  // alignment asked of callers is the file's own.
  uint32_t io_alignment() const override { return data_->io_alignment(); }
  uint32_t memory_alignment() const override { return checked_->memory_alignment(); }
  std::string describe() const override { return checked_->describe(); }
  uint32_t block_bytes() const override { return checked_->block_bytes(); }
  void set_verify(bool on) override { checked_->set_verify(on); }
  uint64_t mismatches() const override { return checked_->mismatches(); }
  uint64_t last_mismatch_block() const override { return checked_->last_mismatch_block(); }

  // The mapping once the data is resident and matches every sum. A section
  // found bad once is never checked again (a check reads all of it: asked
  // again and again, it would be a way to keep the caller busy); its reads
  // still go through the queues, block by checked block.
  std::shared_ptr<host_mapping> map_readonly() const override {
    if (found_bad_.load(std::memory_order_relaxed)) return nullptr;
    std::shared_ptr<host_mapping> m = data_->map_readonly();
    if (!m || m->resident < defaults::builtin::direct_resident_share) return nullptr;
    if (first_bad_block(m->data, m->bytes, sums_.data()) != UINT64_MAX) {
      found_bad_.store(true, std::memory_order_relaxed);
      return nullptr;
    }
    return m;
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (offset % file_sum_block == 0 && len % file_sum_block == 0) return checked_->read(io, buf, len, offset, done);
    // A read smaller than the sums' blocks (cache pages under 4 KiB): the
    // blocks that hold it are read and checked whole into a bounce buffer
    // and the part asked for is copied out, so small pages cost more reads
    // of the storage but never skip the check.
    const uint64_t first = offset / file_sum_block * file_sum_block;
    const uint64_t end = (offset + len + file_sum_block - 1) / file_sum_block * file_sum_block;
    const size_t align = std::max<size_t>(file_sum_block, checked_->memory_alignment());
    auto* r = new sub_block_read{buf, len, uint32_t(offset - first), done,
                                 static_cast<uint8_t*>(std::aligned_alloc(align, size_t(end - first)))};
    if (!r->bounce) {
      delete r;
      return done(-ENOMEM);
    }
    checked_->read(io, r->bounce, uint32_t(end - first), first, {&sub_block_read::finish, r});
  }
  void write(io_engine&, const void*, uint32_t, uint64_t, bool, io_callback done) override { done(-EROFS); }
  void flush(io_engine& io, io_callback done) override { checked_->flush(io, done); }

 private:
  std::shared_ptr<target> data_;
  std::shared_ptr<checksummed_target> checked_;
  std::vector<uint32_t> sums_;
  mutable std::atomic<bool> found_bad_{false};
};

}  // namespace

std::shared_ptr<checksummed_target> checked_section(std::shared_ptr<target> section, const std::vector<uint32_t>& sums) {
  if (!section) throw error("checked section: no target");
  if (section->writable()) throw error("checked section: " + section->describe() + " is writable (sums are fixed)");
  if (sums.size() != section_sum_count(section->size()))
    throw error("checked section: " + section->describe() + " has " + std::to_string(section->size()) +
                " bytes, which need " + std::to_string(section_sum_count(section->size())) + " sums, not " +
                std::to_string(sums.size()));
  // The sums in host memory, in the layout of a sums region (4 bytes a
  // block, whole 4 KiB pages), read by the checksummed target at once.
  auto store = make_host_memory_target(checksum_region_bytes(section->size(), file_sum_block), false);
  std::memcpy(store->host_pointer(), sums.data(), sums.size() * 4);
  auto checked = make_checksummed_target(section, std::move(store), file_sum_block);
  return std::make_shared<checked_section_target>(std::move(section), std::move(checked), sums);
}

}  // namespace deepwell
