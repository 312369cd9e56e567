// Where a tool or library call may write a file it makes or replaces.
#pragma once
#include <cstdint>
#include <string>

namespace deepwell {

// Throws, naming the path and what it is, unless `path` names a regular
// file, a link (replacing it replaces the link, not what it names) or
// nothing: a write, rename or unlink there would replace or delete a device
// (`-o /dev/null` as root), wait forever on a FIFO with no reader, or take
// a directory's or socket's place.
void check_output_path(const std::string& path);

// A file written as path + suffix, synced and renamed over `path` by
// commit(): no half-written file is ever seen under the name, and a write
// that fails (a full disk, ulimit -f) leaves a file that was there as it
// was. Dropped without a commit, the temporary file goes.
class replacing_file {
 public:
  explicit replacing_file(std::string path, const char* suffix = ".part");
  ~replacing_file();
  replacing_file(const replacing_file&) = delete;
  replacing_file& operator=(const replacing_file&) = delete;

  // n bytes at offset `off` of the new file; throws naming the path.
  void write(const void* from, uint64_t n, uint64_t off);
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace deepwell
