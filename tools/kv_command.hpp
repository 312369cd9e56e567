// `deepwell kv`: the persistent key-value store (docs/kv.md) from the
// command line: create, set (pairs on the command line or a --from file),
// get, delete, info, check. CPU threads through a host page cache by
// default; --gpu runs the batches on the GPU. Keys and values as text
// (kv_values.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/durable/kv_store.hpp"

namespace deepwell::tools {

struct kv_command {
  CLI::App *app = nullptr, *create = nullptr, *set = nullptr, *get = nullptr, *del = nullptr, *info = nullptr,
           *check = nullptr;
  std::string path;
  // create
  durable::kv_config shape;  // --value-bytes, --capacity, --bucket-bytes, --max-probe, --log-rows
  bool force = false;
  // set, get, delete
  std::vector<std::string> args;  // set: KEY VALUE; get, delete: KEY...
  std::string from;               // set --from FILE
  bool hex = false;               // get: every value as hex
  // every verb
  bool gpu = false;
  std::string cache;  // cache size; "" for the default
  unsigned threads = 0;
  std::string server;  // a deepwell serve socket: the path names a dataset it grants for writing
  bool parsed() const { return app && app->parsed(); }
  int run();
};

void add_command(CLI::App& app, kv_command& k);

}  // namespace deepwell::tools
