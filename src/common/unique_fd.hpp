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

// `path` opened read-only and stat'ed; an error reads "WHAT: open PATH: reason".
// Only a regular file or a block device: opened with O_NONBLOCK, so that a
// FIFO (whose open waits for a writer) is refused instead of hanging.
inline opened_file open_for_reading(const std::string& path, const std::string& what) {
  opened_file f{unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)), {}};
  if (f.fd.get() < 0) throw error(errno_message(what + ": open " + path, errno));
  if (::fstat(f.fd.get(), &f.st) != 0) throw error(errno_message(what + ": stat " + path, errno));
  if (!S_ISREG(f.st.st_mode) && !S_ISBLK(f.st.st_mode))
    throw error(what + ": " + path + " is not a regular file or a block device");
  ::fcntl(f.fd.get(), F_SETFL, ::fcntl(f.fd.get(), F_GETFL) & ~O_NONBLOCK);
  return f;
}

}  // namespace deepwell::detail
