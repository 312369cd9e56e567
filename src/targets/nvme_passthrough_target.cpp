// The NVMe passthrough target (deepwell/targets/nvme_passthrough.hpp).
//
// How it fits the engine model: targets complete through the calling
// poller's io_engine, whose reap() runs on that poller's thread. A
// passthrough command needs a ring set up for 128-byte SQEs (and IOPOLL,
// where used), which the engine's ring is not, so the target keeps a ring
// per engine, made by that engine's thread on its first command and used
// only by it. Its completions are collected by a timer on the engine: while
// the ring has commands in flight one timer of a tick is armed, and when it
// fires the ring is reaped (an IOPOLL ring polled) and the finished
// commands' callbacks run, inside the engine's reap(), as any target's do.
// The armed timer counts in the engine's in_flight(), so the poller waits
// on it as on any I/O, and the moments it picks for no I/O in flight
// (dropping a queue, registering staging again) have none of ours either.
// A completion waits at most a tick (5 us polled, 10 us with interrupts)
// beyond the device's own time.
#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "targets/per_engine_slots.hpp"
#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/protocol/nvme.hpp"
#include "deepwell/targets/nvme_passthrough.hpp"
#include "targets/io_engines.hpp"
#include "targets/nvme_ring.hpp"
#include "targets/split_request.hpp"

namespace deepwell {
namespace {

using detail::nvme_io;
using detail::nvme_ring;
using detail::nvme_ring_error;

constexpr unsigned ring_entries = 256;
constexpr unsigned command_chunk = 32;  // command contexts a poller allocates at a time
constexpr uint64_t polled_tick_ns = 5'000;
constexpr uint64_t interrupt_tick_ns = 10'000;
// The nvme driver's DMA alignment (4 bytes); a buffer aligned less is
// bounced by the block layer, which the controller's check spares it.
constexpr uint32_t dma_alignment = 4;
// How long the probe at open waits for one read.
constexpr uint64_t probe_timeout_ns = 10'000'000'000ull;

// An NVMe status the device completed a command with, as the errno the
// controller turns back into a status (poller.cpp).
int64_t errno_of_status(int64_t status) {
  const unsigned sct = unsigned(status >> 8) & 7, sc = unsigned(status) & 0xFF;
  if (sct == nvme::sct_generic && (sc == 0x80 || sc == 0x02)) return -EINVAL;  // LBA out of range, invalid field
  if (sct == nvme::sct_generic && sc == 0x81) return -ENOSPC;                  // capacity exceeded
  if (sct == nvme::sct_generic && sc == 0x20) return -EROFS;                   // namespace write protected
  if (sct == nvme::sct_command_specific && sc == 0x82) return -EROFS;          // write to a read-only range
  if (sct == nvme::sct_generic && sc == 0x04) return -EFAULT;                  // data transfer error
  return -EIO;
}

std::string reason_of(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return "permission denied (passthrough needs access to the /dev/ng* node, and CAP_SYS_ADMIN before Linux 6.2)";
    case EOPNOTSUPP:
    case EINVAL:
      return std::string(std::strerror(err)) + " (a kernel without NVMe uring_cmd: Linux 5.19 or later is needed)";
    default:
      return std::strerror(err);
  }
}

class nvme_target final : public target {
 public:
  nvme_target(nvme_namespace_info ns, int fd, bool writable, bool iopoll)
      : ns_(std::move(ns)), fd_(fd), size_(ns_.lbas * ns_.lba_bytes), writable_(writable), iopoll_(iopoll) {}

  ~nvme_target() override {
    for (auto& e : engines_) e.ring.reset();  // waits for what is in the kernel
    ::close(fd_);
  }

