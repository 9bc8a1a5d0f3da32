// The all-ranks agreement that the stores and the engine use after every step a single rank can
// fail, and the dtype names the optimizer kernels take.
#include "engine/param_store.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {

absl::Status AgreeAllOk(comm::ProcessGroup* group, const absl::Status& local,
                        const std::string& where) {
  const int world = group->world_size();
  at::Tensor mine = at::full({1}, local.ok() ? 0 : 1, at::kLong);
  at::Tensor all = at::empty({world}, at::kLong);
  absl::Status s = group->AllGather(mine, all);
  if (!local.ok()) return local;
  if (!s.ok()) return WithPrefix(s, where);
  std::vector<int> failed;
  for (int r = 0; r < world; ++r) {
    if (all.data_ptr<int64_t>()[r] != 0) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat(where, "rank(s) ", absl::StrJoin(failed, ","), " failed (see their errors)"));
}

optim::DType ToOptimDtype(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
      return optim::DType::kBFloat16;
    case at::kHalf:
      return optim::DType::kFloat16;
    default:
      return optim::DType::kFloat32;
  }
}

}  // namespace zerotrain::engine
