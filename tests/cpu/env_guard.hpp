// Sets an environment variable for a test's scope (the knobs read at start-up).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace deepwell::test {

// Restores an environment variable (or its absence) when it goes.
struct env_var_guard {
  std::string name;
  std::optional<std::string> saved;
  explicit env_var_guard(std::string n) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) saved = v;
  }
  env_var_guard(std::string n, const char* value) : env_var_guard(std::move(n)) { setenv(name.c_str(), value, 1); }
  ~env_var_guard() {
    if (saved)
      setenv(name.c_str(), saved->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

}  // namespace deepwell::test
