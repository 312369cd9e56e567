// A server thread's file-system identity, taken on for one client's call:
// the kernel then checks that client's rights at every path step and open
// (a 0600 file, a 0700 directory), where the server's own (root's, with
// DAC override) would read anything the tree holds. setfsuid, setfsgid and
// setgroups as raw system calls change only the calling thread (glibc's
// setgroups changes every thread of the process). Needs CAP_SETUID and
// CAP_SETGID, which a server running as root has; a server without them
// opens with its own rights, and the grant is then to everything its user
// may read under the tree.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace deepwell::detail {

struct fs_identity {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// Whether this process may take on other identities (CAP_SETUID and
// CAP_SETGID in its effective set).
bool can_act_as_others();

// While it lives, the calling thread's file-system checks are `who`'s.
class acting_as {
 public:
  explicit acting_as(const fs_identity* who);  // nullptr: no change
  ~acting_as();
  acting_as(const acting_as&) = delete;
  acting_as& operator=(const acting_as&) = delete;
  // False where the switch failed: the caller must not go on as itself.
  bool ok() const { return ok_; }

 private:
  bool changed_ = false;
  bool ok_ = true;
  uint32_t uid_ = 0, gid_ = 0;
  std::vector<gid_t> groups_;
};

}  // namespace deepwell::detail
