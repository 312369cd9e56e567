// host_tier.hpp: the server's shared page cache in host memory, one arena
// (tier_layout.hpp) per dataset.
#include "targets/host_tier.hpp"

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "deepwell/common/detail/copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/protocol/shared_region.hpp"
#include "deepwell/protocol/tier_layout.hpp"

namespace deepwell {

namespace {

// One dataset's part of the tier. The server's threads (pollers) change it
// under `mutex_`; other processes only read it, by the sequence locks.
class tier_arena {
 public:
  tier_arena(uint64_t dataset_bytes, uint64_t frames, uint32_t page, const std::string& name)
      : page_(page), pages_((dataset_bytes + page - 1) / page), full_pages_(dataset_bytes / page), frames_(frames) {
    if (pages_ > tier_max_pages)
      throw error("host tier: a dataset of " + std::to_string(pages_) + " pages is more than an arena can name (" +
                  std::to_string(tier_max_pages) + ")");
    const tier_geometry g = tier_geometry::of(pages_, frames_, page_);
    // Zeroed: no page resident. Clients map it read-only, and the seal
    // keeps it so for any descriptor of it (a reopen through
    // /proc/PID/fd included); the server writes through its own mapping.
    region_ = shared_region::create(g.bytes, name, /*read_only_to_others=*/true);
    auto* base = static_cast<uint8_t*>(region_.data());
    auto* h = reinterpret_cast<tier_header*>(base);
    h->magic = tier_magic;
    h->version = tier_layout_version;
    h->page_bytes = page_;
    h->pages = pages_;
    h->frames = frames_;
    h->index_offset = g.index_offset;
    h->seq_offset = g.seq_offset;
    h->data_offset = g.data_offset;
    h->bytes = g.bytes;
    index_ = reinterpret_cast<uint32_t*>(base + g.index_offset);
    seq_ = reinterpret_cast<uint64_t*>(base + g.seq_offset);
    data_ = base + g.data_offset;
    page_of_.assign(frames_, tier_no_page);  // seq_[f] 0: no page
    frame_plus_1_.assign(pages_, 0);
    seq_word_.assign(frames_, 0);
    used_ = std::make_unique<std::atomic<uint8_t>[]>(frames_);  // zeroed: value-initialized
  }

  uint64_t frames() const { return frames_; }
  const shared_region& region() const { return region_; }

  host_tier_stats stats() const {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    host_tier_stats s = stats_;
    s.hits = hits_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.resident_pages = resident_;
    s.capacity_pages = frames_;
    return s;
  }

  // Copies [offset, offset + len) into buf if every page of it is resident.
  // Under a shared lock: the pollers copy hits side by side, and only
  // installs, drops and evictions take the arena for themselves.
  bool try_hit(uint8_t* buf, uint32_t len, uint64_t offset) {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    const uint64_t first = offset / page_, last = (offset + len - 1) / page_;
    for (uint64_t p = first; p <= last; ++p)
      if (frame_of(p) < 0) {
        misses_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    for (uint64_t p = first; p <= last; ++p) {
      const uint32_t f = uint32_t(frame_of(p));
      used_[f].store(1, std::memory_order_relaxed);
      const uint64_t from = std::max(offset, p * page_), to = std::min(offset + len, (p + 1) * page_);
      std::memcpy(buf + (from - offset), frame(f) + (from - p * page_), to - from);
    }
    hits_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // True if [offset, offset + len) covers a whole page that install() would keep.
  bool holds_whole_page(uint32_t len, uint64_t offset) const {
    const uint64_t first = (offset + page_ - 1) / page_, end = std::min((offset + len) / page_, full_pages_);
    return first < end;
  }

  // The whole pages of [offset, offset + len) from buf, CLOCK evicting,
  // unless a write began since the read that brought them (writes_begun
  // moved from `epoch`): checked under the lock that invalidate() takes
  // after a writer counts itself, so no write slips between the check and
  // the install.
  void install(const uint8_t* buf, uint32_t len, uint64_t offset, const std::atomic<uint64_t>& writes_begun,
               uint64_t epoch) {
    const uint64_t first = (offset + page_ - 1) / page_, end = std::min((offset + len) / page_, full_pages_);  // a partial last page is never held
    if (first >= end) return;
    std::unique_lock<std::shared_mutex> lock(mutex_);
    if (writes_begun.load(std::memory_order_acquire) != epoch) return;
    for (uint64_t p = first; p < end; ++p) {
      const int64_t have = frame_of(p);
      if (have >= 0) {  // resident: its bytes are storage's (writes drop pages), so these are the same
        used_[uint32_t(have)].store(1, std::memory_order_relaxed);
        continue;
      }
      const uint32_t f = victim();
      // The sequence lock: odd while the frame changes.
      const uint64_t s = seq_word_[f];
      shared_store_relaxed(seq_ + f, s + 1);
      cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_system);
      page_of_[f] = p;
      // Readers in this process may copy the frame while it changes (and
      // then discard what they copied): a race by design, uninstrumented.
      detail::racy_page_copy(frame(f), buf + (p * page_ - offset), page_);
      seq_word_[f] = tier_seq_word(p + 1, s + 2);
      shared_store_release(seq_ + f, seq_word_[f]);
      frame_plus_1_[p] = f + 1;
      shared_store_release(index_ + p, f + 1);
      used_[f].store(1, std::memory_order_relaxed);
      ++resident_;
      ++stats_.pages_installed;
    }
  }

  void invalidate(uint32_t len, uint64_t offset) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    const uint64_t first = offset / page_, last = std::min((offset + len - 1) / page_, pages_ - 1);
    for (uint64_t p = first; p <= last; ++p) {
      const int64_t f = frame_of(p);
      if (f < 0) continue;
      drop(uint32_t(f));
      ++stats_.invalidations;
    }
  }

