// `deepwell settings`: names the DEEPWELL_* variables in the environment
// that nothing reads, each with the nearest setting's name ("did you mean
// DEEPWELL_CACHE_BYTES?"): a misspelt setting is otherwise ignored without
// a word.
#pragma once
#include <vector>

#include "deepwell/common/defaults.hpp"

namespace deepwell::tools {
void report_unknown_variables(const std::vector<defaults::knob>& knobs);
}  // namespace deepwell::tools
