// Built without CUDA: the GPU taxi queries say so.
#include "deepwell/common/error.hpp"
#include "taxi/taxi_run.hpp"

namespace deepwell::table {
taxi_query_report run_taxi_query_gpu(const column_file&, const taxi_query_options&) {
  throw error("this deepwell was built without CUDA: run the queries with --cpu, or rebuild with nvcc available");
}
}  // namespace deepwell::table
