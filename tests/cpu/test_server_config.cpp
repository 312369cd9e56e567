// The server's configuration: a whole file read back, defaults, and every
// kind of mistake refused with the file, the line and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "../../tools/size_arg.hpp"
#include "deepwell/c/deepwell.h"
#include "deepwell/common/defaults.hpp"
#include "deepwell/common/size_text.hpp"
#include "deepwell/server/config.hpp"
#include "env_guard.hpp"

using namespace deepwell::server;

namespace {

// The message of the config_error that parsing `text` throws ("" if none).
std::string error_of(const std::string& text) {
  try {
    parse_config(text, "bad.toml");
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

const std::string one_dataset = "[[dataset]]\nname = \"d\"\nfile = \"/data/d.bin\"\n";

}  // namespace

TEST(ServerConfig, AWholeFileReadsBack) {
  const server_config c = parse_config(R"(
[server]
socket = "/run/dw.sock"
metrics = "127.0.0.1:9464"
pollers = 3
io_budget = "8MiB"
latency_target = 2.5
poller_spin_us = 500
max_queue_pairs = 32
max_staging = "1GiB"

[[dataset]]
name = "features"
file = "/data/features.bin"
block_size = 512
direct = true
offset = "4KiB"
length = 1048576

[[dataset]]
name = "disk"
device = "/dev/nvme0n1"
writable = true

[[dataset]]
name = "scratch"
memory = "1.5GiB"
writable = true

[[dataset]]
name = "drive"
nvme = "/dev/ng0n1"
writable = true

[[grant]]
dataset = "features"
user = "root"

[[grant]]
dataset = "*"
gid = 100
access = "read-write"

[[share]]
uid = 1000
weight = 2.5
rate = "500MiB"
)",
                                       "full.toml");
  EXPECT_EQ(c.source, "full.toml");
  EXPECT_EQ(c.socket_path, "/run/dw.sock");
  EXPECT_EQ(c.metrics, "127.0.0.1:9464");
  EXPECT_EQ(c.pollers, 3u);
  EXPECT_EQ(c.io_budget_bytes, 8u << 20);
  EXPECT_EQ(c.latency_target, 2.5);
  EXPECT_EQ(c.poller_spin_us, 500u);
  EXPECT_EQ(c.max_queue_pairs, 32u);
  EXPECT_EQ(c.max_staging_bytes, 1u << 30);
  ASSERT_EQ(c.datasets.size(), 4u);
  const dataset_config& f = c.datasets[0];
  EXPECT_EQ(f.kind, dataset_config::kind_t::file);
  EXPECT_EQ(f.path, "/data/features.bin");
  EXPECT_EQ(f.block_size, 512u);
  EXPECT_TRUE(f.direct);
  EXPECT_FALSE(f.writable);
  EXPECT_EQ(f.offset, 4096u);
  EXPECT_EQ(f.length, 1u << 20);
  EXPECT_EQ(f.line, 12);
  EXPECT_EQ(c.datasets[1].kind, dataset_config::kind_t::device);
  EXPECT_TRUE(c.datasets[1].writable);
  EXPECT_EQ(c.datasets[2].kind, dataset_config::kind_t::memory);
  EXPECT_EQ(c.datasets[2].memory_bytes, 3ull << 29);
  EXPECT_EQ(c.find("scratch"), &c.datasets[2]);
  EXPECT_EQ(c.datasets[3].kind, dataset_config::kind_t::nvme);
  EXPECT_EQ(c.datasets[3].path, "/dev/ng0n1");
  EXPECT_TRUE(c.datasets[3].writable);
  EXPECT_EQ(c.find("nope"), nullptr);
  ASSERT_EQ(c.grants.size(), 2u);
  EXPECT_EQ(c.grants[0].who.uid, 0u) << "user root";
  EXPECT_FALSE(c.grants[0].write);
  EXPECT_EQ(c.grants[1].dataset, "*");
  EXPECT_EQ(c.grants[1].who.gid, 100u);
  EXPECT_TRUE(c.grants[1].write);
  ASSERT_EQ(c.shares.size(), 1u);
  EXPECT_DOUBLE_EQ(c.shares[0].weight, 2.5);
  EXPECT_EQ(c.shares[0].rate_bytes, 500ull << 20);
}

TEST(ServerConfig, DefaultsAndTheSocketFromTheRuntimeDirectory) {
  deepwell::test::env_var_guard g("XDG_RUNTIME_DIR", "/run/user/77");
  const server_config c = parse_config(one_dataset);
  EXPECT_EQ(c.socket_path, "/run/user/77/deepwell.sock");
  EXPECT_EQ(c.pollers, deepwell::defaults::pollers()) << "the library's rule, as in a program's own controller";
  {
    deepwell::test::env_var_guard p("DEEPWELL_POLLERS", "5");
    EXPECT_EQ(parse_config(one_dataset).pollers, 5u);
  }
  EXPECT_TRUE(c.metrics.empty());
  EXPECT_EQ(c.latency_target, 2.0) << "on by default: it acts only while clients share";
  EXPECT_EQ(parse_config("[server]\nlatency_target = 0\n" + one_dataset).latency_target, 0.0) << "0 turns it off";
  EXPECT_FALSE(c.poller_spin_us) << "absent: the server picks (DEEPWELL_POLLER_SPIN_US where set, else 1000)";
  EXPECT_EQ(c.datasets[0].block_size, 4096u);
  EXPECT_EQ(c.host_cache_page, 4096u);
  EXPECT_EQ(parse_config("[server]\nhost_cache_page = \"64KiB\"\n" + one_dataset).host_cache_page, 65536u);
  EXPECT_TRUE(c.grants.empty()) << "no grants: nobody may read anything";
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(default_socket_path(), "/tmp/deepwell-" + std::to_string(getuid()) + "/deepwell.sock")
      << "a directory of the user's own: a socket file in /tmp itself could be squatted";
}

TEST(ServerConfig, MistakesNameTheFileTheLineAndTheKey) {
  struct bad {
    std::string text, expect;
  } cases[] = {
      {one_dataset + "writeable = true\n", "bad.toml:4: dataset[1].writeable: unknown key"},
      {"[server]\npollers = \"two\"\n" + one_dataset, "bad.toml:2: server.pollers: must be an integer"},
      {"[server]\npollers = 0\n" + one_dataset, "server.pollers: 0 is out of range"},
      {one_dataset + "block_size = 3000\n", "bad.toml:4: dataset[1].block_size: 3000 is not a power of two"},
      {one_dataset + one_dataset, "bad.toml:5: dataset[2].name: 'd' is already a dataset's name"},
      {one_dataset + "memory = \"1GiB\"\n", "bad.toml:1: dataset[1]: needs exactly one of file, device, nvme, memory, tree, stripe or mirror"},
      {"[[dataset]]\nname = \"n\"\nnvme = \"/dev/ng0n1\"\noffset = 4096\n",
       "bad.toml:4: dataset[1].offset: does not apply to an nvme dataset"},
      {"[[dataset]]\nname = \"n\"\nnvme = \"\"\n", "bad.toml:3: dataset[1].nvme: is empty"},
      {"[[dataset]]\nname = \"m\"\nmemory = \"1G\"\ndirect = true\n", "dataset[1].direct: does not apply"},
      {one_dataset + "[[grant]]\ndataset = \"e\"\nuid = 1\n", "bad.toml:5: grant[1].dataset: no dataset named 'e'"},
      {one_dataset + "[[grant]]\ndataset = \"d\"\nuid = 1\ngid = 2\n", "grant[1]: needs exactly one of uid"},
      {one_dataset + "[[grant]]\ndataset = \"d\"\nuid = 1\naccess = \"read-write\"\n",
       "bad.toml:7: grant[1].access: read-write on dataset 'd', which is not writable"},
      {one_dataset + "[[grant]]\ndataset = \"d\"\nuser = \"no-such-user-deepwell\"\n",
       "grant[1].user: no user 'no-such-user-deepwell'"},
      {"[server]\nio_budget = \"lots\"\n" + one_dataset, "bad.toml:2: server.io_budget: 'lots' is not a size"},
      {"[server]\nlatency_target = 0.5\n" + one_dataset, "bad.toml:2: server.latency_target: must be 0 (off) or a factor"},
      {"[server]\nlatency_target = \"2x\"\n" + one_dataset, "bad.toml:2: server.latency_target: must be a number"},
      {"[server]\npoller_spin_us = -1\n" + one_dataset,
       "bad.toml:2: server.poller_spin_us: -1 is out of range (0 to 1000000)"},
      {"[server]\nhost_cache_page = \"3000\"\n" + one_dataset,
       "bad.toml:2: server.host_cache_page: must be a power of two from 512 bytes to 64 KiB"},
      {"[server]\nhost_cache_page = \"128KiB\"\n" + one_dataset, "server.host_cache_page: must be a power of two"},
      {"[server]\nmetrics = \"9464\"\n" + one_dataset, "server.metrics: '9464' is not HOST:PORT"},
      {"[server]\nsocket = \"rel.sock\"\n" + one_dataset, "server.socket: must be an absolute path"},
      {one_dataset + "[[share]]\neveryone = true\nweight = 0\n", "share[1].weight: must be above 0"},
      {one_dataset + "[servers]\n", "servers: unknown section"},
      {"[server]\npollers = = 2\n", "bad.toml:2: "},
      {"[server]\n", "bad.toml: dataset: no datasets"},
      {"[[dataset]]\nname = \"t\"\ntree = \"/tmp\"\nblock_size = 4096\n", "dataset[1].block_size: does not apply to a tree"},
      {"[[dataset]]\nname = \"t\"\ntree = \"\"\n", "dataset[1].tree: is empty"},
      {"[server]\nmax_trees_per_uid = 1000\n" + one_dataset, "server.max_trees_per_uid"},
  };
  for (const bad& b : cases) {
    const std::string e = error_of(b.text);
    EXPECT_NE(e.find(b.expect), std::string::npos) << "config:\n" << b.text << "\nerror: " << e;
  }
}

TEST(ServerConfig, SizesTakeUnits) {
  EXPECT_EQ(parse_bytes("4096", "x"), 4096u);
  EXPECT_EQ(parse_bytes("4K", "x"), 4096u);
  EXPECT_EQ(parse_bytes("4k", "x"), 4096u);
  EXPECT_EQ(parse_bytes("512 MiB", "x"), 512u << 20);
  EXPECT_EQ(parse_bytes("1.5GiB", "x"), 3ull << 29);
  EXPECT_EQ(parse_bytes("2T", "x"), 2ull << 40);
  for (const char* junk : {"", "-1", "1.5", "12 parsecs", "GiB", "1e30GiB", " 4"})
    EXPECT_THROW(parse_bytes(junk, "x"), config_error) << junk;
}

// One rule for a size in every place a user writes one: the library's
// parser, the C ABI (Python's), the environment, the server's TOML and the
// command line give the same bytes for the same text, and refuse the same
// junk.
TEST(Sizes, OneRuleInEveryPlace) {
  const std::pair<const char*, uint64_t> good[] = {
      {"4096", 4096},         {"512K", 512ull << 10}, {"512k", 512ull << 10},  {"8kb", 8192},
      {"64MiB", 64ull << 20}, {"64 MiB", 64ull << 20}, {"1.5GiB", 3ull << 29}, {"1TiB", 1ull << 40},
      {"2tb", 2ull << 40},    {"0.5K", 512},           {"1M", 1ull << 20},     {"700B", 700}};
  for (const auto& [text, bytes] : good) {
    EXPECT_EQ(deepwell::parse_size(text), bytes) << text;
    uint64_t c = 0;
    EXPECT_EQ(dw_parse_size(text, &c), DW_OK) << text;
    EXPECT_EQ(c, bytes) << text;
    EXPECT_EQ(parse_bytes(text, "x"), bytes) << text;
    EXPECT_EQ(deepwell::tools::parse_size_arg(text, "--cache"), bytes) << text;
    deepwell::test::env_var_guard g("DEEPWELL_CACHE_BYTES", text);
    EXPECT_EQ(deepwell::defaults::cache_bytes(), bytes) << text;
  }
  for (const char* junk : {"", "lots", "-1", "+4", " 4", "1.5", "1e3", "0x10", "12PB", "1 gigabyte", "4k?",
                           "99999999TiB", "1  GiB", "GiB"}) {
    EXPECT_FALSE(deepwell::parse_size(junk).has_value()) << junk;
    uint64_t c = 0;
    EXPECT_EQ(dw_parse_size(junk, &c), DW_EINVAL) << junk;
    EXPECT_NE(std::string(dw_last_error()).find("is not a size"), std::string::npos) << dw_last_error();
    EXPECT_THROW(parse_bytes(junk, "x"), config_error) << junk;
    EXPECT_THROW(deepwell::tools::parse_size_arg(junk, "--cache"), deepwell::error) << junk;
    deepwell::test::env_var_guard g("DEEPWELL_CACHE_BYTES", junk);
    if (*junk) EXPECT_THROW(deepwell::defaults::cache_bytes(), deepwell::error) << junk;  // empty: unset
  }
}

TEST(ServerConfig, AMissingFileIsAConfigError) {
  try {
    load_config("/nonexistent/deepwell.toml");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/deepwell.toml: cannot read"), std::string::npos);
  }
}

TEST(ServerConfig, PrincipalsMatchByUidGroupOrEveryone) {
  principal u;
  u.uid = 1000;
  principal g;
  g.gid = 27;
  principal all;
  all.everyone = true;
  EXPECT_TRUE(u.matches(1000, {100}));
  EXPECT_FALSE(u.matches(1001, {1000}));
  EXPECT_TRUE(g.matches(5, {100, 27}));
  EXPECT_FALSE(g.matches(27, {100}));
  EXPECT_TRUE(all.matches(12345, {}));
  EXPECT_EQ(u.describe(), "uid 1000");
  EXPECT_EQ(all.describe(), "everyone");
}

TEST(ServerConfig, ArraysOfDrivesNameTheirMembers) {
  const server_config c = parse_config(R"(
[[dataset]]
name = "s"
stripe = ["/data/a.bin", "/data/b.bin"]
chunk = "16KiB"
[[dataset]]
name = "m"
mirror = ["/data/c.bin", "/data/d.bin", "/data/e.bin"]
writable = true
)");
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0].kind, dataset_config::kind_t::stripe);
  EXPECT_EQ(c.datasets[0].members, (std::vector<std::string>{"/data/a.bin", "/data/b.bin"}));
  EXPECT_EQ(c.datasets[0].chunk, 16384u);
  EXPECT_EQ(c.datasets[1].kind, dataset_config::kind_t::mirror);
  EXPECT_EQ(c.datasets[1].members.size(), 3u);
  EXPECT_EQ(c.datasets[1].chunk, 65536u) << "the default chunk";
  const std::string head = "[[dataset]]\nname = \"s\"\n";
  EXPECT_NE(error_of(head + "stripe = []\n").find("dataset[1].stripe: must be a non-empty array of strings"), std::string::npos);
  EXPECT_NE(error_of(head + "stripe = [\"/a\", 3]\n").find("must hold non-empty strings"), std::string::npos);
  EXPECT_NE(error_of(head + "stripe = [\"/a\", \"\"]\n").find("must hold non-empty strings"), std::string::npos);
  EXPECT_NE(error_of(head + "stripe = [\"/a\"]\nfile = \"/b\"\n").find("exactly one of"), std::string::npos);
  EXPECT_NE(error_of(head + "mirror = [\"/a\"]\nchunk = 4096\n").find("dataset[1].chunk: applies to a stripe only"),
            std::string::npos);
  EXPECT_NE(error_of(head + "stripe = [\"/a\"]\nchunk = 3000\n").find("power of two"), std::string::npos);
  EXPECT_NE(error_of(head + "stripe = [\"/a\"]\noffset = 4096\n").find("does not apply to a stripe or mirror"),
            std::string::npos);
}
