// A modelled drive (drive_array.hpp): host memory whose requests complete
// when a device model says. The bytes move at once; the completion waits on
// the calling poller's engine. One timer a poller (for its earliest waiting
// command) rather than one a command: at millions of commands a second a
// timer each would cost the controller more than the commands it times.
// The drive's state is shared by every poller that sends it commands, and
// is reserved with atomics, not a lock: a lock taken by every poller for
// every command held one drive near 1 M commands a second, below the 1.5 M
// it models.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>
#include <queue>
#include <vector>

#include "deepwell/common/detail/hash.hpp"
#include "deepwell/common/detail/staging_copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "targets/per_engine_slots.hpp"

namespace deepwell {
namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

// Commands waiting for their completion time on one poller's engine. Only
// that poller's thread touches it (requests come from it, timers fire in
// its reap()).
struct alignas(64) engine_queue {  // a line of its own: each poller writes its own
  struct waiting {
    uint64_t due;
    int64_t result;
    io_callback done;
    bool operator>(const waiting& o) const { return due > o.due; }
  };
  io_engine* io = nullptr;
  std::priority_queue<waiting, std::vector<waiting>, std::greater<>> heap;
  uint64_t armed_due = 0;  // the earliest timer in flight (0: none)
};

struct timer_ctx {
  engine_queue* q;
  uint64_t due;
};

class model_drive_target final : public target {
 public:
  model_drive_target(uint64_t bytes, const drive_model& m, bool writable)
      : mem_(make_host_memory_target(bytes, true)), data_(static_cast<uint8_t*>(mem_->host_pointer())),
        size_(bytes), model_(m), writable_(writable), ring_(new std::atomic<uint64_t>[m.queue_depth]()) {
    if (m.iops == 0 || m.bandwidth_bytes == 0 || m.queue_depth == 0)
      throw error("model drive: iops, bandwidth and queue depth must be above 0");
    if (!(m.tail >= 0) || !(m.write_penalty >= 1))
      throw error("model drive: the latency tail must be >= 0 and the write penalty >= 1");
  }

