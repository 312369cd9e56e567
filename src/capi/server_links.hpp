// The C ABI's server mode: the socket dw_set_server named (else
// DEEPWELL_SERVER), and one link per socket for the process, shared by its
// arrays, stores and checkpoints (made again once its server is gone).
#pragma once
#include <memory>
#include <string>

#include "deepwell/link/server_link.hpp"

namespace deepwell::capi {

void set_server(const char* socket);  // nullptr: DEEPWELL_SERVER's again
// The socket in use, or "" for none (datasets are opened in this process).
std::string current_server();
// Throws api_error(DW_EIO) naming the socket when no server answers there.
std::shared_ptr<server_link> server_link_to(const std::string& socket);

}  // namespace deepwell::capi
