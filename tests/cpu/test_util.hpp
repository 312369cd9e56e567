// Shared helpers for the CPU tests: deterministic data patterns and scale.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/pattern.hpp"

namespace deepwell::test {

inline void fill_pattern(void* dst, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  auto* p = static_cast<uint8_t*>(dst);
  for (uint64_t i = 0; i < bytes; i += 8) {
    const uint64_t w = pattern_word(offset + i, seed);
    std::memcpy(p + i, &w, bytes - i < 8 ? bytes - i : 8);
  }
}

// Index of the first byte that differs from the pattern, or -1.
inline int64_t check_pattern(const void* src, uint64_t bytes, uint64_t offset, uint64_t seed = 0) {
  std::vector<uint8_t> want(bytes);
  fill_pattern(want.data(), bytes, offset, seed);
  const auto* p = static_cast<const uint8_t*>(src);
  for (uint64_t i = 0; i < bytes; ++i)
    if (p[i] != want[i]) return int64_t(i);
  return -1;
}

// A scratch file filled with the pattern of `seed` (on disk: /var/tmp, where
// O_DIRECT works), removed at the end of the test.
class scratch_file {
 public:
  explicit scratch_file(uint64_t bytes, uint64_t seed = 11) {
    std::string tmpl = std::string(access("/var/tmp", W_OK) == 0 ? "/var/tmp" : ".") + "/deepwell-test-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    path_ = tmpl;
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), bytes - off);
      fill_pattern(buf.data(), n, off, seed);
      if (pwrite(fd, buf.data(), n, off_t(off)) != ssize_t(n)) throw std::runtime_error("pwrite failed");
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

// Work sizes shrink under ThreadSanitizer, which is ~10x slower.
#if defined(DEEPWELL_TSAN_BUILD)
constexpr uint64_t scale_div = 10;
#else
constexpr uint64_t scale_div = 1;
#endif

}  // namespace deepwell::test