  uint64_t size() const override { return size_; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override {
    return "model drive (" + std::to_string(size_) + " bytes, " + std::to_string(model_.iops / 1000) + " K IOPS, " +
           std::to_string(model_.bandwidth_bytes / 1'000'000) + " MB/s, " + std::to_string(model_.latency_ns / 1000) +
           " us)";
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (offset + len < offset) return done(-EINVAL);
    const uint64_t valid = offset < size_ ? std::min<uint64_t>(len, size_ - offset) : 0;
    // Into staging the GPU reads next: the controller's own streaming copy,
    // as the host-memory target makes (a drive's DMA leaves no dirty lines
    // in a core's caches either).
    if (valid) detail::copy_to_staging(buf, data_ + offset, valid);
    if (valid < len) std::memset(static_cast<uint8_t*>(buf) + valid, 0, len - valid);
    later(io, len, 1.0, len, done);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool, io_callback done) override {
    if (!writable_) return done(-EROFS);
    if (offset > size_ || len > size_ - offset) return done(-EINVAL);
    if (len) std::memcpy(data_ + offset, buf, len);
    later(io, len, model_.write_penalty, len, done);
  }

  void flush(io_engine& io, io_callback done) override { later(io, 0, 1.0, 0, done); }

 private:
  static constexpr unsigned max_engines = 64;

  // When a command of `bytes` arriving now completes.
  uint64_t due_of(uint64_t now, uint32_t bytes, double penalty) {
    const double turn = std::max(1e9 / double(model_.iops), double(bytes) * 1e9 / double(model_.bandwidth_bytes));
    const uint64_t n = issued_.fetch_add(1, std::memory_order_relaxed);
    // A place among queue_depth commands: it starts no earlier than the one
    // queue_depth before it ended (a command issued at the same moment on
    // another poller may not have written its due time yet: then this one
    // reads the one before, off by one place, which the model tolerates).
    std::atomic<uint64_t>& place = ring_[n % model_.queue_depth];
    const uint64_t earlier = place.load(std::memory_order_relaxed);
    // Its turn of the drive's throughput, reserved at the drive's next free
    // moment.
    uint64_t free = free_at_.load(std::memory_order_relaxed);
    uint64_t start;
    do {
      start = std::max({now, free, earlier});
    } while (!free_at_.compare_exchange_weak(free, start + uint64_t(turn * penalty), std::memory_order_relaxed));
    const double u = double(detail::splitmix64_mix(model_.seed + n) >> 11) * 0x1.0p-53;  // [0, 1)
    const double tail = -std::log1p(-u) * double(model_.latency_ns) * model_.tail;
    const uint64_t due = start + uint64_t(double(model_.latency_ns) * penalty + tail);
    place.store(due, std::memory_order_relaxed);
    return due;
  }

  void later(io_engine& io, uint32_t bytes, double penalty, int64_t result, io_callback done) {
    const uint64_t now = now_ns();
    const uint64_t due = due_of(now, bytes, penalty);
    engine_queue* q = queue_of(io);
    if (!q) {  // more engines than slots: a timer of its own
      io_op op;
      op.kind = io_op::timer;
      op.delay_ns = due > now ? due - now : 0;
      op.done = {&own_timer, new own_ctx{done, result}};  // a timer completes with 0: keep the result
      return io.queue(op);
    }
    q->heap.push({due, result, done});
    // A timer for its tick when it is the earliest, or when the armed one
    // was lost (an engine that went before its timer fired leaves it armed).
    const uint64_t at = tick_of(due);
    if (q->armed_due == 0 || at < q->armed_due || now > q->armed_due + 10'000'000) arm(*q, at, now);
  }

  struct own_ctx {
    io_callback done;
    int64_t result;
  };
  static void own_timer(void* ctx, int64_t r) {
    own_ctx* c = static_cast<own_ctx*>(ctx);
    const own_ctx o = *c;
    delete c;
    o.done(r < 0 ? r : o.result);
  }

  // Completions are delivered on ticks: a command completes at the first
  // tick at or after its due time (at most tick_ns late), and the commands
  // of one tick on one timer, so a poller arms at most one timer a tick
  // however many commands it has waiting. (On an H200 the ticks made no
  // measurable difference at 1.5 M IOPS a drive: there the controller's own
  // path is the limit, bench/results/2026-11-29-a3f7257-h200-array-scaling-
  // model-drives.json.)
  static constexpr uint64_t tick_ns = 20'000;
  static uint64_t tick_of(uint64_t due) { return (due + tick_ns - 1) / tick_ns * tick_ns; }

  static void arm(engine_queue& q, uint64_t due, uint64_t now) {
    q.armed_due = due;
    io_op op;
    op.kind = io_op::timer;
    op.delay_ns = due > now ? due - now : 0;
    op.done = {&on_timer, new timer_ctx{&q, due}};
    q.io->queue(op);
  }

  static void on_timer(void* ctx, int64_t) {
    timer_ctx* t = static_cast<timer_ctx*>(ctx);
    engine_queue& q = *t->q;
    if (q.armed_due == t->due) q.armed_due = 0;
    delete t;
    // Everything due by now, in order of due time.
    const uint64_t now = now_ns();
    std::vector<engine_queue::waiting> ready;
    while (!q.heap.empty() && q.heap.top().due <= now) {
      ready.push_back(q.heap.top());
      q.heap.pop();
    }
    if (!q.heap.empty()) {
      const uint64_t at = tick_of(q.heap.top().due);
      if (q.armed_due == 0 || at < q.armed_due) arm(q, at, now);
    }
    for (const auto& w : ready) w.done(w.result);
  }

  engine_queue* queue_of(io_engine& io) {
    return queues_.of(io, [&](engine_queue& q) { q.io = &io; });
  }

  std::shared_ptr<target> mem_;
  uint8_t* data_;
  uint64_t size_;
  drive_model model_;
  bool writable_;
  // The model's state, each on a line of its own (every poller writes them).
  alignas(64) std::atomic<uint64_t> free_at_{0};  // when the drive's next turn starts
  alignas(64) std::atomic<uint64_t> issued_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> ring_;  // due times of the last queue_depth commands
  detail::per_engine_slots<engine_queue, max_engines> queues_;
};

}  // namespace

std::shared_ptr<target> make_model_drive_target(uint64_t bytes, const drive_model& model, bool writable) {
  return std::make_shared<model_drive_target>(bytes, model, writable);
}

}  // namespace deepwell
