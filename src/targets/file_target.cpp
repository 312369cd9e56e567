// A dataset stored in a regular file or block device, from a byte offset
// inside it (a header may come first), read and written through the
// calling poller's io_engine, buffered or with O_DIRECT.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/unique_fd.hpp"
#include "deepwell/common/detail/staging_copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/target.hpp"
#include "direct_io_alignment.hpp"
#include "request_cache.hpp"

namespace deepwell {
namespace {

class file_target;

// One read or write in flight: enough to resubmit the rest after a short
// transfer and to zero what lies past the dataset's end.
struct file_request {
  const file_target* target = nullptr;
  io_engine* io = nullptr;
  char* buf = nullptr;
  uint64_t offset = 0;      // in the dataset
  uint32_t len = 0;         // as asked; what success reports
  uint32_t valid = 0;       // bytes of [offset, offset + len) inside the dataset
  uint32_t io_len = 0;      // bytes to transfer: `valid`, rounded up to the alignment for O_DIRECT
  uint32_t done_bytes = 0;  // transferred so far
  bool is_write = false;
  int rw_flags = 0;
  io_callback done;
  file_request* next = nullptr;
};

using request_pool = detail::request_cache<file_request>;

struct file_layout {
  uint64_t data_offset = 0;  // where the dataset starts in the file
  uint64_t size = 0;         // dataset bytes
  uint32_t io_alignment = 1;
  uint32_t memory_alignment = 1;
};

// The file descriptor is closed when the target goes, so the target must
// outlive every request it has in flight (the controller drains first).
class file_target final : public target {
 public:
  file_target(std::string path, int fd, const file_options& opts, const file_layout& layout)
      : path_(std::move(path)), fd_(fd), direct_(opts.direct), writable_(opts.writable), layout_(layout) {}

  ~file_target() override { ::close(fd_); }

  uint64_t size() const override { return layout_.size; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return layout_.io_alignment; }
  uint32_t memory_alignment() const override { return layout_.memory_alignment; }

  // None for a file opened with O_DIRECT: a mapping reads through the page
  // cache its opener asked to bypass, so its misses go to the controller.
  std::shared_ptr<host_mapping> map_readonly() const override {
    if (direct_) return nullptr;
    return map_file_readonly(fd_, layout_.data_offset, layout_.size);
  }
  std::shared_ptr<host_mapping> map_range(uint64_t offset, uint64_t bytes) const override {
    if (direct_ || offset > layout_.size || bytes > layout_.size - offset) return nullptr;
    return map_file_readonly(fd_, layout_.data_offset + offset, bytes);
  }

  std::string describe() const override {
    std::string d = "file " + path_ + " (" + (direct_ ? "O_DIRECT" : "buffered");
    if (!writable_) d += ", read-only";
    if (layout_.data_offset) d += ", offset " + std::to_string(layout_.data_offset);
    return d + ")";
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (len == 0) return done(0);
    if (offset + len < offset || !aligned(buf, len, offset)) return done(-EINVAL);
    const uint64_t size = layout_.size;
    const uint32_t valid = offset < size ? static_cast<uint32_t>(std::min<uint64_t>(len, size - offset)) : 0;
    if (valid == 0) {  // wholly past the end: nothing to read
      std::memset(buf, 0, len);
      return done(len);
    }
    file_request* r = request_pool::take();
    r->target = this;
    r->io = &io;
    r->buf = static_cast<char*>(buf);
    r->offset = offset;
    r->len = len;
    r->valid = valid;
    // O_DIRECT moves whole aligned blocks: read the last one in full and
    // zero the part past the dataset's end afterwards. (`len` is aligned,
    // so the rounded length never exceeds it.)
    r->io_len = direct_ ? round_up(valid, layout_.io_alignment) : valid;
    r->done_bytes = 0;
    r->is_write = false;
    r->rw_flags = 0;
    r->done = done;
    issue(r);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua,
             io_callback done) override {
    if (!writable_) return done(-EROFS);
    if (len == 0) return done(0);
    // The controller checks ranges first; this is a second line of defence
    // against writing over whatever follows the dataset in the file.
    if (offset > layout_.size || len > layout_.size - offset || !aligned(buf, len, offset)) return done(-EINVAL);
    file_request* r = request_pool::take();
    r->target = this;
    r->io = &io;
    r->buf = static_cast<char*>(const_cast<void*>(buf));
    r->offset = offset;
    r->len = len;
    r->valid = len;
    r->io_len = len;
    r->done_bytes = 0;
    r->is_write = true;
    r->rw_flags = fua ? RWF_DSYNC : 0;
    r->done = done;
    issue(r);
  }

