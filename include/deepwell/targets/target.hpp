// Targets: where a dataset's bytes live. A file (regular file or block
// device, buffered or O_DIRECT, optionally starting at a byte offset inside
// the file), host memory, or a fault-injecting wrapper around another target
// for tests. All I/O is asynchronous through the calling poller's io_engine;
// a target may also complete at once (host memory), calling `done` before
// returning.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/common/host_mapping.hpp"
#include "deepwell/targets/io_engine.hpp"

namespace deepwell {

// A target must outlive the requests it has in flight (their completions
// call back into it).
class target {
 public:
  virtual ~target() = default;
  // Bytes in the dataset. Reads past it (inside the last partial block) give zeros.
  virtual uint64_t size() const = 0;
  virtual bool writable() const = 0;
  // Offset and length alignment every request must have (O_DIRECT: from
  // statx(STATX_DIOALIGN)); 1 when there is none.
  virtual uint32_t io_alignment() const = 0;
  // Buffer address alignment every request must have; 1 when there is none.
  virtual uint32_t memory_alignment() const = 0;
  // "file /data/x (O_DIRECT, offset 4096)": for messages.
  virtual std::string describe() const = 0;
  // Host memory holding the whole dataset, when there is such (host-memory
  // targets): lets readers bypass the controller. nullptr otherwise.
  virtual void* host_pointer() const { return nullptr; }
  // A read-only mapping of the dataset, where the target can make one (files
  // and block devices); nullptr otherwise.
  virtual std::shared_ptr<host_mapping> map_readonly() const { return nullptr; }
  // The same of [offset, offset + bytes) only (a section's own mapping, so
  // that sections of one file never share a registered page range).
  virtual std::shared_ptr<host_mapping> map_range(uint64_t /*offset*/, uint64_t /*bytes*/) const { return nullptr; }
  // The dataset's arena of the server's host-memory tier (host_tier.hpp,
  // tier_layout.hpp), for readers that copy resident pages from it: a
  // read-only view in this process, and the memfd another process maps.
  // nullptr and -1 where the target reads through no tier.
  virtual std::shared_ptr<host_mapping> map_tier() const { return nullptr; }
  virtual int tier_fd() const { return -1; }

  // [offset, offset + len) of the dataset. Results: len on success, or a
  // negative errno (-EIO for a short transfer that is not at the end of
  // the dataset, -ENOSPC, ...). Reads that run past size() succeed, with the
  // bytes past the end zeroed.
  virtual void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) = 0;
  virtual void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua,
                     io_callback done) = 0;
  // Makes completed writes durable; reports write errors that buffered
  // writes only surface at fsync.
  virtual void flush(io_engine& io, io_callback done) = 0;
};

struct file_options {
  bool direct = false;      // O_DIRECT
  bool writable = false;    // O_RDWR instead of O_RDONLY
  bool create = false;      // create (with create_size bytes past `offset`) if missing
  uint64_t create_size = 0;
  uint64_t offset = 0;      // the dataset starts here inside the file (a header before it)
  uint64_t length = 0;      // dataset bytes; 0: up to the end of the file / device
};

// Opens a regular file or block device. Throws deepwell::error naming the
// path and the reason (missing file, offset past the end, O_DIRECT offset
// not aligned to the device's alignment, ...).
std::shared_ptr<target> open_file_target(const std::string& path, const file_options& opts = {});

// [offset, offset + length) of `inner` as a target of its own (a section of
// a file, a region of a store), writable only if `writable` and inner is.
// Reads past its end give zeros, never the bytes after it in inner (a
// section's last partial block is checked as its writers padded it). Its
// mapping is its own range of inner's (map_range). Throws deepwell::error
// when the range is not inside inner or not aligned to inner's io_alignment.
std::shared_ptr<target> make_slice_target(std::shared_ptr<target> inner, uint64_t offset, uint64_t length,
                                          bool writable);

// Host memory owned by the target (zeroed), or caller-owned memory that must
// outlive the target.
std::shared_ptr<target> make_host_memory_target(uint64_t bytes, bool writable = true);
std::shared_ptr<target> wrap_host_memory(void* data, uint64_t bytes, bool writable);

// Fault injection for tests: requests overlapping a rule's byte range fail,
// come back short, or are delayed. A rule fires `count` times (0: always).
// fail_flush matches every flush, whatever its range. short_read and
// short_write move half the bytes and report that short count (result <
// len): the fault target does not retry, the caller must treat it as an
// error. A delay holds a read or write back by delay_ns (a timer on the
// caller's engine), then the other rules apply to it; delay_write holds back
// writes only. raise throws std::bad_alloc from the read or write call, as
// an allocation (or an io engine) inside the controller might.
struct fault_rule {
  enum kind_t { fail_read, fail_write, fail_flush, short_read, short_write, delay, delay_write, raise } kind = fail_read;
  uint64_t offset = 0;
  uint64_t length = UINT64_MAX;
  int error = 5;            // errno for fail_* (default EIO)
  uint64_t delay_ns = 0;    // for delay: applies to reads and writes
  uint32_t count = 0;
};

class fault_target : public target {
 public:
  virtual void add_rule(const fault_rule& r) = 0;
  virtual void clear_rules() = 0;
  // Requests each rule has fired on so far.
  virtual uint64_t fired() const = 0;
};

// host_pointer() of the result is nullptr even over host memory, so that no
// reader bypasses the faults.
std::shared_ptr<fault_target> make_fault_target(std::shared_ptr<target> inner);

// Moves no data; every request succeeds at once. Measures the controller's
// own cost per request.
std::shared_ptr<target> make_null_target(uint64_t bytes);

}  // namespace deepwell
