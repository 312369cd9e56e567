// Mirroring (drive_array.hpp): reads spread over the members in service
// (each to the least busy of them on the calling poller, from a turn that
// moves on, so a slow replica takes fewer) and retried on the next when one
// fails; each member's requests in a lane of its own (member_lanes.hpp); writes and flushes to every member in
// service, good while one of them succeeds. A member that fails leaves
// service for good (a replica that missed a write holds stale bytes: it
// must not serve reads again) and is reported.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "targets/member_lanes.hpp"
#include "targets/split_request.hpp"

namespace deepwell {
namespace {

class mirrored_target final : public mirror_target {
 public:
  explicit mirrored_target(std::vector<std::shared_ptr<target>> members) : members_(std::move(members)) {
    if (members_.empty()) throw error("mirrored target: no members");
    if (members_.size() > 64) throw error("mirrored target: at most 64 members, not " + std::to_string(members_.size()));
    size_ = UINT64_MAX;
    for (size_t i = 0; i < members_.size(); ++i) {
      const auto& m = members_[i];
      if (!m) throw error("mirrored target: member " + std::to_string(i) + " is null");
      if (m->writable() != members_[0]->writable())
        throw error("mirrored target: members differ in writability (" + members_[0]->describe() + " and " +
                    m->describe() + ")");
      size_ = std::min(size_, m->size());
      io_alignment_ = std::max(io_alignment_, m->io_alignment());
      memory_alignment_ = std::max(memory_alignment_, m->memory_alignment());
    }
    state_ = std::make_unique<member_state[]>(members_.size());
    lanes_ = std::make_unique<detail::member_lanes>(members_, detail::member_window(members_.size()));
  }

  uint64_t size() const override { return size_; }
  bool writable() const override { return members_[0]->writable(); }
  uint32_t io_alignment() const override { return io_alignment_; }
  uint32_t memory_alignment() const override { return memory_alignment_; }
  std::string describe() const override {
    std::string s = "mirror of " + std::to_string(members_.size());
    if (const uint32_t f = failed_members()) s += " (" + std::to_string(f) + " failed)";
    s += ":";
    for (size_t i = 0; i < members_.size(); ++i)
      s += (i ? "; " : " ") + members_[i]->describe() + (failed(i) ? " [failed]" : "");
    return s;
  }

  std::vector<mirror_member_state> members() const override {
    std::vector<mirror_member_state> out(members_.size());
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < members_.size(); ++i) {
      out[i].describe = members_[i]->describe();
      out[i].failed = failed(i);
      out[i].error = state_[i].error;
      out[i].reads = state_[i].reads.load(std::memory_order_relaxed);
    }
    return out;
  }
  uint32_t failed_members() const override {
    uint32_t n = 0;
    for (size_t i = 0; i < members_.size(); ++i) n += failed(i);
    return n;
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    const uint32_t inside = detail::bytes_inside(offset, len, size_);
    if (inside < len) std::memset(static_cast<uint8_t*>(buf) + inside, 0, len - inside);  // past the end: zeros
    if (inside == 0) return done(len);
    auto* r = new read_request{this, &io, buf, inside, len, offset, done, 0};
    const size_t start = next_.fetch_add(1, std::memory_order_relaxed) % members_.size();
    try_next(r, start);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    if (!writable()) return done(-EROFS);
    const uint32_t inside = detail::bytes_inside(offset, len, size_);
    if (inside == 0) return done(len);
    fan_out(done, len, [&](size_t m, io_callback cb) { lanes_->write(io, m, buf, inside, offset, fua, cb); }, inside,
            offset);
  }

  void flush(io_engine& io, io_callback done) override {
    fan_out(done, 0, [&](size_t m, io_callback cb) { lanes_->flush(io, m, cb); }, 0, flush_offset);
  }

 private:
  struct member_state {
    std::atomic<bool> failed{false};
    std::atomic<uint64_t> reads{0};
    std::string error;  // guarded by mutex_
  };

  struct read_request {
    mirrored_target* self;
    io_engine* io;
    void* buf;
    uint32_t inside, len;
    uint64_t offset;
    io_callback done;
    uint64_t tried;  // a bit a member
    size_t member = 0;
  };

  // A write or flush sent to every member in service; its pieces' contexts
  // are its own, freed with it.
  struct fan_request;
  struct fan_piece {
    fan_request* parent;
    size_t member;
    uint32_t expect;
  };
  struct fan_request {
    mirrored_target* self;
    std::atomic<uint32_t> left;
    std::atomic<uint32_t> good{0};
    std::atomic<int64_t> error{0};
    int64_t result;
    io_callback done;
    uint64_t offset;  // a write's (flush_offset: a flush), for the message of a member that fails it
    std::unique_ptr<fan_piece[]> pieces;
  };
  static constexpr uint64_t flush_offset = UINT64_MAX;

