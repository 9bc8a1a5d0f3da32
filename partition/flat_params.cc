// Moves parameters into a flat buffer (see flat_params.h).
#include "partition/flat_params.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "absl/strings/str_cat.h"

namespace zerotrain::partition {

namespace {

// Every parameter defined and of one dtype and device; their element counts.
absl::StatusOr<std::vector<int64_t>> CheckParams(const NamedTensors& params) {
  if (params.empty()) {
    return absl::InvalidArgumentError("FlatParams: the module has no trainable parameters");
  }
  std::vector<int64_t> numels;
  for (const auto& [name, p] : params) {
    if (!p.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("FlatParams: parameter '", name,
                                                     "' is undefined"));
    }
    const at::Tensor& first = params.front().second;
    if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) {
      // One flat group per dtype is the plan; today the engine handles one.
      return absl::UnimplementedError(absl::StrCat(
          "FlatParams: parameter '", name, "' is ", c10::toString(p.scalar_type()), " on ",
          p.device().str(), " but '", params.front().first, "' is ",
          c10::toString(first.scalar_type()), " on ", first.device().str(),
          "; mixed dtype or device groups are not supported"));
    }
    numels.push_back(p.numel());
  }
  return numels;
}

}  // namespace

absl::StatusOr<FlatParams> FlatParams::Describe(const NamedTensors& params, int world_size,
                                                int64_t bucket_numel,
                                                const std::vector<int>& segment_starts,
                                                const std::vector<int64_t>& given_numels) {
  auto numels = CheckParams(params);
  if (!numels.ok()) return numels.status();
  if (!given_numels.empty()) {
    if (given_numels.size() != params.size()) {
      return absl::InvalidArgumentError(absl::StrCat("FlatParams: ", given_numels.size(),
                                                     " element counts for ", params.size(),
                                                     " parameters"));
    }
    *numels = given_numels;
  }
  auto layout = ShardLayout::Create(*numels, world_size, bucket_numel, segment_starts);
  if (!layout.ok()) return layout.status();
  FlatParams out(std::move(*layout));
  const at::Tensor& first = params.front().second;
  out.options_ = at::TensorOptions().dtype(first.scalar_type()).device(first.device());
  out.params_ = params;
  return out;
}

absl::StatusOr<FlatParams> FlatParams::Create(const NamedTensors& params, int world_size,
                                              int64_t bucket_numel) {
  auto described = Describe(params, world_size, bucket_numel, {});
  if (!described.ok()) return described.status();
  FlatParams out = *std::move(described);
  out.params_.clear();
  try {
    c10::NoGradGuard no_grad;
    out.flat_ = at::zeros({out.layout_.padded_numel()}, out.options_);
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor p = params[i].second;
      at::Tensor view =
          out.flat_.narrow(0, out.layout_.param_offset(i), p.numel()).view(p.sizes());
      view.copy_(p.detach());
      // set_data keeps the autograd leaf (and every holder of `p`) while swapping its storage.
      p.set_data(view);
      out.params_.emplace_back(params[i].first, p);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("FlatParams: ", e.what_without_backtrace()));
  }
  return out;
}

at::ScalarType FlatParams::dtype() const { return options_.dtype().toScalarType(); }

at::Tensor FlatParams::ViewOf(const at::Tensor& buffer, int i) const {
  return buffer.narrow(0, layout_.param_offset(i), layout_.param_numel(i))
      .view(params_[i].second.sizes());
}

}  // namespace zerotrain::partition
