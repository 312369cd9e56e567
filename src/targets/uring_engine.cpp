// The io_uring engine: one ring per poller thread, driven only by that
// thread. Operations that find no room (SQ full, or as many in the kernel as
// the CQ can hold) wait in an overflow list that submit() drains, so queue()
// never drops an operation and never blocks.
//
// Writes to regular files do not go to the ring but to threads of the
// engine's own (make_thread_engine): the kernel can rarely start one without
// blocking (an O_DIRECT write must update the file's mtime, which IOCB_NOWAIT
// refuses; ext4 starts no buffered write so), so io_uring hands it to its
// io-wq workers, which run writes to one file one after another in a
// per-inode chain. On Linux 6.18 (the project's CI machine: ext4 on virtio)
// that chain was seen to stall: 63 write-backs in the kernel, no I/O at the
// device, the worker idle, and one write moving each time any other work
// was queued to the pool, none for minutes when nothing else was
// (Cases/Integrity odirect_4k hung until ctest killed it at 300 s). Threads
// of our own never stall so. Which threads, by what was measured on the GPU
// machine (bench/results/2026-11-27-14e6e31-h200-write-routing-ab.json):
// - O_DIRECT writes: four threads in parallel (ext4 takes its inode lock
//   shared for overwrites, and file_target allocates the files it creates
//   for direct I/O so that their writes are overwrites too; one thread per
//   file wrote random 4 KiB blocks about a quarter slower);
// - buffered writes (DEEPWELL_BUFFERED_WRITES): by default on the poller
//   itself at submit(), a pass's writes sorted and adjacent pages merged
//   into one vectored write (buffered_writes.hpp); FUA writes (RWF_DSYNC)
//   wait for the disk, so they go to the file's lane. A buffered write is a
//   copy into the page cache; handing it to a thread cost a wake-up each,
//   and its completion waited for the poller's next look. A file whose
//   write call blocks longer than inline_write_limit_ns (the kernel
//   throttling dirty pages) goes to its lane for a while, so the poller
//   does not stall. `lane`: always a lane per file, one thread writing that
//   file's writes one after another as io-wq would (lane fd %
//   file_write_lanes); buffered writes to an ext4 file all take its inode
//   lock, and four threads at once made a mixed read/write kernel about a
//   tenth slower than one.
// Reads (never chained) and fsync stay on the ring. (Tried and dropped: a
// watchdog queuing a no-op to io-wq, which let about one write through
// each; O_DIRECT writes on the ring with RWF_NOWAIT and the refused ones
// again on a lane, which ran the CPU integrity case in 9-55 s and twice
// past 120 s, against 4-5 s for this, both beside a build on two cores;
// Linux native AIO (io_submit) for O_DIRECT writes of whole blocks, whose
// second run of the six CPU integrity cases spent 63 s in odirect_4k against
// 3 s in the first, not understood.)
// What the threads cost against the ring where it does not stall: a thread
// waits for each direct write, where io-wq only started it, so random
// O_DIRECT writes and steady checkpoint saves ran at 0.8-0.9 of the ring;
// and writes into holes of a sparse file, each holding the inode lock until
// it lands, ran one at a time (a checkpoint's first save at half speed
// until file_target allocated the files it creates: ...-0f272d7-h200-
// checkpoint-allocate-ab.json).
#include <liburing.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <vector>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "targets/buffered_writes.hpp"
#include "targets/io_engines.hpp"
#include "targets/op_fifo.hpp"
#include "targets/op_pool.hpp"

