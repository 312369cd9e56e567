// The file API's namespace: every open file is a window of 2^gfs_window_shift
// bytes (files/gfs_layout.hpp). The file service attaches a window to an
// open descriptor and detaches it when the file's last GPU user closes it;
// I/O to a detached window fails with EBADF. Reads past a file's end give
// zeros (a file shorter than the GPU thinks, shrunk behind its back, reads
// as zeros, never as another file's bytes); a Flush fsyncs every file
// written since the last one. A write-once file's writes are merged into
// what the file holds (files/gfs_layout.hpp, g_gwronce).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "deepwell/protocol/gfs_layout.hpp"
#include "deepwell/targets/target.hpp"
#include "targets/descriptor_quota.hpp"

namespace deepwell::detail {

struct window_file {
  int fd = -1;
  std::string path;                  // relative to the root, for messages
  bool writable = false;
  bool direct = false;               // O_DIRECT: a short read is the end of the file
  // g_gwronce: writes are merged into the file's bytes (a byte-wise OR).
  // Only merges of the same page must not interleave (a page's write-back
  // always covers the same range), so the lock is one of merge_stripes,
  // chosen by the write's offset; the stripe also keeps the offsets it has
  // written, so that a page's first write-back (the common case: a page
  // written in one go) is a plain pwrite, with nothing in the file to keep.
  bool write_once = false;
  static constexpr unsigned merge_stripes = 64;  // merge_write_once's index is 6 bits
  struct merge_stripe {
    std::mutex mutex;
    std::unordered_set<uint64_t> written;  // offsets of writes merged so far
  };
  std::unique_ptr<merge_stripe[]> merges;  // write-once files only (make_write_once)
  // Offsets the merges of a session's write-once files may keep, together
  // (a server's sessions: a client must not grow the server's memory
  // without bound); none: no limit. A merge past it fails with ENOSPC.
  std::shared_ptr<std::atomic<int64_t>> merge_budget;
  void make_write_once() {
    write_once = true;
    merges.reset(new merge_stripe[merge_stripes]);
  }
  // A server's session: the descriptor counts this file's descriptor was
  // taken from (the uid's share, the server's budget), given back when it
  // closes. None in a program's own session.
  std::shared_ptr<descriptor_quota> quota;
  std::atomic<bool> written{false};  // writes since the last flush
  std::atomic<int> write_error{0};   // the first failed write's errno (a background close reports it)
  ~window_file();
};

class window_target final : public target {
 public:
  window_target(uint64_t bytes, std::string root)
      : bytes_(bytes), root_(std::move(root)), writes_done_(fresh_counts()) {}

  // Returns whether the window had no file attached before.
  bool attach(uint32_t window, std::shared_ptr<window_file> f);
  // Detaches `window`; with `only`, only while that file is the one
  // attached (a close finishing after the tables' lock must not detach the
  // file of a reopen that came meanwhile).
  // Returns whether it detached a file.
  bool detach(uint32_t window, const window_file* only = nullptr);
  uint32_t windows() const { return uint32_t(bytes_ >> gfs_window_shift); }
  // Writes to `window` completed (or failed) since the target was made,
  // modulo 2^32: the other half of dataset_desc::write_counts, which
  // counts the write-backs clients submitted.
  uint32_t writes_done(uint32_t window) const {
    return window < windows() ? writes_done_.load()[window].load(std::memory_order_acquire) : 0;
  }
  // Every window detached and every count back at 0, for a new user of the
  // namespace (a server's next tree session): writes still in flight for
  // the last one count in the counts they started with, never in these.
  void reset(std::string root);

  uint64_t size() const override { return bytes_; }
  bool writable() const override { return true; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override {
    std::lock_guard<std::mutex> lock(shards_[0].mutex);
    return "file windows beneath " + root_;
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override;
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override;
  void flush(io_engine& io, io_callback done) override;

 private:
  std::shared_ptr<window_file> find(uint64_t offset) const;

  uint64_t bytes_;
  std::string root_;  // for describe(); set before the target is shared, or under every shard's lock
  // The open windows, in shards by window number, each with a lock of its
  // own: the pollers look a window up for every read and write, the file
  // service attaches and detaches windows under its tables' lock, and one
  // lock for all had the service wait behind the pollers.
  static constexpr uint32_t shards = 64;
  struct shard {
    mutable std::mutex mutex;
    std::unordered_map<uint32_t, std::shared_ptr<window_file>> windows;
  };
  shard& shard_of(uint32_t window) const { return shards_[window % shards]; }
  std::unique_ptr<shard[]> shards_{new shard[shards]};
  using counts = std::shared_ptr<std::atomic<uint32_t>[]>;
  counts fresh_counts() const { return counts(new std::atomic<uint32_t>[windows()]()); }
  std::atomic<counts> writes_done_;
};

}  // namespace deepwell::detail
