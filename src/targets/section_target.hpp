// The controller's side of a section (section.hpp): its target, built over
// the dataset's. One function, so that a controller in this process and a
// server build the same thing from the same request.
#pragma once
#include <memory>

#include "deepwell/protocol/section.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell::detail {

// Every check of the request against `dataset` that needs no I/O (ranges
// inside it and apart, the sizes, the block a whole number of the section's
// I/O units, the sums' size, writable only over writable data). Throws
// deepwell::error naming what is wrong. A request that passes costs work
// (reading sums) before it can still fail on I/O.
void check_section_request(const target& dataset, const section_request& r);

// check_section_request, then the section's target; fixed sums are read
// from the dataset now, kept ones when the target is made.
std::shared_ptr<target> make_section_target(const std::shared_ptr<target>& dataset, const section_request& r);

// Checks of a section target (zeros for one without sums); set_verify on
// one without sums does nothing.
section_checks section_target_checks(const target& t);
void section_target_verify(target& t, bool on);

}  // namespace deepwell::detail
