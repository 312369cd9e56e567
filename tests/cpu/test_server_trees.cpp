// The file API under a server started by the test: tree datasets (a
// directory the server opens files beneath, as each client's grant
// allows), read and written through a cache on the server's link and
// checked byte for byte against the files; and the tree ops on the wire,
// where every field is the client's and a bad one fails that request only.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/files/file_system.hpp"
#include "grep/grep.hpp"
#include "grep/grep_run.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/server/config.hpp"
#include "deepwell/server/server.hpp"
#include "protocol/wire.hpp"
#include "cache_test_support.hpp"
#include "files_test_support.hpp"
#include "server_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> pattern(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = uint8_t((i * 131 + seed * 7 + (i >> 9)) & 0xFF);
  return v;
}

void put_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> read_all(const gfs_ref& g, const gfile& f) { return test::read_all(g, f, 5000); }

std::string socket_path() {
  static std::atomic<int> n{0};
  return "/tmp/deepwell-tree-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

// A server with a tree granted read-only to everyone ("src"), a tree
// granted read-write to this uid ("out"), and one granted to another uid
// only ("secret"). "src" holds files of several sizes, a subdirectory and
// a symlink out of the tree.
class Trees : public ::testing::Test {
 protected:
  fs::path base = fs::temp_directory_path() / ("deepwell-trees-" + std::to_string(getpid()) + "-" +
                                               std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::path src = base / "src", out = base / "out", secret = base / "secret";
  std::vector<uint64_t> sizes{0, 1, 4095, 4096, 100000, 300001};
  std::string sock = socket_path();
  test::server_thread server_;

  void SetUp() override {
    fs::remove_all(base);
    for (uint64_t n : sizes) put_file(src / ("f" + std::to_string(n)), pattern(n, n));
    put_file(src / "sub" / "deep", pattern(777, 9));
    put_file(base / "outside", pattern(100, 1));
    fs::create_symlink(base / "outside", src / "escape");
    fs::create_directories(out);
    put_file(secret / "s", pattern(100, 2));
    start("");
  }
  void TearDown() override {
    stop();
    fs::remove_all(base);
  }

  void start(const std::string& server_keys) {
    const std::string uid = std::to_string(getuid());
    const std::string text = "[server]\nsocket = \"" + sock + "\"\npollers = 2\n" + server_keys +
                             "[[dataset]]\nname = \"src\"\ntree = \"" + src.string() + "\"\n" +
                             "[[dataset]]\nname = \"out\"\ntree = \"" + out.string() + "\"\nwritable = true\n" +
                             "[[dataset]]\nname = \"secret\"\ntree = \"" + secret.string() + "\"\n" +
                             "[[grant]]\ndataset = \"src\"\neveryone = true\n" +
                             "[[grant]]\ndataset = \"out\"\nuid = " + uid + "\naccess = \"read-write\"\n" +
                             "[[grant]]\ndataset = \"secret\"\nuid = " + std::to_string(getuid() + 4242) + "\n";
    server_.start(text);
  }
  void stop() { server_.stop(); }

  std::shared_ptr<page_cache> cache(std::shared_ptr<server_link> link, uint64_t pages = 16) {
    cache_config c = test::small_cache(pages);
    c.timeout_ns = 10'000'000'000ull;
    return make_host_page_cache(std::move(link), c);
  }
  std::shared_ptr<file_system> files(std::shared_ptr<page_cache> c, const std::string& tree, bool read_only) {
    file_system_options o;
    o.root = tree;
    o.read_only = read_only;
    o.max_open = 64;
    o.slots = 16;
    return make_host_file_system(std::move(c), o);
  }
};

TEST_F(Trees, FilesOfAGrantedTreeReadAsTheyAreOnDisk) {
  auto fsys = files(cache(server_link::connect(sock, "reader"), 8), "src", true);  // 8 pages: the larger files evict
  const gfs_ref& g = fsys->ref();
  for (uint64_t n : sizes) {
    const gfile f = g.gopen(("f" + std::to_string(n)).c_str(), g_rdonly);
    ASSERT_TRUE(f.ok()) << f.err;
    gstat st;
    ASSERT_EQ(g.gfstat(one_lane{}, f, &st), 0);
    EXPECT_EQ(st.size, n);
    EXPECT_EQ(read_all(g, f), pattern(n, n)) << n;
    EXPECT_EQ(g.gclose(f), 0);
  }
  const gfile d = g.gopen("sub/deep", g_rdonly);
  ASSERT_TRUE(d.ok()) << d.err;
  EXPECT_EQ(read_all(g, d), pattern(777, 9));
  EXPECT_EQ(g.gclose(d), 0);
  // The directory as readdir gives it.
  const gdir dir = g.gopendir(one_lane{}, "");
  ASSERT_TRUE(dir.ok()) << dir.err;
  std::set<std::string> names;
  gdirent e;
  for (int n; (n = g.greaddir(one_lane{}, dir, &e)) == 1;) names.insert(e.name);
  EXPECT_EQ(g.gclosedir(one_lane{}, dir), 0);
  std::set<std::string> want{"sub", "escape"};
  for (uint64_t n : sizes) want.insert("f" + std::to_string(n));
  EXPECT_EQ(names, want);
  EXPECT_EQ(fsys->stats().errors, 0u);
}

TEST_F(Trees, NothingOutsideTheTreeAndNoWritesThroughAReadGrant) {
  auto link = server_link::connect(sock, "prober");
  auto fsys = files(cache(link), "src", true);
  const gfs_ref& g = fsys->ref();
  for (const char* p : {"../outside", "/etc/passwd", "escape", "sub/../../outside"})
    EXPECT_EQ(g.gopen(p, g_rdonly).err, EACCES) << p;
  EXPECT_EQ(g.gopendir(one_lane{}, "..").err, EACCES);
  EXPECT_EQ(g.gopen("missing", g_rdonly).err, ENOENT);
  // A read-only file system refuses writes itself; a writable one on a
  // read grant is refused by the server.
  EXPECT_THROW(files(cache(link), "src", false), error);
  EXPECT_EQ(g.gopen("f1", g_rdwr).err, EROFS);
  // The tree granted to another uid, and one that does not exist, are
  // the same to this client: not offered.
  test::expect_error([&] { files(cache(link), "secret", true); }, "no tree 'secret' is offered");
  test::expect_error([&] { files(cache(link), "nope", true); }, "no tree 'nope' is offered");
  // Its stats list the trees it may open, as it may open them.
  const std::string st = link->stats();
  EXPECT_NE(st.find("\"name\": \"src\""), std::string::npos) << st;
  EXPECT_NE(st.find("\"name\": \"out\""), std::string::npos) << st;
  // (The server's own uid and root see every tree: the operator's view.)
  if (st.find("\"view\": \"operator\"") == std::string::npos) EXPECT_EQ(st.find("secret"), std::string::npos) << st;
}

TEST_F(Trees, WritesThroughAReadWriteGrantLandInTheFiles) {
  auto fsys = files(cache(server_link::connect(sock, "writer"), 8), "out", false);
  const gfs_ref& g = fsys->ref();
  const std::vector<uint8_t> a = pattern(200000, 3), b = pattern(5000, 4);
  gfile f = g.gopen("new.bin", g_rdwr | g_creat);
  ASSERT_TRUE(f.ok()) << f.err;
  ASSERT_EQ(g.gwrite(f, 0, a.data(), a.size()), int64_t(a.size()));
  ASSERT_EQ(g.gfsync(one_lane{}, f), 0);
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(file_bytes(out / "new.bin"), a);
  // Reopened: read back, overwritten in part, truncated.
  f = g.gopen("new.bin", g_rdwr);
  ASSERT_TRUE(f.ok()) << f.err;
  EXPECT_EQ(read_all(g, f), a);
  ASSERT_EQ(g.gwrite(f, 1000, b.data(), b.size()), int64_t(b.size()));
  ASSERT_EQ(g.gftruncate(one_lane{}, f, 150000), 0);
  ASSERT_EQ(g.gclose(f), 0);
  std::vector<uint8_t> want(a.begin(), a.begin() + 150000);
  std::copy(b.begin(), b.end(), want.begin() + 1000);
  EXPECT_EQ(file_bytes(out / "new.bin"), want);
  // Write-once output, as grep writes its lines.
  f = g.gopen("once.txt", g_wronly | g_gwronce);
  ASSERT_TRUE(f.ok()) << f.err;
  ASSERT_EQ(g.gwrite(f, 0, b.data(), b.size()), int64_t(b.size()));
  ASSERT_EQ(g.gclose(f), 0);
  EXPECT_EQ(file_bytes(out / "once.txt"), b);
  fsys->sync();
}

TEST_F(Trees, GrepUnderTheServerCountsAsInProcess) {
  // A small tree of words, searched in process and under the server.
  const fs::path words = base / "words";
  for (int i = 0; i < 40; ++i) {
    std::ofstream(src / ("w" + std::to_string(i) + ".txt")) << "alpha beta gamma " << std::string(size_t(i), 'x')
                                                           << " beta\nalpha delta " << i << "\n";
  }
  std::ofstream(words) << "alpha\nbeta\ndelta\nomega\n";
  const grep_dictionary d = load_grep_dictionary(words.string());
  std::vector<std::string> list;
  for (int i = 0; i < 40; ++i) list.push_back("w" + std::to_string(i) + ".txt");
  grep_options local;
  local.root = src.string();
  local.out_dir = out.string();
  local.out_name = "local.out";
  local.workers = 4;
  const grep_report a = run_grep_cpu(local, d, list);
  grep_options remote = local;
  remote.server = sock;
  remote.root = "src";
  remote.out_dir = "out";
  remote.out_name = "remote.out";
  remote.fsync = true;
  const grep_report b = run_grep_cpu(remote, d, list);
  EXPECT_EQ(a.counters.matches, b.counters.matches);
  EXPECT_EQ(b.counters.failed, 0u);
  const grep_counts want = reference_grep(src.string(), d, list);
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(parse_grep_output((out / "local.out").string()), want);
  EXPECT_EQ(parse_grep_output((out / "remote.out").string()), want);
}

TEST_F(Trees, SessionsAreLimitedPerUidAndTheirNamespacesReused) {
  stop();
  start("max_trees_per_uid = 2\n");
  auto link = server_link::connect(sock, "many");
  auto c = cache(link);
  auto one = files(c, "src", true);
  {
    auto two = files(c, "src", true);
    test::expect_error([&] { files(c, "src", true); }, "max_trees_per_uid");
    // A second connection of the same uid meets the same limit.
    test::expect_error([&] { files(cache(server_link::connect(sock, "other")), "src", true); }, "max_trees_per_uid");
  }
  // One ended: its namespace serves the next session, with none of its
  // files (window 1 of the new session is a new file).
  for (int round = 0; round < 5; ++round) {
    auto next = files(c, "src", true);
    const std::string name = "f" + std::to_string(sizes[size_t(round) % sizes.size()]);
    const gfile f = next->ref().gopen(name.c_str(), g_rdonly);
    ASSERT_TRUE(f.ok()) << f.err;
    EXPECT_EQ(read_all(next->ref(), f), pattern(sizes[size_t(round) % sizes.size()], sizes[size_t(round) % sizes.size()]));
    EXPECT_EQ(next->ref().gclose(f), 0);
  }
}

}  // namespace

namespace {

wire::message call(int s, wire::op o, uint32_t a, uint32_t b = 0, uint32_t c = 0, uint32_t d = 0, std::string text = {}) {
  wire::message m;
  m.h.op = uint16_t(o);
  m.h.a = a;
  m.h.b = b;
  m.h.c = c;
  m.h.d = d;
  m.text = std::move(text);
  wire::message r;
  if (!wire::send_message(s, std::move(m)) || !wire::receive_message(s, r)) r.h.status = -1;
  return r;
}

tree_call op(tree_op_kind k, uint64_t file = 0, uint32_t window = 0, std::string path = {}, uint32_t flags = 0) {
  tree_call c;
  c.op.kind = uint32_t(k);
  c.op.file = file;
  c.op.window = window;
  c.op.flags = flags;
  c.path = std::move(path);
  return c;
}

// The ops' results as the server gives them (status -1 if refused whole).
std::vector<tree_call> run_ops(int s, uint32_t nsid, std::vector<tree_call> calls, int32_t* status = nullptr) {
  const wire::message r =
      call(s, wire::op::tree_ops, nsid, uint32_t(calls.size()), 0, 0, wire::pack_tree_request(calls.data(), uint32_t(calls.size())));
  if (status) *status = r.h.status;
  if (r.h.status != 0 || !wire::unpack_tree_reply(r.text, uint32_t(calls.size()), calls.data())) return {};
  return calls;
}

// A raw connection that said hello as `name` (-1 if either failed).
int hello(const std::string& sock, const char* name) {
  const int s = test::raw_connect(sock);
  if (s >= 0 && call(s, wire::op::hello, 0, 0, 0, 0, name).h.status != 0) {
    close(s);
    return -1;
  }
  return s;
}

wire::status status(const wire::message& r) { return wire::status(r.h.status); }

}  // namespace

TEST_F(Trees, TreeOpsOnTheWireAreCheckedFieldByField) {
  const int a = hello(sock, "a"), b = hello(sock, "b");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Opening: the grant, the sizes, the limits.
  EXPECT_EQ(status(call(a, wire::op::open_tree, 0, 1, 8, 2, "src")), wire::status::denied);
  EXPECT_EQ(status(call(a, wire::op::open_tree, 0, 2, 8, 2, "src")), wire::status::bad_request);
  EXPECT_EQ(status(call(a, wire::op::open_tree, 0, 0, 0, 2, "src")), wire::status::bad_request);
  EXPECT_EQ(status(call(a, wire::op::open_tree, 0, 0, 0xFFFFFFFFu, 2, "src")), wire::status::limit);
  EXPECT_EQ(status(call(a, wire::op::open_tree, 0, 0, 8, 2, "secret")), wire::status::not_found);
  const wire::message ta = call(a, wire::op::open_tree, 0, 0, 8, 2, "src");
  const wire::message tb = call(b, wire::op::open_tree, 0, 0, 8, 2, "src");
  ASSERT_EQ(ta.h.status, 0) << ta.text;
  ASSERT_EQ(tb.h.status, 0) << tb.text;
  const uint32_t ns = ta.h.a, first = ta.h.b, windows = ta.h.c;
  ASSERT_NE(ns, tb.h.a);
  // Batches that are not batches.
  int32_t st = 0;
  for (uint32_t n : {0u, tree_batch_max + 1}) {
    const wire::message r = call(a, wire::op::tree_ops, ns, n, 0, 0, std::string(size_t(n) * sizeof(tree_op), '\0'));
    EXPECT_EQ(status(r), wire::status::bad_request) << n;
  }
  EXPECT_EQ(status(call(a, wire::op::tree_ops, ns, 2, 0, 0, std::string(sizeof(tree_op), '\0'))), wire::status::bad_request);
  {
    tree_call c = op(tree_op_kind::open, 0, 0, "f1");
    std::string text = wire::pack_tree_request(&c, 1);
    reinterpret_cast<tree_op*>(text.data())->path_bytes = 100;  // past the end
    EXPECT_EQ(status(call(a, wire::op::tree_ops, ns, 1, 0, 0, text)), wire::status::bad_request);
    EXPECT_EQ(status(call(a, wire::op::tree_ops, ns, 1, 0, 0, wire::pack_tree_request(&c, 1) + "x")), wire::status::bad_request);
    c.path = std::string(tree_path_max + 1, 'a');  // longer than a path
    EXPECT_EQ(status(call(a, wire::op::tree_ops, ns, 1, 0, 0, wire::pack_tree_request(&c, 1))), wire::status::bad_request);
  }
  // Another client's session, and one that does not exist.
  EXPECT_EQ(status(call(a, wire::op::tree_ops, tb.h.a, 1, 0, 0, [&] {
              tree_call c = op(tree_op_kind::stat, 1);
              return wire::pack_tree_request(&c, 1);
            }())),
            wire::status::not_found);
  EXPECT_EQ(status(call(a, wire::op::close_tree, tb.h.a)), wire::status::not_found);
  EXPECT_EQ(status(call(a, wire::op::info, tb.h.a)), wire::status::not_found);
  // Ops whose fields are wrong fail one by one, with their errno.
  std::vector<tree_call> r = run_ops(a, ns,
                                     {op(tree_op_kind::stat, 12345), op(tree_op_kind::attach, 0, 0),
                                      op(tree_op_kind::detach, 0, first + windows), op(tree_op_kind::writes_done, 0, 0),
                                      op(tree_op_kind(99)),
                                      op(tree_op_kind::open, 0, 0, "f1", 0x100), op(tree_op_kind::open, 0, 0, "f1", tree_open_write),
                                      op(tree_op_kind::open, 0, 0, "../outside"), op(tree_op_kind::open, 0, 0, std::string("f1\0x", 4)),
                                      op(tree_op_kind::opendir, 0, 0, "f1"), op(tree_op_kind::readdir, 77),
                                      op(tree_op_kind::open, 0, 0, "f4096")},
                                     &st);
  ASSERT_EQ(st, 0);
  ASSERT_EQ(r.size(), 12u);
  const std::vector<int> want{EBADF, EINVAL, EINVAL, EINVAL, EINVAL, EINVAL, EROFS, EACCES, EINVAL, ENOTDIR, EBADF, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r[i].op.err, want[i]) << "op " << i;
  const uint64_t file = r[11].op.id;
  EXPECT_EQ(r[11].op.st.size, 4096u);
  // Creating a file writes the tree, even opened read-only: refused on a
  // read-only session, and nothing is made.
  r = run_ops(a, ns, {op(tree_op_kind::open, 0, 0, "made", tree_open_create),
                      op(tree_op_kind::open, 0, 0, "sub/made", tree_open_create)});
  ASSERT_EQ(r.size(), 2u);
  for (const tree_call& c : r) EXPECT_EQ(c.op.err, EROFS);
  EXPECT_FALSE(fs::exists(src / "made"));
  EXPECT_FALSE(fs::exists(src / "sub" / "made"));
  // Its id is this session's only: b's session does not know it.
  std::vector<tree_call> rb = run_ops(b, tb.h.a, {op(tree_op_kind::stat, file), op(tree_op_kind::attach, file, first)});
  ASSERT_EQ(rb.size(), 2u);
  EXPECT_EQ(rb[0].op.err, EBADF);
  EXPECT_EQ(rb[1].op.err, EBADF);
  // At most 8 ids at once; a closed id names nothing.
  std::vector<tree_call> opens;
  for (int i = 0; i < 8; ++i) opens.push_back(op(tree_op_kind::open, 0, 0, "f1"));
  r = run_ops(a, ns, opens);
  ASSERT_EQ(r.size(), 8u);
  // (The server opens a batch's files in parallel: which one finds the
  // table full is not fixed.)
  int opened = 0, full = 0;
  for (const tree_call& c : r) {
    opened += c.op.err == 0;
    full += c.op.err == EMFILE;
  }
  EXPECT_EQ(opened, 7);
  EXPECT_EQ(full, 1);
  // One file in many windows: no more windows attached than files may be
  // open (8); a detached one makes room.
  uint64_t some = 0;
  for (const tree_call& c : r)
    if (c.op.err == 0) some = c.op.id;
  std::vector<tree_call> attaches;
  for (uint32_t w = 0; w < 9; ++w) attaches.push_back(op(tree_op_kind::attach, some, first + w));
  std::vector<tree_call> ra = run_ops(a, ns, attaches);
  ASSERT_EQ(ra.size(), 9u);
  for (uint32_t w = 0; w < 8; ++w) EXPECT_EQ(ra[w].op.err, 0) << w;
  EXPECT_EQ(ra[8].op.err, EMFILE);
  ra = run_ops(a, ns, {op(tree_op_kind::detach, 0, first), op(tree_op_kind::attach, some, first + 8)});
  ASSERT_EQ(ra.size(), 2u);
  EXPECT_EQ(ra[0].op.err, 0);
  EXPECT_EQ(ra[1].op.err, 0);
  r = run_ops(a, ns, {op(tree_op_kind::close, file), op(tree_op_kind::close, file), op(tree_op_kind::stat, file)});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].op.err, 0);
  EXPECT_EQ(r[1].op.err, EBADF);
  EXPECT_EQ(r[2].op.err, EBADF);
  close(a);
  close(b);
  // The server goes on: a client reads a file whole.
  auto fsys = files(cache(server_link::connect(sock, "after")), "src", true);
  const gfile f = fsys->ref().gopen("f300001", g_rdonly);
  ASSERT_TRUE(f.ok()) << f.err;
  EXPECT_EQ(read_all(fsys->ref(), f), pattern(300001, 300001));
}

