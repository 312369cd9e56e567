// `deepwell settings`' report of DEEPWELL_* variables that nothing reads.
#include "settings_report.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

namespace deepwell::tools {
namespace {

// Edit distance (Levenshtein), for "did you mean" on a misspelt variable.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// The words of a variable's name after DEEPWELL_ (CACHE, BYTES).
std::vector<std::string> setting_words(const std::string& v) {
  std::vector<std::string> w;
  for (size_t at = 9, end; at < v.size(); at = end + 1) {
    end = std::min(v.find('_', at), v.size());
    w.push_back(v.substr(at, end - at));
  }
  return w;
}

}  // namespace

void report_unknown_variables(const std::vector<defaults::knob>& knobs) {
  // Read elsewhere: the server's socket (C ABI, Python), the Python package's
  // library; the tests' and the build scripts' own (docs/settings.md).
  static const char* const others[] = {"DEEPWELL_SERVER",   "DEEPWELL_LIBRARY",     "DEEPWELL_CLI",
                                       "DEEPWELL_TEST_DIR", "DEEPWELL_TEST_HOSTILE_SOCKET", "DEEPWELL_TSAN",
                                       "DEEPWELL_PYTHON",   "DEEPWELL_PYTHON_CUDA"};
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("DEEPWELL_", 0) != 0) continue;
    bool known = std::find(std::begin(others), std::end(others), name) != std::end(others);
    // The nearest setting: the one sharing the first word (CACHE in
    // DEEPWELL_CACHE_SIZE) before one sharing a later word, then the
    // fewest edits (DEEPWELL_POLERS: DEEPWELL_POLLERS).
    const std::vector<std::string> mine = setting_words(name);
    std::string nearest;
    long best = LONG_MAX;
    for (const defaults::knob& k : knobs) {
      if (k.variable == name) known = true;
      const std::vector<std::string> theirs = setting_words(k.variable);
      long score = long(edit_distance(name, k.variable));
      for (size_t i = 0; i < mine.size(); ++i)
        if (std::find(theirs.begin(), theirs.end(), mine[i]) != theirs.end()) score -= i == 0 ? 200 : 100;
      if (score < best) best = score, nearest = k.variable;
    }
    if (known) continue;
    std::printf("%s is not a deepwell setting: nothing reads it%s\n", name.c_str(),
                best <= 6 ? (" (did you mean " + nearest + "?)").c_str() : "");
  }
}

}  // namespace deepwell::tools
