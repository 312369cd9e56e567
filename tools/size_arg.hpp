// Sizes on the command line, by the library's one rule (size_text.hpp):
// "4096", "512K", "64MiB", "1.5GiB", "1TiB" -> bytes; zero is refused (no
// option of the command line takes a size of nothing).
#pragma once
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

}  // namespace deepwell::tools