 private:
  const uint64_t page_;
  const uint64_t pages_, full_pages_, frames_;  // the dataset's pages, its whole ones, the arena's frames
  shared_region region_;
  uint32_t* index_ = nullptr;
  uint64_t* seq_ = nullptr;
  // The server's own records. It never reads back what it wrote to the
  // shared arena (index_, seq_): its decisions must not rest on memory
  // that anyone but this process could have touched.
  std::vector<uint64_t> page_of_;       // each frame's page, or tier_no_page
  std::vector<uint32_t> frame_plus_1_;  // each page's frame + 1, or 0 (index_'s twin)
  std::vector<uint64_t> seq_word_;      // each frame's sequence word (seq_'s twin)
  uint8_t* data_ = nullptr;
  mutable std::shared_mutex mutex_;
  // CLOCK's use bits: set by hits under the shared lock (relaxed: a lost
  // or late bit only changes which page goes next), cleared under the
  // exclusive one.
  std::unique_ptr<std::atomic<uint8_t>[]> used_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
  uint64_t hand_ = 0;
  uint64_t resident_ = 0;
  host_tier_stats stats_;

  uint8_t* frame(uint32_t f) const { return data_ + uint64_t(f) * page_; }

  // The frame holding page p, or -1 (under the lock).
  int64_t frame_of(uint64_t p) const {
    if (p >= pages_) return -1;
    const uint32_t e = frame_plus_1_[p];
    return e ? int64_t(e) - 1 : -1;
  }

  // Unlinks frame f's page: its sequence moves on (a reader that began on
  // it discards its copy) and it no longer names a page.
  void drop(uint32_t f) {
    const uint64_t p = page_of_[f];
    if (p == tier_no_page) return;
    const uint64_t s = seq_word_[f];
    shared_store_relaxed(seq_ + f, s + 1);
    shared_store_relaxed(index_ + p, 0u);
    frame_plus_1_[p] = 0;
    page_of_[f] = tier_no_page;
    seq_word_[f] = tier_seq_word(0, s + 2);
    shared_store_release(seq_ + f, seq_word_[f]);
    used_[f].store(0, std::memory_order_relaxed);
    --resident_;
  }

  uint32_t victim() {
    for (;;) {
      const uint32_t f = uint32_t(hand_);
      hand_ = (hand_ + 1) % frames_;
      if (page_of_[f] == tier_no_page) return f;
      if (used_[f].load(std::memory_order_relaxed)) {
        used_[f].store(0, std::memory_order_relaxed);
        continue;
      }
      drop(f);
      ++stats_.evictions;
      return f;
    }
  }
};

// One dataset read through its arena.
class tiered_target final : public target {
 public:
  tiered_target(std::shared_ptr<const void> tier, std::shared_ptr<tier_arena> arena, std::shared_ptr<target> inner)
      : tier_(std::move(tier)), arena_(std::move(arena)), inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override { return inner_->describe() + " via the host tier"; }
  std::shared_ptr<host_mapping> map_readonly() const override { return inner_->map_readonly(); }
  std::shared_ptr<host_mapping> map_tier() const override {
    auto m = std::make_shared<host_mapping>();
    const shared_region& r = arena_->region();
    m->data = static_cast<const uint8_t*>(r.data());
    m->bytes = r.size();
    m->base = r.data();
    m->base_bytes = r.size();
    m->resident = 1.0;
    m->owner = arena_;  // the arena's memory stays while the view does
    return m;
  }
  int tier_fd() const override { return arena_->region().fd(); }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override;
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override;
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

