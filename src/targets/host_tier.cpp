// host_tier.hpp: the server's shared page cache in host memory.
#include "deepwell/host_tier.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "deepwell/error.hpp"

namespace deepwell {

namespace {

class tier_impl;

// One dataset read through the tier.
class tiered_target final : public target {
 public:
  tiered_target(std::shared_ptr<tier_impl> tier, std::shared_ptr<target> inner, uint64_t id)
      : tier_(std::move(tier)), inner_(std::move(inner)), id_(id) {}
  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override { return inner_->describe() + " via the host tier"; }
  std::shared_ptr<host_mapping> map_readonly() const override { return inner_->map_readonly(); }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override;
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override;
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

  // Writes begun, and writes in flight: a read may install its pages only
  // if no write was in flight when it began and none began since.
  std::atomic<uint64_t> writes_begun{0};
  std::atomic<uint64_t> writes_in_flight{0};

  std::shared_ptr<tier_impl> tier_;
  std::shared_ptr<target> inner_;
  const uint64_t id_;
};

class tier_impl final : public host_tier, public std::enable_shared_from_this<tier_impl> {
 public:
  tier_impl(uint64_t bytes, uint32_t page) : page_(page) {
    if (page < 512 || page > 65536 || (page & (page - 1)))
      throw error("host tier page size " + std::to_string(page) + ": a power of two from 512 to 65536");
    frames_ = bytes / page;
    if (frames_ == 0) throw error("host tier of " + std::to_string(bytes) + " bytes holds no page of " + std::to_string(page));
    if (frames_ > (1u << 31)) throw error("host tier too large");
    mem_bytes_ = frames_ * page;
    void* p = mmap(nullptr, mem_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw error(errno_message("host tier: mmap of " + std::to_string(mem_bytes_) + " bytes", errno));
    mem_ = static_cast<uint8_t*>(p);
    key_.assign(frames_, empty);
    used_.assign(frames_, 0);
    dir_.reserve(size_t(frames_));
  }
  ~tier_impl() override { munmap(mem_, mem_bytes_); }

  std::shared_ptr<target> wrap(std::shared_ptr<target> inner) override {
    if (!inner) throw error("host tier: no target to wrap");
    return std::make_shared<tiered_target>(shared_from_this(), std::move(inner), next_id_++);
  }

  host_tier_stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    host_tier_stats s = stats_;
    s.resident_pages = dir_.size();
    s.capacity_pages = frames_;
    return s;
  }
  uint32_t page_bytes() const override { return page_; }

  // Copies [offset, offset + len) of dataset `id` into buf if every page
  // of it is resident.
  bool try_hit(uint64_t id, uint8_t* buf, uint32_t len, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t first = offset / page_, last = (offset + len - 1) / page_;
    for (uint64_t p = first; p <= last; ++p)
      if (!dir_.count(key(id, p))) {
        ++stats_.misses;
        return false;
      }
    for (uint64_t p = first; p <= last; ++p) {
      const uint32_t f = dir_[key(id, p)];
      used_[f] = 1;
      const uint64_t from = std::max(offset, p * page_), to = std::min(offset + len, (p + 1) * page_);
      std::memcpy(buf + (from - offset), mem_ + uint64_t(f) * page_ + (from - p * page_), to - from);
    }
    ++stats_.hits;
    return true;
  }

  // The whole pages of [offset, offset + len) from buf, CLOCK evicting.
  void install(uint64_t id, const uint8_t* buf, uint32_t len, uint64_t offset) {
    const uint64_t first = (offset + page_ - 1) / page_, end = (offset + len) / page_;
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint64_t p = first; p < end; ++p) {
      const uint64_t k = key(id, p);
      auto it = dir_.find(k);
      uint32_t f;
      if (it != dir_.end()) {
        f = it->second;
      } else {
        f = victim();
        dir_[k] = f;
        key_[f] = k;
        ++stats_.pages_installed;
      }
      used_[f] = 1;
      std::memcpy(mem_ + uint64_t(f) * page_, buf + (p * page_ - offset), page_);
    }
  }

