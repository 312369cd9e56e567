#include "deepwell/common/output_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/file_io.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell {

void check_output_path(const std::string& path) {
  if (path.empty()) throw error("no output file named (an empty path)");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw error(errno_message("output " + path, errno));
  }
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return;
  throw error(path + ": exists and is not a regular file (" +
              (S_ISDIR(st.st_mode)    ? "a directory"
               : S_ISCHR(st.st_mode)  ? "a character device"
               : S_ISBLK(st.st_mode)  ? "a block device"
               : S_ISFIFO(st.st_mode) ? "a FIFO"
                                      : "a socket") +
              "): not replaced; name a file");
}

replacing_file::replacing_file(std::string path, const char* suffix) : path_(std::move(path)), tmp_(path_ + suffix) {
  check_output_path(path_);
  check_output_path(tmp_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw error(errno_message("create " + tmp_, errno));
}

replacing_file::~replacing_file() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void replacing_file::write(const void* from, uint64_t n, uint64_t off) { detail::pwrite_all(fd_, from, n, off, path_); }

void replacing_file::commit() {
  if (::fdatasync(fd_) != 0) throw error(errno_message("sync " + tmp_, errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw error(errno_message("rename " + tmp_ + " to " + path_, errno));
  committed_ = true;
}

}  // namespace deepwell
