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

// "open /data/x: No such file or directory" from an errno value.
std::string errno_message(const std::string& what, int err);

}  // namespace deepwell
