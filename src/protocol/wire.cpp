// Framing of server messages: one SOCK_SEQPACKET record each, header then
// text, with at most one descriptor in SCM_RIGHTS.
#include "protocol/wire.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "deepwell/common/error.hpp"

namespace deepwell::wire {

bool send_message(int sock, message m) {
  if (m.text.size() > max_text) m.text.resize(max_text);
  m.h.magic = magic;
  m.h.version = version;
  m.h.text_bytes = uint32_t(m.text.size());
  iovec iov[2] = {{&m.h, sizeof(m.h)}, {m.text.data(), m.text.size()}};
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = m.text.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (m.fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &m.fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n >= 0) return true;
    if (errno == EINTR) continue;
    // EAGAIN: a non-blocking socket (the server's) whose peer does not
    // read its replies; the server drops such a client rather than wait.
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == EAGAIN) return false;
    throw error(errno_message("sending to the deepwell server socket", errno));
  }
}

bool receive_message(int sock, message& m, std::vector<int>* received) {
  m = message{};
  std::vector<char> buf(sizeof(header) + max_text + 1);
  iovec iov{buf.data(), buf.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  ssize_t n;
  for (;;) {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return false;
    throw error(errno_message("receiving from the deepwell socket", errno));
  }
  // Keep at most one descriptor; close any others a peer sent (or, with
  // `received`, hand every one to the caller, who closes them where a
  // close that waits harms nobody).
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (received)
        received->push_back(fd);
      else if (m.fd < 0)
        m.fd = fd;
      else
        close(fd);
    }
  }
  auto fail = [&](const std::string& why) {
    if (m.fd >= 0) close(m.fd);
    m.fd = -1;
    throw error("malformed deepwell message: " + why);
  };
  if (n == 0) {
    if (m.fd >= 0) close(m.fd);
    m.fd = -1;
    return false;  // SEQPACKET: a zero-length read is the end of the stream
  }
  if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) fail("longer than " + std::to_string(buf.size() - 1) + " bytes");
  if (size_t(n) < sizeof(header)) fail(std::to_string(n) + " bytes, shorter than a header");
  std::memcpy(&m.h, buf.data(), sizeof(header));
  if (m.h.magic != magic) fail("bad magic");
  if (m.h.version != version)
    fail("protocol version " + std::to_string(m.h.version) + ", this side speaks " + std::to_string(version));
  if (m.h.text_bytes != size_t(n) - sizeof(header) || m.h.text_bytes > max_text) fail("text length does not match");
  m.text.assign(buf.data() + sizeof(header), m.h.text_bytes);
  return true;
}

const char* op_name(uint16_t o) {
  switch (op(o)) {
    case op::hello: return "hello";
    case op::lookup: return "lookup";
    case op::info: return "info";
    case op::open_queue_pair: return "open_queue_pair";
    case op::close_queue_pair: return "close_queue_pair";
    case op::map_dataset: return "map_dataset";
    case op::map_tier: return "map_tier";
    case op::dump: return "dump";
    case op::stats: return "stats";
    case op::list: return "list";
    case op::open_section: return "open_section";
    case op::section_checks: return "section_checks";
    case op::set_verify: return "set_verify";
    case op::open_tree: return "open_tree";
    case op::tree_ops: return "tree_ops";
    case op::close_tree: return "close_tree";
    case op::join_tree: return "join_tree";
  }
  return "unknown";
}

namespace {

std::string pack(const tree_call* calls, uint32_t n, bool reply) {
  std::string out(size_t(n) * sizeof(tree_op), '\0');
  for (uint32_t i = 0; i < n; ++i) {
    tree_op op = calls[i].op;
    const std::string& s = reply ? calls[i].name : calls[i].path;
    op.path_bytes = uint32_t(s.size());
    std::memcpy(&out[size_t(i) * sizeof(tree_op)], &op, sizeof op);
  }
  for (uint32_t i = 0; i < n; ++i) out += reply ? calls[i].name : calls[i].path;
  return out;
}

bool unpack(const std::string& text, uint32_t n, tree_call* calls, bool reply, std::string& why) {
  if (n == 0 || n > tree_batch_max) {
    why = "a tree batch of " + std::to_string(n) + " ops (1 to " + std::to_string(tree_batch_max) + ")";
    return false;
  }
  const size_t head = size_t(n) * sizeof(tree_op);
  if (text.size() < head) {
    why = "a tree batch shorter than its ops";
    return false;
  }
  size_t at = head;
  for (uint32_t i = 0; i < n; ++i) {
    tree_op op;
    std::memcpy(&op, &text[size_t(i) * sizeof(tree_op)], sizeof op);
    if (op.path_bytes > tree_path_max || op.path_bytes > text.size() - at) {
      why = "a tree op whose path is longer than the batch or than " + std::to_string(tree_path_max) + " bytes";
      return false;
    }
    (reply ? calls[i].name : calls[i].path).assign(text, at, op.path_bytes);
    at += op.path_bytes;
    if (reply) {
      op.path_bytes = uint32_t(calls[i].path.size());  // the request's
      op.kind = calls[i].op.kind;
    }
    calls[i].op = op;
  }
  if (at != text.size()) {
    why = "a tree batch with bytes after its paths";
    return false;
  }
  return true;
}

}  // namespace

std::string pack_tree_request(const tree_call* calls, uint32_t n) { return pack(calls, n, false); }
std::string pack_tree_reply(const tree_call* calls, uint32_t n) { return pack(calls, n, true); }
bool unpack_tree_request(const std::string& text, uint32_t n, tree_call* calls, std::string& why) {
  return unpack(text, n, calls, false, why);
}
bool unpack_tree_reply(const std::string& text, uint32_t n, tree_call* calls) {
  std::string why;
  return unpack(text, n, calls, true, why);
}

}  // namespace deepwell::wire
