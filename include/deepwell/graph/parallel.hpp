// The graph code's parallel_for and thread_count: deepwell/detail/parallel.hpp.
#pragma once
#include "deepwell/common/detail/parallel.hpp"

namespace deepwell::graph::detail {
using deepwell::detail::parallel_for;
using deepwell::detail::thread_count;
}  // namespace deepwell::graph::detail
