// The server's configuration file (config.hpp says what it holds). Strict
// on purpose: an unknown key is an error, because a misspelt grant or
// limit that is silently ignored is a security bug; every message names
// the file, the line and the key.
#include "deepwell/server/config.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "deepwell/common/size_text.hpp"

namespace deepwell::server {

namespace {

// "FILE:LINE: KEY: problem".
std::string where(const std::string& source, const toml::source_region& r, const std::string& key) {
  std::string w = source;
  if (r.begin.line) w += ":" + std::to_string(r.begin.line);
  return w + ": " + key;
}

[[noreturn]] void fail(const std::string& source, const toml::node& n, const std::string& key, const std::string& why) {
  throw config_error(where(source, n.source(), key) + ": " + why);
}

void check_keys(const std::string& source, const toml::table& t, const std::string& section,
                const std::vector<std::string>& known) {
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    bool ok = false;
    for (const std::string& n : known) ok |= n == key;
    if (ok) continue;
    std::string list;
    for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
    fail(source, v, section + "." + key, "unknown key (known: " + list + ")");
  }
}

// Reads typed values of one table, naming "section.key" in errors.
struct reader {
  const std::string& source;
  const toml::table& t;
  std::string section;

  const toml::node* get(const char* key) const { return t.get(key); }
  std::string name(const char* key) const { return section + "." + key; }

  std::optional<std::string> string(const char* key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) fail(source, *n, name(key), "must be a string");
    return std::string(n->as_string()->get());
  }
  std::optional<bool> boolean(const char* key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_boolean()) fail(source, *n, name(key), "must be true or false");
    return n->as_boolean()->get();
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) fail(source, *n, name(key), "must be an integer");
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi)
      fail(source, *n, name(key), std::to_string(v) + " is out of range (" + std::to_string(lo) + " to " +
                                      std::to_string(hi) + ")");
    return v;
  }
  std::optional<double> number(const char* key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    if (n->is_integer()) return double(n->as_integer()->get());
    if (n->is_floating_point()) return n->as_floating_point()->get();
    fail(source, *n, name(key), "must be a number");
  }
  // A non-empty array of non-empty strings.
  std::optional<std::vector<std::string>> strings(const char* key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    const toml::array* a = n->as_array();
    if (!a || a->empty()) fail(source, *n, name(key), "must be a non-empty array of strings");
    std::vector<std::string> out;
    for (const toml::node& e : *a) {
      if (!e.is_string() || e.as_string()->get().empty()) fail(source, e, name(key), "must hold non-empty strings");
      out.push_back(std::string(e.as_string()->get()));
    }
    return out;
  }
  // An integer, or a string with a unit ("4GiB").
  std::optional<uint64_t> bytes(const char* key) const {
    const toml::node* n = get(key);
    if (!n) return std::nullopt;
    const std::string w = where(source, n->source(), name(key));
    if (n->is_integer()) {
      const int64_t v = n->as_integer()->get();
      if (v < 0) throw config_error(w + ": " + std::to_string(v) + " is negative");
      return uint64_t(v);
    }
    if (n->is_string()) return parse_bytes(n->as_string()->get(), w);
    throw config_error(w + ": must be a size (an integer, or a string such as \"512MiB\")");
  }
};

uint32_t uid_of(const std::string& user, const std::string& w) {
  std::vector<char> buf(16384);
  passwd pw{}, *out = nullptr;
  if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &out) != 0 || !out)
    throw config_error(w + ": no user '" + user + "' on this machine");
  return out->pw_uid;
}

uint32_t gid_of(const std::string& group, const std::string& w) {
  std::vector<char> buf(65536);
  struct group gr{}, *out = nullptr;
  if (getgrnam_r(group.c_str(), &gr, buf.data(), buf.size(), &out) != 0 || !out)
    throw config_error(w + ": no group '" + group + "' on this machine");
  return out->gr_gid;
}

