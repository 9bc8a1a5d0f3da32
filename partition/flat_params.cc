// Moves parameters into flat buffers, one per dtype group (see flat_params.h).
#include "partition/flat_params.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerotrain::partition {

namespace {

// Every parameter defined and on one device (and, when `one_dtype`, of one dtype); their element
// counts.
absl::StatusOr<std::vector<int64_t>> CheckParams(const NamedTensors& params, bool one_dtype) {
  if (params.empty()) {
    return absl::InvalidArgumentError("FlatParams: the module has no trainable parameters");
  }
  std::vector<int64_t> numels;
  for (const auto& [name, p] : params) {
    if (!p.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("FlatParams: parameter '", name, "' is undefined"));
    }
    const auto& [first_name, first] = params.front();
    if (p.device() != first.device() || (one_dtype && p.scalar_type() != first.scalar_type())) {
      return absl::UnimplementedError(
          absl::StrCat("FlatParams: parameter '", name, "' is ", c10::toString(p.scalar_type()),
                       " on ", p.device().str(), " but '", first_name, "' is ",
                       c10::toString(first.scalar_type()), " on ", first.device().str(), "; ",
                       one_dtype ? "a sharded (stage 3) layout takes one dtype and one device"
                                 : "all parameters must be on one device"));
    }
    numels.push_back(p.numel());
  }
  return numels;
}

// `params` grouped by dtype, stably, groups in the order their dtype first appears.
NamedTensors GroupByDtype(const NamedTensors& params) {
  std::vector<at::ScalarType> order;
  for (const auto& [name, p] : params) {
    if (std::find(order.begin(), order.end(), p.scalar_type()) == order.end()) {
      order.push_back(p.scalar_type());
    }
  }
  NamedTensors grouped;
  for (at::ScalarType t : order) {
    for (const auto& named : params) {
      if (named.second.scalar_type() == t) grouped.push_back(named);
    }
  }
  return grouped;
}

}  // namespace

at::Tensor GroupedBuffer::Range(int64_t begin, int64_t numel) const {
  const auto it = std::upper_bound(begins_.begin(), begins_.end(), begin);
  TORCH_CHECK(it != begins_.begin(), "GroupedBuffer: element ", begin, " precedes every group");
  const size_t g = static_cast<size_t>(it - begins_.begin()) - 1;
  TORCH_CHECK(begin + numel <= begins_[g] + parts_[g].numel(), "GroupedBuffer: elements [", begin,
              ", ", begin + numel, ") cross the end of group ", g);
  return parts_[g].narrow(0, begin - begins_[g], numel);
}

int64_t GroupedBuffer::nbytes() const {
  int64_t n = 0;
  for (const at::Tensor& t : parts_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

void GroupedBuffer::Zero() {
  c10::NoGradGuard no_grad;
  for (at::Tensor& t : parts_) t.zero_();
}

absl::StatusOr<FlatParams> FlatParams::Describe(const NamedTensors& params, int world_size,
                                                int64_t bucket_numel,
                                                const std::vector<int>& segment_starts,
                                                const std::vector<int64_t>& given_numels) {
  auto numels = CheckParams(params, /*one_dtype=*/true);
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
  out.device_ = params.front().second.device();
  out.params_ = params;
  FlatGroup g;
  g.dtype = params.front().second.scalar_type();
  g.end_param = out.num_params();
  g.end_bucket = static_cast<int>(out.layout_.buckets().size());
  g.numel = out.layout_.padded_numel();
  out.groups_ = {g};
  return out;
}

absl::StatusOr<FlatParams> FlatParams::Create(const NamedTensors& given, int world_size,
                                              int64_t bucket_numel) {
  auto numels = CheckParams(given, /*one_dtype=*/false);
  if (!numels.ok()) return numels.status();
  const NamedTensors params = GroupByDtype(given);
  std::vector<int64_t> sizes;
  std::vector<int> starts;  // each dtype group starts a layout segment: its own buckets
  for (size_t i = 0; i < params.size(); ++i) {
    sizes.push_back(params[i].second.numel());
    if (i > 0 && params[i].second.scalar_type() != params[i - 1].second.scalar_type()) {
      starts.push_back(static_cast<int>(i));
    }
  }
  auto layout = ShardLayout::Create(sizes, world_size, bucket_numel, starts);
  if (!layout.ok()) return layout.status();
  FlatParams out(std::move(*layout));
  out.device_ = params.front().second.device();
  const ShardLayout& l = out.layout_;
  for (int s = 0; s < l.num_segments(); ++s) {
    FlatGroup g;
    g.dtype = params[l.SegmentFirstParam(s)].second.scalar_type();
    g.first_param = l.SegmentFirstParam(s);
    g.end_param = l.SegmentEndParam(s);
    g.first_bucket = l.SegmentFirstBucket(s);
    g.end_bucket = l.SegmentEndBucket(s);
    g.begin = l.param_offset(g.first_param);
    const int64_t end =
        g.end_param < l.num_params() ? l.param_offset(g.end_param) : l.padded_numel();
    g.numel = end - g.begin;
    out.groups_.push_back(g);
  }
  try {
    c10::NoGradGuard no_grad;
    out.flat_ = out.NewFlat();
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor p = params[i].second;
      at::Tensor view = out.flat_.Range(l.param_offset(i), p.numel()).view(p.sizes());
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

GroupedBuffer FlatParams::NewBuffer(int divisor) const {
  std::vector<int64_t> begins;
  std::vector<at::Tensor> parts;
  for (size_t g = 0; g < groups_.size(); ++g) {
    begins.push_back(groups_[g].begin / divisor);
    parts.push_back(at::zeros({groups_[g].numel / divisor}, options(static_cast<int>(g))));
  }
  return GroupedBuffer(std::move(begins), std::move(parts));
}

GroupedBuffer FlatParams::NewFlat() const { return NewBuffer(1); }

GroupedBuffer FlatParams::NewShard() const { return NewBuffer(layout_.world_size()); }

at::TensorOptions FlatParams::options(int group) const {
  return at::TensorOptions().dtype(groups_[group].dtype).device(device_);
}

int FlatParams::GroupOfParam(int param) const {
  auto it = std::upper_bound(groups_.begin(), groups_.end(), param,
                             [](int p, const FlatGroup& g) { return p < g.first_param; });
  return static_cast<int>(it - groups_.begin()) - 1;
}

int FlatParams::GroupOfBucket(int bucket) const {
  auto it = std::upper_bound(groups_.begin(), groups_.end(), bucket,
                             [](int b, const FlatGroup& g) { return b < g.first_bucket; });
  return static_cast<int>(it - groups_.begin()) - 1;
}

at::Tensor FlatParams::ViewOf(const GroupedBuffer& buffer, int i) const {
  return buffer.Range(layout_.param_offset(i), layout_.param_numel(i))
      .view(params_[i].second.sizes());
}

}  // namespace zerotrain::partition
