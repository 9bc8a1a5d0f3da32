// Gloo backend: c10d's ProcessGroupGloo from LibTorch, driven with exact-size flat buffers.
#include "comm/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "comm/local_route.h"

namespace zerotrain::comm {
namespace {

// GLOO_SOCKET_IFNAME wins, as in PyTorch; otherwise the address that routes to MASTER_ADDR (not
// the host name's, which is often loopback), so peers on other machines can connect back.
std::shared_ptr<gloo::transport::Device> MakeDevice(const LocalRoute& route) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  return c10d::ProcessGroupGloo::createDeviceForHostname(route.address);
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  return op == ReduceOp::kMax ? c10d::ReduceOp(c10d::ReduceOp::MAX)
                              : c10d::ReduceOp(c10d::ReduceOp::SUM);
}

Work::Step WaitFor(c10::intrusive_ptr<c10d::Work> work, std::chrono::milliseconds timeout) {
  return [work = std::move(work), timeout]() -> absl::Status {
    try {
      work->wait(timeout);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return StatusFromException(e);
    }
  };
}

class GlooBackend : public Backend {
 public:
  GlooBackend(c10::intrusive_ptr<c10d::Backend> pg, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), timeout_(timeout) {}

  c10::DeviceType device_type() const override { return c10::DeviceType::CPU; }

  absl::StatusOr<Transfer> AllReduce(at::Tensor& tensor, ReduceOp op) override {
    return Launch([&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions opts;
      opts.reduceOp = ToC10d(op);
      return pg_->allreduce(tensors, opts);
    });
  }

  absl::StatusOr<Transfer> ReduceScatter(at::Tensor& input, at::Tensor& output,
                                         ReduceOp op) override {
    return Launch([&] {
      c10d::ReduceScatterOptions opts;
      opts.reduceOp = ToC10d(op);
      return pg_->_reduce_scatter_base(output, input, opts);
    });
  }

  // c10d's Gloo has no reduce-scatter of its own: it clones the input, all-reduces the clone and
  // copies this rank's chunk out.
  bool reduce_scatter_copies_input() const override { return true; }

  absl::StatusOr<Transfer> AllGather(at::Tensor& input, at::Tensor& output) override {
    return Launch([&] { return pg_->_allgather_base(output, input); });
  }

  absl::StatusOr<Transfer> AllToAll(at::Tensor& input, at::Tensor& output, int, int) override {
    return Launch([&] {
      std::vector<int64_t> equal_splits;  // empty: equal blocks
      return pg_->alltoall_base(output, input, equal_splits, equal_splits);
    });
  }

  absl::StatusOr<Transfer> Broadcast(at::Tensor& tensor, int root) override {
    return Launch([&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      return pg_->broadcast(tensors, opts);
    });
  }

  absl::StatusOr<Transfer> Barrier() override {
    return Launch([&] { return pg_->barrier(); });
  }

 private:
  template <typename F>
  absl::StatusOr<Transfer> Launch(F&& start) {
    try {
      return Transfer{WaitFor(start(), timeout_)};
    } catch (const std::exception& e) {
      return StatusFromException(e);
    }
  }

  c10::intrusive_ptr<c10d::Backend> pg_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

absl::StatusOr<c10::intrusive_ptr<c10d::Backend>> ConnectGloo(const BackendContext& ctx) {
  const std::string who =
      absl::StrCat("gloo rendezvous of rank ", ctx.rank, " of ", ctx.world_size);
  auto route = ChooseLocalRoute(ctx.master_addr, 0, "GLOO_SOCKET_IFNAME");
  if (!route.ok()) {
    return absl::Status(
        route.status().code(),
        absl::StrCat(who, ": choosing the local address: ", route.status().message()));
  }
  try {
    auto opts = c10d::ProcessGroupGloo::Options::create(ctx.timeout);
    opts->devices.push_back(MakeDevice(*route));
    opts->threads = ctx.gloo_threads;
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(ctx.store, ctx.rank, ctx.world_size, opts));
  } catch (const std::exception& e) {
    absl::Status s = StatusFromException(e);
    return absl::Status(s.code(), absl::StrCat(who, " (timeout ", ctx.timeout.count(),
                                               " ms): ", s.message(), "; ", RouteHint(*route)));
  }
}

absl::StatusOr<std::unique_ptr<Backend>> MakeGlooBackend(const BackendContext& ctx) {
  auto pg = ConnectGloo(ctx);
  if (!pg.ok()) return pg.status();
  return std::unique_ptr<Backend>(new GlooBackend(*std::move(pg), ctx.timeout));
}

}  // namespace zerotrain::comm