namespace deepwell::detail {
namespace {

struct uring_op {
  io_op op;
  // A timer's duration: the kernel reads it until the timer's CQE arrives,
  // so it lives in the record rather than on queue()'s stack.
  __kernel_timespec timeout{};
  int64_t result = 0;  // for operations finished without the kernel
  uring_op* next = nullptr;
};

constexpr unsigned reap_batch = 32;

// Threads for writes to O_DIRECT files, in parallel; lanes (a thread each)
// for writes to buffered files: a file's writes all go to lane
// fd % file_write_lanes. All made on first use.
constexpr unsigned direct_write_threads = 4;
constexpr unsigned file_write_lanes = 8;
// The ring's longest wait while writes are also in flight on the threads.
constexpr uint64_t mixed_wait_ns = 20'000;
// A buffered write call on the poller longer than this sends the file's
// writes to its lane for lane_hold_ns (then, once the lane is empty, back).
constexpr uint64_t inline_write_limit_ns = 2'000'000;
constexpr uint64_t lane_hold_ns = 100'000'000;

enum class buffered_mode : uint8_t { lane, inline_one, inline_merged };
buffered_mode buffered_mode_from_defaults() {
  const std::string m = defaults::buffered_writes();
  return m == "lane" ? buffered_mode::lane : m == "inline" ? buffered_mode::inline_one : buffered_mode::inline_merged;
}

// Registrations are numbered across the process: an engine made where
// another was freed must not repeat a number a passthrough ring still holds.
uint64_t next_generation() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool transient_submit_error(int ret) {
  // EAGAIN: out of kernel resources for now; EBUSY: completions are backed
  // up; EINTR: a signal. The SQEs stay in the ring for the next submit.
  return ret == -EAGAIN || ret == -EBUSY || ret == -EINTR;
}

class uring_engine final : public io_engine {
 public:
  explicit uring_engine(unsigned depth) : depth_(depth), buffered_(buffered_mode_from_defaults()), pool_(depth) {
    io_uring_params p{};
    p.flags = IORING_SETUP_CLAMP;
    int ret = io_uring_queue_init_params(depth, &ring_, &p);
    if (ret < 0) throw error(errno_message("io_uring_queue_init(" + std::to_string(depth) + ")", -ret));
    cq_capacity_ = p.cq_entries;
  }

  // The write threads finish what they were given (their engine's
  // destructor) before the ring goes.
  ~uring_engine() override {
    run_inline_writes();
    direct_writes_.reset();
    for (auto& lane : lanes_) lane.reset();
    drain_kernel();
    io_uring_queue_exit(&ring_);
  }

  const char* name() const override { return "io_uring"; }

  void queue(const io_op& op) override {
    if (op.kind == io_op::write) {
      // A Force Unit Access write (RWF_DSYNC) waits for the disk: never on
      // the poller.
      if (op.offset <= max_io_offset && op.rw_flags == 0 && inline_write(op.fd)) {
        uring_op* r = pool_.take();
        r->op = op;
        ++in_flight_;
        inline_writes_.push_back(r);
        return;
      }
      if (io_engine* e = write_engine(op.fd)) {
        e->queue(op);
        return;
      }
    }
    uring_op* r = pool_.take();
    r->op = op;
    ++in_flight_;
    if ((op.kind == io_op::read || op.kind == io_op::write) && op.offset > max_io_offset) {
      r->result = -EINVAL;
      finished_locally_.push_back(r);
      return;
    }
    // Keep the order: nothing overtakes what is already waiting.
    if (!overflow_.empty() || !try_prepare(r)) overflow_.push_back(r);
  }

  void submit() override {
    run_inline_writes();
    for (io_engine* e : write_engines_) e->submit();
    for (;;) {
      unsigned moved = move_overflow_to_sq();
      submit_sq();
      // Stop when the overflow is empty, or nothing more can move (the CQ
      // is at capacity, or the kernel did not take the SQEs this time).
      if (overflow_.empty() || moved == 0) break;
    }
  }

  unsigned reap() override {
    unsigned total = 0;
    struct finished {
      io_callback done;
      int64_t result;
    };
    for (;;) {
      io_uring_cqe* cqes[reap_batch];
      finished batch[reap_batch];
      unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, reap_batch);
      unsigned ours = 0;
      for (unsigned i = 0; i < n; ++i) {
        auto* r = static_cast<uring_op*>(io_uring_cqe_get_data(cqes[i]));
        if (!r || cqes[i]->user_data == LIBURING_UDATA_TIMEOUT) continue;  // internal
        int64_t res = cqes[i]->res;
        // A pure timer (count 0) reports its expiry as -ETIME.
        if (r->op.kind == io_op::timer && res == -ETIME) res = 0;
        batch[ours++] = {r->op.done, res};
        --in_kernel_;
        release(r);
      }
      io_uring_cq_advance(&ring_, n);
      // Callbacks run after the records are back in the pool and the CQ is
      // advanced: they may queue follow-up operations.
      for (unsigned i = 0; i < ours; ++i) batch[i].done(batch[i].result);
      total += ours;
      if (n < reap_batch) break;
    }
    total += reap_finished_locally();
    for (io_engine* e : write_engines_) total += e->reap();
    return total;
  }

