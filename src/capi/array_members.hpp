// dw_array_options' arrays of drives (members, layout, chunk_bytes): the
// fields checked, the members opened (made, with create) and joined as a
// stripe or a mirror. Every refusal is DW_EINVAL or DW_EIO naming the field
// or the member and what is wrong with it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/c/deepwell.h"
#include "deepwell/targets/target.hpp"

namespace deepwell::capi {

// The size of dw_array_options before the members were appended (ABI 7's).
uint32_t array_options_first_size();

// Checks the layout fields for any open (a single-file open that sets a
// member field, a server's dataset with members, ...).
void check_layout(const dw_array_options& o, bool server);

// The array's target. `created`: every member was missing and has been
// made, so the dataset is create_bytes long.
std::shared_ptr<target> open_array_target(const dw_array_options& o, bool& created);

// What shares an array's dataset: its members' devices and inodes, the
// layout and the chunk ("" when a member cannot be stat'ed).
std::string array_key(const dw_array_options& o);

}  // namespace deepwell::capi
