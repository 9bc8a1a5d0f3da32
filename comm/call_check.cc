// Cross-rank agreement check for collective calls (see call_check.h).
#include "comm/call_check.h"

#include <array>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerotrain::comm {
namespace {

using Signature = std::array<int64_t, 6>;

Signature SignatureOf(const OpDesc& op) {
  return {static_cast<int64_t>(op.seq),
          static_cast<int64_t>(op.kind),
          static_cast<int64_t>(op.reduce),
          static_cast<int64_t>(op.dtype),
          op.numel,
          op.root};
}

OpDesc OpOf(const Signature& s, int rank, int world_size) {
  OpDesc op;
  op.seq = static_cast<uint64_t>(s[0]);
  op.kind = static_cast<CollectiveKind>(s[1]);
  op.reduce = static_cast<ReduceOp>(s[2]);
  op.dtype = static_cast<at::ScalarType>(s[3]);
  op.numel = s[4];
  op.root = static_cast<int>(s[5]);
  op.rank = rank;
  op.world_size = world_size;
  return op;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CallCheck>> CallCheck::Connect(const BackendContext& ctx) {
  auto mesh = TcpMesh::Connect(ctx);
  if (!mesh.ok()) {
    return absl::Status(mesh.status().code(),
                        absl::StrCat("call check: rank ", ctx.rank, " of ", ctx.world_size,
                                     " could not connect to its peers: ", mesh.status().message()));
  }
  return std::unique_ptr<CallCheck>(new CallCheck(*std::move(mesh), ctx.timeout));
}

absl::Status CallCheck::Agree(const OpDesc& op) {
  const Signature mine = SignatureOf(op);
  const int world = mesh_->world_size();
  for (int r = 0; r < world; ++r) {
    if (r == mesh_->rank()) continue;
    absl::Status s = mesh_->Send(r, mine.data(), sizeof(mine));
    if (!s.ok()) {
      return absl::AbortedError(
          absl::StrCat("call check: rank ", r, " is gone (exited or crashed): ", s.message()));
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  absl::Status disagreement;
  // Once the deadline has passed, the remaining peers are still read (without waiting), so the
  // error names every rank that did not arrive, not only the first: a stopped rank or a cut link
  // shows as its rank numbers.
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (r == mesh_->rank()) continue;
    Signature theirs;
    absl::Status s = mesh_->Recv(r, theirs.data(), sizeof(theirs), deadline);
    if (absl::IsDeadlineExceeded(s)) {
      missing.push_back(r);
      continue;
    }
    if (!s.ok()) {
      return absl::AbortedError(
          absl::StrCat("call check: rank ", r, " is gone (exited or crashed): ", s.message()));
    }
    if (disagreement.ok() && theirs != mine) {
      disagreement = absl::FailedPreconditionError(
          absl::StrCat("ranks called different collectives: this rank called ", Describe(op),
                       ", rank ", r, " called ", Describe(OpOf(theirs, r, world))));
    }
  }
  if (!missing.empty()) {
    // The mesh is out of step with the peers that did answer, which is why a failure latches the
    // group (process_group.cc).
    return absl::DeadlineExceededError(
        absl::StrCat("call check: rank", missing.size() > 1 ? "s " : " ",
                     absl::StrJoin(missing, ", "), " did not reach this call within ",
                     timeout_.count(), " ms (stopped, hung, or unreachable over the network)"));
  }
  return disagreement;
}

}  // namespace zerotrain::comm
