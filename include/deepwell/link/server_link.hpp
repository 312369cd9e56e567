// The link to a controller in another process: `deepwell serve`, over its
// Unix socket (src/protocol/wire.hpp). Queue pairs come as memfds the client maps; the
// server checks every command against this client's grants. Caches,
// arrays and the C ABI use it as they use in_process_link.
//
// When the server goes away (it stopped, crashed or restarted), a watcher
// thread marks this link's queue pairs stopped, so waits in running
// kernels end with controller_lost within their deadline instead of
// hanging; connect again for a new link.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/link/controller_link.hpp"

namespace deepwell {

class server_link : public controller_link {
 public:
  // Connects and says hello. Throws deepwell::error naming the socket when
  // there is no server there (or another protocol version answers).
  static std::shared_ptr<server_link> connect(const std::string& socket_path, const std::string& client_name = {});

  // The namespace of a dataset the server offers, by its name or its
  // file's path. Throws deepwell::error when there is none this client may
  // see.
  virtual uint32_t lookup(const std::string& name_or_path) = 0;
  // Whether this client may write the namespace.
  virtual bool may_write(uint32_t nsid) const = 0;
  // The server's statistics (JSON text), as `deepwell stat` prints them.
  virtual std::string stats() const = 0;
  // The datasets this client may see, one per line: "nsid name rights bytes".
  virtual std::string list() const = 0;
  virtual uint32_t client_id() const = 0;
  virtual const std::string& socket_path() const = 0;
  // False once the server is gone.
  virtual bool connected() const = 0;
};

// The socket that DEEPWELL_SERVER names, or "" when it is unset.
std::string server_from_env();

}  // namespace deepwell
