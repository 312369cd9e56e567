// Host-side errors: bad user input and failed set-up get an exception whose
// message names what was wrong (the file, the number, the limit).
#pragma once
#include <stdexcept>
#include <string>

namespace deepwell {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The storage is wrong (not what it should hold, corrupt, truncated) or its
// I/O failed, as opposed to a bad argument. The durable stores throw
// subclasses of it (checkpoint_data_error, kv_io_error); the C ABI reports
// it as DW_EIO.
class data_error : public error {
 public:
  using error::error;
};

// "open /data/x: No such file or directory" from an errno value.
std::string errno_message(const std::string& what, int err);

// Throws deepwell::error naming `what` and the CUDA error (its name and
// text) unless cuda_error is cudaSuccess (0). Defined in the CUDA library
// (deepwell_cuda).
void check_cuda(int cuda_error, const char* what);

}  // namespace deepwell
