// A command's output file written whole or not at all: written as
// path + ".partial", synced and renamed over `path` by commit(). A write
// that fails (a full disk, ulimit -f) leaves a file that was there as it
// was, and no partial one.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdint>
#include <string>

#include "deepwell/common/error.hpp"
#include "deepwell/common/output_path.hpp"

namespace deepwell::tools {

class replaced_output {
 public:
  explicit replaced_output(std::string path) : path_(std::move(path)), tmp_(path_ + ".partial") {
    check_output_path(path_);
    check_output_path(tmp_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw error(errno_message("create " + tmp_, errno));
  }
  ~replaced_output() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  replaced_output(const replaced_output&) = delete;
  replaced_output& operator=(const replaced_output&) = delete;

  void write(const void* from, uint64_t n) {
    const auto* p = static_cast<const char*>(from);
    while (n) {
      const ssize_t r = ::write(fd_, p, size_t(std::min<uint64_t>(n, 64u << 20)));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw error(errno_message("write " + path_, r < 0 ? errno : ENOSPC));
      p += r;
      n -= uint64_t(r);
    }
  }
  void commit() {
    if (::fdatasync(fd_) != 0) throw error(errno_message("sync " + path_, errno));
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw error(errno_message("rename " + tmp_ + " to " + path_, errno));
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace deepwell::tools
