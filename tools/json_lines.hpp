// The subcommands' --json output: one JSON object a run, appended as a line
// to the file the user named, so that repeated runs build one record.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "deepwell/common/error.hpp"

namespace deepwell::tools {

// --json's file, checked when the options are read: a run of minutes must
// not end in "cannot append". It may be there (a file to append to, or
// /dev/stdout) or be made in a directory that lets us.
inline const CLI::Validator appendable(
    [](std::string& path) -> std::string {
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return path + " is a directory, not a file to append JSON lines to";
        if (::access(path.c_str(), W_OK) != 0) return path + ": cannot append to it (" + std::strerror(errno) + ")";
        return "";
      }
      const auto slash = path.find_last_of('/');
      const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
      if (::access(dir.c_str(), W_OK | X_OK) != 0)
        return path + ": cannot make it in " + dir + " (" + std::strerror(errno) + ")";
      return "";
    },
    "FILE");

inline void append_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::app);
  if (!out) throw error("cannot append to " + path);
  out << j.dump() << "\n";
}

// A run's "checked" field: "equal" or "different" when the run was checked
// against a plain computation, null when it was not.
inline nlohmann::json checked_json(bool checked, bool equal) {
  return checked ? nlohmann::json(equal ? "equal" : "different") : nlohmann::json(nullptr);
}

}  // namespace deepwell::tools