  void wait(uint64_t timeout_ns) override {
    if (!overflow_.empty() || io_uring_sq_ready(&ring_) > 0 || !write_engines_.empty() || !inline_writes_.empty())
      submit();
    if (!finished_locally_.empty()) return;
    io_engine* writing = nullptr;  // a write engine with writes in flight
    unsigned busy = 0;
    for (io_engine* e : write_engines_)
      if (e->in_flight() > 0) {
        writing = e;
        ++busy;
      }
    if (in_kernel_ == 0) {
      // One engine's wait sees only its own completions: a full wait where
      // it is the only one busy, else a brief one.
      if (writing) writing->wait(busy == 1 ? timeout_ns : std::min<uint64_t>(timeout_ns, mixed_wait_ns));
      return;  // nothing in the ring to wait for
    }
    // Both kinds in flight: the ring's wait does not see the threads'
    // completions, so it waits only briefly.
    if (writing) timeout_ns = std::min<uint64_t>(timeout_ns, mixed_wait_ns);
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<int64_t>(timeout_ns / 1000000000u);
    ts.tv_nsec = static_cast<long long>(timeout_ns % 1000000000u);
    io_uring_cqe* cqe = nullptr;
    // -ETIME (timed out) and -EINTR are both fine: the caller reaps next.
    (void)io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
  }

  unsigned in_flight() const override {
    unsigned n = in_flight_;
    for (const io_engine* e : write_engines_) n += e->in_flight();
    return n;
  }

  bool register_buffers(const iovec* iov, unsigned n) override {
    unregister_buffers();
    if (n == 0) return false;
    int ret = io_uring_register_buffers(&ring_, iov, n);
    if (ret < 0) return false;  // ENOMEM (RLIMIT_MEMLOCK), EPERM, EINVAL, ...
    registered_buffers_ = n;
    registered_iov_.assign(iov, iov + n);
    generation_ = next_generation();
    return true;
  }

  void unregister_buffers() override {
    if (registered_buffers_ == 0) return;
    io_uring_unregister_buffers(&ring_);
    registered_buffers_ = 0;
    registered_iov_.clear();
    generation_ = 0;
  }

  buffer_registration registered() const { return {registered_iov_.data(), registered_buffers_, generation_}; }

 private:
  // False when there is no room: the SQ stays full even after a submit, or
  // the kernel already holds as many operations as the CQ has entries
  // (never more, so no completion can overflow the CQ).
  bool try_prepare(uring_op* r) {
    if (in_kernel_ >= cq_capacity_) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      submit_sq();
      sqe = io_uring_get_sqe(&ring_);
      if (!sqe) return false;
    }
    prepare(sqe, r);
    ++in_kernel_;
    return true;
  }

