// Block checksums kept in a second target (include/deepwell/targets/checksummed_target.hpp).
#include "deepwell/targets/checksummed_target.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "deepwell/common/crc32c.hpp"
#include "deepwell/common/error.hpp"
#include "request_cache.hpp"

namespace deepwell {

namespace {

constexpr uint32_t sums_page = 4096;                   // bytes of sums written at a time
constexpr uint32_t sums_per_page = sums_page / 4;

uint32_t zero_block_crc(uint32_t bytes) {
  static thread_local uint32_t cached_bytes = 0, cached = 0;
  if (cached_bytes != bytes) {
    std::vector<uint8_t> z(bytes, 0);
    cached = crc32c(0, z.data(), bytes);
    cached_bytes = bytes;
  }
  return cached;
}

class checksummed_target_impl;

struct sum_request {
  checksummed_target_impl* self = nullptr;
  io_engine* io = nullptr;  // a read's: where a mismatch is read again
  void* buf = nullptr;
  uint32_t len = 0;
  uint64_t offset = 0;
  std::vector<uint32_t> sums;  // a write's new sums, set when it succeeds
  io_callback done;
  sum_request* next = nullptr;
};
using request_pool = detail::request_cache<sum_request>;

struct aligned_free {
  void operator()(void* p) const { std::free(p); }
};

// A flush: the dirty pages of sums written, then both targets flushed.
struct flush_job {
  checksummed_target_impl* self = nullptr;
  io_engine* io = nullptr;
  io_callback done;
  std::vector<uint64_t> pages;  // sums pages being written
  std::vector<std::unique_ptr<uint8_t, aligned_free>> bufs;
  unsigned pending = 0;
  int64_t error = 0;
  bool flushing = false;
};

class checksummed_target_impl final : public checksummed_target {
 public:
  checksummed_target_impl(std::shared_ptr<target> data, std::shared_ptr<target> sums, uint32_t block)
      : data_(std::move(data)), sums_t_(std::move(sums)), block_(block) {
    if (block_ < 512 || (block_ & (block_ - 1)))
      throw error("checksummed target: blocks of " + std::to_string(block_) + " bytes (a power of two, at least 512)");
    // Read-only data may end in a partial block (a section of a file: see
    // file_sums.hpp): its reads come back zeroed past the end, which is the
    // block its sum covers. Written data is whole blocks, every write a
    // whole block's sum.
    if (data_->size() % block_ && data_->writable())
      throw error("checksummed target: " + data_->describe() + " has " + std::to_string(data_->size()) +
                  " bytes, not a whole number of " + std::to_string(block_) + "-byte blocks");
    blocks_ = (data_->size() + block_ - 1) / block_;
    const uint64_t need = checksum_region_bytes(data_->size(), block_);
    if (sums_t_->size() < need)
      throw error("checksummed target: the sums region " + sums_t_->describe() + " has " +
                  std::to_string(sums_t_->size()) + " bytes; " + std::to_string(blocks_) + " blocks need " +
                  std::to_string(need));
    pages_ = need / sums_page;
    sums_ = std::make_unique<std::atomic<uint32_t>[]>(pages_ * sums_per_page);
    dirty_ = std::make_unique<std::atomic<uint64_t>[]>((pages_ + 63) / 64);
    load();
  }

  uint64_t size() const override { return data_->size(); }
  bool writable() const override { return data_->writable() && sums_t_->writable(); }
  uint32_t io_alignment() const override { return std::max(block_, data_->io_alignment()); }
  uint32_t memory_alignment() const override { return data_->memory_alignment(); }
  std::string describe() const override { return data_->describe() + " (block checksums)"; }
  uint32_t block_bytes() const override { return block_; }
  void set_verify(bool on) override { verify_.store(on, std::memory_order_relaxed); }
  uint64_t mismatches() const override { return mismatches_.load(std::memory_order_relaxed); }
  uint64_t last_mismatch_block() const override { return last_bad_.load(std::memory_order_relaxed); }

  // A request for whole blocks; nullptr (after done(-EINVAL)) for any other.
  sum_request* request(void* buf, uint32_t len, uint64_t offset, io_callback done) {
    if (offset % block_ || len % block_) {
      done(-EINVAL);
      return nullptr;
    }
    sum_request* r = request_pool::take();
    r->self = this;
    r->buf = buf;
    r->len = len;
    r->offset = offset;
    r->done = done;
    return r;
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    sum_request* r = request(buf, len, offset, done);
    if (!r) return;
    r->io = &io;
    data_->read(io, buf, len, offset, {&on_read, r});
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    sum_request* r = request(nullptr, len, offset, done);
    if (!r) return;
    r->sums.resize(len / block_);
    for (uint32_t i = 0; i < len / block_; ++i) r->sums[i] = block_sum(static_cast<const uint8_t*>(buf) + i * block_, block_);
    data_->write(io, buf, len, offset, fua, {&on_write, r});
  }

