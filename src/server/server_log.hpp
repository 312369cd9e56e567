// The server logs to stderr, one line per event, with a UTC timestamp:
// systemd's journal (or whatever runs it) keeps them.
#pragma once
#include <string>

namespace deepwell::server {
void log_line(const std::string& line);
}
