// Pairwise TCP connections through the store (see tcp_mesh.h).
#include "comm/tcp_mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/local_route.h"

namespace zerotrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Errno(const std::string& what) {
  return absl::AbortedError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int Remaining(TcpMesh::Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Closes the listening socket on every way out of Connect.
struct ListenerGuard {
  int fd;
  ~ListenerGuard() { close(fd); }
};

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<int> ConnectTo(const std::string& host_port, TcpMesh::Deadline deadline) {
  std::vector<std::string> parts = absl::StrSplit(host_port, ':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port) ||
      inet_pton(AF_INET, parts[0].c_str(), &addr.sin_addr) != 1) {
    return absl::DataLossError(absl::StrCat("malformed peer address '", host_port, "'"));
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  while (true) {  // the peer's listener exists before it publishes, so retries are rare
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return Errno("socket");
    // Non-blocking, so an unreachable peer costs the deadline, not the kernel's SYN retries.
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (poll(&p, 1, Remaining(deadline)) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      fcntl(fd, F_SETFL, flags);
      NoDelay(fd);
      return fd;
    }
    close(fd);
    if (Clock::now() > deadline) return Errno("connecting to " + host_port);
    usleep(10000);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpMesh>> TcpMesh::Connect(const BackendContext& ctx) {
  const auto deadline = Clock::now() + ctx.timeout;
  std::vector<int> fds(ctx.world_size, -1);
  std::unique_ptr<TcpMesh> mesh(new TcpMesh(ctx.rank, fds));
  if (ctx.world_size == 1) return mesh;
  // The address Gloo binds too (gloo_backend.cc): reachable from MASTER_ADDR's machine.
  auto route = ChooseLocalRoute(ctx.master_addr, 0, "GLOO_SOCKET_IFNAME");
  if (!route.ok()) return route.status();
  const std::string* host = &route->address;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return Errno("socket");
  ListenerGuard guard{listener};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, host->c_str(), &addr.sin_addr);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, ctx.world_size) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("listening on " + *host);
  }
  try {
    ctx.store->set(absl::StrCat("mesh/", ctx.rank), absl::StrCat(*host, ":", ntohs(addr.sin_port)));
    for (int peer = ctx.rank + 1; peer < ctx.world_size; ++peer) {
      const std::string key = absl::StrCat("mesh/", peer);
      ctx.store->wait({key}, ctx.timeout);
      std::vector<uint8_t> value = ctx.store->get(key);
      auto fd = ConnectTo(std::string(value.begin(), value.end()), deadline);
      if (!fd.ok()) {
        return absl::Status(
            fd.status().code(),
            absl::StrCat("rank ", peer, ": ", fd.status().message(), "; ", RouteHint(*route)));
      }
      mesh->fds_[peer] = *fd;
      const int32_t me = ctx.rank;
      absl::Status s = mesh->Send(peer, &me, sizeof(me));
      if (!s.ok()) return s;
    }
  } catch (const std::exception& e) {
    return StatusFromException(e);
  }
  for (int accepted = 0; accepted < ctx.rank; ++accepted) {  // the lower ranks connect to us
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, Remaining(deadline)) <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("only ", accepted, " of the ", ctx.rank, " lower ranks connected within ",
                       ctx.timeout.count(), " ms; ", RouteHint(*route)));
    }
    int fd = accept(listener, nullptr, nullptr);
    int32_t peer = -1;
    pollfd q{fd, POLLIN, 0};
    if (fd < 0 || poll(&q, 1, Remaining(deadline)) <= 0 ||
        recv(fd, &peer, sizeof(peer), MSG_WAITALL) != sizeof(peer) || peer < 0 ||
        peer >= ctx.rank || mesh->fds_[peer] >= 0) {
      if (fd >= 0) close(fd);
      return absl::DataLossError("a lower rank's connection sent no valid rank");
    }
    NoDelay(fd);
    mesh->fds_[peer] = fd;
  }
  return mesh;
}

TcpMesh::~TcpMesh() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status TcpMesh::Send(int peer, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fds_[peer], p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno(absl::StrCat("sending to rank ", peer));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status TcpMesh::Recv(int peer, void* data, size_t size, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    pollfd fd{fds_[peer], POLLIN, 0};
    const int ready = poll(&fd, 1, Remaining(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      return absl::DeadlineExceededError(absl::StrCat("rank ", peer, " sent nothing"));
    const ssize_t n = recv(fds_[peer], p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::AbortedError(absl::StrCat("rank ", peer, " closed the connection"));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::comm