  bool failed(size_t i) const { return state_[i].failed.load(std::memory_order_acquire); }
  // Errors of the request itself, which every member would give alike: not
  // a member's failure.
  static bool request_error(int64_t r) { return r == -EINVAL || r == -EROFS; }

  void fail(size_t i, const std::string& what, int64_t r) {
    std::string why = what + ": " + (r < 0 ? std::strerror(int(-r)) : "short transfer (" + std::to_string(r) + " bytes)");
    bool first = false;
    {
      std::lock_guard lock(mutex_);
      if (state_[i].error.empty()) {
        state_[i].error = why;
        first = true;
      }
    }
    state_[i].failed.store(true, std::memory_order_release);
    if (first)
      detail::log_line(detail::log_level::warn, "mirror member " + std::to_string(i) + " (" + members_[i]->describe() +
                                                    ") failed (" + why + "): out of service, " +
                                                    std::to_string(members_.size() - failed_members()) + " of " +
                                                    std::to_string(members_.size()) + " left");
  }

  // The read on the least busy member in service that it has not tried
  // (the first of them from `from` on, when they are alike); with none
  // left, its last error.
  void try_next(read_request* r, size_t from, int64_t last_error = -EIO) {
    size_t best = members_.size();
    uint32_t best_load = UINT32_MAX;
    for (size_t k = 0; k < members_.size(); ++k) {
      const size_t i = (from + k) % members_.size();
      if (failed(i) || (r->tried >> i) & 1) continue;
      const uint32_t load = lanes_->load(*r->io, i);
      if (load < best_load) best = i, best_load = load;
      if (load == 0) break;
    }
    if (best < members_.size()) {
      r->tried |= uint64_t(1) << best;
      r->member = best;
      return lanes_->read(*r->io, best, r->buf, r->inside, r->offset, {&on_read, r});
    }
    const io_callback done = r->done;
    delete r;
    done(last_error);
  }

  static void on_read(void* ctx, int64_t result) {
    read_request* r = static_cast<read_request*>(ctx);
    mirrored_target* self = r->self;
    if (result == r->inside) {
      self->state_[r->member].reads.fetch_add(1, std::memory_order_relaxed);
      const io_callback done = r->done;
      const uint32_t len = r->len;
      delete r;
      return done(len);
    }
    if (request_error(result)) {
      const io_callback done = r->done;
      delete r;
      return done(result);
    }
    self->fail(r->member, "read at " + std::to_string(r->offset), result);
    self->try_next(r, r->member + 1, result < 0 ? result : -EIO);
  }

  template <class Send>
  void fan_out(io_callback done, int64_t result, Send send, uint32_t expect, uint64_t offset) {
    uint8_t live[64];  // at most 64 members (the constructor's limit)
    uint32_t n = 0;
    for (size_t i = 0; i < members_.size(); ++i)
      if (!failed(i)) live[n++] = uint8_t(i);
    if (n == 0) return done(-EIO);
    auto* f = new fan_request{this, {n + 1}, {0}, {0}, result, done, offset, std::make_unique<fan_piece[]>(n)};
    for (uint32_t k = 0; k < n; ++k) {
      f->pieces[k] = {f, live[k], expect};
      send(size_t(live[k]), io_callback{&on_fan, &f->pieces[k]});
    }
    // The issuer's reference (a member may complete before the others are sent).
    if (f->left.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(f);
  }

  static void on_fan(void* ctx, int64_t r) {
    fan_piece* p = static_cast<fan_piece*>(ctx);
    fan_request* f = p->parent;
    const bool ok = r >= 0 && (!p->expect || r == p->expect);
    if (ok) {
      f->good.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (!request_error(r))
        f->self->fail(p->member, f->offset == flush_offset ? "flush" : "write at " + std::to_string(f->offset), r);
      int64_t none = 0;
      f->error.compare_exchange_strong(none, r < 0 ? r : -EIO, std::memory_order_relaxed);
    }
    if (f->left.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(f);
  }

  static void complete(fan_request* f) {
    // Good while one member took it: the mirror runs degraded.
    const int64_t result = f->good.load(std::memory_order_relaxed) ? f->result : f->error.load(std::memory_order_relaxed);
    const io_callback done = f->done;
    delete f;
    done(result);
  }

  std::vector<std::shared_ptr<target>> members_;
  std::unique_ptr<detail::member_lanes> lanes_;
  std::unique_ptr<member_state[]> state_;
  uint64_t size_;
  uint32_t io_alignment_ = 1, memory_alignment_ = 1;
  std::atomic<size_t> next_{0};
  mutable std::mutex mutex_;  // the members' first errors
};

}  // namespace

std::shared_ptr<mirror_target> make_mirrored_target(std::vector<std::shared_ptr<target>> members) {
  return std::make_shared<mirrored_target>(std::move(members));
}

}  // namespace deepwell