  uint64_t size() const override { return size_; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return ns_.lba_bytes; }
  uint32_t memory_alignment() const override { return dma_alignment; }
  std::string describe() const override {
    uint64_t fixed = 0, plain = 0;
    for (const auto& e : engines_) {
      fixed += e.fixed.load(std::memory_order_relaxed);
      plain += e.plain.load(std::memory_order_relaxed);
    }
    return "nvme passthrough " + ns_.char_path + " (namespace " + std::to_string(ns_.nsid) + ", " +
           std::to_string(ns_.lbas) + " LBAs of " + std::to_string(ns_.lba_bytes) + " bytes, " +
           (iopoll_ ? "polled completions (IOPOLL)" : "interrupt completions") +
           ", fixed file, " +
           (fixed_refused_.load(std::memory_order_relaxed) ? std::string("fixed buffers refused by the kernel, ")
                                                           : std::string()) +
           "fixed buffers for " + std::to_string(fixed) + " of " + std::to_string(fixed + plain) + " transfers)";
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (len == 0) return done(0);
    if (!aligned(offset, len)) return done(-EINVAL);
    // Past the namespace's end: zeros (target.hpp), never a command.
    const uint32_t inside = detail::bytes_inside(offset, len, size_);
    if (inside < len) std::memset(static_cast<uint8_t*>(buf) + inside, 0, len - inside);
    if (inside == 0) return done(len);
    issue(io, nvme::op_read, buf, inside, offset, false, len, done);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    if (!writable_) return done(-EROFS);
    if (len == 0) return done(0);
    if (!aligned(offset, len) || offset > size_ || len > size_ - offset) return done(-EINVAL);
    issue(io, nvme::op_write, const_cast<void*>(buf), len, offset, fua, len, done);
  }

  void flush(io_engine& io, io_callback done) override {
    if (!writable_) return done(0);  // nothing of ours to make durable
    issue(io, nvme::op_flush, nullptr, 0, 0, false, 0, done);
  }

 private:
  static constexpr unsigned max_engines = 64;

  // A command's context: the NVMe status turned into the target's result.
  struct per_engine;
  struct command {
    io_callback done;
    uint32_t bytes = 0;
    per_engine* st = nullptr;
    nvme_io io;  // as sent, for sending again without a fixed buffer
    command* next = nullptr;  // op_pool's link
  };

  // One poller's ring and what goes with it; touched only by that poller's
  // thread (fixed/plain are read by describe() from any).
  struct per_engine {
    io_engine* io = nullptr;
    nvme_target* owner = nullptr;
    std::unique_ptr<nvme_ring> ring;
    detail::op_pool<command> commands{command_chunk};
    bool timer_armed = false;
    uint64_t generation = 0;  // of the engine's registration the ring holds (0: none)
    bool fixed_ok = false;    // the ring's registration is the engine's current one
    std::atomic<uint64_t> fixed{0}, plain{0};
  };

  bool aligned(uint64_t offset, uint32_t len) const {
    return offset % ns_.lba_bytes == 0 && len % ns_.lba_bytes == 0;
  }

  per_engine* state_of(io_engine& io) {
    return engines_.of(io, [&](per_engine& st) {
      st.io = &io;
      st.owner = this;
    });
  }

  // The ring of `st`, made on first use; nullptr (and the errno) when it
  // cannot be made, which fails the command rather than the poller.
  nvme_ring* ring_of(per_engine& st, int& err) {
    if (st.ring) return st.ring.get();
    try {
      st.ring = std::make_unique<nvme_ring>(fd_, ring_entries, iopoll_);
    } catch (const nvme_ring_error& e) {
      err = e.err();
      detail::log_line(detail::log_level::warn, ns_.char_path + ": a poller's passthrough ring: " + e.what());
      return nullptr;
    }
    return st.ring.get();
  }

  // The engine's registered staging as the ring's fixed buffers, whenever
  // the engine's registration changed and the ring is idle (the poller
  // changes it only with no I/O in flight, our armed timer included, so
  // the ring is idle then). While they differ no command uses the ring's:
  // a registration the engine dropped may be of memory unmapped since.
  void follow_registration(per_engine& st) {
    const detail::buffer_registration reg = detail::registered_buffers(*st.io);
    if (reg.generation == st.generation) return;
    st.fixed_ok = false;
    if (st.ring->in_flight() != 0) return;
    st.generation = reg.generation;
    st.fixed_ok = reg.n != 0 && st.ring->register_buffers(reg.iov, reg.n, ns_.max_transfer);
    if (!st.fixed_ok) st.ring->unregister_buffers();
  }

