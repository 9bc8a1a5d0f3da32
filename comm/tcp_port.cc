// Port probes for the rendezvous store (see tcp_port.h): a socket bound and closed at once.
#include "comm/tcp_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerotrain::comm {
namespace {

// Binds a TCP socket to the wildcard address and `port` (0: the kernel chooses); returns the
// bound port, or -errno.
int BindWildcard(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int result = 0;
  socklen_t len = sizeof(addr);
  // A listening socket, as the store's: binding alone would not conflict with a socket that
  // holds the port with SO_REUSEADDR but is not listening yet.
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    result = -errno;
  } else {
    result = ntohs(addr.sin_port);
  }
  close(fd);
  return result;
}

}  // namespace

absl::StatusOr<int> PickFreePort() {
  const int port = BindWildcard(0);
  if (port <= 0) {
    return absl::InternalError(
        absl::StrCat("could not find a free TCP port: ", std::strerror(-port)));
  }
  return port;
}

absl::Status CheckPortFree(int port) {
  const int got = BindWildcard(port);
  if (got > 0) return absl::OkStatus();
  if (got == -EADDRINUSE) {
    return absl::FailedPreconditionError(absl::StrCat("port ", port, " is in use"));
  }
  return absl::InternalError(
      absl::StrCat("cannot listen on port ", port, ": ", std::strerror(-got)));
}

}  // namespace zerotrain::comm
