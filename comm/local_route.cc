// The local address toward MASTER_ADDR, or of a named interface (local_route.h).
#include "comm/local_route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace zerotrain::comm {
namespace {

std::string Text(const in_addr& a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

// The interface carrying IPv4 address `a`, or "".
std::string InterfaceOf(const in_addr& a) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.s_addr) {
      name = i->ifa_name;
    }
  }
  freeifaddrs(list);
  return name;
}

}  // namespace

absl::StatusOr<LocalRoute> RouteToward(const std::string& master_addr, int port) {
  addrinfo hints{};
  addrinfo* res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  const std::string service = std::to_string(port > 0 ? port : 9);
  if (const int rc = getaddrinfo(master_addr.c_str(), service.c_str(), &hints, &res);
      rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_ADDR=", master_addr,
        " does not resolve to an IPv4 address: ", rc != 0 ? gai_strerror(rc) : "no address"));
  }
  const std::string resolved = Text(reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return absl::ResourceExhaustedError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  // A datagram socket's connect only picks the route and source address; nothing is sent.
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (rc == 0) rc = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  const int err = errno;
  close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("no route from this host to MASTER_ADDR=", master_addr, " (", resolved,
                     "): ", std::strerror(err)));
  }
  LocalRoute route;
  route.address = Text(local.sin_addr);
  route.interface = InterfaceOf(local.sin_addr);
  route.reason = absl::StrCat("the route to MASTER_ADDR=", master_addr);
  return route;
}

absl::StatusOr<LocalRoute> InterfaceRoute(const std::string& name, const std::string& variable) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  LocalRoute route;
  for (ifaddrs* i = list; i != nullptr && route.address.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || name != i->ifa_name) {
      continue;
    }
    route.address = Text(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
  }
  freeifaddrs(list);
  if (route.address.empty()) {
    return absl::NotFoundError(
        absl::StrCat(variable, "=", name, ": no such interface with an IPv4 address here"));
  }
  route.interface = name;
  route.reason = absl::StrCat(variable, "=", name);
  return route;
}

absl::StatusOr<LocalRoute> ChooseLocalRoute(const std::string& master_addr, int port,
                                            const char* ifname_variable) {
  if (const char* ifname = std::getenv(ifname_variable); ifname != nullptr && *ifname != '\0') {
    return InterfaceRoute(ifname, ifname_variable);
  }
  return RouteToward(master_addr, port);
}

void PointNcclAtRoute(const std::string& master_addr) {
  if (std::getenv("NCCL_SOCKET_IFNAME") != nullptr) return;
  auto route = RouteToward(master_addr, 0);
  if (route.ok() && !route->interface.empty()) {
    setenv("NCCL_SOCKET_IFNAME", route->interface.c_str(), /*overwrite=*/0);
  }
}

std::string RouteHint(const LocalRoute& route) {
  return absl::StrCat("this rank advertised ", route.address,
                      route.interface.empty() ? "" : absl::StrCat(" (", route.interface, ")"),
                      ", chosen by ", route.reason,
                      "; if the other machines cannot reach that address, set GLOO_SOCKET_IFNAME "
                      "(NCCL_SOCKET_IFNAME for nccl) to an interface they can reach");
}

}  // namespace zerotrain::comm