  void issue(io_engine& io, uint8_t opcode, void* buf, uint32_t len, uint64_t offset, bool fua, int64_t result,
             io_callback done) {
    per_engine* st = state_of(io);
    if (!st) return done(-EMFILE);  // more pollers than a target keeps rings for
    int err = 0;
    nvme_ring* ring = ring_of(*st, err);
    if (!ring) return done(-err);
    follow_registration(*st);
    const uint64_t fixed_before = ring->fixed_sent(), plain_before = ring->plain_sent();
    const uint32_t most = ns_.max_transfer;
    const uint32_t pieces = len <= most ? 1 : (len + most - 1) / most;
    if (pieces == 1) {
      send(*st, opcode, buf, len, offset, fua, done, result);
    } else {
      // A transfer larger than one command may move: commands of at most
      // max_transfer bytes, sent at once, completing with the last.
      detail::split_request* s = detail::split_request::make(pieces, result, done);
      for (uint32_t off = 0; off < len; off += most) {
        const uint32_t n = std::min(most, len - off);
        send(*st, opcode, static_cast<uint8_t*>(buf) + off, n, offset + off, fua, s->piece(n), n);
      }
      s->issued();
    }
    st->fixed.store(st->fixed.load(std::memory_order_relaxed) + ring->fixed_sent() - fixed_before,
                    std::memory_order_relaxed);
    st->plain.store(st->plain.load(std::memory_order_relaxed) + ring->plain_sent() - plain_before,
                    std::memory_order_relaxed);
    arm(*st);
  }

  // One command; done gets `bytes` on success.
  void send(per_engine& st, uint8_t opcode, void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done,
            int64_t bytes) {
    command* c = st.commands.take();
    c->done = done;
    c->bytes = uint32_t(bytes);
    c->st = &st;
    nvme_io cmd;
    cmd.opcode = opcode;
    cmd.nsid = ns_.nsid;
    cmd.buf = buf;
    cmd.len = len;
    cmd.slba = offset / ns_.lba_bytes;
    cmd.nlb = len / ns_.lba_bytes;
    cmd.fua = fua;
    cmd.buf_index =
        len && st.fixed_ok && !fixed_refused_.load(std::memory_order_relaxed) ? st.ring->registered_index(buf, len) : -1;
    cmd.done = {&on_command, c};
    c->io = cmd;
    st.ring->send(cmd);
  }

  static void on_command(void* ctx, int64_t res) {
    command* c = static_cast<command*>(ctx);
    per_engine& st = *c->st;  // its pool: on_command runs on st's thread
    if (res == -EINVAL && c->io.buf_index >= 0) {
      // Linux 6.1's nvme driver refuses registered buffers of ours with
      // EINVAL (seen in the QEMU guest with Debian's 6.1.0-57: every
      // command, whatever its size). The command goes again with a plain
      // buffer, and the target uses none from here on.
      st.owner->refuse_fixed();
      c->io.buf_index = -1;
      return st.ring->send(c->io);
    }
    const io_callback done = c->done;
    const int64_t result = res == 0 ? int64_t(c->bytes) : res < 0 ? res : errno_of_status(res);
    st.commands.give(c);
    done(result);
  }

  void refuse_fixed() {
    if (fixed_refused_.exchange(true, std::memory_order_relaxed)) return;
    detail::log_line(detail::log_level::warn, ns_.char_path +
                                                  ": the kernel refused a passthrough command with a fixed "
                                                  "buffer (EINVAL); plain buffers from here on");
  }

  // One timer a ring while it has commands in flight (top of the file).
  void arm(per_engine& st) {
    if (st.timer_armed || st.ring->in_flight() == 0) return;
    st.timer_armed = true;
    io_op op;
    op.kind = io_op::timer;
    op.delay_ns = iopoll_ ? polled_tick_ns : interrupt_tick_ns;
    op.done = {&on_tick, &st};
    st.io->queue(op);
  }

  static void on_tick(void* ctx, int64_t) {
    per_engine& st = *static_cast<per_engine*>(ctx);
    st.timer_armed = false;
    st.ring->reap();
    st.owner->arm(st);
  }

