#include "deepwell/common/detail/log.hpp"

#include <cstdio>

#include "deepwell/common/defaults.hpp"

namespace deepwell::detail {

bool log_enabled(log_level l) {
  std::string s;
  try {
    s = defaults::log_level();
  } catch (...) {
    s = defaults::builtin::log_level;  // a bad DEEPWELL_LOG is reported where settings are read, not here
  }
  const int at = s == "quiet" ? 0 : s == "info" ? 2 : 1;
  return int(l) <= at;
}

void log_line(log_level l, const std::string& text) {
  if (!log_enabled(l)) return;
  std::fprintf(stderr, "deepwell: %s\n", text.c_str());
}

}  // namespace deepwell::detail
