#include "deepwell/common/output_path.hpp"

#include <sys/stat.h>

#include <cerrno>

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

}  // namespace deepwell