  void flush(io_engine& io, io_callback done) override {
    io_op op;
    op.kind = io_op::fsync;
    op.fd = fd_;
    op.done = done;
    io.queue(op);
  }

 private:
  static uint32_t round_up(uint32_t v, uint32_t align) {
    return static_cast<uint32_t>((uint64_t(v) + align - 1) / align * align);
  }

  // O_DIRECT's rules, checked here so a misaligned request fails cleanly
  // with -EINVAL instead of reaching the kernel.
  bool aligned(const void* buf, uint32_t len, uint64_t offset) const {
    if (!direct_) return true;
    return offset % layout_.io_alignment == 0 && len % layout_.io_alignment == 0 &&
           reinterpret_cast<uintptr_t>(buf) % layout_.memory_alignment == 0;
  }

  // Starts (or continues, after a short transfer) the request's I/O.
  void issue(file_request* r) const {
    io_op op;
    op.kind = r->is_write ? io_op::write : io_op::read;
    op.fd = fd_;
    op.buf = r->buf + r->done_bytes;
    op.len = r->io_len - r->done_bytes;
    op.offset = layout_.data_offset + r->offset + r->done_bytes;
    op.rw_flags = r->rw_flags;
    op.done = {&on_io_done, r};
    r->io->queue(op);
  }

  static void on_io_done(void* ctx, int64_t result) {
    auto* r = static_cast<file_request*>(ctx);
    const file_target* t = r->target;
    if (result < 0) return finish(r, result);
    // Nothing transferred before the dataset's end: the file is shorter
    // than the dataset (truncated behind our back) or the device failed.
    if (result == 0) return finish(r, -EIO);
    r->done_bytes += static_cast<uint32_t>(result);
    if (r->done_bytes >= r->valid) {
      // The file may go on past the dataset (or O_DIRECT read a whole
      // block): what lies past the dataset's end must not reach the reader.
      if (!r->is_write && r->valid < r->len) std::memset(r->buf + r->valid, 0, r->len - r->valid);
      // The kernel's copy left the lines in some core's caches: with
      // DEEPWELL_STAGING_STORES=demote, push them toward the shared cache
      // before the GPU reads them.
      if (!r->is_write && detail::default_staging_stores() == detail::staging_stores::demote)
        detail::demote_lines(r->buf, r->len);
      return finish(r, r->len);
    }
    // A short transfer: go on with the rest, if O_DIRECT can still take it.
    if (t->direct_ && r->done_bytes % t->layout_.io_alignment != 0) return finish(r, -EIO);
    t->issue(r);
  }

  static void finish(file_request* r, int64_t result) {
    io_callback done = r->done;
    request_pool::give(r);
    done(result);
  }

  std::string path_;
  int fd_;
  bool direct_;
  bool writable_;
  file_layout layout_;
};

// Closes the descriptor unless released: open_file_target throws midway.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

uint64_t file_bytes(int fd, const struct stat& st, const std::string& path) {
  if (!S_ISBLK(st.st_mode)) return static_cast<uint64_t>(st.st_size);
  uint64_t bytes = 0;
  if (ioctl(fd, BLKGETSIZE64, &bytes) != 0) throw error(errno_message("BLKGETSIZE64 on " + path, errno));
  return bytes;
}

// A new file's name is durable only once its directory is: fsync it.
void sync_parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0) throw error(errno_message("open directory " + dir + " (to make the new file " + path + " durable)", errno));
  if (fsync(d.fd) != 0) throw error(errno_message("fsync of directory " + dir, errno));
}

}  // namespace