  void flush(io_engine& io, io_callback done) override {
    auto* j = new flush_job;
    j->self = this;
    j->io = &io;
    j->done = done;
    for (uint64_t w = 0; w < (pages_ + 63) / 64; ++w) {
      uint64_t bits = dirty_[w].exchange(0, std::memory_order_acq_rel);
      for (; bits; bits &= bits - 1) j->pages.push_back(w * 64 + uint64_t(__builtin_ctzll(bits)));
    }
    if (j->pages.empty()) return flush_targets(j);
    // One count for each write and one held while they are issued: a
    // target that completes at once (host memory) must not finish the job
    // inside this loop.
    j->pending = unsigned(j->pages.size()) + 1;
    const uint32_t align = std::max<uint32_t>(sums_t_->memory_alignment(), 64);
    for (uint64_t page : j->pages) {
      auto* b = static_cast<uint8_t*>(std::aligned_alloc(std::max<uint32_t>(align, 4096), sums_page));
      if (!b) throw std::bad_alloc();
      j->bufs.emplace_back(b);
      for (uint32_t i = 0; i < sums_per_page; ++i) {
        const uint32_t v = sums_[page * sums_per_page + i].load(std::memory_order_relaxed);
        std::memcpy(b + 4 * i, &v, 4);
      }
    }
    const size_t n = j->pages.size();
    for (size_t k = 0; k < n; ++k)
      sums_t_->write(io, j->bufs[k].get(), sums_page, j->pages[k] * sums_page, false, {&on_flush_step, j});
    on_flush_step(j, 0);  // the hold
  }

 private:
  // The block of a read whose bytes do not match their sum, or UINT64_MAX.
  uint64_t first_mismatch(const uint8_t* buf, uint32_t len, uint64_t offset) const {
    for (uint32_t i = 0; i < len / block_; ++i) {
      const uint64_t b = offset / block_ + i;
      if (b >= blocks_) break;
      if (block_sum(buf + uint64_t(i) * block_, block_) != sums_[b].load(std::memory_order_relaxed)) return b;
    }
    return UINT64_MAX;
  }

  // The read fails on a mismatch. The buffer it checked may be memory its
  // client can write (a server's staging), so before the mismatch counts
  // in the target's checks, which every client of a shared section sees,
  // the block is read again into memory of this process and checked there:
  // only storage's own bad bytes are counted, never a client's scribbles.
  static void on_read(void* ctx, int64_t result) {
    auto* r = static_cast<sum_request*>(ctx);
    checksummed_target_impl* self = r->self;
    const io_callback done = r->done;
    if (result == int64_t(r->len) && self->verify_.load(std::memory_order_relaxed)) {
      const uint64_t bad = self->first_mismatch(static_cast<const uint8_t*>(r->buf), r->len, r->offset);
      if (bad != UINT64_MAX) return self->read_again(r, bad);
    }
    request_pool::give(r);
    done(result);
  }

  struct recheck {
    sum_request* r;
    uint64_t block;
    uint8_t* copy;
  };
  void read_again(sum_request* r, uint64_t block) {
    const size_t align = std::max<size_t>({data_->memory_alignment(), data_->io_alignment(), 64});
    auto* c = new recheck{r, block, static_cast<uint8_t*>(std::aligned_alloc(align, (block_ + align - 1) / align * align))};
    if (!c->copy) {  // not counted: it could not be told from a client's scribble
      delete c;
      const io_callback done = r->done;
      request_pool::give(r);
      return done(-EBADMSG);
    }
    data_->read(*r->io, c->copy, block_, block * block_, {&on_recheck, c});
  }
  static void on_recheck(void* ctx, int64_t result) {
    auto* c = static_cast<recheck*>(ctx);
    sum_request* r = c->r;
    checksummed_target_impl* self = r->self;
    if (result == int64_t(self->block_) && self->first_mismatch(c->copy, self->block_, c->block * self->block_) != UINT64_MAX) {
      self->mismatches_.fetch_add(1, std::memory_order_relaxed);
      self->last_bad_.store(c->block, std::memory_order_relaxed);
    }
    std::free(c->copy);
    delete c;
    const io_callback done = r->done;
    request_pool::give(r);
    done(-EBADMSG);  // the requester's bytes did not match, whoever changed them
  }