// Exactly one of uid, gid, user, group, everyone.
principal read_principal(const reader& r, const toml::table& t) {
  principal p;
  int n = 0;
  const std::string w = where(r.source, t.source(), r.section);
  if (auto v = r.integer("uid", 0, UINT32_MAX)) p.uid = uint32_t(*v), ++n;
  if (auto v = r.integer("gid", 0, UINT32_MAX)) p.gid = uint32_t(*v), ++n;
  if (auto v = r.string("user")) p.uid = uid_of(*v, where(r.source, r.get("user")->source(), r.name("user"))), ++n;
  if (auto v = r.string("group")) p.gid = gid_of(*v, where(r.source, r.get("group")->source(), r.name("group"))), ++n;
  if (auto v = r.boolean("everyone")) {
    if (!*v) throw config_error(w + ": everyone = false grants nothing: leave it out");
    p.everyone = true;
    ++n;
  }
  if (n != 1)
    throw config_error(w + ": needs exactly one of uid, gid, user, group or everyone = true (has " +
                       std::to_string(n) + ")");
  return p;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// Calls f(reader, table, "name[i]") for each [[name]] section in order,
// after checking its keys against `known`.
template <class F>
void for_each_section(const std::string& source, const toml::table& root, const char* name,
                      const std::vector<std::string>& known, F f) {
  const toml::node* n = root.get(name);
  if (!n) return;
  const toml::array* a = n->as_array();
  if (!a || !a->is_array_of_tables()) fail(source, *n, name, std::string("must be [[") + name + "]] sections");
  int i = 0;
  for (const toml::node& e : *a) {
    const toml::table& t = *e.as_table();
    const std::string sec = std::string(name) + "[" + std::to_string(++i) + "]";
    check_keys(source, t, sec, known);
    f(reader{source, t, sec}, t, sec);
  }
}

}  // namespace

bool principal::matches(uint32_t peer_uid, const std::vector<uint32_t>& peer_gids) const {
  if (everyone) return true;
  if (uid) return *uid == peer_uid;
  if (gid)
    for (uint32_t g : peer_gids)
      if (g == *gid) return true;
  return false;
}

std::string principal::describe() const {
  if (everyone) return "everyone";
  if (uid) return "uid " + std::to_string(*uid);
  if (gid) return "gid " + std::to_string(*gid);
  return "nobody";
}

const dataset_config* server_config::find(std::string_view name) const {
  for (const dataset_config& d : datasets)
    if (d.name == name) return &d;
  return nullptr;
}

std::string default_socket_path() {
  const char* run = std::getenv("XDG_RUNTIME_DIR");
  if (run && *run) return std::string(run) + "/deepwell.sock";
  return "/tmp/deepwell-" + std::to_string(getuid()) + "/deepwell.sock";
}

uint64_t parse_bytes(std::string_view text, const std::string& w) {
  if (const std::optional<uint64_t> b = parse_size(text)) return *b;
  throw config_error(w + ": '" + std::string(text) + "' is not a size " + size_examples);
}

