// Which local address a rank binds and advertises to its peers. A host name often resolves to a
// loopback address (Debian's /etc/hosts maps it to 127.0.1.1), so a rank that advertised its host
// name's address would be unreachable from other machines; the address the kernel would use to
// reach MASTER_ADDR is one that rank 0's machine, at least, can reach back.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace zerotrain::comm {

struct LocalRoute {
  std::string address;    // dotted IPv4, e.g. "10.0.0.2"; "127.0.0.1" toward a local master
  std::string interface;  // its interface, e.g. "eth0" or "lo"; "" when none carries it
  // Where the choice came from, for error messages: "the route to MASTER_ADDR=..." or
  // "GLOO_SOCKET_IFNAME=...".
  std::string reason;
};

// The local IPv4 address (and its interface) that routes to `master_addr` (a host name is
// resolved), found by connecting a UDP socket, which sends nothing. InvalidArgument naming
// MASTER_ADDR when the name does not resolve; Unavailable when no route leads there.
absl::StatusOr<LocalRoute> RouteToward(const std::string& master_addr, int port);

// The first IPv4 address of interface `name`; NotFound naming it (and `variable`, the setting it
// came from) when the interface does not exist or has no IPv4 address.
absl::StatusOr<LocalRoute> InterfaceRoute(const std::string& name, const std::string& variable);

// What a rank binds and advertises: the interface `ifname_variable` names when that environment
// variable is set and not empty (the user's choice wins), else RouteToward(master_addr, port).
absl::StatusOr<LocalRoute> ChooseLocalRoute(const std::string& master_addr, int port,
                                            const char* ifname_variable);

// For NCCL, which picks its own socket interface: sets NCCL_SOCKET_IFNAME to the interface that
// routes to `master_addr`, unless the variable is set already (the user's choice wins) or no
// interface is found (NCCL then chooses as it always does).
void PointNcclAtRoute(const std::string& master_addr);

// What to tell a user whose peers cannot be reached: the address this rank chose and why, and
// the variables that override it. One sentence, no line break.
std::string RouteHint(const LocalRoute& route);

}  // namespace zerotrain::comm
