// The controller's side of a section (section.hpp): its target, built over
// the dataset's. One function, so that a controller in this process and a
// server build the same thing from the same request.
#pragma once
#include <memory>

#include "deepwell/protocol/section.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell::detail {

// Checks the request against `dataset` (ranges inside it and apart, the
// sums' size, writable only over writable data) and builds the section's
// target; fixed sums are read from the dataset now. Throws deepwell::error
// naming what is wrong.
std::shared_ptr<target> make_section_target(const std::shared_ptr<target>& dataset, const section_request& r);

// Checks of a section target (zeros for one without sums); set_verify on
// one without sums does nothing.
section_checks section_target_checks(const target& t);
void section_target_verify(target& t, bool on);

}  // namespace deepwell::detail
