// The subcommands' --json output: one JSON object a run, appended as a line
// to the file the user named, so that repeated runs build one record.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "deepwell/common/error.hpp"

namespace deepwell::tools {

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