  nvme_namespace_info ns_;
  int fd_;
  uint64_t size_;
  bool writable_;
  bool iopoll_;
  std::atomic<bool> fixed_refused_{false};
  detail::per_engine_slots<per_engine, max_engines> engines_;
};

// The block device through the file target, its description saying why.
class fallback_target final : public target {
 public:
  fallback_target(std::shared_ptr<target> inner, std::string why) : inner_(std::move(inner)), why_(std::move(why)) {}
  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override {
    return inner_->describe() + " (nvme passthrough unavailable: " + why_ + ")";
  }
  std::shared_ptr<host_mapping> map_readonly() const override { return inner_->map_readonly(); }
  std::shared_ptr<host_mapping> map_range(uint64_t o, uint64_t b) const override { return inner_->map_range(o, b); }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    inner_->read(io, buf, len, offset, done);
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inner_->write(io, buf, len, offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

 private:
  std::shared_ptr<target> inner_;
  std::string why_;
};

// Passthrough unavailable on this machine or to this process (as opposed
// to a wrong path or a read-only namespace opened for writing).
struct unavailable : error {
  using error::error;
};

// One read of LBA 0 on a ring made as the pollers' will be: what the
// kernel and the process's rights allow shows here, at open, rather than
// as failed commands later.
void probe(int fd, const nvme_namespace_info& ns, bool iopoll) {
  const size_t bytes = std::max<size_t>(ns.lba_bytes, 4096);
  std::unique_ptr<void, decltype(&std::free)> buf(std::aligned_alloc(4096, bytes), &std::free);
  if (!buf) throw std::bad_alloc();
  int64_t r;
  {
    nvme_ring ring(fd, 2, iopoll);
    nvme_io io;
    io.opcode = nvme::op_read;
    io.nsid = ns.nsid;
    io.buf = buf.get();
    io.len = ns.lba_bytes;
    io.nlb = 1;
    r = ring.run_one(io, probe_timeout_ns);
  }  // the ring waits for a command that timed out before the buffer goes
  if (r < 0) throw nvme_ring_error(int(-r), "a passthrough read of LBA 0");
  if (r > 0)
    throw error("a passthrough read of LBA 0 completed with NVMe status " +
                std::string(nvme::status_name(nvme::status(uint16_t(r & 0x7FF)))));
}

std::shared_ptr<target> open_passthrough(const nvme_namespace_info& ns, const std::string& path,
                                         const nvme_options& opts) {
  const int fd = ::open(ns.char_path.c_str(), (opts.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw unavailable(errno_message("cannot open " + ns.char_path, err) +
                      (err == ENOENT ? " (no generic NVMe device: Linux 5.13 or later makes /dev/ngXnY)" : ""));
  }
  try {
    const int id = ::ioctl(fd, NVME_IOCTL_ID);
    if (id < 0) throw unavailable(errno_message(ns.char_path + ": NVME_IOCTL_ID", errno));
    if (uint32_t(id) != ns.nsid)
      throw unavailable(ns.char_path + " is namespace " + std::to_string(id) + " but " + ns.block_path +
                        " is namespace " + std::to_string(ns.nsid) + " (multipath?)");
    bool iopoll = opts.poll == nvme_options::polling::on ||
                  (opts.poll == nvme_options::polling::automatic && ns.poll_queues);
    try {
      probe(fd, ns, iopoll);
    } catch (const nvme_ring_error& e) {
      // Poll queues announced but polling refused: interrupts still serve.
      if (!(iopoll && opts.poll == nvme_options::polling::automatic)) throw unavailable(path + ": " + reason_of(e.err()) + " (" + e.what() + ")");
      iopoll = false;
      try {
        probe(fd, ns, false);
      } catch (const nvme_ring_error& e2) {
        throw unavailable(path + ": " + reason_of(e2.err()) + " (" + e2.what() + ")");
      }
    }
    return std::make_shared<nvme_target>(ns, fd, opts.writable, iopoll);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

nvme_namespace_info checked_namespace(const std::string& path, const nvme_options& opts) {
  nvme_namespace_info ns = nvme_namespace(path);
  if (opts.writable && ns.read_only)
    throw error(path + ": namespace " + std::to_string(ns.nsid) + " is read-only; open it without writable");
  return ns;
}

}  // namespace

std::shared_ptr<target> open_nvme_passthrough(const std::string& path, const nvme_options& opts) {
  const nvme_namespace_info ns = checked_namespace(path, opts);
  try {
    return open_passthrough(ns, path, opts);
  } catch (const unavailable& e) {
    throw error(std::string(e.what()));
  }
}

std::shared_ptr<target> make_nvme_target(const std::string& path, const nvme_options& opts) {
  const nvme_namespace_info ns = checked_namespace(path, opts);
  try {
    return open_passthrough(ns, path, opts);
  } catch (const unavailable& e) {
    if (!opts.fallback) throw error(std::string(e.what()));
    const std::string why = e.what();
    file_options fo;
    fo.direct = opts.fallback_direct;
    fo.writable = opts.writable;
    auto inner = open_file_target(ns.block_path, fo);
    detail::log_line(detail::log_level::warn, "NVMe passthrough unavailable: " + why + "; serving " + ns.block_path +
                                                  " through the block layer instead");
    return std::make_shared<fallback_target>(std::move(inner), why);
  }
}

}  // namespace deepwell
