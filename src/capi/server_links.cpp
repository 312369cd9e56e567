#include "server_links.hpp"

#include <map>
#include <mutex>

#include "deepwell/c/deepwell.h"
#include "guarded.hpp"

namespace deepwell::capi {

namespace {
std::mutex server_mutex;
std::string server_socket;  // set_server's; unset: DEEPWELL_SERVER's
bool server_socket_set = false;
std::map<std::string, std::shared_ptr<server_link>> server_links;
}  // namespace

void set_server(const char* socket) {
  std::lock_guard<std::mutex> lock(server_mutex);
  server_socket_set = socket != nullptr;
  server_socket = socket ? socket : "";
}

std::string current_server() {
  std::lock_guard<std::mutex> lock(server_mutex);
  return server_socket_set ? server_socket : server_from_env();
}

std::shared_ptr<server_link> server_link_to(const std::string& socket) {
  std::lock_guard<std::mutex> lock(server_mutex);
  auto& l = server_links[socket];
  if (!l || !l->connected()) {
    try {
      l = server_link::connect(socket);
    } catch (const error& e) {
      throw api_error(DW_EIO, e.what());
    }
  }
  return l;
}

}  // namespace deepwell::capi
