#include "deepwell/protocol/nvme.hpp"
#include "deepwell/protocol/status.hpp"

namespace deepwell {

namespace nvme {
const char* status_name(status s) {
  if (s.ok()) return "Successful Completion";
  switch (s.sct()) {
    case sct_generic:
      switch (s.sc()) {
        case 0x01: return "Invalid Command Opcode";
        case 0x02: return "Invalid Field in Command";
        case 0x03: return "Command ID Conflict";
        case 0x04: return "Data Transfer Error";
        case 0x06: return "Internal Error";
        case 0x07: return "Command Abort Requested";
        case 0x08: return "Command Aborted due to SQ Deletion";
        case 0x0B: return "Invalid Namespace or Format";
        case 0x13: return "PRP Offset Invalid";
        case 0x80: return "LBA Out of Range";
        case 0x81: return "Capacity Exceeded";
      }
      break;
    case sct_command_specific:
      if (s.sc() == 0x82) return "Attempted Write to Read Only Range";
      break;
    case sct_media:
      if (s.sc() == 0x80) return "Write Fault";
      if (s.sc() == 0x81) return "Unrecovered Read Error";
      if (s.sc() == 0x82) return "End-to-end Guard Check Error (the bytes fail their stored checksum)";
      break;
  }
  return "Unknown Status";
}
}  // namespace nvme

const char* client_code_name(client_code c) {
  switch (c) {
    case client_code::ok: return "ok";
    case client_code::nvme_error: return "NVMe error";
    case client_code::timeout: return "timeout";
    case client_code::controller_lost: return "controller lost";
    case client_code::cache_exhausted: return "cache exhausted";
    case client_code::out_of_range: return "index out of range";
    case client_code::invalid_argument: return "invalid argument";
    case client_code::read_only: return "dataset is read-only";
  }
  return "unknown";
}

std::string describe(request_status s) {
  if (s.code == client_code::nvme_error) return std::string("NVMe error: ") + nvme::status_name(s.nvme);
  return client_code_name(s.code);
}

}  // namespace deepwell
