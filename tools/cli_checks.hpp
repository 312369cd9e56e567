// Command-line checks shared by the deepwell subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/common/output_path.hpp"

namespace deepwell::tools {

// An output checked before the work that makes it: a place a file may go
// (check_output_path), and not the input itself (`graph convert e.txt -o
// e.txt` replaced the edge list it had read with the graph).
inline void check_output_of(const std::string& input, const std::string& output) {
  check_output_path(output);
  struct stat a {}, b {};
  if (::stat(input.c_str(), &a) == 0 && ::stat(output.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
      a.st_ino == b.st_ino)
    throw error(output + " is the input file too: name another output");
}

// A subcommand's body, its errors reported as "WHO: what went wrong" on
// stderr with exit status 2 (the CLI's status for a run that failed).
template <class F>
int errors_reported(const char* who, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who, e.what());
    return 2;
  }
}

// Refuses a negative number for an unsigned option: CLI11 reads "-5" into a
// uint64_t as 2^64 - 5 (strtoull), so `--rows -5` became 18 quintillion rows.
// (CLI::NonNegativeNumber says so too, but prints the range up to DBL_MAX.)
// A whole number past 2^63 - 1 is refused too: CLI11 clamps it into a
// signed option (--source 99999999999999999999 was node 2^63 - 1).
inline const CLI::Validator not_negative(
    [](std::string& v) -> std::string {
      const auto first = v.find_first_not_of(" \t");
      if (first != std::string::npos && v[first] == '-') return v + " is negative (0 or more, please)";
      const auto last = v.find_last_not_of(" \t");
      if (first != std::string::npos && v.find_first_not_of("0123456789", first) > last) {
        errno = 0;
        const unsigned long long n = std::strtoull(v.c_str() + first, nullptr, 10);
        if (errno == ERANGE || n > uint64_t(INT64_MAX)) return v + " is too large (at most 2^63 - 1)";
      }
      return "";
    },
    "NONNEGATIVE");

// Walks the command words of argv down the subcommand tree and names an
// unknown or missing command, with the valid ones: CLI11 says only "A
// subcommand is required" or "The following arguments were not expected".
// "" when the words are fine (or an option comes first: CLI11 judges those,
// --help and --version included).
inline std::string subcommand_problem(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = app.get_name();
  for (int i = 1;; ++i) {
    std::vector<CLI::App*> subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return "";
    std::string names;
    for (CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
    const bool required = cur->get_require_subcommand_min() > 0;
    if (i >= argc)
      return required ? path + ": a command is required: " + names + " (" + path + " --help says what each does)"
                      : "";
    const std::string word = argv[i];
    if (!word.empty() && word[0] == '-') return "";
    CLI::App* next = nullptr;
    for (CLI::App* s : subs)
      if (s->check_name(word)) next = s;
    if (!next)
      return required ? path + ": '" + word + "' is not a command; the commands are: " + names + " (" + path +
                            " --help says what each does)"
                      : "";
    cur = next;
    path += " " + word;
  }
}

}  // namespace deepwell::tools