  static void on_write(void* ctx, int64_t result) {
    auto* r = static_cast<sum_request*>(ctx);
    checksummed_target_impl* self = r->self;
    const io_callback done = r->done;
    if (result == int64_t(r->len)) {
      for (uint32_t i = 0; i < r->len / self->block_; ++i) {
        const uint64_t b = r->offset / self->block_ + i;
        if (b >= self->blocks_) break;
        self->sums_[b].store(r->sums[i], std::memory_order_relaxed);
        self->dirty_[b / sums_per_page / 64].fetch_or(1ull << (b / sums_per_page % 64), std::memory_order_release);
      }
    }
    request_pool::give(r);
    done(result);
  }

  static void on_flush_step(void* ctx, int64_t result) {
    auto* j = static_cast<flush_job*>(ctx);
    if (result < 0 && !j->error) j->error = result;
    if (--j->pending) return;
    if (!j->flushing) {
      if (j->error) {  // the sums did not reach storage: write them at the next flush
        for (uint64_t page : j->pages) j->self->dirty_[page / 64].fetch_or(1ull << (page % 64), std::memory_order_release);
        return finish(j);
      }
      return j->self->flush_targets(j);
    }
    finish(j);
  }

  void flush_targets(flush_job* j) {
    j->flushing = true;
    j->pending = 3;  // two flushes and the hold, as in flush()
    io_engine& io = *j->io;
    sums_t_->flush(io, {&on_flush_step, j});
    data_->flush(io, {&on_flush_step, j});
    on_flush_step(j, 0);
  }

  static void finish(flush_job* j) {
    const io_callback done = j->done;
    const int64_t result = j->error;
    delete j;
    done(result);
  }

  // The stored sums, read once (synchronously, on an engine of our own).
  void load() {
    auto io = make_io_engine(io_backend::automatic, 8);
    const uint32_t chunk = 1u << 20;
    const uint32_t align = std::max<uint32_t>(sums_t_->memory_alignment(), 4096);
    std::unique_ptr<uint8_t, aligned_free> buf(static_cast<uint8_t*>(std::aligned_alloc(align, chunk)));
    if (!buf) throw std::bad_alloc();
    const uint64_t total = pages_ * sums_page;
    for (uint64_t at = 0; at < total; at += chunk) {
      const uint32_t n = uint32_t(std::min<uint64_t>(chunk, total - at));
      int64_t got = INT64_MIN;
      auto cb = [](void* ctx, int64_t res) { *static_cast<int64_t*>(ctx) = res; };
      sums_t_->read(*io, buf.get(), n, at, {cb, &got});
      while (got == INT64_MIN) {
        io->wait(1'000'000'000);
        io->reap();
      }
      if (got != int64_t(n))
        throw error("checksummed target: reading the sums of " + data_->describe() + " from " + sums_t_->describe() +
                    " at byte " + std::to_string(at) + ": " + (got < 0 ? std::strerror(int(-got)) : "short read"));
      for (uint32_t i = 0; i < n / 4; ++i) {
        uint32_t v;
        std::memcpy(&v, buf.get() + 4 * i, 4);
        sums_[at / 4 + i].store(v, std::memory_order_relaxed);
      }
    }
  }

  std::shared_ptr<target> data_, sums_t_;
  uint32_t block_;
  uint64_t blocks_ = 0, pages_ = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> sums_;
  std::unique_ptr<std::atomic<uint64_t>[]> dirty_;  // a bit per sums page
  std::atomic<bool> verify_{true};
  std::atomic<uint64_t> mismatches_{0}, last_bad_{0};
};

}  // namespace

uint32_t block_sum(const void* block, uint32_t bytes) { return crc32c(0, block, bytes) ^ zero_block_crc(bytes); }

uint64_t checksum_region_bytes(uint64_t data_bytes, uint32_t block_bytes) {
  if (block_bytes == 0) throw error("checksummed target: a block of 0 bytes");
  // Safe for any size (a server sizes a client's request with it): past
  // what 64 bits hold, the largest whole number of sums pages.
  const uint64_t blocks = data_bytes / block_bytes + (data_bytes % block_bytes != 0);
  if (blocks > UINT64_MAX / 4 - sums_page) return UINT64_MAX / sums_page * sums_page;
  return std::max<uint64_t>(1, (blocks * 4 + sums_page - 1) / sums_page) * sums_page;
}

std::shared_ptr<checksummed_target> make_checksummed_target(std::shared_ptr<target> data,
                                                            std::shared_ptr<target> sums, uint32_t block_bytes) {
  if (!data || !sums) throw error("checksummed target: no data or no sums target");
  return std::make_shared<checksummed_target_impl>(std::move(data), std::move(sums), block_bytes);
}

}  // namespace deepwell
