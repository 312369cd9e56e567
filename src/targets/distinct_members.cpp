#include <sys/stat.h>

#include <map>
#include <utility>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/drive_array.hpp"

namespace deepwell {

void check_distinct_members(const std::vector<std::string>& paths, const std::string& kind) {
  std::map<std::pair<dev_t, ino_t>, size_t> seen;
  for (size_t i = 0; i < paths.size(); ++i) {
    struct stat st {};
    if (::stat(paths[i].c_str(), &st) != 0) continue;  // the open that follows names what is missing
    // A device node is the device it names (st_rdev), wherever the node is.
    const auto id = S_ISBLK(st.st_mode) ? std::make_pair(dev_t(st.st_rdev), ino_t(0)) : std::make_pair(st.st_dev, st.st_ino);
    const auto [at, fresh] = seen.emplace(id, i);
    if (!fresh)
      throw error("the " + kind + "'s members " + std::to_string(at->second) + " (" + paths[at->second] + ") and " +
                  std::to_string(i) + " (" + paths[i] + ") are the same " +
                  (S_ISBLK(st.st_mode) ? "device" : "file") + ": each drive of an array must be a different one");
  }
}

}  // namespace deepwell
