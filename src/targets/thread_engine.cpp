// The fallback engine where io_uring is unavailable (and the io_uring
// engine's threads for writes to regular files): worker threads run
// preadv2/pwritev2/fdatasync and put finished operations on a completion
// list that the owner drains in reap(). Timers never occupy a worker (a
// sleeping worker would hold up reads queued behind it): the owner keeps
// them in a deadline-ordered list and completes the expired ones in reap().
//
// A worker that takes a write also takes the writes queued right behind it
// to the same file with the same flags when, together, they cover one
// range with no gap and no overlap (a warp's run of adjacent pages, which
// the cache sends through one queue), and writes them with one vectored
// call (buffered_writes): the GPU machine's disk took O_DIRECT writes of
// 1 MiB at 2.0-2.5 GB/s against 1.8-2.1 for 64 KiB, and a buffered file's
// lock is taken once. Writes that do not
// join such a range go back to the front of the queue, in their order,
// for any worker; nothing moves past a read, a flush or a write to
// another file, and writes that overlap are never reordered.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "targets/buffered_writes.hpp"
#include "targets/io_engines.hpp"
#include "targets/op_fifo.hpp"
#include "targets/op_pool.hpp"

namespace deepwell::detail {
namespace {

using steady = std::chrono::steady_clock;

// The most writes one vectored call takes (buffered_writes also stops at
// 1 MiB).
constexpr size_t max_merged_writes = 64;

struct thread_op {
  io_op op;
  int64_t result = 0;
  steady::time_point deadline{};  // timers only
  thread_op* next = nullptr;
};

// Runs one read, write or fsync on the calling thread; bytes or -errno.
int64_t run_blocking(const io_op& op) {
  if ((op.kind == io_op::read || op.kind == io_op::write) && op.offset > max_io_offset) return -EINVAL;
  ssize_t r;
  iovec iov{op.buf, op.len};
  do {
    switch (op.kind) {
      case io_op::read:
        r = preadv2(op.fd, &iov, 1, static_cast<off_t>(op.offset), op.rw_flags);
        break;
      case io_op::write:
        r = pwritev2(op.fd, &iov, 1, static_cast<off_t>(op.offset), op.rw_flags);
        break;
      case io_op::fsync:
        r = fdatasync(op.fd);
        break;
      default:
        return -EINVAL;
    }
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

class thread_engine final : public io_engine {
 public:
  thread_engine(unsigned depth, unsigned threads) : pool_(depth) {
    workers_.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

  // Workers finish everything queued (so no buffer is touched after the
  // engine is gone), then exit. Callbacks of unreaped operations are not
  // called; pending timers are dropped.
  ~thread_engine() override {
    {
      std::lock_guard lock(mutex_);
      pending_.splice_back(staged_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& t : workers_) t.join();
  }

  const char* name() const override { return "threads"; }

  void queue(const io_op& op) override {
    thread_op* r = pool_.take();
    r->op = op;
    r->result = 0;
    ++in_flight_;
    if (op.kind == io_op::timer) {
      r->deadline = steady::now() + std::chrono::nanoseconds(op.delay_ns);
      insert_timer(r);
    } else {
      staged_.push_back(r);
      ++staged_count_;
    }
  }

  void submit() override {
    if (staged_.empty()) return;
    unsigned n = staged_count_;
    {
      std::lock_guard lock(mutex_);
      pending_.splice_back(staged_);
    }
    staged_count_ = 0;
    if (n == 1)
      work_ready_.notify_one();
    else
      work_ready_.notify_all();
  }

  unsigned reap() override {
    unsigned n = reap_timers();
    op_fifo<thread_op> done;
    {
      std::lock_guard lock(mutex_);
      done.splice_back(finished_);
    }
    while (thread_op* r = done.pop_front()) {
      finish(r);
      ++n;
    }
    return n;
  }

  void wait(uint64_t timeout_ns) override {
    submit();
    if (in_flight_ == 0) return;
    auto until = steady::now() + std::chrono::nanoseconds(timeout_ns);
    if (!timers_.empty() && timers_.front()->deadline < until) until = timers_.front()->deadline;
    std::unique_lock lock(mutex_);
    finished_ready_.wait_until(lock, until, [this] { return !finished_.empty(); });
  }

  unsigned in_flight() const override { return in_flight_; }

 private:
  void work() {
    std::vector<thread_op*> run;  // a write and the writes that continue its range
    std::vector<io_op*> ops;
    std::vector<int64_t> results;
    buffered_writes writer;
    std::unique_lock lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      thread_op* r = pending_.pop_front();
      if (!r) return;  // stopping, and nothing left to run
      run.assign(1, r);
      if (r->op.kind == io_op::write && take_adjacent_writes(run)) work_ready_.notify_all();
      lock.unlock();
      if (run.size() == 1) {
        r->result = run_blocking(r->op);
      } else {
        ops.clear();
        for (thread_op* w : run) ops.push_back(&w->op);
        results.resize(run.size());
        (void)writer.run(ops.data(), results.data(), ops.size(), true);
        for (size_t i = 0; i < run.size(); ++i) run[i]->result = results[i];
      }
      lock.lock();
      for (thread_op* w : run) finished_.push_back(w);
      finished_ready_.notify_one();
    }
  }

  // With the lock held; run = {a write just taken}. Takes the writes queued
  // right behind it to the same file with the same flags and near it (at
  // most max_merged_writes, none further than that many of its lengths:
  // random writes stop the look at once) and keeps those that, with it,
  // make one range with no gap: the others go back to the front of the
  // queue in their order. None is kept if any two overlap (their order
  // must stay as queued). True if some went back (other workers may take
  // them).
  bool take_adjacent_writes(std::vector<thread_op*>& run) {
    const io_op& first = run[0]->op;
    const uint64_t reach = uint64_t(max_merged_writes) * (first.len ? first.len : 1);
    while (run.size() < max_merged_writes) {
      const thread_op* n = pending_.front();
      if (!n || n->op.kind != io_op::write || n->op.fd != first.fd || n->op.rw_flags != first.rw_flags) break;
      const uint64_t apart = n->op.offset > first.offset ? n->op.offset - first.offset : first.offset - n->op.offset;
      if (apart > reach) break;
      run.push_back(pending_.pop_front());
    }
    if (run.size() == 1) return false;
    sorted_.assign(run.begin(), run.end());
    std::stable_sort(sorted_.begin(), sorted_.end(),
                     [](const thread_op* a, const thread_op* b) { return a->op.offset < b->op.offset; });
    bool overlap = false;
    for (size_t k = 1; k < sorted_.size(); ++k)
      overlap |= sorted_[k]->op.offset < sorted_[k - 1]->op.offset + sorted_[k - 1]->op.len;
    // The longest gapless range of the sorted writes that holds the first.
    size_t lo = 0, hi = 0;  // [lo, hi]
    if (!overlap) {
      const size_t at = size_t(std::find(sorted_.begin(), sorted_.end(), run[0]) - sorted_.begin());
      lo = hi = at;
      while (lo > 0 && sorted_[lo - 1]->op.offset + sorted_[lo - 1]->op.len == sorted_[lo]->op.offset) --lo;
      while (hi + 1 < sorted_.size() && sorted_[hi]->op.offset + sorted_[hi]->op.len == sorted_[hi + 1]->op.offset)
        ++hi;
    }
    // Back to the front, in queued order: every write outside [lo, hi].
    op_fifo<thread_op> back;
    kept_.clear();
    for (size_t i = 1; i < run.size(); ++i) {
      const uint64_t off = run[i]->op.offset;
      const bool in = !overlap && off >= sorted_[lo]->op.offset && off <= sorted_[hi]->op.offset;
      if (in)
        kept_.push_back(run[i]);
      else
        back.push_back(run[i]);
    }
    const bool gave_back = !back.empty();
    back.splice_back(pending_);
    pending_.splice_back(back);
    run.resize(1);
    run.insert(run.end(), kept_.begin(), kept_.end());
    return gave_back;
  }

  // Sorted by deadline; few timers are in flight at once, so a linear
  // insertion is cheap and needs no allocation.
  void insert_timer(thread_op* r) {
    if (timers_.empty() || timers_.back()->deadline <= r->deadline) {
      timers_.push_back(r);
      return;
    }
    if (r->deadline < timers_.front()->deadline) {
      timers_.insert(timers_.begin(), r);
      return;
    }
    auto it = timers_.begin();
    while ((*it)->deadline <= r->deadline) ++it;
    timers_.insert(it, r);
  }

  unsigned reap_timers() {
    if (timers_.empty()) return 0;
    auto now = steady::now();
    size_t expired = 0;
    while (expired < timers_.size() && timers_[expired]->deadline <= now) ++expired;
    if (expired == 0) return 0;
    // Copy out first: a callback may queue a new timer into timers_.
    expired_.assign(timers_.begin(), timers_.begin() + expired);
    timers_.erase(timers_.begin(), timers_.begin() + expired);
    for (thread_op* r : expired_) finish(r);
    expired_.clear();
    return static_cast<unsigned>(expired);
  }

  void finish(thread_op* r) {
    io_callback done = r->op.done;
    int64_t res = r->result;
    pool_.give(r);
    --in_flight_;
    done(res);
  }

  // Owner thread only.
  op_pool<thread_op> pool_;
  op_fifo<thread_op> staged_;  // queued, not yet submitted
  unsigned staged_count_ = 0;
  std::vector<thread_op*> timers_;   // capacity is kept, so steady state does not allocate
  std::vector<thread_op*> expired_;
  unsigned in_flight_ = 0;

  // Shared with the workers.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable finished_ready_;
  op_fifo<thread_op> pending_;
  op_fifo<thread_op> finished_;
  std::vector<thread_op*> sorted_, kept_;  // take_adjacent_writes' scratch
  bool stopping_ = false;

  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<io_engine> make_thread_engine(unsigned queue_depth, unsigned threads) {
  return std::make_unique<thread_engine>(queue_depth ? queue_depth : 1, threads ? threads : 1);
}

}  // namespace deepwell::detail