  // Writes begun, and writes in flight: a read may install its pages only
  // if no write was in flight when it began and none began since.
  std::atomic<uint64_t> writes_begun{0};
  std::atomic<uint64_t> writes_in_flight{0};

  std::shared_ptr<const void> tier_;
  std::shared_ptr<tier_arena> arena_;
  std::shared_ptr<target> inner_;
};

class tier_impl final : public host_tier, public std::enable_shared_from_this<tier_impl> {
 public:
  tier_impl(uint64_t bytes, uint32_t page) : page_(page) {
    if (page < 512 || page > 65536 || (page & (page - 1)))
      throw error("host tier page size " + std::to_string(page) + ": a power of two from 512 to 65536");
    frames_left_ = bytes / page;
    if (frames_left_ == 0)
      throw error("host tier of " + std::to_string(bytes) + " bytes holds no page of " + std::to_string(page));
    if (frames_left_ > (1ull << 31)) throw error("host tier too large");
  }

  std::shared_ptr<target> wrap(std::shared_ptr<target> inner, uint64_t bytes) override {
    if (!inner) throw error("host tier: no target to wrap");
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t whole = inner->size() / page_;
    uint64_t frames = bytes ? bytes / page_ : std::min(frames_left_, whole);
    if (frames > frames_left_) frames = frames_left_;
    if (frames == 0)
      throw error("host tier: " + std::string(frames_left_ ? "the arena for " + inner->describe() + " holds no whole page"
                                                             : "no memory left for " + inner->describe()));
    auto arena = std::make_shared<tier_arena>(inner->size(), frames, page_, "deepwell-tier");
    frames_left_ -= frames;
    arenas_.push_back(arena);
    return std::make_shared<tiered_target>(shared_from_this(), std::move(arena), std::move(inner));
  }

  host_tier_stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    host_tier_stats s;
    for (const auto& a : arenas_) {
      const host_tier_stats x = a->stats();
      s.hits += x.hits;
      s.misses += x.misses;
      s.pages_installed += x.pages_installed;
      s.evictions += x.evictions;
      s.invalidations += x.invalidations;
      s.resident_pages += x.resident_pages;
      s.capacity_pages += x.capacity_pages;
    }
    return s;
  }
  uint32_t page_bytes() const override { return page_; }
  uint64_t bytes_left() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return frames_left_ * page_;
  }

 private:
  const uint64_t page_;
  mutable std::mutex mutex_;
  uint64_t frames_left_ = 0;
  std::vector<std::shared_ptr<tier_arena>> arenas_;
};

// A read that went to storage: installs its pages when it is done. It
// reads into memory of the server's own (`bounce`), not the caller's
// buffer: in server mode that buffer is a client's staging, which the
// client may rewrite while the read runs, and the tier must hold only
// what storage said. The caller gets a copy of the same bytes.
struct miss {
  tiered_target* t;
  uint8_t* buf;
  uint8_t* bounce;  // nullptr: read straight into buf, nothing to install
  uint32_t len;
  uint64_t offset;
  uint64_t epoch;
  io_callback done;
  static void finish(void* ctx, int64_t result) {
    auto* m = static_cast<miss*>(ctx);
    if (m->bounce) {
      if (result > 0) std::memcpy(m->buf, m->bounce, size_t(std::min<int64_t>(result, m->len)));
      if (result == int64_t(m->len)) m->t->arena_->install(m->bounce, m->len, m->offset, m->t->writes_begun, m->epoch);
      std::free(m->bounce);
    }
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
  if (quiet && arena_->try_hit(b, len, offset)) {
    done(len);
    return;
  }
  // A target outlives its requests in flight (target.hpp): a plain pointer.
  uint8_t* bounce = nullptr;
  if (quiet && arena_->holds_whole_page(len, offset)) {
    const size_t align = std::max<size_t>(64, inner_->memory_alignment());
    bounce = static_cast<uint8_t*>(std::aligned_alloc(align, (size_t(len) + align - 1) / align * align));
    // No memory for a bounce: this read fills no page of the tier.
  }
  auto* m = new miss{this, b, bounce, len, offset, epoch, done};
  inner_->read(io, bounce ? bounce : buf, len, offset, io_callback{&miss::finish, m});
}

void tiered_target::write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) {
  writes_in_flight.fetch_add(1, std::memory_order_acq_rel);
  writes_begun.fetch_add(1, std::memory_order_acq_rel);
  if (len) arena_->invalidate(len, offset);
  auto* w = new write_done{this, done};
  inner_->write(io, buf, len, offset, fua, io_callback{&write_done::finish, w});
}

}  // namespace

std::shared_ptr<host_tier> host_tier::make(uint64_t bytes, uint32_t page_bytes) {
  return std::make_shared<tier_impl>(bytes, page_bytes);
}

}  // namespace deepwell
