// check_command on its own: each field, each status, boundary values.
#include <gtest/gtest.h>

#include "controller/command_check.hpp"

using namespace deepwell;
using namespace deepwell::detail;
namespace sc = deepwell::nvme::sc;

namespace {
const ns_limits rw{4096, 100, false, 1};
const ns_limits ro{512, 10, true, 1};
const ns_limits* lookup(const void*, uint32_t nsid) { return nsid == 1 ? &rw : nsid == 2 ? &ro : nullptr; }
const queue_limits q{16 * 8192, 8192};

nvme::status check(const nvme::command& c) {
  checked_command out;
  return check_command(c, q, lookup, nullptr, out);
}
}  // namespace

TEST(CommandCheck, AcceptsWellFormedCommands) {
  checked_command out;
  ASSERT_TRUE(check_command(nvme::make_read(1, 98, 2, 8192), q, lookup, nullptr, out).ok());
  EXPECT_EQ(out.byte_offset, 98u * 4096);
  EXPECT_EQ(out.bytes, 8192u);
  EXPECT_EQ(out.buffer_offset, 8192u);
  nvme::command w = nvme::make_write(1, 0, 1, 0);
  w.cdw12 |= nvme::cdw12_fua;
  ASSERT_TRUE(check_command(w, q, lookup, nullptr, out).ok());
  EXPECT_TRUE(out.fua);
  EXPECT_TRUE(check(nvme::make_flush(2)).ok());
  EXPECT_TRUE(check(nvme::make_identify_namespace(2, 0)).ok());
  EXPECT_TRUE(check(nvme::make_read(2, 9, 1, 4)).ok());  // dword-aligned buffer suffices
}

TEST(CommandCheck, RejectsEachBadField) {
  nvme::command c = nvme::make_read(1, 0, 1, 0);
  c.opcode = 0x09;  // Dataset Management: not offered
  EXPECT_EQ(check(c), sc::invalid_opcode);
  c = nvme::make_read(1, 0, 1, 0);
  c.flags = 1;  // fused
  EXPECT_EQ(check(c), sc::invalid_field);
  c.flags = 0;
  c.nsid = 3;
  EXPECT_EQ(check(c), sc::invalid_namespace);
  EXPECT_EQ(check(nvme::make_read(1, 100, 1, 0)), sc::lba_out_of_range);
  EXPECT_EQ(check(nvme::make_read(1, 99, 2, 0)), sc::lba_out_of_range);
  EXPECT_EQ(check(nvme::make_read(2, 0, 11, 0)), sc::lba_out_of_range);
  EXPECT_EQ(check(nvme::make_read(1, 0, 3, 0)), sc::invalid_field);  // 12 KiB > 8 KiB
  EXPECT_EQ(check(nvme::make_read(1, 0, 1, 2)), sc::prp_offset_invalid);
  EXPECT_EQ(check(nvme::make_read(1, 0, 2, 15 * 8192 + 4)), sc::data_transfer_error);
  EXPECT_EQ(check(nvme::make_write(2, 0, 1, 0)), sc::write_to_read_only);
  for (uint32_t nvme::command::*f : {&nvme::command::cdw2, &nvme::command::cdw3, &nvme::command::cdw13,
                                     &nvme::command::cdw14, &nvme::command::cdw15}) {
    c = nvme::make_read(1, 0, 1, 0);
    c.*f = 1;
    EXPECT_EQ(check(c), sc::invalid_field);
  }
  c = nvme::make_read(1, 0, 1, 0);
  c.mptr = 8;
  EXPECT_EQ(check(c), sc::invalid_field);
  c = nvme::make_flush(1);
  c.prp1 = 8;
  EXPECT_EQ(check(c), sc::invalid_field);
  c = nvme::make_identify_namespace(1, 0);
  c.cdw10 = 2;
  EXPECT_EQ(check(c), sc::invalid_field);
  EXPECT_EQ(check(nvme::make_identify_namespace(1, 15 * 8192 + 4100)), sc::data_transfer_error);
}

TEST(CommandCheck, MemoryAlignmentOfTheTargetIsEnforced) {
  const ns_limits direct{4096, 100, false, 4096};
  auto lk = [](const void* p, uint32_t) { return static_cast<const ns_limits*>(p); };
  checked_command out;
  EXPECT_EQ(check_command(nvme::make_read(1, 0, 1, 512), q, lk, &direct, out), sc::prp_offset_invalid);
  EXPECT_TRUE(check_command(nvme::make_read(1, 0, 1, 4096), q, lk, &direct, out).ok());
}

TEST(NvmeStatus, EncodingRoundTrips) {
  for (nvme::status s : {sc::success, sc::invalid_opcode, sc::lba_out_of_range, sc::write_to_read_only,
                         sc::unrecovered_read_error, sc::write_fault}) {
    const uint32_t dw3 = nvme::make_cqe_dw3(0xBEEF, 1, s);
    EXPECT_EQ(nvme::cqe_cid(dw3), 0xBEEF);
    EXPECT_EQ(nvme::cqe_phase(dw3), 1u);
    EXPECT_EQ(nvme::cqe_status(dw3), s);
    EXPECT_STRNE(nvme::status_name(s), "Unknown Status");
  }
  EXPECT_EQ(sc::write_fault.sct(), nvme::sct_media);
  EXPECT_EQ(sc::write_to_read_only.sct(), nvme::sct_command_specific);
  EXPECT_TRUE(sc::lba_out_of_range.dnr());
  EXPECT_FALSE(sc::success.dnr());
}
