// An array's members each in a lane of their own on every poller's engine,
// so that drives do not wait on each other. A poller's io engine holds a
// bounded number of operations (io_uring: as many as its CQ has entries);
// past that they wait in one FIFO. Without lanes a slow member's requests
// could fill the engine and a fast member's would queue behind them. With
// them, at most `window` requests of a member are in the engine at once; its
// others wait in the member's own queue and go as its requests complete, and
// the windows together stay within the engine's room.
//
// A lane is touched only by the thread that owns its engine (requests come
// from that poller; completions are delivered in its reap(), io_engine.hpp),
// so it needs no lock. Engines past the first 64 a target sees get no lanes
// (their requests go straight to the member). An engine must not go while
// it holds requests of the lanes (a poller drains its engine before it
// goes): another engine at its address would inherit their counts.
#pragma once
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/targets/target.hpp"
#include "targets/per_engine_slots.hpp"

namespace deepwell::detail {

class member_lanes {
 public:
  // window: requests of one member in one engine at once.
  member_lanes(std::vector<std::shared_ptr<target>> members, uint32_t window)
      : members_(std::move(members)), window_(window ? window : 1) {}
  ~member_lanes() {
    for (auto& e : engines_)
      for (size_t m = 0; e.lanes && m < members_.size(); ++m) {
        for (request* r : e.lanes[m].spare) delete r;
        for (request* r : e.lanes[m].waiting) delete r;
      }
  }
  member_lanes(const member_lanes&) = delete;
  member_lanes& operator=(const member_lanes&) = delete;

  size_t size() const { return members_.size(); }
  target& operator[](size_t m) const { return *members_[m]; }
  const std::vector<std::shared_ptr<target>>& members() const { return members_; }

  void read(io_engine& io, size_t m, void* buf, uint32_t len, uint64_t offset, io_callback done) {
    send(io, m, request::read, buf, len, offset, false, done);
  }
  void write(io_engine& io, size_t m, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) {
    send(io, m, request::write, const_cast<void*>(buf), len, offset, fua, done);
  }
  void flush(io_engine& io, size_t m, io_callback done) { send(io, m, request::flush, nullptr, 0, 0, false, done); }

  // Member m's requests on this engine, sent and waiting (0 for an engine
  // without lanes): how busy the member is as this poller sees it.
  uint32_t load(io_engine& io, size_t m) {
    lane* l = lane_of(io, m);
    return l ? l->in_engine + uint32_t(l->waiting.size()) : 0;
  }

 private:
  struct lane;
  struct request {
    enum kind_t : uint8_t { read, write, flush } kind;
    bool fua;
    uint32_t len;
    void* buf;
    uint64_t offset;
    io_callback done;
    member_lanes* self;
    lane* l;
    io_engine* io;
    size_t member;
  };
  struct alignas(64) lane {  // a line of its own: only its engine's thread writes it
    uint32_t in_engine = 0;
    bool pumping = false;  // starting waiting requests (one that completes at once must not recurse)
    std::deque<request*> waiting;
    std::vector<request*> spare;  // finished requests, for reuse
  };
  struct engine_lanes {
    std::unique_ptr<lane[]> lanes;  // a lane a member, made by the engine's own thread
  };

  // Null for an engine past the table's (its requests go straight to the member).
  lane* lane_of(io_engine& io, size_t m) {
    engine_lanes* e =
        engines_.of(io, [&](engine_lanes& s) { s.lanes = std::make_unique<lane[]>(members_.size()); });
    return e ? &e->lanes[m] : nullptr;
  }

  void send(io_engine& io, size_t m, request::kind_t kind, void* buf, uint32_t len, uint64_t offset, bool fua,
            io_callback done) {
    lane* l = lane_of(io, m);
    if (!l) return issue(*members_[m], io, kind, buf, len, offset, fua, done);
    request* r;
    if (l->spare.empty()) {
      r = new request;
    } else {
      r = l->spare.back();
      l->spare.pop_back();
    }
    *r = {kind, fua, len, buf, offset, done, this, l, &io, m};
    // What the member throws goes to the caller (the poller's own
    // handling, as without lanes).
    if (l->in_engine < window_ && l->waiting.empty()) return (void)start(r, true);
    l->waiting.push_back(r);
  }

  static void issue(target& t, io_engine& io, request::kind_t kind, void* buf, uint32_t len, uint64_t offset, bool fua,
                    io_callback done) {
    if (kind == request::read) return t.read(io, buf, len, offset, done);
    if (kind == request::write) return t.write(io, buf, len, offset, fua, done);
    t.flush(io, done);
  }

  // When the member throws (an allocation, an io engine) the lane takes the
  // request back, so its window is not lost; then the exception goes on
  // (`rethrow`), or start says false.
  bool start(request* r, bool rethrow) {
    lane* l = r->l;
    ++l->in_engine;
    try {
      issue(*members_[r->member], *r->io, r->kind, r->buf, r->len, r->offset, r->fua, {&on_done, r});
      return true;
    } catch (...) {
      --l->in_engine;
      l->spare.push_back(r);
      if (rethrow) throw;
      return false;
    }
  }

  static void on_done(void* ctx, int64_t result) {
    request* r = static_cast<request*>(ctx);
    lane* l = r->l;
    member_lanes* self = r->self;
    const io_callback done = r->done;
    --l->in_engine;
    l->spare.push_back(r);
    done(result);
    self->pump(*l);
  }

  // The member's waiting requests, as its window has room.
  void pump(lane& l) {
    if (l.pumping) return;
    l.pumping = true;
    while (l.in_engine < window_ && !l.waiting.empty()) {
      request* r = l.waiting.front();
      l.waiting.pop_front();
      const io_callback done = r->done;
      // A request that waited has no caller left to throw to: it fails.
      if (!start(r, false)) done(-EIO);
    }
    l.pumping = false;
  }

  std::vector<std::shared_ptr<target>> members_;
  uint32_t window_;
  per_engine_slots<engine_lanes> engines_;
};

// The window of each of `members` members: together, one engine's depth
// (defaults::io_depth, DEEPWELL_IO_DEPTH; io_uring's CQ holds twice that),
// and at least 16 each (64 members of 16 fill the CQ of the default depth).
inline uint32_t member_window(size_t members) {
  return std::max<uint32_t>(16, uint32_t(defaults::io_depth() / std::max<size_t>(1, members)));
}

}  // namespace deepwell::detail
