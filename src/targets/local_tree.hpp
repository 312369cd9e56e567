// The side of a tree (tree.hpp) that holds its files: the directory's
// descriptors, the files and directories its ops open, and the namespace's
// windows. The in-process link serves its own clients with one; the server
// makes one per client's tree session, on a namespace of its pool. Every
// field of every op is checked here (ids, windows, flags, paths), so both
// serve untrusted ops alike.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/protocol/tree.hpp"
#include "deepwell/targets/target.hpp"
#include "common/fs_identity.hpp"
#include "targets/descriptor_quota.hpp"

namespace deepwell::detail {

// A namespace's target for trees' windows (2^60 bytes: every window a
// cache's keys can address).
std::shared_ptr<target> make_tree_windows(const std::string& root);
constexpr uint32_t tree_first_window = 1;  // window 0 is never a file's: a default handle matches nothing
// Every window of `windows` detached and its counts restarted, for the
// namespace's next session (the last one's files close as their writes end).
void reset_tree_windows(target& windows, const std::string& root);

// A session on the tree rooted at r.name (a directory path), whose files
// are attached to windows [first_window, the last) of `windows`
// (make_tree_windows), namespace `nsid`. Throws deepwell::error when the
// root is not a directory it can open. Closing the session (its last
// reference) closes every directory it still has open; its files close as
// their windows are detached.
// for_server: a server's session for another process. A batch's opens are
// spread over a few threads of a pool shared by every such session (the
// server's one loop thread would otherwise make every client's system
// calls in turn; a program's own file API has several service threads
// already), descriptors are closed on a thread of their own, and limits
// keep the client from growing the server's memory: no more windows
// attached than files open, 4 M write-once pages merged. A program's own
// session has none of these (its memory is its own).
// quota: a server's count of the descriptors this session's files and
// directories may hold (its uid's share and the server's budget); an open
// past it is EMFILE. None: no count (a program's own session).
// root: the tree's directory opened once (a server's, at start: a path
// looked up again could have been swapped for a link to `/` by whoever may
// write its parent); -1: r.name opened now. as: whose rights the session's
// path operations use (a server's client; none: this process's own).
std::shared_ptr<tree_session> make_local_tree(const tree_request& r, std::shared_ptr<target> windows, uint32_t nsid,
                                              uint32_t first_window = tree_first_window, bool for_server = false,
                                              std::shared_ptr<descriptor_quota> quota = nullptr, int root = -1,
                                              std::shared_ptr<const fs_identity> as = nullptr);


}  // namespace deepwell::detail
