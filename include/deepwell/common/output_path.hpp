// Where a tool or library call may write a file it makes or replaces.
#pragma once
#include <string>

namespace deepwell {

// Throws, naming the path and what it is, unless `path` names a regular
// file, a link (replacing it replaces the link, not what it names) or
// nothing: a write, rename or unlink there would replace or delete a device
// (`-o /dev/null` as root), wait forever on a FIFO with no reader, or take
// a directory's or socket's place.
void check_output_path(const std::string& path);

}  // namespace deepwell