// A program's service threads each send batches on a connection of their
// own, joined to the session with the key open_tree gave. A join needs the
// key, the owner's uid and a session that is still open; a joined
// connection's close_tree only leaves; the owner's ends the session for
// every connection that joined it.
TEST_F(Trees, ConnectionsJoinASessionWithItsKeyOnly) {
  const int a = hello(sock, "owner"), b = hello(sock, "lane");
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  const wire::message t = call(a, wire::op::open_tree, 0, 0, 8, 2, "src");
  ASSERT_EQ(t.h.status, 0) << t.text;
  const uint32_t ns = t.h.a;
  EXPECT_NE(t.h.x | t.h.y, 0u);
  auto join = [&](int s, uint32_t nsid, uint64_t x, uint64_t y) {
    wire::message m;
    m.h.op = uint16_t(wire::op::join_tree);
    m.h.a = nsid;
    m.h.x = x;
    m.h.y = y;
    wire::message r;
    if (!wire::send_message(s, std::move(m)) || !wire::receive_message(s, r)) r.h.status = -1;
    return r;
  };
  // A wrong key (each half), a session that does not exist, its owner.
  EXPECT_EQ(status(join(b, ns, t.h.x ^ 1, t.h.y)), wire::status::not_found);
  EXPECT_EQ(status(join(b, ns, t.h.x, t.h.y ^ (1ull << 63))), wire::status::not_found);
  EXPECT_EQ(status(join(b, ns + 1000, t.h.x, t.h.y)), wire::status::not_found);
  EXPECT_EQ(status(join(a, ns, t.h.x, t.h.y)), wire::status::bad_request);
  EXPECT_EQ(status(call(b, wire::op::tree_ops, ns, 1, 0, 0, [&] {
              tree_call c = op(tree_op_kind::stat, 1);
              return wire::pack_tree_request(&c, 1);
            }())),
            wire::status::not_found);
  // Another uid with the right key (where this test may become one).
  if (getuid() == 0) {
    const pid_t child = fork();
    if (child == 0) {
      int code = 0;
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      const int c = hello(sock, "other uid");
      if (c >= 0) code = join(c, ns, t.h.x, t.h.y).h.status == 0 ? 1 : 0;  // (the socket's mode may refuse it: also a refusal)
      _exit(code);
    }
    int st = 0;
    ASSERT_EQ(waitpid(child, &st, 0), child);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0) << "another uid joined the session with its key";
  }
  // Joined: b's batches run in the session, on its files.
  ASSERT_EQ(join(b, ns, t.h.x, t.h.y).h.status, 0);
  EXPECT_EQ(status(join(b, ns, t.h.x, t.h.y)), wire::status::bad_request);  // twice
  std::vector<tree_call> r = run_ops(b, ns, {op(tree_op_kind::open, 0, 0, "f4096")});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].op.err, 0);
  const uint64_t file = r[0].op.id;
  r = run_ops(a, ns, {op(tree_op_kind::stat, file)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op.err, 0);
  EXPECT_EQ(r[0].op.st.size, 4096u);
  // A joined connection is no owner: no namespace to look at or map.
  EXPECT_EQ(status(call(b, wire::op::info, ns)), wire::status::not_found);
  // Leaving: b's batches refused, a's session goes on; b may join again.
  EXPECT_EQ(call(b, wire::op::close_tree, ns).h.status, 0);
  EXPECT_EQ(status(call(b, wire::op::tree_ops, ns, 1, 0, 0, [&] {
              tree_call c = op(tree_op_kind::stat, file);
              return wire::pack_tree_request(&c, 1);
            }())),
            wire::status::not_found);
  r = run_ops(a, ns, {op(tree_op_kind::stat, file)});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op.err, 0);
  ASSERT_EQ(join(b, ns, t.h.x, t.h.y).h.status, 0);
  // At most 16 connections join one session.
  std::vector<int> more;
  for (int i = 0; i < 16; ++i) {
    more.push_back(hello(sock, "more"));
    ASSERT_GE(more.back(), 0);
  }
  int joined = 0, limited = 0;
  for (int s : more) {
    const wire::message j = join(s, ns, t.h.x, t.h.y);
    joined += j.h.status == 0;
    limited += status(j) == wire::status::limit;
  }
  EXPECT_EQ(joined, 15);
  EXPECT_EQ(limited, 1);
  for (int s : more) close(s);
  // The owner's close ends the session for b too; its key joins nothing.
  EXPECT_EQ(call(a, wire::op::close_tree, ns).h.status, 0);
  EXPECT_EQ(status(call(b, wire::op::tree_ops, ns, 1, 0, 0, [&] {
              tree_call c = op(tree_op_kind::stat, file);
              return wire::pack_tree_request(&c, 1);
            }())),
            wire::status::not_found);
  EXPECT_EQ(status(join(b, ns, t.h.x, t.h.y)), wire::status::not_found);
  // A new session on the same namespace: the old key does not open it.
  const wire::message t2 = call(a, wire::op::open_tree, 0, 0, 8, 2, "src");
  ASSERT_EQ(t2.h.status, 0) << t2.text;
  EXPECT_EQ(status(join(b, t2.h.a, t.h.x, t.h.y)), wire::status::not_found);
  EXPECT_EQ(join(b, t2.h.a, t2.h.x, t2.h.y).h.status, 0);
  // The owner leaving ends it the same way.
  close(a);
  bool ended = false;
  for (int i = 0; i < 500 && !ended; ++i) {
    const wire::message q = call(b, wire::op::tree_ops, t2.h.a, 1, 0, 0, [&] {
      tree_call c = op(tree_op_kind::stat, 1);
      return wire::pack_tree_request(&c, 1);
    }());
    ended = status(q) == wire::status::not_found;
    if (!ended) {
      ASSERT_EQ(q.h.status, 0) << q.text;
      usleep(10000);
    }
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(status(join(b, t2.h.a, t2.h.x, t2.h.y)), wire::status::not_found);
  close(b);
}

