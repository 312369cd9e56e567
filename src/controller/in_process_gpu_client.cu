// A GPU client of a queue pair that a controller in this process made
// (deepwell/link/gpu_client.hpp): the link layer knows queue pairs only as
// handles; the controller layer, which makes them, turns one into a handle.
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/gpu_client.hpp"

namespace deepwell {

gpu_queue_client::gpu_queue_client(std::shared_ptr<queue_pair> qp) : gpu_queue_client(client_handle(std::move(qp))) {}

}  // namespace deepwell