  void invalidate(uint64_t id, uint32_t len, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t first = offset / page_, last = (offset + len - 1) / page_;
    for (uint64_t p = first; p <= last; ++p) {
      auto it = dir_.find(key(id, p));
      if (it == dir_.end()) continue;
      key_[it->second] = empty;
      used_[it->second] = 0;
      dir_.erase(it);
      ++stats_.invalidations;
    }
  }

 private:
  static constexpr uint64_t empty = ~uint64_t(0);
  const uint64_t page_;
  uint64_t frames_ = 0, mem_bytes_ = 0;
  uint8_t* mem_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, uint32_t> dir_;  // (dataset, page) -> frame
  std::vector<uint64_t> key_;                   // frame -> its key, or empty
  std::vector<uint8_t> used_;                   // CLOCK's use bits
  uint64_t hand_ = 0;
  host_tier_stats stats_;
  std::atomic<uint64_t> next_id_{0};

  static uint64_t key(uint64_t id, uint64_t page) { return id << 48 | page; }

  uint32_t victim() {
    for (;;) {
      const uint32_t f = uint32_t(hand_);
      hand_ = (hand_ + 1) % frames_;
      if (key_[f] == empty) return f;
      if (used_[f]) {
        used_[f] = 0;
        continue;
      }
      dir_.erase(key_[f]);
      key_[f] = empty;
      ++stats_.evictions;
      return f;
    }
  }
};

void tier_install(tiered_target& t, const uint8_t* buf, uint32_t len, uint64_t offset) {
  t.tier_->install(t.id_, buf, len, offset);
}

// A read that went to storage: installs its pages when it is done.
struct miss {
  tiered_target* t;
  uint8_t* buf;
  uint32_t len;
  uint64_t offset;
  uint64_t epoch;
  bool may_install;
  io_callback done;
  static void finish(void* ctx, int64_t result) {
    auto* m = static_cast<miss*>(ctx);
    if (result == int64_t(m->len) && m->may_install &&
        m->t->writes_begun.load(std::memory_order_acquire) == m->epoch)
      tier_install(*m->t, m->buf, m->len, m->offset);
    const io_callback done = m->done;
    delete m;
    done(result);
  }
};

struct write_done {
  tiered_target* t;
  io_callback done;
  static void finish(void* ctx, int64_t result) {
    auto* w = static_cast<write_done*>(ctx);
    w->t->writes_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    const io_callback done = w->done;
    delete w;
    done(result);
  }
};

void tiered_target::read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) {
  auto* b = static_cast<uint8_t*>(buf);
  if (len == 0) {
    done(0);
    return;
  }
  // A write in flight may or may not be in the tier's copy yet: storage answers.
  const uint64_t epoch = writes_begun.load(std::memory_order_acquire);
  const bool quiet = writes_in_flight.load(std::memory_order_acquire) == 0;
  if (quiet && tier_->try_hit(id_, b, len, offset)) {
    done(len);
    return;
  }
  // A target outlives its requests in flight (target.hpp): a plain pointer.
  auto* m = new miss{this, b, len, offset, epoch, quiet, done};
  inner_->read(io, buf, len, offset, io_callback{&miss::finish, m});
}

void tiered_target::write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) {
  writes_in_flight.fetch_add(1, std::memory_order_acq_rel);
  writes_begun.fetch_add(1, std::memory_order_acq_rel);
  if (len) tier_->invalidate(id_, len, offset);
  auto* w = new write_done{this, done};
  inner_->write(io, buf, len, offset, fua, io_callback{&write_done::finish, w});
}

}  // namespace

std::shared_ptr<host_tier> host_tier::make(uint64_t bytes, uint32_t page_bytes) {
  return std::make_shared<tier_impl>(bytes, page_bytes);
}

}  // namespace deepwell
