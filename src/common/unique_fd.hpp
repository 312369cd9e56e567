// A file descriptor that closes itself, and the open-and-stat that readers
// of whole files start with (errors name what was being done and the path).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "deepwell/common/error.hpp"

namespace deepwell::detail {

class unique_fd {
 public:
  explicit unique_fd(int fd = -1) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

struct opened_file {
  unique_fd fd;
  struct stat st {};
};

// Storage is opened with O_NONBLOCK (a FIFO's open would wait for its other
// end), then kept only if it is a regular file or a block device: true, with
// `st` filled and O_NONBLOCK cleared; false for anything else.
inline bool keep_if_storage(int fd, struct stat& st) {
  if (::fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))) return false;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return true;
}

// `path` opened read-only and stat'ed, a regular file or a block device; an
// error reads "WHAT: open PATH: reason".
inline opened_file open_for_reading(const std::string& path, const std::string& what) {
  opened_file f{unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)), {}};
  if (f.fd.get() < 0) throw error(errno_message(what + ": open " + path, errno));
  if (!keep_if_storage(f.fd.get(), f.st)) throw error(what + ": " + path + " is not a regular file or a block device");
  return f;
}

}  // namespace deepwell::detail
