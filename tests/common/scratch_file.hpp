// Scratch data of every test suite (host code only): files on disk, empty or
// filled with the test pattern and removed when the test ends, plain reads
// of them, and host-memory targets filled with the pattern.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepwell/targets/target.hpp"
#include "pattern.hpp"

namespace deepwell::test {

// A disk-backed directory: /tmp may be tmpfs, where O_DIRECT may not work.
// DEEPWELL_TEST_DIR names another.
inline std::string scratch_dir() {
  if (const char* d = std::getenv("DEEPWELL_TEST_DIR")) return d;
  if (access("/var/tmp", W_OK) == 0) return "/var/tmp";
  return ".";
}

// A file of its own in scratch_dir() for the test's lifetime: empty, named
// with a suffix (a file name the test will write, "graph.dwg"), or `bytes`
// of the pattern of `seed`. A test that wants the path free (for the code
// under test to create) unlinks it first; the destructor removes it either way.
class scratch_file {
 public:
  scratch_file() : scratch_file(std::string()) {}
  explicit scratch_file(const std::string& suffix) {
    std::string tmpl = scratch_dir() + "/deepwell-test-XXXXXX" + (suffix.empty() ? "" : "-" + suffix);
    const int fd = mkstemps(tmpl.data(), suffix.empty() ? 0 : int(suffix.size() + 1));
    if (fd < 0) throw std::runtime_error("mkstemp in " + scratch_dir() + " failed");
    // Readable by all, as a dataset file usually is: a root server's tests
    // grant it to other uids, and the server refuses to read for anyone a
    // file that they could not read themselves.
    ::fchmod(fd, 0644);
    ::close(fd);
    path_ = tmpl;
  }
  scratch_file(uint64_t bytes, uint64_t seed) : scratch_file() {
    const int fd = ::open(path_.c_str(), O_WRONLY);
    if (fd < 0) throw std::runtime_error("open of " + path_ + " failed");
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), bytes - off);
      fill_pattern(buf.data(), n, off, seed);
      if (pwrite(fd, buf.data(), n, off_t(off)) != ssize_t(n)) {
        ::close(fd);
        throw std::runtime_error("pwrite to " + path_ + " failed");
      }
    }
    ::close(fd);
  }
  ~scratch_file() { ::unlink(path_.c_str()); }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The first `bytes` bytes (whole words) of a file as words, with a plain
// pread (past the page cache under test); throws if they cannot be read.
inline std::vector<uint64_t> file_words(const std::string& path, uint64_t bytes) {
  std::vector<uint64_t> words(bytes / 8);
  const int fd = ::open(path.c_str(), O_RDONLY);
  const uint64_t n = words.size() * 8;
  const bool ok = fd >= 0 && pread(fd, words.data(), n, 0) == ssize_t(n);
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("pread of " + path + " failed");
  return words;
}

// A host-memory target of `bytes` holding the pattern of `seed`.
inline std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable, uint64_t seed) {
  auto t = make_host_memory_target(bytes, writable);
  fill_pattern(t->host_pointer(), bytes, 0, seed);
  return t;
}

}  // namespace deepwell::test
