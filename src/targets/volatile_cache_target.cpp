// A disk with a volatile write cache, for crash tests (crash_target.hpp
// says what it models). Test-only code: one mutex guards all state; every
// request is served under it and its callback is called after it is
// released, so a callback may call back into the target.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <utility>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/crash_target.hpp"

namespace deepwell {
namespace {

// A write in the volatile cache. `live` lists the byte ranges of `data`
// (relative to `offset`; sorted, disjoint, never empty) that can still reach
// the medium: all of it, less what later FUA writes superseded.
struct cached_write {
  uint64_t offset;
  std::vector<uint8_t> data;
  std::vector<std::pair<uint32_t, uint32_t>> live;  // [begin, end)
};

void check_cut(const power_cut& how) {
  if (how.mode != power_cut::drop_all && how.mode != power_cut::keep_random && how.mode != power_cut::torn)
    throw error("power_cut: unknown mode " + std::to_string(uint32_t(how.mode)));
  // Written so that NaN fails too.
  if (!(how.keep_fraction >= 0.0 && how.keep_fraction <= 1.0))
    throw error("power_cut: keep_fraction " + std::to_string(how.keep_fraction) + " is not in [0, 1]");
}

// Uniform in [0, 1) from 53 bits of the generator: no standard distribution,
// whose output the standard leaves to the library, so seeds replay anywhere.
double unit(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

class volatile_cache_target_impl final : public volatile_cache_target {
 public:
  volatile_cache_target_impl(std::vector<uint8_t> image, uint32_t sector)
      : durable_(std::move(image)), current_(durable_), size_(durable_.size()), sector_(sector) {}

  // ---- target ----
  uint64_t size() const override { return size_; }
  bool writable() const override { return true; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override {
    std::lock_guard lock(mutex_);
    return "volatile-cache disk (" + std::to_string(size_) + " bytes, " + std::to_string(cache_.size()) +
           " unflushed writes)";
  }
  // No direct pointer and no mapping: every read must go through the cache.
  void* host_pointer() const override { return nullptr; }
  std::shared_ptr<host_mapping> map_readonly() const override { return nullptr; }

  void read(io_engine&, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    int64_t result = len;
    {
      std::lock_guard lock(mutex_);
      if (dead_) {
        result = -EIO;
      } else if (offset + len < offset) {
        result = -EINVAL;
      } else {
        const uint64_t valid = offset < size_ ? std::min<uint64_t>(len, size_ - offset) : 0;
        if (valid) std::memcpy(buf, current_.data() + offset, valid);
        if (valid < len) std::memset(static_cast<char*>(buf) + valid, 0, len - valid);
      }
    }
    done(result);
  }

  void write(io_engine&, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    int64_t result = len;
    {
      std::lock_guard lock(mutex_);
      if (!admit()) {
        result = -EIO;
      } else if (offset > size_ || len > size_ - offset) {
        result = -EINVAL;
      } else if (len != 0) {
        std::memcpy(current_.data() + offset, buf, len);
        if (fua) {
          std::memcpy(durable_.data() + offset, buf, len);
          supersede(offset, len);
        } else {
          cached_write w{offset, std::vector<uint8_t>(static_cast<const uint8_t*>(buf),
                                                      static_cast<const uint8_t*>(buf) + len),
                         {{0u, len}}};
          cache_.push_back(std::move(w));
        }
      }
    }
    done(result);
  }

  void flush(io_engine&, io_callback done) override {
    int64_t result = 0;
    {
      std::lock_guard lock(mutex_);
      if (!admit()) {
        result = -EIO;
      } else {
        for (const cached_write& w : cache_) apply_whole(w);
        cache_.clear();
        ++flushes_;
      }
    }
    done(result);
  }

  // ---- volatile_cache_target ----
  std::vector<uint8_t> durable_image() const override {
    std::lock_guard lock(mutex_);
    return durable_;
  }

  void cut(const power_cut& how) override {
    check_cut(how);
    std::lock_guard lock(mutex_);
    cut_locked(how);
  }

  void cut_at_request(uint64_t n, const power_cut& how) override {
    if (n != 0) check_cut(how);
    std::lock_guard lock(mutex_);
    armed_ = n != 0;
    arm_at_ = requests_ + n;  // an n so large that this wraps names a request that never comes
    arm_how_ = how;
  }

  bool dead() const override {
    std::lock_guard lock(mutex_);
    return dead_;
  }

  void revive() override {
    std::lock_guard lock(mutex_);
    if (!dead_) return;
    current_ = durable_;
    dead_ = false;
  }

  uint64_t unflushed_writes() const override {
    std::lock_guard lock(mutex_);
    return cache_.size();
  }
  uint64_t flushes() const override {
    std::lock_guard lock(mutex_);
    return flushes_;
  }
  uint64_t requests() const override {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  // A write or flush arrives (mutex held): counts it and fires an armed cut
  // that falls on it. Returns whether the request may be performed.
  bool admit() {
    if (dead_) return false;
    ++requests_;
    if (armed_ && requests_ == arm_at_) {
      cut_locked(arm_how_);
      return false;
    }
    return true;
  }

  void cut_locked(const power_cut& how) {
    armed_ = false;
    if (dead_) return;
    if (how.mode != power_cut::drop_all) {
      std::mt19937_64 rng(how.seed);
      // Which writes reached the medium (decided in arrival order), then the
      // order they landed in (Fisher-Yates), then, torn, which sectors of each.
      std::vector<size_t> kept;
      for (size_t i = 0; i < cache_.size(); ++i)
        if (unit(rng) < how.keep_fraction) kept.push_back(i);
      for (size_t i = kept.size(); i > 1; --i) std::swap(kept[i - 1], kept[rng() % i]);
      for (size_t i : kept) {
        if (how.mode == power_cut::torn && (rng() & 1) == 0)
          apply_torn(cache_[i], rng);
        else
          apply_whole(cache_[i]);
      }
    }
    cache_.clear();
    dead_ = true;
  }

  void apply_whole(const cached_write& w) {
    for (auto [b, e] : w.live) std::memcpy(durable_.data() + w.offset + b, w.data.data() + b, e - b);
  }

  // Each sector the write touches lands with probability 1/2, with all of
  // the write's (live) bytes in it or none.
  void apply_torn(const cached_write& w, std::mt19937_64& rng) {
    const uint64_t first = w.offset / sector_;
    const uint64_t last = (w.offset + w.data.size() - 1) / sector_;
    std::vector<bool> lands(last - first + 1);
    for (size_t s = 0; s < lands.size(); ++s) lands[s] = (rng() & 1) != 0;
    for (auto [b, e] : w.live) {
      uint64_t pos = b;
      while (pos < e) {
        const uint64_t s = (w.offset + pos) / sector_;
        const uint64_t end = std::min<uint64_t>(e, (s + 1) * sector_ - w.offset);
        if (lands[s - first]) std::memcpy(durable_.data() + w.offset + pos, w.data.data() + pos, end - pos);
        pos = end;
      }
    }
  }

  // A FUA write of [offset, offset + len) reached the medium: what earlier
  // cached writes hold there is older data that may no longer land. Writes
  // left with nothing live leave the cache.
  void supersede(uint64_t offset, uint32_t len) {
    const uint64_t end = offset + len;
    for (cached_write& w : cache_) {
      const uint64_t wend = w.offset + w.data.size();
      if (wend <= offset || w.offset >= end) continue;
      // The superseded range relative to w.
      const uint64_t cb = std::max(offset, w.offset) - w.offset;
      const uint64_t ce = std::min(end, wend) - w.offset;
      std::vector<std::pair<uint32_t, uint32_t>> live;
      for (auto [b, e] : w.live) {
        if (e <= cb || b >= ce) {
          live.emplace_back(b, e);
          continue;
        }
        if (b < cb) live.emplace_back(b, uint32_t(cb));
        if (e > ce) live.emplace_back(uint32_t(ce), e);
      }
      w.live = std::move(live);
    }
    cache_.erase(std::remove_if(cache_.begin(), cache_.end(), [](const cached_write& w) { return w.live.empty(); }),
                 cache_.end());
  }

  mutable std::mutex mutex_;
  std::vector<uint8_t> durable_;    // the medium
  std::vector<uint8_t> current_;    // what reads see: the medium with the cache over it
  std::vector<cached_write> cache_;  // unflushed writes, in arrival order
  const uint64_t size_;    // bytes; neither image ever changes size
  const uint64_t sector_;
  bool dead_ = false;
  bool armed_ = false;
  uint64_t arm_at_ = 0;  // the value of requests_ whose request the armed cut stops
  power_cut arm_how_;
  uint64_t flushes_ = 0;
  uint64_t requests_ = 0;
};

}  // namespace

std::shared_ptr<volatile_cache_target> make_volatile_cache_target(std::vector<uint8_t> image, uint32_t sector) {
  if (sector == 0) throw error("volatile-cache disk: sector size 0");
  return std::make_shared<volatile_cache_target_impl>(std::move(image), sector);
}

std::shared_ptr<volatile_cache_target> make_volatile_cache_target(uint64_t bytes, uint32_t sector) {
  if (bytes > SIZE_MAX / 2)
    throw error("volatile-cache disk of " + std::to_string(bytes) + " bytes is too large (it is held in memory twice)");
  return make_volatile_cache_target(std::vector<uint8_t>(size_t(bytes)), sector);
}

}  // namespace deepwell
