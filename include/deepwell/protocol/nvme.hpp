// NVMe wire formats: 64-byte submission entries, 16-byte completion entries,
// opcodes and status codes (NVM Express Base Specification 2.0, sections 4.2,
// 4.6 and 4.6.1.2; NVM Command Set 1.0). Shared by clients (CPU and GPU) and
// the controller, so everything here is trivially copyable and __host__ __device__.
#pragma once
#include <cstddef>
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell::nvme {

// I/O command opcodes (NVM command set) plus Identify, which deepwell also
// accepts on I/O queues (there is no separate admin queue).
enum opcode : uint8_t {
  op_flush = 0x00,
  op_write = 0x01,
  op_read = 0x02,
  op_identify = 0x06,
};

// A submission queue entry: 16 dwords.
struct command {
  uint8_t opcode;
  uint8_t flags;  // fused operation (bits 1:0), PSDT (bits 7:6): must be 0
  uint16_t cid;   // command identifier, unique among outstanding commands of the queue
  uint32_t nsid;  // namespace id, 1-based
  uint32_t cdw2;
  uint32_t cdw3;
  uint64_t mptr;
  uint64_t prp1;  // deepwell: byte offset of the data buffer inside the queue pair's staging region
  uint64_t prp2;  // must be 0 (the staging region is contiguous)
  uint32_t cdw10;  // Read/Write: starting LBA, low; Identify: CNS
  uint32_t cdw11;  // Read/Write: starting LBA, high
  uint32_t cdw12;  // Read/Write: number of logical blocks, 0-based (bits 15:0); FUA (bit 30)
  uint32_t cdw13;
  uint32_t cdw14;
  uint32_t cdw15;
};
static_assert(sizeof(command) == 64, "NVMe submission entries are 64 bytes");

// A completion queue entry: 4 dwords. dw3 carries the phase tag and the
// status; the controller writes it last, with release ordering.
struct completion {
  uint32_t dw0;      // command specific
  uint32_t dw1;      // command specific
  uint16_t sq_head;  // how far the controller has fetched the submission queue
  uint16_t sq_id;
  uint32_t dw3;  // bits 15:0 cid, bit 16 phase tag, bits 31:17 status field
};
static_assert(sizeof(completion) == 16, "NVMe completion entries are 16 bytes");

constexpr uint32_t cdw12_nlb_mask = 0xFFFFu;
constexpr uint32_t cdw12_fua = 1u << 30;

// Status code types (SCT).
enum status_type : uint8_t {
  sct_generic = 0,
  sct_command_specific = 1,
  sct_media = 2,
};

// The 15-bit status field of a completion without its phase bit: SC in bits
// 7:0, SCT in bits 10:8, DNR in bit 14.
struct status {
  uint16_t value = 0;

  constexpr status() = default;
  DW_HD constexpr explicit status(uint16_t v) : value(v) {}
  DW_HD constexpr status(status_type sct, uint8_t sc, bool dnr = true)
      : value(static_cast<uint16_t>(sc | (uint16_t(sct) << 8) | (dnr && (sc | sct) ? 1u << 14 : 0u))) {}
  DW_HD constexpr uint8_t sc() const { return uint8_t(value & 0xFF); }
  DW_HD constexpr uint8_t sct() const { return uint8_t((value >> 8) & 0x7); }
  DW_HD constexpr bool dnr() const { return (value >> 14) & 1; }
  DW_HD constexpr bool ok() const { return (value & 0x7FF) == 0; }
  DW_HD constexpr bool same_code(status o) const { return (value & 0x7FF) == (o.value & 0x7FF); }
  DW_HD constexpr bool operator==(status o) const { return same_code(o); }
};

// The status codes deepwell's controller returns.
namespace sc {
constexpr status success{sct_generic, 0x00};
constexpr status invalid_opcode{sct_generic, 0x01};
constexpr status invalid_field{sct_generic, 0x02};
constexpr status cid_conflict{sct_generic, 0x03};
constexpr status data_transfer_error{sct_generic, 0x04};
constexpr status internal_error{sct_generic, 0x06};
constexpr status abort_requested{sct_generic, 0x07};
constexpr status aborted_sq_deleted{sct_generic, 0x08};
constexpr status invalid_namespace{sct_generic, 0x0B};
constexpr status prp_offset_invalid{sct_generic, 0x13};
constexpr status lba_out_of_range{sct_generic, 0x80};
constexpr status capacity_exceeded{sct_generic, 0x81};
constexpr status write_to_read_only{sct_command_specific, 0x82};
constexpr status write_fault{sct_media, 0x80};
constexpr status unrecovered_read_error{sct_media, 0x81};
// The stored checksum of a block does not match its bytes (checksummed_target.hpp).
constexpr status guard_check_error{sct_media, 0x82};
}  // namespace sc

// Names for messages and tests ("LBA Out of Range").
const char* status_name(status s);

DW_HD constexpr uint16_t cqe_cid(uint32_t dw3) { return uint16_t(dw3 & 0xFFFF); }
DW_HD constexpr uint32_t cqe_phase(uint32_t dw3) { return (dw3 >> 16) & 1; }
DW_HD constexpr status cqe_status(uint32_t dw3) { return status(uint16_t(dw3 >> 17)); }
DW_HD constexpr uint32_t make_cqe_dw3(uint16_t cid, uint32_t phase, status s) {
  return uint32_t(cid) | (phase & 1) << 16 | uint32_t(s.value & 0x7FFF) << 17;
}

// Command builders.
DW_HD inline command make_read(uint32_t nsid, uint64_t slba, uint32_t nblocks, uint64_t buf_offset) {
  command c{};
  c.opcode = op_read;
  c.nsid = nsid;
  c.prp1 = buf_offset;
  c.cdw10 = uint32_t(slba);
  c.cdw11 = uint32_t(slba >> 32);
  c.cdw12 = (nblocks - 1) & cdw12_nlb_mask;
  return c;
}
DW_HD inline command make_write(uint32_t nsid, uint64_t slba, uint32_t nblocks, uint64_t buf_offset) {
  command c = make_read(nsid, slba, nblocks, buf_offset);
  c.opcode = op_write;
  return c;
}
DW_HD inline command make_flush(uint32_t nsid) {
  command c{};
  c.opcode = op_flush;
  c.nsid = nsid;
  return c;
}
DW_HD inline command make_identify_namespace(uint32_t nsid, uint64_t buf_offset) {
  command c{};
  c.opcode = op_identify;
  c.nsid = nsid;
  c.prp1 = buf_offset;
  c.cdw10 = 0;  // CNS 0: Identify Namespace
  return c;
}

// The fields of the 4096-byte Identify Namespace data structure that deepwell
// fills in. NSZE/NCAP/NUSE in blocks; LBA format 0 gives the block size as a
// power of two; NSATTR bit 0 means write protected. The exact byte length of
// the dataset (the last block may be partial) is in the vendor-specific area.
struct identify_namespace {
  uint64_t nsze;          // byte 0
  uint64_t ncap;          // byte 8
  uint64_t nuse;          // byte 16
  uint8_t nsfeat;         // byte 24
  uint8_t nlbaf;          // byte 25
  uint8_t flbas;          // byte 26
  uint8_t mc, dpc, dps, nmic, rescap, fpi, dlfeat;  // 27..33
  uint8_t reserved0[99 - 34];                        // 34..98
  uint8_t nsattr;         // byte 99
  uint8_t reserved1[128 - 100];
  uint32_t lbaf[64];      // byte 128: bits 23:16 LBADS (log2 of block size)
  uint8_t reserved2[3072 - 384];
  uint64_t dw_bytes;      // byte 3072 (vendor specific): dataset length in bytes
  uint32_t dw_block_size; // byte 3080: block size in bytes
  uint8_t reserved3[4096 - 3084];
};
static_assert(sizeof(identify_namespace) == 4096, "Identify data is 4096 bytes");
static_assert(offsetof(identify_namespace, nsattr) == 99);
static_assert(offsetof(identify_namespace, lbaf) == 128);
static_assert(offsetof(identify_namespace, dw_bytes) == 3072);

}  // namespace deepwell::nvme
