// The server protocol: messages on a Unix SOCK_SEQPACKET socket between a
// client (server_link.hpp) and `deepwell serve` (server/server.hpp). One
// request, one reply, in order; a message is a fixed header and up to
// max_text bytes of text; a reply may carry one descriptor (SCM_RIGHTS):
// a queue pair's memfd, or a dataset's memory or file for the direct tier.
// The server trusts nothing in a request: every field is checked, a
// malformed message fails that request (or, if it cannot be parsed at all,
// ends that client's connection), never the server.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "deepwell/protocol/tree.hpp"

namespace deepwell::wire {

constexpr uint32_t magic = 0x56535744;  // "DWSV"
constexpr uint16_t version = 1;
constexpr size_t max_text = 60 * 1024;  // a message stays under the socket's default buffer
// A text reply (stats, dump, list) longer than max_text comes whole in a
// sealed memfd: h.c = long_text, h.x its bytes, fd. Never cut short.
constexpr uint32_t long_text = 0x4C4F4E47;  // "LONG"
constexpr uint64_t long_text_max = 64ull << 20;

enum class op : uint16_t {
  hello = 1,             // text: the client's name -> a: protocol version, b: client id, text: server
  lookup = 2,            // text: a dataset's name (or its file's path) -> a dataset reply
  info = 3,              // a: nsid -> a dataset reply
  open_queue_pair = 4,   // a: SQ entries, b: CQ entries, c: slot bytes -> a: qid, x: bytes, fd: memfd
  close_queue_pair = 5,  // a: qid
  map_dataset = 6,       // a: nsid -> a: map_kind, b: writable, x: bytes, y: offset in the file, fd
  dump = 7,              // -> text: controller and queue state
  stats = 8,             // -> text: JSON (per client and per dataset)
  list = 9,              // -> text: the datasets this client may see, one "nsid name rights bytes" per line
  map_tier = 10,         // a: nsid -> x: bytes, fd: its host-tier arena, read-only (none: no fd)
  open_section = 11,     // a: dataset nsid, b: block size, c: writable | sums kind << 8, d: sum block,
                         // x: offset, y: bytes, text: 16 bytes (sums offset, sums bytes) -> a dataset reply
  section_checks = 12,   // a: nsid -> x: mismatches, y: last bad block
  set_verify = 13,       // a: nsid, b: on
  open_tree = 14,        // text: a tree dataset's name, b: writable, c: max open files, d: max open directories
                         //   -> a: nsid, b: first window, c: windows, d: writable, x, y: the session's key
                         //   (join_tree), text: description
  tree_ops = 15,         // a: the tree's nsid, b: ops, text: a tree batch (pack_tree_request) -> text: pack_tree_reply
  close_tree = 16,       // a: the tree's nsid (a joined connection: it leaves the session)
  join_tree = 17,        // a: a tree's nsid, x, y: its key -> this connection sends the session's tree_ops too
                         //   (the same uid as the session's owner; it ends with the owner's close_tree)
};

// A dataset reply: a: nsid, b: block size, c: read_only (the dataset),
// d: rights (the bits below), x: bytes, y: blocks, text: description, a newline, and the route
// (who serves it: "deepwell serve at SOCKET (io_uring)").

enum class map_kind : uint32_t { none = 0, file = 1, memory = 2 };

// A client's rights on a dataset as replies carry them (the controller's
// access_grants bits; the server checks they agree).
constexpr uint32_t right_read = 1, right_write = 2;

// Reply status: 0, or one of these, with the message in text.
enum class status : int32_t {
  ok = 0,
  bad_request = 1,    // malformed or out of range
  not_found = 2,      // no such dataset (or none this client may see)
  denied = 3,         // no grant for it
  limit = 4,          // a per-client limit (queue pairs, staging bytes)
  failed = 5,         // the server could not do it (out of memory, stopped)
};

struct header {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint32_t seq;      // a reply echoes its request's
  int32_t status;    // replies
  uint32_t a, b, c, d;
  uint64_t x, y;
  uint32_t text_bytes;
  uint32_t reserved;
};
static_assert(sizeof(header) == 56);

struct message {
  header h{};
  std::string text;
  int fd = -1;  // received or to send; the receiver owns what it got
};

// Sends one message (with h.text_bytes set from text), and fd if >= 0.
// Returns false when the peer is gone (EPIPE, ECONNRESET) or, on a
// non-blocking socket, does not take it (EAGAIN); throws
// deepwell::error for other failures.
bool send_message(int sock, message m);
// Receives one message. Returns false on end of stream (the peer closed).
// Throws deepwell::error for a malformed message (bad size, magic, version,
// text length) or a socket error. Descriptors beyond one are closed; with
// `received`, every descriptor goes there instead (m.fd stays -1), also
// when it throws.
bool receive_message(int sock, message& m, std::vector<int>* received = nullptr);

const char* op_name(uint16_t o);

// A tree batch (tree.hpp) in a message's text: the n ops, then their
// paths (each op's path_bytes). The reply: the ops with their results,
// then readdir's names (each in its op's path_bytes).
std::string pack_tree_request(const tree_call* calls, uint32_t n);
std::string pack_tree_reply(const tree_call* calls, uint32_t n);
// Into calls[0..n): false, with why, when the text is not such a batch.
bool unpack_tree_request(const std::string& text, uint32_t n, tree_call* calls, std::string& why);
bool unpack_tree_reply(const std::string& text, uint32_t n, tree_call* calls);

}  // namespace deepwell::wire
