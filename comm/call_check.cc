// Cross-rank agreement check for collective calls (see call_check.h).
#include "comm/call_check.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "absl/strings/str_cat.h"
#include "comm/gloo_backend.h"

namespace zerotrain::comm {
namespace {

constexpr int kFields = 6;

void Encode(const OpDesc& op, int64_t* row) {
  row[0] = static_cast<int64_t>(op.seq);
  row[1] = static_cast<int64_t>(op.kind);
  row[2] = static_cast<int64_t>(op.reduce);
  row[3] = static_cast<int64_t>(op.dtype);
  row[4] = op.numel;
  row[5] = op.root;
}

OpDesc Decode(const int64_t* row, int rank, int world_size) {
  OpDesc op;
  op.seq = static_cast<uint64_t>(row[0]);
  op.kind = static_cast<CollectiveKind>(row[1]);
  op.reduce = static_cast<ReduceOp>(row[2]);
  op.dtype = static_cast<at::ScalarType>(row[3]);
  op.numel = row[4];
  op.root = static_cast<int>(row[5]);
  op.rank = rank;
  op.world_size = world_size;
  return op;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CallCheck>> CallCheck::Connect(const BackendContext& ctx) {
  BackendContext check_ctx = ctx;
  check_ctx.gloo_threads = 1;  // the exchanges are tiny and ordered
  auto pg = ConnectGloo(check_ctx);
  if (!pg.ok()) return pg.status();
  return std::make_unique<CallCheck>(*std::move(pg), ctx.timeout);
}

CallCheck::CallCheck(c10::intrusive_ptr<c10d::Backend> pg, std::chrono::milliseconds timeout)
    : pg_(std::move(pg)), timeout_(timeout) {}

CallCheck::~CallCheck() = default;

absl::StatusOr<Work::Step> CallCheck::Start(const OpDesc& op) {
  const int world = op.world_size;
  at::Tensor mine = at::empty({kFields}, at::kLong);
  Encode(op, mine.data_ptr<int64_t>());
  at::Tensor all = at::empty({world * kFields}, at::kLong);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = pg_->_allgather_base(all, mine);
  } catch (const std::exception& e) {
    return StatusFromException(e);
  }
  return Work::Step([work, all, mine, op, timeout = timeout_]() -> absl::Status {
    try {
      work->wait(timeout);
    } catch (const std::exception& e) {
      absl::Status s = StatusFromException(e);
      return absl::Status(s.code(), absl::StrCat("call check: ", s.message()));
    }
    const int64_t* rows = all.data_ptr<int64_t>();
    const int64_t* own = mine.data_ptr<int64_t>();
    for (int r = 0; r < op.world_size; ++r) {
      if (std::equal(own, own + kFields, rows + r * kFields)) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("ranks called different collectives: this rank called ", Describe(op),
                       ", rank ", r, " called ",
                       Describe(Decode(rows + r * kFields, r, op.world_size))));
    }
    return absl::OkStatus();
  });
}

}  // namespace zerotrain::comm
