// Sizes on the command line, by the library's one rule (size_text.hpp):
// "4096", "512K", "64MiB", "1.5GiB", "1TiB" -> bytes; zero is refused (no
// option of the command line takes a size of nothing).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "deepwell/common/error.hpp"
#include "deepwell/common/size_text.hpp"

namespace deepwell::tools {

inline uint64_t parse_size_arg(const std::string& s, const std::string& what) {
  const std::optional<uint64_t> b = parse_size(s);
  if (!b || *b == 0) throw error(what + " '" + s + "' is not a size " + size_examples);
  return *b;
}

// A page size option: a size by the same rule ("4096", "16K", "64KiB"),
// rewritten to its bytes as the options are read, so that a page of
// "16K" is taken and "1MiB" is refused by the cache naming its range
// (CLI11 alone said "Could not convert"). Bytes past 32 bits are refused
// here, not cut to their low bits.
inline const CLI::Validator page_bytes(
    [](std::string& v) -> std::string {
      const std::optional<uint64_t> b = parse_size(v);
      if (!b) return "'" + v + "' is not a size " + size_examples;
      if (*b > UINT32_MAX) return v + " is far past any page size (512 to 65536 bytes)";
      v = std::to_string(*b);
      return "";
    },
    "SIZE");

}  // namespace deepwell::tools
