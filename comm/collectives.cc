// ProcessGroup's collectives: argument checks, padding of flat buffers to equal shards, and
// averaging as a sum followed by a division, so every backend only moves exact-size buffers.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "absl/strings/str_cat.h"
#include "comm/backend.h"
#include "comm/process_group.h"

namespace zerotrain::comm {
namespace {

at::ScalarType DtypeOf(const at::Tensor& t) { return t.defined() ? t.scalar_type() : at::kByte; }

ReduceOp OnWire(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

absl::Status CheckReduce(const at::Tensor& t, ReduceOp op) {
  if (op == ReduceOp::kAvg && !at::isFloatingType(t.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("avg needs a floating-point tensor, got ", c10::toString(t.scalar_type())));
  }
  return absl::OkStatus();
}

// Divides by the world size after the sum, when averaging.
void AddAverage(std::vector<Work::Step>& after, ReduceOp op, at::Tensor t, int world_size) {
  if (op != ReduceOp::kAvg) return;
  after.push_back([t, world_size]() mutable {
    t.div_(world_size);
    return absl::OkStatus();
  });
}

}  // namespace

void HostDeviceCopies::Count(const at::Tensor& from, const at::Tensor& to) {
  const int64_t bytes = static_cast<int64_t>(from.nbytes());
  if (from.is_cpu() && !to.is_cpu()) host_to_device_ += bytes;
  if (!from.is_cpu() && to.is_cpu()) device_to_host_ += bytes;
}

at::Tensor ProcessGroup::Staged(const at::Tensor& t, bool copy_back,
                                std::vector<Work::Step>* after) const {
  if (t.device().type() == backend_->device_type()) return t;
  at::Tensor wire = t.to(device(), /*non_blocking=*/false, /*copy=*/true);
  staging_->Count(t, wire);
  if (copy_back) {
    after->push_back([t, wire, counters = staging_]() mutable {
      t.copy_(wire);
      counters->Count(wire, t);
      return absl::OkStatus();
    });
  }
  return wire;
}

Work ProcessGroup::AllReduceAsync(at::Tensor tensor, ReduceOp op) {
  const OpDesc desc = NextOp(CollectiveKind::kAllReduce, DtypeOf(tensor),
                             tensor.defined() ? tensor.numel() : 0, op, 0);
  absl::Status valid = CheckTensor(tensor, "all_reduce tensor");
  if (valid.ok()) valid = CheckReduce(tensor, op);
  std::vector<Work::Step> after, back;
  at::Tensor wire;
  if (valid.ok()) {
    wire = Staged(tensor, /*copy_back=*/true, &back);
    AddAverage(after, op, wire, world_size_);
    for (Work::Step& s : back) after.push_back(std::move(s));
  }
  // Launches may run later, on the launcher thread: they hold their own tensor handles.
  return Issue(
      desc, valid, [this, wire, op]() mutable { return backend_->AllReduce(wire, OnWire(op)); },
      std::move(after));
}

Work ProcessGroup::ReduceScatterAsync(at::Tensor input, at::Tensor output, ReduceOp op) {
  const int64_t n = input.defined() ? input.numel() : 0;
  const int64_t shard = ShardNumel(n, world_size_);
  const OpDesc desc = NextOp(CollectiveKind::kReduceScatter, DtypeOf(input), n, op, 0);
  absl::Status valid = CheckTensor(input, "reduce_scatter input");
  if (valid.ok()) valid = CheckTensor(output, "reduce_scatter output");
  if (valid.ok()) valid = CheckReduce(input, op);
  if (valid.ok() && output.scalar_type() != input.scalar_type()) {
    valid = absl::InvalidArgumentError("reduce_scatter output dtype differs from the input's");
  }
  if (valid.ok() && output.numel() != shard) {
    valid = absl::InvalidArgumentError(absl::StrCat("reduce_scatter output has ", output.numel(),
                                                    " elements, the shard of ", n, " over ",
                                                    world_size_, " ranks has ", shard));
  }
  std::vector<Work::Step> after, back;
  at::Tensor send, recv;
  if (valid.ok()) {
    send = Staged(input.view({-1}), /*copy_back=*/false, nullptr);
    recv = Staged(output.view({-1}), /*copy_back=*/true, &back);
    if (n != shard * world_size_) {  // zero padding, so the sum over ranks leaves it zero
      at::Tensor padded = at::zeros({shard * world_size_}, send.options());
      padded.narrow(0, 0, n).copy_(send);
      send = padded;
    }
    AddAverage(after, op, recv, world_size_);
    for (Work::Step& s : back) after.push_back(std::move(s));
  }
  return Issue(
      desc, valid,
      [this, send, recv, op]() mutable { return backend_->ReduceScatter(send, recv, OnWire(op)); },
      std::move(after));
}

Work ProcessGroup::AllGatherAsync(at::Tensor shard, at::Tensor output) {
  const int64_t n = output.defined() ? output.numel() : 0;
  const int64_t shard_numel = ShardNumel(n, world_size_);
  const OpDesc desc = NextOp(CollectiveKind::kAllGather, DtypeOf(output), n, ReduceOp::kSum, 0);
  // The row form: a [world, m] view whose rows are contiguous but not adjacent.
  const bool rows = output.defined() && !output.is_contiguous() && output.dim() == 2 &&
                    output.size(0) == world_size_ && output.stride(1) == 1;
  absl::Status valid = CheckTensor(shard, "all_gather shard");
  if (valid.ok()) valid = CheckTensor(rows ? output.select(0, 0) : output, "all_gather output");
  if (valid.ok() && output.scalar_type() != shard.scalar_type()) {
    valid = absl::InvalidArgumentError("all_gather output dtype differs from the shard's");
  }
  if (valid.ok() && shard.numel() != shard_numel) {
    valid = absl::InvalidArgumentError(absl::StrCat("all_gather shard has ", shard.numel(),
                                                    " elements, the shard of ", n, " over ",
                                                    world_size_, " ranks has ", shard_numel));
  }
  std::vector<Work::Step> after;
  at::Tensor send, recv;
  if (valid.ok()) {
    send = Staged(shard.view({-1}), /*copy_back=*/false, nullptr);
    recv = rows ? output : output.view({-1});
    // Gather into a contiguous buffer, then drop the padding past n or spread it over the rows
    // (or copy it to the output's device).
    const bool staged = output.device().type() != backend_->device_type();
    if (staged || (rows && !backend_->gathers_into_rows()) ||
        (!rows && n != shard_numel * world_size_)) {
      recv = at::empty({shard_numel * world_size_}, output.options().device(device()));
      after.push_back([recv, out = output, n, rows, counters = staging_]() mutable {
        const at::Tensor gathered = rows ? recv.view(out.sizes()) : recv.narrow(0, 0, n);
        if (rows) {
          out.copy_(gathered);
        } else {
          out.view({-1}).copy_(gathered);
        }
        counters->Count(gathered, out);  // the staged case: back to the output's device
        return absl::OkStatus();
      });
    }
  }
  return Issue(
      desc, valid, [this, send, recv]() mutable { return backend_->AllGather(send, recv); },
      std::move(after));
}

Work ProcessGroup::AllToAllAsync(at::Tensor input, at::Tensor output) {
  const int64_t n = input.defined() ? input.numel() : 0;
  const OpDesc desc = NextOp(CollectiveKind::kAllToAll, DtypeOf(input), n, ReduceOp::kSum, 0);
  absl::Status valid = CheckTensor(input, "all_to_all input");
  if (valid.ok()) valid = CheckTensor(output, "all_to_all output");
  if (valid.ok() && (output.scalar_type() != input.scalar_type() || output.numel() != n ||
                     n % world_size_ != 0)) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("all_to_all input (", n, " x ", c10::toString(input.scalar_type()),
                     ") and output (", output.numel(), " x ", c10::toString(output.scalar_type()),
                     ") must have one dtype and one numel, a multiple of ", world_size_));
  }
  std::vector<Work::Step> after;
  at::Tensor send, recv;
  if (valid.ok()) {
    send = Staged(input.view({-1}), /*copy_back=*/false, nullptr);
    recv = Staged(output.view({-1}), /*copy_back=*/true, &after);
  }
  return Issue(
      desc, valid,
      [this, send, recv]() mutable { return backend_->AllToAll(send, recv, rank_, world_size_); },
      std::move(after));
}

