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

using ::deepwell::replacing_file;

}  // namespace deepwell::detail
