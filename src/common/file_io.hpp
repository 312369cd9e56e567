// Whole reads and writes at an offset (short transfers and EINTR taken
// care of), and a file written under a temporary name that replaces its
// target only once whole and synced. Errors name the file.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>

#include "common/unique_fd.hpp"
#include "deepwell/common/output_path.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell::detail {

// `n` bytes at `off`; the end of the file first is an error.
inline void pread_all(int fd, void* to, uint64_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<char*>(to);
  while (n) {
    const ssize_t r = ::pread(fd, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw error(errno_message("read " + path, errno));
    if (r == 0) throw error(path + ": unexpected end of file at byte " + std::to_string(off));
    p += r;
    n -= uint64_t(r);
    off += uint64_t(r);
  }
}

// `n` bytes at `off`, in pieces of at most 64 MiB, each told to `advance`
// (may be empty) for progress output.
inline void pwrite_all(int fd, const void* from, uint64_t n, uint64_t off, const std::string& path,
                       const std::function<void(uint64_t)>& advance = {}) {
  auto* p = static_cast<const char*>(from);
  while (n) {
    const ssize_t r = ::pwrite(fd, p, size_t(std::min<uint64_t>(n, 64u << 20)), off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw error(errno_message("write " + path, r < 0 ? errno : ENOSPC));
    p += r;
    n -= uint64_t(r);
    off += uint64_t(r);
    if (advance) advance(uint64_t(r));
  }
}

using ::deepwell::check_output_path;

// A file written as path + suffix, renamed over `path` by commit() once
// synced: no half-written file is ever seen under the name. Dropped without
// a commit (an error on the way), the temporary file goes.
class replacing_file {
 public:
  explicit replacing_file(std::string path, const char* suffix = ".part")
      : path_(std::move(path)), tmp_(path_ + suffix) {
    check_output_path(path_);
    check_output_path(tmp_);
    fd_.reset(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd_.get() < 0) throw error(errno_message("create " + tmp_, errno));
  }
  ~replacing_file() {
    if (!committed_) ::unlink(tmp_.c_str());
  }
  replacing_file(const replacing_file&) = delete;
  replacing_file& operator=(const replacing_file&) = delete;

  void write(const void* from, uint64_t n, uint64_t off) { pwrite_all(fd_.get(), from, n, off, tmp_); }
  void commit() {
    if (::fdatasync(fd_.get()) != 0) throw error(errno_message("sync " + tmp_, errno));
    fd_.reset();
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw error(errno_message("rename " + tmp_ + " to " + path_, errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  unique_fd fd_;
  bool committed_ = false;
};

}  // namespace deepwell::detail
