// The outcome of one request as a client sees it: either the controller's
// NVMe status, or something that happened on the client's side of the queue
// (a deadline passed, the queue or controller is gone, the cache is full).
#pragma once
#include <cstdint>
#include <string>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/nvme.hpp"

namespace deepwell {

enum class client_code : uint16_t {
  ok = 0,
  nvme_error = 1,       // the controller completed the command with an error status
  timeout = 2,          // the deadline passed before the completion arrived
  controller_lost = 3,  // the queue pair failed or the controller stopped
  cache_exhausted = 4,  // no cache slot could be had before the deadline
  out_of_range = 5,     // an element index outside the array
  invalid_argument = 6,
  read_only = 7,        // a write to a read-only dataset
};

struct request_status {
  client_code code = client_code::ok;
  nvme::status nvme{};

  DW_HD constexpr bool ok() const { return code == client_code::ok; }
  DW_HD static constexpr request_status from_nvme(nvme::status s) {
    return {s.ok() ? client_code::ok : client_code::nvme_error, s};
  }
  DW_HD static constexpr request_status client(client_code c) { return {c, nvme::status{}}; }
  // Packs into 32 bits for device-side error flags.
  DW_HD constexpr uint32_t pack() const { return uint32_t(code) << 16 | nvme.value; }
  DW_HD static constexpr request_status unpack(uint32_t v) {
    return {client_code(v >> 16), nvme::status(uint16_t(v & 0xFFFF))};
  }
};

const char* client_code_name(client_code c);
// "NVMe error: Unrecovered Read Error", "timeout", "ok": for messages.
std::string describe(request_status s);

}  // namespace deepwell
