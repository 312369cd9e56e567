// Command-line checks shared by the deepwell subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace deepwell::tools {

// Refuses a negative number for an unsigned option: CLI11 reads "-5" into a
// uint64_t as 2^64 - 5 (strtoull), so `--rows -5` became 18 quintillion rows.
// (CLI::NonNegativeNumber says so too, but prints the range up to DBL_MAX.)
inline const CLI::Validator not_negative(
    [](std::string& v) -> std::string {
      const auto first = v.find_first_not_of(" \t");
      return first != std::string::npos && v[first] == '-' ? v + " is negative (0 or more, please)" : "";
    },
    "NONNEGATIVE");

}  // namespace deepwell::tools
