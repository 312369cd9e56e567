// Shared helpers for the CPU tests: the common data pattern and scratch
// files (tests/common), and work sizes.
#pragma once
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/pattern.hpp"
#include "../common/scratch_file.hpp"
#include "deepwell/common/error.hpp"

namespace deepwell::test {

// Work sizes shrink under ThreadSanitizer, which is ~10x slower.
#if defined(DEEPWELL_TSAN_BUILD)
constexpr uint64_t scale_div = 10;
#else
constexpr uint64_t scale_div = 1;
#endif

// A whole file's bytes, and a file made of these bytes (the integrity
// sweeps damage a copy and write it back).
inline std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream s(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(s), {});
}
inline void write_all(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream s(path, std::ios::binary | std::ios::trunc);
  s.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// f() throws a deepwell::error whose message has `needle` in it.
template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const deepwell::error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace deepwell::test
