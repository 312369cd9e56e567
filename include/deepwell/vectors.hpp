// Vector search over embeddings on storage (docs/vectors.md): the index
// format, its build, its search with CPU clients; gpu_search.hpp (CUDA
// code) adds the GPU search.
#pragma once
#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/data.hpp"
#include "deepwell/vectors/index.hpp"
#include "deepwell/vectors/search.hpp"
