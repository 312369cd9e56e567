// errno values turned into messages for deepwell::error.
#include "deepwell/common/error.hpp"

#include <system_error>

namespace deepwell {

std::string errno_message(const std::string& what, int err) {
  // generic_category() gives strerror's text without strerror_r's
  // XSI-versus-GNU signature trap, and is thread-safe.
  return what + ": " + std::generic_category().message(err);
}

}  // namespace deepwell