server_config parse_config(std::string_view text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw config_error(source + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  server_config cfg;
  cfg.source = source;
  cfg.socket_path = default_socket_path();
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "server" && key != "dataset" && key != "grant" && key != "share" && key != "operator")
      fail(source, v, key, "unknown section (known: [server], [[dataset]], [[grant]], [[share]], [[operator]])");
  }

  if (const toml::node* n = root.get("server")) {
    const toml::table* t = n->as_table();
    if (!t) fail(source, *n, "server", "must be a [server] section");
    check_keys(source, *t, "server", {"socket", "metrics", "metrics_remote", "metrics_detail", "pollers", "io_budget", "max_queue_pairs", "max_staging",
                "max_clients_per_uid", "max_queue_pairs_per_uid", "max_staging_per_uid", "max_staging_total", "max_sections_per_uid", "max_trees_per_uid", "max_tree_files_per_uid", "max_tree_dirs_per_uid",
                "max_section_sums_per_uid", "host_cache", "host_cache_page",
                "latency_target", "poller_spin_us"});
    const reader r{source, *t, "server"};
    if (auto v = r.string("socket")) {
      if (v->empty() || (*v)[0] != '/') fail(source, *t->get("socket"), "server.socket", "must be an absolute path");
      cfg.socket_path = *v;
    }
    if (auto v = r.string("metrics")) {
      const size_t c = v->rfind(':');
      bool ok = c != std::string::npos && c > 0 && c + 1 < v->size();
      if (ok) {
        const std::string port = v->substr(c + 1);
        ok = port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5 && std::stoi(port) >= 0 &&
             std::stoi(port) <= 65535;
      }
      if (!ok) fail(source, *t->get("metrics"), "server.metrics", "'" + *v + "' is not HOST:PORT (port 0 to 65535; 0: any free port)");
      cfg.metrics = *v;
    }
    cfg.metrics_remote = r.boolean("metrics_remote").value_or(false);
    cfg.metrics_detail = r.boolean("metrics_detail").value_or(false);
    if (auto v = r.integer("pollers", 1, 64)) cfg.pollers = uint32_t(*v);
    if (auto v = r.integer("max_clients_per_uid", 1, 1024)) cfg.max_clients_per_uid = uint32_t(*v);
    if (auto v = r.integer("max_queue_pairs_per_uid", 1, 1 << 20)) cfg.max_queue_pairs_per_uid = uint32_t(*v);
    if (auto v = r.bytes("max_staging_per_uid")) {
      if (*v < (1u << 20)) fail(source, *t->get("max_staging_per_uid"), "server.max_staging_per_uid", "must be at least 1 MiB");
      cfg.max_staging_per_uid = *v;
    }
    if (auto v = r.bytes("max_staging_total")) {
      if (*v < (1u << 20)) fail(source, *t->get("max_staging_total"), "server.max_staging_total", "must be at least 1 MiB");
      cfg.max_staging_total = *v;
    }
    if (auto v = r.integer("max_sections_per_uid", 0, 1024)) cfg.max_sections_per_uid = uint32_t(*v);
    if (auto v = r.integer("max_trees_per_uid", 0, 256)) cfg.max_trees_per_uid = uint32_t(*v);
    if (auto v = r.integer("max_tree_files_per_uid", 1, 1 << 20)) cfg.max_tree_files_per_uid = uint32_t(*v);
    if (auto v = r.integer("max_tree_dirs_per_uid", 1, 1 << 20)) cfg.max_tree_dirs_per_uid = uint32_t(*v);
    if (auto v = r.bytes("max_section_sums_per_uid")) cfg.max_section_sums_per_uid = *v;
    if (auto v = r.bytes("io_budget")) {
      if (*v < 4096) fail(source, *t->get("io_budget"), "server.io_budget", "must be at least 4096 bytes");
      cfg.io_budget_bytes = *v;
    }
    if (auto v = r.number("latency_target")) {
      if (*v != 0 && !(*v >= 1 && *v <= 1000))
        fail(source, *t->get("latency_target"), "server.latency_target", "must be 0 (off) or a factor from 1 to 1000");
      cfg.latency_target = *v;
    }
    if (auto v = r.integer("poller_spin_us", 0, 1000000)) cfg.poller_spin_us = uint32_t(*v);
    if (auto v = r.integer("max_queue_pairs", 1, 65536)) cfg.max_queue_pairs = uint32_t(*v);
    if (auto v = r.bytes("max_staging")) {
      if (*v < (1u << 20)) fail(source, *t->get("max_staging"), "server.max_staging", "must be at least 1 MiB");
      cfg.max_staging_bytes = *v;
    }
    if (auto v = r.bytes("host_cache")) {
      if (*v != 0 && *v < 4096) fail(source, *t->get("host_cache"), "server.host_cache", "must be 0 (none) or at least 4096 bytes");
      cfg.host_cache_bytes = *v;
    }
    if (auto v = r.bytes("host_cache_page")) {
      if (*v < 512 || *v > 65536 || (*v & (*v - 1)))
        fail(source, *t->get("host_cache_page"), "server.host_cache_page",
             "must be a power of two from 512 bytes to 64 KiB");
      cfg.host_cache_page = uint32_t(*v);
    }
  }

  for_each_section(source, root, "dataset",
                   {"name", "file", "device", "nvme", "memory", "tree", "stripe", "mirror", "chunk", "writable", "block_size",
                    "direct", "offset", "length"},
                   [&](const reader& r, const toml::table& t, const std::string& sec) {
    dataset_config d;
    d.line = int(t.source().begin.line);
    const auto name = r.string("name");
    if (!name) throw config_error(where(source, t.source(), sec) + ": needs a name");
    if (!valid_name(*name))
      fail(source, *t.get("name"), sec + ".name", "'" + *name + "': 1 to 64 letters, digits, '-', '_' or '.'");
    if (cfg.find(*name)) fail(source, *t.get("name"), sec + ".name", "'" + *name + "' is already a dataset's name");
    d.name = *name;
    const auto file = r.string("file");
    const auto device = r.string("device");
    const auto nvme = r.string("nvme");
    const auto memory = r.bytes("memory");
    const auto tree = r.string("tree");
    const auto stripe = r.strings("stripe");
    const auto mirror = r.strings("mirror");
    const int kinds = int(bool(file)) + int(bool(device)) + int(bool(nvme)) + int(bool(memory)) + int(bool(tree)) +
                      int(bool(stripe)) + int(bool(mirror));
    if (kinds != 1)
      throw config_error(where(source, t.source(), sec) +
                         ": needs exactly one of file, device, nvme, memory, tree, stripe or mirror (has " +
                         std::to_string(kinds) + ")");
    if (t.get("chunk") && !stripe) fail(source, *t.get("chunk"), sec + ".chunk", "applies to a stripe only");
    if (stripe || mirror) {
      d.kind = stripe ? dataset_config::kind_t::stripe : dataset_config::kind_t::mirror;
      d.members = stripe ? *stripe : *mirror;
      if (d.members.size() > 64)
        fail(source, *t.get(stripe ? "stripe" : "mirror"), sec + (stripe ? ".stripe" : ".mirror"),
             "has " + std::to_string(d.members.size()) + " members; at most 64");
      if (auto v = r.bytes("chunk")) {
        if (*v < 512 || *v > defaults::builtin::max_stripe_chunk || (*v & (*v - 1)))
          fail(source, *t.get("chunk"), sec + ".chunk",
               "must be a power of two from 512 bytes to " + std::to_string(defaults::builtin::max_stripe_chunk >> 20) + " MiB");
        d.chunk = *v;
      }
      for (const char* k : {"offset", "length"})
        if (t.get(k)) fail(source, *t.get(k), sec + "." + k, "does not apply to a stripe or mirror");
    } else if (file) {
      if (file->empty()) fail(source, *t.get("file"), sec + ".file", "is empty");
      d.kind = dataset_config::kind_t::file;
      d.path = *file;
    } else if (tree) {
      if (tree->empty()) fail(source, *t.get("tree"), sec + ".tree", "is empty");
      d.kind = dataset_config::kind_t::tree;
      d.path = *tree;
      for (const char* k : {"block_size", "direct", "offset", "length"})
        if (t.get(k)) fail(source, *t.get(k), sec + "." + k, "does not apply to a tree");
    } else if (nvme) {
      // A namespace served by NVMe passthrough (targets/nvme_passthrough.hpp),
      // or its block device where passthrough is unavailable; always the
      // whole namespace, without the page cache.
      if (nvme->empty()) fail(source, *t.get("nvme"), sec + ".nvme", "is empty");
      d.kind = dataset_config::kind_t::nvme;
      d.path = *nvme;
      for (const char* k : {"direct", "offset", "length"})
        if (t.get(k)) fail(source, *t.get(k), sec + "." + k, "does not apply to an nvme dataset (the whole namespace)");
    } else if (device) {
      if (device->empty()) fail(source, *t.get("device"), sec + ".device", "is empty");
      d.kind = dataset_config::kind_t::device;
      d.path = *device;
    } else {
      if (*memory == 0) fail(source, *t.get("memory"), sec + ".memory", "must be more than 0 bytes");
      d.kind = dataset_config::kind_t::memory;
      d.memory_bytes = *memory;
      for (const char* k : {"direct", "offset", "length"})
        if (t.get(k)) fail(source, *t.get(k), sec + "." + k, "does not apply to a memory dataset");
    }
    d.writable = r.boolean("writable").value_or(false);
    if (auto v = r.integer("block_size", 512, 65536)) {
      if (*v & (*v - 1)) fail(source, *t.get("block_size"), sec + ".block_size", std::to_string(*v) + " is not a power of two");
      d.block_size = uint32_t(*v);
    }
    d.direct = r.boolean("direct").value_or(false);
    d.offset = r.bytes("offset").value_or(0);
    d.length = r.bytes("length").value_or(0);
    cfg.datasets.push_back(std::move(d));
  });
  if (cfg.datasets.empty()) throw config_error(source + ": dataset: no datasets ([[dataset]] sections)");

  for_each_section(source, root, "grant", {"dataset", "uid", "gid", "user", "group", "everyone", "access", "widen"},
                   [&](const reader& r, const toml::table& t, const std::string& sec) {
    grant_config g;
    g.line = int(t.source().begin.line);
    const auto ds = r.string("dataset");
    if (!ds) throw config_error(where(source, t.source(), sec) + ": needs a dataset (a name, or \"*\")");
    const dataset_config* d = *ds == "*" ? nullptr : cfg.find(*ds);
    if (*ds != "*" && !d) fail(source, *t.get("dataset"), sec + ".dataset", "no dataset named '" + *ds + "'");
    g.dataset = *ds;
    g.who = read_principal(r, t);
    g.widen = r.boolean("widen").value_or(false);
    const std::string access = r.string("access").value_or("read");
    if (access == "read-write")
      g.write = true;
    else if (access != "read")
      fail(source, *t.get("access"), sec + ".access", "'" + access + "' is neither \"read\" nor \"read-write\"");
    if (g.write && d && !d->writable)
      fail(source, *t.get("access"), sec + ".access", "read-write on dataset '" + d->name + "', which is not writable");
    cfg.grants.push_back(std::move(g));
  });

  for_each_section(source, root, "share", {"uid", "gid", "user", "group", "everyone", "weight", "rate"},
                   [&](const reader& r, const toml::table& t, const std::string& sec) {
    share_config s;
    s.line = int(t.source().begin.line);
    s.who = read_principal(r, t);
    if (auto w = r.number("weight")) {
      if (!(*w > 0) || *w > 1e6) fail(source, *t.get("weight"), sec + ".weight", "must be above 0 and at most 1e6");
      s.weight = *w;
    }
    s.rate_bytes = r.bytes("rate").value_or(0);
    cfg.shares.push_back(std::move(s));
  });
  for_each_section(source, root, "operator", {"uid", "gid", "user", "group", "everyone"},
                   [&](const reader& r, const toml::table& t, const std::string&) {
    cfg.operators.push_back(read_principal(r, t));
  });
  return cfg;
}

