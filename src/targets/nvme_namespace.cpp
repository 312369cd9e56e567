// A namespace's geometry from sysfs: its block device's attributes are
// readable by anyone, where Identify Namespace by admin passthrough needs
// CAP_SYS_ADMIN (Linux 6.1; 6.2 lets the file's mode decide for Identify
// too, but sysfs works on both).
#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/nvme_passthrough.hpp"

namespace deepwell {
namespace {

// "ng0n1" and "nvme0n1" name the same namespace: X is the controller's
// instance, Y the namespace's (without multipath; with it, the head).
bool digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// "XnY" of a name, or "" when it is not an NVMe namespace's name.
std::string instance_of(const std::string& name) {
  std::string rest;
  if (name.rfind("ng", 0) == 0)
    rest = name.substr(2);
  else if (name.rfind("nvme", 0) == 0)
    rest = name.substr(4);
  else
    return "";
  const size_t n = rest.find('n');
  if (n == std::string::npos || !digits(rest.substr(0, n)) || !digits(rest.substr(n + 1))) return "";
  return rest;
}

std::string read_attr(const std::string& dir, const std::string& attr, const std::string& path) {
  std::ifstream f(dir + "/" + attr);
  std::string v;
  if (!f || !std::getline(f, v))
    throw error(path + ": cannot read " + dir + "/" + attr + " (is sysfs mounted, and is this an NVMe namespace?)");
  return v;
}

uint64_t number_attr(const std::string& dir, const std::string& attr, const std::string& path) {
  const std::string v = read_attr(dir, attr, path);
  try {
    size_t used = 0;
    const uint64_t n = std::stoull(v, &used, 0);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  throw error(path + ": " + dir + "/" + attr + " holds '" + v + "', not a number");
}

}  // namespace

nvme_namespace_info nvme_namespace(const std::string& path) {
  const std::string name = path.substr(path.rfind('/') + 1);
  const std::string inst = instance_of(name);
  if (inst.empty())
    throw error(path + ": not an NVMe namespace's device name (/dev/ngXnY or /dev/nvmeXnY)");
  nvme_namespace_info ns;
  const std::string dev = path.substr(0, path.size() - name.size());
  ns.char_path = dev + "ng" + inst;
  ns.block_path = dev + "nvme" + inst;
  const std::string sys = "/sys/block/nvme" + inst;
  ns.nsid = uint32_t(number_attr(sys, "nsid", path));
  ns.lba_bytes = uint32_t(number_attr(sys + "/queue", "logical_block_size", path));
  if (ns.lba_bytes < 512 || (ns.lba_bytes & (ns.lba_bytes - 1)))
    throw error(path + ": logical block size " + std::to_string(ns.lba_bytes) + " is not a power of two >= 512");
  // `size` counts 512-byte sectors whatever the LBA size.
  ns.lbas = number_attr(sys, "size", path) * 512 / ns.lba_bytes;
  ns.read_only = number_attr(sys, "ro", path) != 0;
  ns.poll_queues = number_attr(sys + "/queue", "io_poll", path) != 0;
  // One command's largest transfer: the controller's limit (MDTS, as
  // max_hw_sectors_kb), and what a buffer of 4 KiB pages one segment each
  // fits in max_segments, less one for a buffer that does not start on a
  // page; in whole LBAs.
  const uint64_t hw = number_attr(sys + "/queue", "max_hw_sectors_kb", path) * 1024;
  const uint64_t segs = number_attr(sys + "/queue", "max_segments", path);
  uint64_t most = std::min<uint64_t>(hw, segs > 1 ? (segs - 1) * 4096 : 4096);
  most = std::min<uint64_t>(most, 1u << 30) / ns.lba_bytes * ns.lba_bytes;
  if (most == 0) throw error(path + ": the device takes less than one logical block a command");
  ns.max_transfer = uint32_t(most);
  return ns;
}

}  // namespace deepwell
