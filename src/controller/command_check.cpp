#include "controller/command_check.hpp"

namespace deepwell::detail {

namespace {

// NVMe requires data pointers to be dword aligned.
constexpr uint64_t dword_alignment = 4;

bool buffer_inside(uint64_t offset, uint64_t bytes, uint64_t region) {
  return offset <= region && bytes <= region - offset;
}

nvme::status check_buffer(uint64_t offset, uint64_t bytes, uint32_t mem_align, const queue_limits& q) {
  const uint64_t align = mem_align > dword_alignment ? mem_align : dword_alignment;
  if (offset % align != 0) return nvme::sc::prp_offset_invalid;
  if (!buffer_inside(offset, bytes, q.staging_bytes)) return nvme::sc::data_transfer_error;
  return nvme::sc::success;
}

nvme::status check_read_write(const nvme::command& c, const queue_limits& q, const ns_limits& ns,
                              checked_command& out) {
  constexpr uint32_t allowed_cdw12 = nvme::cdw12_nlb_mask | nvme::cdw12_fua | (1u << 31);  // NLB, FUA, LR
  if (c.cdw2 || c.cdw3 || c.mptr || c.prp2 || c.cdw13 || c.cdw14 || c.cdw15 || (c.cdw12 & ~allowed_cdw12))
    return nvme::sc::invalid_field;
  if (c.opcode == nvme::op_write && ns.read_only) return nvme::sc::write_to_read_only;
  const uint64_t slba = uint64_t(c.cdw11) << 32 | c.cdw10;
  const uint64_t nblocks = uint64_t(c.cdw12 & nvme::cdw12_nlb_mask) + 1;  // 0-based on the wire
  if (slba >= ns.blocks || nblocks > ns.blocks - slba) return nvme::sc::lba_out_of_range;
  const uint64_t bytes = nblocks * ns.block_size;
  if (bytes > q.max_transfer) return nvme::sc::invalid_field;
  if (auto s = check_buffer(c.prp1, bytes, ns.memory_alignment, q); !s.ok()) return s;
  out.byte_offset = slba * ns.block_size;
  out.bytes = uint32_t(bytes);
  out.buffer_offset = c.prp1;
  out.fua = (c.cdw12 & nvme::cdw12_fua) != 0;
  return nvme::sc::success;
}

nvme::status check_flush(const nvme::command& c) {
  if (c.cdw2 || c.cdw3 || c.mptr || c.prp1 || c.prp2 || c.cdw10 || c.cdw11 || c.cdw12 || c.cdw13 || c.cdw14 ||
      c.cdw15)
    return nvme::sc::invalid_field;
  return nvme::sc::success;
}

nvme::status check_identify(const nvme::command& c, const queue_limits& q, checked_command& out) {
  // CNS 0 (Identify Namespace) only; no controller id, no other fields.
  if (c.cdw2 || c.cdw3 || c.mptr || c.prp2 || c.cdw10 || c.cdw11 || c.cdw12 || c.cdw13 || c.cdw14 || c.cdw15)
    return nvme::sc::invalid_field;
  if (auto s = check_buffer(c.prp1, sizeof(nvme::identify_namespace), 1, q); !s.ok()) return s;
  out.buffer_offset = c.prp1;
  out.bytes = sizeof(nvme::identify_namespace);
  return nvme::sc::success;
}

}  // namespace

nvme::status check_command(const nvme::command& c, const queue_limits& q, ns_lookup lookup, const void* lookup_ctx,
                           checked_command& out) {
  out = checked_command{};
  out.opcode = c.opcode;
  out.nsid = c.nsid;
  switch (c.opcode) {
    case nvme::op_read:
    case nvme::op_write:
    case nvme::op_flush:
    case nvme::op_identify:
      break;
    default:
      return nvme::sc::invalid_opcode;
  }
  if (c.flags != 0) return nvme::sc::invalid_field;  // fused operations and SGLs are not supported
  const ns_limits* ns = lookup(lookup_ctx, c.nsid);
  if (ns == nullptr) return nvme::sc::invalid_namespace;
  switch (c.opcode) {
    case nvme::op_read:
    case nvme::op_write:
      return check_read_write(c, q, *ns, out);
    case nvme::op_flush:
      return check_flush(c);
    default:
      return check_identify(c, q, out);
  }
}

}  // namespace deepwell::detail