  // Where a descriptor's writes go (top of the file). Looked up once per
  // descriptor number: a number reused for another kind of file keeps the
  // first answer, which only picks the slower of two correct paths.
  enum class file_kind : int8_t { unknown, other, buffered, direct };
  file_kind kind_of(int fd) {
    if (fd < 0) return file_kind::other;
    if (size_t(fd) >= fd_kind_.size()) fd_kind_.resize(size_t(fd) + 1, file_kind::unknown);
    file_kind& k = fd_kind_[size_t(fd)];
    if (k == file_kind::unknown) {
      struct stat st {};
      const int fl = fcntl(fd, F_GETFL);
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0)
        k = file_kind::other;
      else
        k = fl & O_DIRECT ? file_kind::direct : file_kind::buffered;
    }
    return k;
  }

  // Whether a write to fd runs on this thread at submit(): a buffered file,
  // not in lane mode, and not held on its lane after a slow write (nor
  // while the lane still has writes of it in flight: they keep their order).
  // (A file's FUA writes always go to its lane; a plain write of it that
  // runs here meanwhile may land before one of them, as two writes in
  // flight at once may on any NVMe device.)
  bool inline_write(int fd) {
    if (buffered_ == buffered_mode::lane || kind_of(fd) != file_kind::buffered) return false;
    if (held_.empty()) return true;
    for (size_t i = 0; i < held_.size(); ++i) {
      if (held_[i].fd != fd) continue;
      if (now_ns() < held_[i].until || write_engine(fd)->in_flight() != 0) return false;
      held_[i] = held_.back();
      held_.pop_back();
      return true;
    }
    return true;
  }

  // The writes queued for this thread, run now; their completions are
  // delivered by the next reap().
  void run_inline_writes() {
    if (inline_writes_.empty()) return;
    recheck_direct();
    if (inline_writes_.empty()) return;
    ops_.clear();
    for (uring_op* r : inline_writes_) ops_.push_back(&r->op);
    results_.resize(inline_writes_.size());
    const buffered_writes::slowest w =
        writer_.run(ops_.data(), results_.data(), ops_.size(), buffered_ == buffered_mode::inline_merged);
    for (size_t i = 0; i < inline_writes_.size(); ++i) {
      inline_writes_[i]->result = results_[i];
      finished_locally_.push_back(inline_writes_[i]);
    }
    inline_writes_.clear();
    if (w.ns > inline_write_limit_ns) {
      const uint64_t until = now_ns() + lane_hold_ns;
      auto h = std::find_if(held_.begin(), held_.end(), [&](const held& x) { return x.fd == w.fd; });
      if (h != held_.end())
        h->until = until;
      else
        held_.push_back({w.fd, until});
    }
  }

  // A descriptor number can be closed and reused for an O_DIRECT file,
  // whose writes would then block this thread for a disk's latency each:
  // once a batch, each file's mode is looked at again and such writes go
  // to the direct-write threads.
  void recheck_direct() {
    int checked = -1;
    bool direct = false;
    size_t kept = 0;
    for (uring_op* r : inline_writes_) {
      const int fd = r->op.fd;
      if (fd != checked) {
        const int fl = fcntl(fd, F_GETFL);
        direct = fl >= 0 && (fl & O_DIRECT);
        checked = fd;
        if (direct) fd_kind_[size_t(fd)] = file_kind::direct;
      }
      if (!direct) {
        inline_writes_[kept++] = r;
        continue;
      }
      const io_op op = r->op;
      pool_.give(r);
      --in_flight_;
      write_engine(fd)->queue(op);
    }
    inline_writes_.resize(kept);
  }

  // The threads that take writes to fd (made on first use), or nullptr for
  // the ring.
  io_engine* write_engine(int fd) {
    std::unique_ptr<io_engine>* slot = nullptr;
    unsigned threads = 1;
    switch (kind_of(fd)) {
      case file_kind::direct:
        slot = &direct_writes_;
        threads = direct_write_threads;
        break;
      case file_kind::buffered:
        slot = &lanes_[unsigned(fd) % file_write_lanes];
        break;
      default:
        return nullptr;
    }
    if (!*slot) {
      *slot = make_thread_engine(depth_, threads);
      write_engines_.push_back(slot->get());
    }
    return slot->get();
  }

  int registered_index(const void* buf, uint32_t len) const {
    const auto* p = static_cast<const uint8_t*>(buf);
    for (size_t i = 0; i < registered_iov_.size(); ++i) {
      const auto* b = static_cast<const uint8_t*>(registered_iov_[i].iov_base);
      if (p >= b && p + len <= b + registered_iov_[i].iov_len) return int(i);
    }
    return -1;
  }

  void prepare(io_uring_sqe* sqe, uring_op* r) {
    const io_op& op = r->op;
    // Callers (targets) need not know buffer indices: a buffer inside a
    // registered region (the controller registers each queue pair's
    // staging) is found by address.
    const int index = op.buf_index >= 0 ? op.buf_index : registered_index(op.buf, op.len);
    const bool fixed = index >= 0 && unsigned(index) < registered_buffers_;
    switch (op.kind) {
      case io_op::read:
      case io_op::write: {
        // What io_uring_prep_{read,write}[_fixed] do: only the opcode differs.
        const bool write = op.kind == io_op::write;
        const int opcode = fixed ? (write ? IORING_OP_WRITE_FIXED : IORING_OP_READ_FIXED)
                                 : (write ? IORING_OP_WRITE : IORING_OP_READ);
        io_uring_prep_rw(opcode, sqe, op.fd, op.buf, op.len, op.offset);
        if (fixed) sqe->buf_index = uint16_t(index);
        sqe->rw_flags = op.rw_flags;
        break;
      }
      case io_op::fsync:
        io_uring_prep_fsync(sqe, op.fd, IORING_FSYNC_DATASYNC);
        break;
      case io_op::timer:
        r->timeout.tv_sec = static_cast<int64_t>(op.delay_ns / 1000000000u);
        r->timeout.tv_nsec = static_cast<long long>(op.delay_ns % 1000000000u);
        io_uring_prep_timeout(sqe, &r->timeout, 0, 0);
        break;
    }
    io_uring_sqe_set_data(sqe, r);
  }

  unsigned move_overflow_to_sq() {
    unsigned moved = 0;
    while (!overflow_.empty() && try_prepare(overflow_.front())) {
      overflow_.pop_front();
      ++moved;
    }
    return moved;
  }

  void submit_sq() {
    if (io_uring_sq_ready(&ring_) == 0) return;
    int ret = io_uring_submit(&ring_);
    if (ret < 0 && !transient_submit_error(ret)) throw error(errno_message("io_uring_submit", -ret));
  }

  unsigned reap_finished_locally() {
    op_fifo<uring_op> list;
    list.splice_back(finished_locally_);
    unsigned n = 0;
    while (uring_op* r = list.pop_front()) {
      io_callback done = r->op.done;
      int64_t res = r->result;
      release(r);
      done(res);
      ++n;
    }
    return n;
  }

  void release(uring_op* r) {
    pool_.give(r);
    --in_flight_;
  }

  // Operations in the kernel may still write into caller buffers, so the
  // ring is not closed before each has completed. Their callbacks are not
  // called: what they would call into may already be gone. Cancelling
  // first ends timers (and anything else that can wait) promptly. A device
  // that never answers must not hang the process: after drain_limit_ns the
  // ring is closed anyway (the kernel cancels what is left) and we say so.
  static constexpr uint64_t drain_limit_ns = 10'000'000'000ull;
  void drain_kernel() {
    if (in_kernel_ == 0) return;
    bool cancel_queued = false;
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) {
      io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);  // Linux 5.19+; harmless before
      io_uring_sqe_set_data(sqe, nullptr);
      cancel_queued = true;
    }
    (void)io_uring_submit(&ring_);
    // SQEs the kernel did not take will never complete; the cancel SQE,
    // queued last, is among them if any are left.
    unsigned unsubmitted = io_uring_sq_ready(&ring_);
    if (cancel_queued && unsubmitted > 0) --unsubmitted;
    unsigned pending = in_kernel_ - std::min(in_kernel_, unsubmitted);
    const uint64_t deadline = now_ns() + drain_limit_ns;
    while (pending > 0) {
      if (now_ns() > deadline) {
        std::fprintf(stderr, "deepwell: io_uring: %u operation(s) still in flight after %llu s; closing the ring\n",
                     pending, static_cast<unsigned long long>(drain_limit_ns / 1000000000ull));
        break;
      }
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{1, 0};
      int ret = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      if (ret == -EINTR || ret == -ETIME) continue;
      if (ret < 0) break;
      if (io_uring_cqe_get_data(cqe) && cqe->user_data != LIBURING_UDATA_TIMEOUT) --pending;
      io_uring_cqe_seen(&ring_, cqe);
    }
  }

  io_uring ring_{};
  unsigned depth_ = 0;
  unsigned cq_capacity_ = 0;
  std::unique_ptr<io_engine> direct_writes_;                        // writes to O_DIRECT files (top of the file)
  std::array<std::unique_ptr<io_engine>, file_write_lanes> lanes_;  // writes to buffered files, a lane per few files
  std::vector<io_engine*> write_engines_;                           // those of the above made so far
  std::vector<file_kind> fd_kind_;          // by descriptor
  buffered_mode buffered_;
  struct held {
    int fd;
    uint64_t until;
  };
  std::vector<held> held_;                  // buffered files whose writes go to their lane for now
  std::vector<uring_op*> inline_writes_;    // buffered writes queued, run at the next submit()
  std::vector<io_op*> ops_;                 // run_inline_writes' scratch
  std::vector<int64_t> results_;
  buffered_writes writer_;
  unsigned in_kernel_ = 0;  // SQEs prepared whose CQE has not been reaped yet
  unsigned in_flight_ = 0;  // queued and not reaped, wherever they are
  unsigned registered_buffers_ = 0;
  std::vector<iovec> registered_iov_;
  uint64_t generation_ = 0;  // of registered_iov_ (registered())
  op_pool<uring_op> pool_;
  op_fifo<uring_op> overflow_;          // waiting for room in the SQ / CQ
  op_fifo<uring_op> finished_locally_;  // rejected before reaching the kernel, or written inline
};

}  // namespace

buffer_registration registered_buffers(const io_engine& e) {
  const auto* u = dynamic_cast<const uring_engine*>(&e);
  return u ? u->registered() : buffer_registration{};
}

std::unique_ptr<io_engine> make_uring_engine(unsigned queue_depth) {
  return std::make_unique<uring_engine>(queue_depth ? queue_depth : 1);
}

}  // namespace deepwell::detail