Work ProcessGroup::BroadcastAsync(at::Tensor tensor, int root) {
  const OpDesc desc = NextOp(CollectiveKind::kBroadcast, DtypeOf(tensor),
                             tensor.defined() ? tensor.numel() : 0, ReduceOp::kSum, root);
  absl::Status valid = CheckTensor(tensor, "broadcast tensor");
  if (valid.ok() && (root < 0 || root >= world_size_)) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not a rank of ", world_size_));
  }
  std::vector<Work::Step> after;
  at::Tensor wire;
  if (valid.ok()) wire = Staged(tensor, /*copy_back=*/true, &after);
  return Issue(
      desc, valid, [this, wire, root]() mutable { return backend_->Broadcast(wire, root); },
      std::move(after));
}

Work ProcessGroup::BarrierAsync() {
  const OpDesc desc = NextOp(CollectiveKind::kBarrier, at::kByte, 0, ReduceOp::kSum, 0);
  return Issue(desc, absl::OkStatus(), [this] { return backend_->Barrier(); }, {});
}

absl::Status ProcessGroup::AllReduce(at::Tensor tensor, ReduceOp op) {
  return AllReduceAsync(std::move(tensor), op).Wait();
}
absl::Status ProcessGroup::ReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  return ReduceScatterAsync(std::move(input), std::move(output), op).Wait();
}
absl::Status ProcessGroup::AllGather(at::Tensor shard, at::Tensor output) {
  return AllGatherAsync(std::move(shard), std::move(output)).Wait();
}
absl::Status ProcessGroup::AllToAll(at::Tensor input, at::Tensor output) {
  return AllToAllAsync(std::move(input), std::move(output)).Wait();
}
absl::Status ProcessGroup::Broadcast(at::Tensor tensor, int root) {
  return BroadcastAsync(std::move(tensor), root).Wait();
}
absl::Status ProcessGroup::Barrier() { return BarrierAsync().Wait(); }

}  // namespace zerotrain::comm
