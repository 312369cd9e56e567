// Helpers of the file API's CPU tests (tests/cpu/test_files.cpp,
// test_server_trees.cpp).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepwell/files/gfs_ref.hpp"

namespace deepwell::test {

// A file's bytes read through the file API in chunks of `chunk`, to its end.
inline std::vector<uint8_t> read_all(const gfs_ref& g, const gfile& f, uint64_t chunk = 3000) {
  std::vector<uint8_t> out, buf(chunk);
  for (uint64_t off = 0;;) {
    const int64_t n = g.gread(f, off, buf.data(), buf.size());
    if (n < 0) throw std::runtime_error("gread: errno " + std::to_string(-n));
    if (n == 0) return out;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
    off += uint64_t(n);
  }
}

}  // namespace deepwell::test
