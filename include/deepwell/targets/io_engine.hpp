// Asynchronous file I/O for one controller poller thread: io_uring (liburing)
// where the kernel allows it, else a small pool of threads doing
// preadv2/pwritev2/fdatasync (io_uring may be disabled by a seccomp profile or
// the io_uring_disabled sysctl). Completions are delivered only from reap(),
// on the thread that owns the engine, so the caller needs no locks.
#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <memory>

namespace deepwell {

// Called with the bytes transferred (>= 0) or a negative errno.
using io_callback_fn = void (*)(void* ctx, int64_t result);

struct io_callback {
  io_callback_fn fn = nullptr;
  void* ctx = nullptr;
  void operator()(int64_t result) const { fn(ctx, result); }
};

struct io_op {
  enum kind_t : uint8_t { read, write, fsync, timer } kind = read;
  int fd = -1;
  void* buf = nullptr;
  uint32_t len = 0;
  uint64_t offset = 0;
  int rw_flags = 0;        // e.g. RWF_DSYNC for a Force Unit Access write
  int buf_index = -1;      // registered buffer holding buf, or -1
  uint64_t delay_ns = 0;   // timer: completes with 0 after this long
  io_callback done;
};

enum class io_backend { automatic, uring, threads };

class io_engine {
 public:
  // Waits until no operation still touches its buffer (io_uring: in-kernel
  // operations are cancelled where possible and their completions awaited;
  // threads: the workers finish what was queued). Callbacks of operations
  // not reaped by then are never called, so drain first (in_flight() == 0)
  // when they matter.
  virtual ~io_engine() = default;
  virtual const char* name() const = 0;  // "io_uring" or "threads"
  // Queues an operation; it starts at the next submit() at the latest.
  virtual void queue(const io_op& op) = 0;
  virtual void submit() = 0;
  // Runs the callbacks of finished operations without blocking; returns how many.
  virtual unsigned reap() = 0;
  // Blocks until an operation finishes or timeout_ns passes (then reap()).
  // Submits queued operations first; returns at once when none is in flight.
  virtual void wait(uint64_t timeout_ns) = 0;
  // Operations queued or running, not yet reaped.
  virtual unsigned in_flight() const = 0;
  // Registers buffers for fixed-buffer I/O. Returns false, and stays fully
  // usable without them, when the kernel or RLIMIT_MEMLOCK does not allow it.
  virtual bool register_buffers(const iovec* iov, unsigned n) {
    (void)iov;
    (void)n;
    return false;
  }
  virtual void unregister_buffers() {}
};

// Whether io_uring can be set up in this process (probes once).
bool io_uring_available();

// The backend named by the DEEPWELL_IO environment variable ("uring",
// "threads" or "auto"), automatic if unset.
io_backend backend_from_env();

// `automatic` picks io_uring when available, else threads. Asking for
// io_uring where it is unavailable throws deepwell::error.
std::unique_ptr<io_engine> make_io_engine(io_backend backend, unsigned queue_depth = 256);

}  // namespace deepwell
