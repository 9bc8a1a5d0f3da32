// Liveness pings over UDP (peer_probe.h).
#include "comm/peer_probe.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::comm {
namespace {

constexpr uint32_t kMagic = 0x7a747072;  // "ztpr"
constexpr auto kResend = std::chrono::milliseconds(100);

struct Message {
  uint32_t magic;
  uint32_t pong;  // 0: ping, 1: the answer
  int32_t rank;   // the sender's
  uint32_t pad;
  uint64_t nonce;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PeerProbe>> PeerProbe::Connect(const BackendContext& ctx,
                                                              const std::string& address) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ResourceExhaustedError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  socklen_t len = sizeof(local);
  if (inet_pton(AF_INET, address.c_str(), &local.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("peer probe: binding a UDP socket on ", address, ": ", std::strerror(err)));
  }
  std::vector<sockaddr_in> peers(ctx.world_size);
  try {
    ctx.store->set(absl::StrCat("probe/", ctx.rank),
                   absl::StrCat(address, ":", ntohs(local.sin_port)));
    for (int r = 0; r < ctx.world_size; ++r) {
      if (r == ctx.rank) continue;
      const std::string key = absl::StrCat("probe/", r);
      ctx.store->wait({key}, ctx.timeout);
      const std::vector<uint8_t> value = ctx.store->get(key);
      const std::string text(value.begin(), value.end());
      const size_t colon = text.rfind(':');
      int port = 0;
      peers[r].sin_family = AF_INET;
      if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(colon + 1), &port) ||
          inet_pton(AF_INET, text.substr(0, colon).c_str(), &peers[r].sin_addr) != 1) {
        close(fd);
        return absl::DataLossError(absl::StrCat("peer probe: rank ", r, " published '", text, "'"));
      }
      peers[r].sin_port = htons(static_cast<uint16_t>(port));
    }
  } catch (const std::exception& e) {
    close(fd);
    return StatusFromException(e);
  }
  return std::unique_ptr<PeerProbe>(new PeerProbe(ctx.rank, fd, std::move(peers)));
}

PeerProbe::PeerProbe(int rank, int fd, std::vector<sockaddr_in> peers)
    : rank_(rank),
      fd_(fd),
      peers_(std::move(peers)),
      answered_(peers_.size(), false),
      server_([this] { Serve(); }) {}

PeerProbe::~PeerProbe() {
  stop_ = true;
  server_.join();
  close(fd_);
}

void PeerProbe::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    Message m{};
    sockaddr_in from{};
    socklen_t len = sizeof(from);
    if (recvfrom(fd_, &m, sizeof(m), 0, reinterpret_cast<sockaddr*>(&from), &len) != sizeof(m) ||
        m.magic != kMagic || m.rank < 0 || m.rank >= static_cast<int>(peers_.size())) {
      continue;
    }
    if (m.pong == 0) {
      const Message answer{kMagic, 1, rank_, 0, m.nonce};
      sendto(fd_, &answer, sizeof(answer), 0, reinterpret_cast<sockaddr*>(&from), len);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (m.nonce == nonce_) {
      answered_[m.rank] = true;
      answered_cv_.notify_all();
    }
  }
}

std::vector<int> PeerProbe::Silent(std::chrono::milliseconds wait) {
  const int world = static_cast<int>(peers_.size());
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock<std::mutex> lock(mu_);
  const Message ping{kMagic, 0, rank_, 0, ++nonce_};
  answered_.assign(world, false);
  answered_[rank_] = true;
  auto all = [&] {
    for (bool a : answered_) {
      if (!a) return false;
    }
    return true;
  };
  while (!all() && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < world; ++r) {
      if (answered_[r]) continue;
      sendto(fd_, &ping, sizeof(ping), 0, reinterpret_cast<const sockaddr*>(&peers_[r]),
             sizeof(peers_[r]));
    }
    answered_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kResend),
                            all);
  }
  std::vector<int> silent;
  for (int r = 0; r < world; ++r) {
    if (!answered_[r]) silent.push_back(r);
  }
  return silent;
}

}  // namespace zerotrain::comm