std::shared_ptr<target> open_file_target(const std::string& path, const file_options& opts) {
  if (opts.create && !opts.writable)
    throw error("cannot create " + path + " read-only: file_options.create needs writable");
  // O_NONBLOCK until the type is known: a FIFO's open would wait for its
  // other end.
  int flags = (opts.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK;
  if (opts.direct) flags |= O_DIRECT;
  fd_guard fd{::open(path.c_str(), flags, 0644)};
  bool created = false;
  if (fd.fd < 0 && errno == ENOENT && opts.create) {
    fd.fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL, 0644);
    created = fd.fd >= 0;
    if (fd.fd < 0 && errno == EEXIST) fd.fd = ::open(path.c_str(), flags, 0644);  // another process made it
  }
  if (fd.fd < 0) {
    int err = errno;
    if (opts.direct && err == EINVAL)
      throw error("O_DIRECT is not supported on the file system of " + path + " (open it without direct I/O)");
    throw error(errno_message("open " + path, err));
  }

  struct stat st {};
  if (!detail::keep_if_storage(fd.fd, st)) throw error(path + " is neither a regular file nor a block device");
  const bool block_device = S_ISBLK(st.st_mode);

  uint64_t file_size = file_bytes(fd.fd, st, path);
  if (opts.create && !block_device) {
    if (opts.create_size > UINT64_MAX - opts.offset)
      throw error("create size " + std::to_string(opts.create_size) + " at offset " + std::to_string(opts.offset) +
                  " of " + path + " is too large");
    const uint64_t wanted = opts.offset + opts.create_size;
    if (file_size < wanted) {
      // A file we create for direct I/O gets its blocks now: an O_DIRECT
      // write into a hole holds ext4's inode lock exclusively until it lands
      // (one write at a time however many threads issue them), a write into
      // allocated blocks takes it shared. Where the file system cannot
      // allocate (or has no room), the file is sized sparse as before.
      const bool allocated =
          created && opts.direct &&
          fallocate(fd.fd, 0, static_cast<off_t>(file_size), static_cast<off_t>(wanted - file_size)) == 0;
      if (!allocated && ftruncate(fd.fd, static_cast<off_t>(wanted)) != 0)
        throw error(errno_message("sizing " + path + " to " + std::to_string(wanted) + " bytes", errno));
      file_size = wanted;
    }
  }
  if (created) {
    // Its size and its name must survive a crash as much as the data the
    // controller's Flush makes durable later.
    if (fsync(fd.fd) != 0) throw error(errno_message("fsync of new file " + path, errno));
    sync_parent_directory(path);
  }

  file_layout layout;
  layout.data_offset = opts.offset;
  if (opts.offset > file_size)
    throw error("data offset " + std::to_string(opts.offset) + " of " + path + " is past its end (size " +
                std::to_string(file_size) + ")");
  if (opts.length > file_size - opts.offset)
    throw error("dataset of " + std::to_string(opts.length) + " bytes at offset " + std::to_string(opts.offset) +
                " runs past the end of " + path + " (size " + std::to_string(file_size) + ")");
  layout.size = opts.length ? opts.length : file_size - opts.offset;

  if (opts.direct) {
    auto align = detail::direct_io_alignment_of(fd.fd, block_device);
    if (opts.offset % align.offset != 0)
      throw error("data offset " + std::to_string(opts.offset) + " of " + path +
                  " is not a multiple of its direct-I/O alignment " + std::to_string(align.offset));
    layout.io_alignment = align.offset;
    layout.memory_alignment = align.memory;
  }
  return std::make_shared<file_target>(path, fd.release(), opts, layout);
}

}  // namespace deepwell
