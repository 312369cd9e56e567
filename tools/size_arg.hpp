// Sizes on the command line: "4096", "512K", "64MiB", "2G", "1.5GiB" -> bytes.
#pragma once
#include <cstdint>
#include <string>

#include "deepwell/error.hpp"

namespace deepwell::tools {

inline uint64_t parse_size_arg(const std::string& s, const std::string& what) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  const double mul = unit.empty() || unit == "B"                 ? 1.0
                     : unit == "K" || unit == "k" || unit == "KiB" ? 1024.0
                     : unit == "M" || unit == "MiB"               ? 1024.0 * 1024
                     : unit == "G" || unit == "GiB"               ? 1024.0 * 1024 * 1024
                                                                  : 0;
  if (used == 0 || mul == 0 || !(v > 0))
    throw error(what + " '" + s + "' is not a size (examples: 4096, 512K, 64MiB, 2G)");
  return uint64_t(v * mul);
}

}  // namespace deepwell::tools
