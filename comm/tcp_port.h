// The rendezvous store's port on the machine that hosts it: whether it is free, and a free one for
// a single-node job, so that two jobs on one machine never share a store by accident.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zerotrain::comm {

// A port no socket on this machine is bound to now (the kernel's choice, as torchrun's standalone
// mode makes it). Another process may take it before the store binds it; the store's own bind
// then fails at once (CheckPortFree's error) rather than joining anything.
absl::StatusOr<int> PickFreePort();

// OK when the store could listen on `port` on every address (it binds the wildcard address, with
// SO_REUSEADDR, so a port in TIME_WAIT counts as free). FailedPrecondition when another socket
// holds it (EADDRINUSE); another failure (EACCES below 1024) is Internal naming the errno.
absl::Status CheckPortFree(int port);

}  // namespace zerotrain::comm