namespace {

// Whether uid with groups gids may open path for reading (and writing),
// by the kernel's own rules: a child process takes that identity and asks
// access(2). Only a root process can take another identity.
bool may_open_as(uint32_t uid, const std::vector<gid_t>& gids, const std::string& path, bool write) {
  const pid_t pid = fork();
  if (pid < 0) return false;  // cannot tell: treat as refused, the operator may widen
  if (pid == 0) {
    // Only system calls from here on (the parent has threads).
    if (setgroups(gids.size() - 1, gids.data() + 1) != 0 || setresgid(gids[0], gids[0], gids[0]) != 0 ||
        setresuid(uid, uid, uid) != 0)
      _exit(2);
    _exit(access(path.c_str(), R_OK | (write ? W_OK : 0)) == 0 ? 0 : 1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

}  // namespace

std::vector<std::string> widening_grants(const server_config& cfg) {
  std::vector<std::string> out;
  if (geteuid() != 0) return out;
  constexpr uint32_t nobody = 65534;
  int i = 0;
  for (const grant_config& g : cfg.grants) {
    ++i;
    if (g.widen) continue;
    // The identity to check as: the uid with its groups, a stranger in
    // the group, or a stranger.
    uint32_t uid = nobody;
    std::vector<gid_t> gids{nobody};
    if (g.who.uid) {
      uid = *g.who.uid;
      if (uid == 0) continue;  // root opens anything itself
      std::vector<char> buf(16384);
      passwd pw{}, *pwo = nullptr;
      if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &pwo) == 0 && pwo) {
        int n = 256;
        std::vector<gid_t> groups(static_cast<size_t>(n));
        if (getgrouplist(pwo->pw_name, pwo->pw_gid, groups.data(), &n) >= 0)
          groups.resize(static_cast<size_t>(n));
        else
          groups = {pwo->pw_gid};
        gids = {pwo->pw_gid};
        gids.insert(gids.end(), groups.begin(), groups.end());
      }
    } else if (g.who.gid) {
      gids = {gid_t(*g.who.gid)};
    }
    for (const dataset_config& d : cfg.datasets) {
      if (g.dataset != "*" && g.dataset != d.name) continue;
      if (d.kind == dataset_config::kind_t::memory) continue;
      const bool write = g.write && d.writable;
      const std::vector<std::string> paths = d.members.empty() ? std::vector<std::string>{d.path} : d.members;
      for (const std::string& path : paths) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) continue;  // missing: the open at start names that, not a grant
        if (may_open_as(uid, gids, path, write)) continue;
        out.push_back(cfg.source + ":" + std::to_string(g.line) + ": grant[" + std::to_string(i) + "]: gives " +
                      g.who.describe() + (write ? " read-write" : " read") + " access to " + path + " (dataset " +
                      d.name + "), which " + g.who.describe() + " could not open " +
                      (write ? "read-write" : "for reading") +
                      " itself: the server (root) would be its deputy. Change the file's permissions, or set widen = "
                      "true on the grant if that is meant");
      }
    }
  }
  return out;
}

server_config load_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw config_error(path + ": cannot read: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw config_error(path + ": cannot read: " + std::strerror(errno));
  return parse_config(ss.str(), path);
}

}  // namespace deepwell::server
