// One line on stderr, "deepwell: ...", when DEEPWELL_LOG allows its level
// (defaults.hpp: quiet, warn, info). Warnings say where the library fell
// back to a slower path than the one asked for or expected (io_uring not
// available, say): a fallback is never silent. Info lines say which route
// each dataset's reads take.
#pragma once
#include <string>

namespace deepwell::detail {

enum class log_level { warn = 1, info = 2 };

bool log_enabled(log_level l);
void log_line(log_level l, const std::string& text);

}  // namespace deepwell::detail
