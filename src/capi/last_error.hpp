// The calling thread's last error message (dw_last_error).
#pragma once
#include <string>

namespace deepwell::capi {
std::string& last_error();
}
