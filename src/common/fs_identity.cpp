#include "fs_identity.hpp"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace deepwell::detail {
namespace {

long set_fsuid(uint32_t id) { return ::syscall(SYS_setfsuid, id); }
long set_fsgid(uint32_t id) { return ::syscall(SYS_setfsgid, id); }
// -1 is no id: the call changes nothing and returns the current one.
uint32_t fsuid_now() { return uint32_t(::syscall(SYS_setfsuid, uint32_t(-1))); }
uint32_t fsgid_now() { return uint32_t(::syscall(SYS_setfsgid, uint32_t(-1))); }
long set_groups(const std::vector<gid_t>& g) { return ::syscall(SYS_setgroups, g.size(), g.data()); }

}  // namespace

bool can_act_as_others() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  const auto has = [&](int cap) { return (d[cap / 32].effective >> (cap % 32)) & 1u; };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

acting_as::acting_as(const fs_identity* who) {
  if (!who) return;
  uid_ = fsuid_now();
  gid_ = fsgid_now();
  const int n = ::getgroups(0, nullptr);
  groups_.resize(n > 0 ? size_t(n) : 0);
  if (n > 0 && ::getgroups(n, groups_.data()) != n) groups_.clear();
  changed_ = true;
  // Groups first: they need CAP_SETGID, which the fsuid change keeps, but
  // the order undone below is the reverse.
  ok_ = set_groups(who->groups) == 0;
  if (ok_) {
    set_fsgid(who->gid);
    ok_ = fsgid_now() == who->gid;
  }
  if (ok_) {
    set_fsuid(who->uid);
    ok_ = fsuid_now() == who->uid;
  }
}

acting_as::~acting_as() {
  if (!changed_) return;
  set_fsuid(uid_);  // back to root: the file-system capabilities come back with it
  set_fsgid(gid_);
  set_groups(groups_);
}

}  // namespace deepwell::detail