#ifndef DEEPWELL_TSAN_BUILD  // forks a process that starts a server of its own
namespace {

// In a child whose descriptor limit is 2048 (the server's budget for tree
// files then 1024, a uid's share 512): one uid opens one file again and
// again until the server says EMFILE. Exit codes name the step that failed.
[[noreturn]] void open_files_until_the_share_is_spent() {
  rlimit rl;
  rl.rlim_cur = rl.rlim_max = 2048;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) std::_Exit(10);
  const fs::path base = fs::temp_directory_path() / ("deepwell-tree-fds-" + std::to_string(getpid()));
  fs::remove_all(base);
  put_file(base / "tree" / "f", pattern(4096, 1));
  put_file(base / "data", pattern(65536, 2));
  const std::string sock = socket_path();
  test::server_thread server;
  server.start("[server]\nsocket = \"" + sock + "\"\npollers = 1\n" + "[[dataset]]\nname = \"src\"\ntree = \"" +
               (base / "tree").string() + "\"\n" + "[[dataset]]\nname = \"data\"\nfile = \"" + (base / "data").string() +
               "\"\n" + "[[grant]]\ndataset = \"src\"\neveryone = true\n" +
               "[[grant]]\ndataset = \"data\"\neveryone = true\n");
  const int a = hello(sock, "opener");
  if (a < 0) std::_Exit(11);
  const wire::message t = call(a, wire::op::open_tree, 0, 0, 4000, 8, "src");
  if (t.h.status != 0) std::_Exit(12);
  uint64_t opened = 0, refused = 0;
  while (refused == 0 && opened < 4000) {
    std::vector<tree_call> batch(tree_batch_max, op(tree_op_kind::open, 0, 0, "f"));
    const std::vector<tree_call> r = run_ops(a, t.h.a, batch);
    if (r.size() != batch.size()) std::_Exit(13);
    for (const tree_call& c : r) {
      opened += c.op.err == 0;
      refused += c.op.err == EMFILE;
      if (c.op.err != 0 && c.op.err != EMFILE) std::_Exit(14);
    }
  }
  if (opened != 512) {
    std::fprintf(stderr, "opened %llu files before EMFILE, not 512\n", (unsigned long long)opened);
    std::_Exit(15);
  }
  // The server has descriptors left for everything else: a new connection,
  // its queue pair (memfds), a dataset read through it.
  try {
    auto link = server_link::connect(sock, "after");
    const uint32_t ns = link->open_dataset({"data", false});
    host_queue_client io(link->open_queue_pair({8, 8, 65536}));
    std::vector<uint8_t> buf(65536);
    if (!io.read(ns, 0, 16, 4096, buf.data()).ok() || buf != pattern(65536, 2)) std::_Exit(16);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "after the opens: %s\n", e.what());
    std::_Exit(17);
  }
  // The opener gone, its descriptors come back to the uid's share.
  close(a);
  bool again = false;
  for (int i = 0; i < 200 && !again; ++i) {
    const int b = hello(sock, "again");
    const wire::message u = call(b, wire::op::open_tree, 0, 0, 8, 8, "src");
    if (u.h.status == 0) {
      const std::vector<tree_call> r = run_ops(b, u.h.a, std::vector<tree_call>(8, op(tree_op_kind::open, 0, 0, "f")));
      again = r.size() == 8 && std::all_of(r.begin(), r.end(), [](const tree_call& c) { return c.op.err == 0; });
    }
    close(b);
    if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server.stop();
  fs::remove_all(base);
  std::_Exit(again ? 0 : 18);
}

}  // namespace

// One uid's tree opens stop at its share of the server's descriptors (a
// quarter of RLIMIT_NOFILE): the server goes on serving, and the share
// comes back when the files close.
TEST(TreeDescriptors, OneUidsOpensStopAtItsShareOfTheServersDescriptors) {
  EXPECT_EXIT(open_files_until_the_share_is_spent(), ::testing::ExitedWithCode(0), "");
}
#endif

// A root server opens a tree's paths with the client's rights, not its
// own: a 0600 file and a 0700 directory under a tree granted to everyone
// stay closed to another uid. And the tree is the directory opened at
// start: swapped afterwards for a link to `/`, sessions still open beneath
// the directory (no /etc/shadow through a renamed tree).
TEST_F(Trees, ATreeIsTheFilesItsClientMayOpenNotTheServers) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: a server that can take on its clients' identities";
  put_file(src / "rootonly", pattern(100, 3));
  ASSERT_EQ(chmod((src / "rootonly").c_str(), 0600), 0);
  put_file(src / "private" / "key", pattern(100, 4));
  ASSERT_EQ(chmod((src / "private").c_str(), 0700), 0);
  fs::rename(src, base / "src-moved");
  fs::create_directory_symlink("/", src);
  auto errors = [&](int s, std::vector<tree_call> calls, std::vector<int>& out) {
    const wire::message t = call(s, wire::op::open_tree, 0, 0, 8, 2, "src");
    if (t.h.status != 0) return false;
    const std::vector<tree_call> r = run_ops(s, t.h.a, std::move(calls));
    for (const tree_call& c : r) out.push_back(c.op.err);
    return !r.empty();
  };
  const std::vector<tree_call> ops = {op(tree_op_kind::open, 0, 0, "f4096"), op(tree_op_kind::open, 0, 0, "rootonly"),
                                      op(tree_op_kind::open, 0, 0, "private/key"),
                                      op(tree_op_kind::opendir, 0, 0, "private"),
                                      op(tree_op_kind::open, 0, 0, "etc/passwd")};
  const pid_t child = fork();
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    const int c = hello(sock, "nobody");
    std::vector<int> e;
    if (c < 0 || !errors(c, ops, e)) _exit(101);
    // Each op's errno in a bit: 0 for f4096, EACCES for the three closed ones, ENOENT for the swap.
    int code = 0;
    if (e[0] != 0) code |= 1;
    if (e[1] != EACCES) code |= 2;
    if (e[2] != EACCES) code |= 4;
    if (e[3] != EACCES) code |= 8;
    if (e[4] != ENOENT) code |= 16;
    _exit(code);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "bits: 1 f4096 refused, 2 a 0600 file opened, 4 a file in a 0700 directory "
                                   "opened, 8 a 0700 directory read, 16 the link to / followed; 100+ setup";
  // Root itself (this process) opens all but the swapped-in path.
  const int a = hello(sock, "root");
  ASSERT_GE(a, 0);
  std::vector<int> e;
  ASSERT_TRUE(errors(a, ops, e));
  EXPECT_EQ(e, (std::vector<int>{0, 0, 0, 0, ENOENT}));
  close(a);
}
