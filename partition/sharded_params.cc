// ZeRO stage 3 parameter storage, gathering and release (see sharded_params.h).
#include "partition/sharded_params.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/quantized_all_gather.h"
#include "offload/memory_roles.h"
#include "tools/status_macros.h"

namespace zerotrain::partition {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void DropStorageRef(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedParams>> ShardedParams::Create(
    const NamedTensors& params, const std::vector<int>& segment_starts, comm::ProcessGroup* group,
    int64_t bucket_numel, const Stage3Options& options, ShardedInit* init,
    const ParamShardOptions& shard_options) {
  std::vector<int64_t> numels;
  for (const auto& [name, p] : params) {
    int64_t n = 1;
    for (int64_t d : init ? init->FullShapeOf(p) : p.sizes().vec()) n *= d;
    numels.push_back(n);
  }
  ZT_ASSIGN_OR_RETURN(FlatParams flat, FlatParams::Describe(params, group->world_size(),
                                                            bucket_numel, segment_starts, numels));
  std::unique_ptr<ShardedParams> s(new ShardedParams(group, options));
  s->flat_ = std::make_unique<FlatParams>(std::move(flat));
  const int k = options.hpz_partition_size;
  if (k > 1) {
    if (group->world_size() % k != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("zero_hpz_partition_size = ", k, " must divide the world size (",
                       group->world_size(), " ranks): hpZ's secondary copy is sharded over ",
                       "groups of that many consecutive ranks"));
    }
    std::vector<int> members;
    for (int r = group->rank() / k * k; r < (group->rank() / k + 1) * k; ++r) members.push_back(r);
    ZT_ASSIGN_OR_RETURN(s->secondary_group_, group->CreateSubgroup(members));
  }
  absl::Status local;
  try {
    local = s->Init(params, init, shard_options);
  } catch (const c10::Error& e) {
    local = absl::InternalError(
        absl::StrCat("ZeRO stage 3 partitioning: ", e.what_without_backtrace()));
  }
  // A rank whose shard could not be placed (a full disk under offload_param) must not leave the
  // others waiting in Refresh's all-gather.
  at::Tensor failed = at::full({1}, local.ok() ? 0.0f : 1.0f, at::kFloat);
  const absl::Status agreed = group->AllReduce(failed, comm::ReduceOp::kMax);
  ZT_RETURN_IF_ERROR(local);
  ZT_RETURN_IF_ERROR(agreed);
  if (failed.item<float>() > 0) {
    return absl::AbortedError(absl::StrCat("ZeRO stage 3 partitioning on rank ", group->rank(),
                                           ": another rank failed (see its error)"));
  }
  ZT_RETURN_IF_ERROR(s->Refresh());
  return s;
}

absl::Status ShardedParams::CheckPart(int s, const ShardedInit::Part& part) const {
  const ShardLayout& layout = flat_->layout();
  const Segment& seg = segments_[s];
  const int first = layout.SegmentFirstParam(s), end = layout.SegmentEndParam(s);
  if (part.released) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ZeRO stage 3: the slices ShardedInit cut for the submodule of ", Describe(first),
        " were adopted by an earlier engine and released; partition a new model for this one"));
  }
  bool same = !seg.persistent && static_cast<int>(part.params.size()) == end - first &&
              part.numel * layout.world_size() == seg.numel;
  for (int p = first; same && p < end; ++p) {
    same = part.params[p - first] == flat_->params()[p].second.unsafeGetTensorImpl();
  }
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "ZeRO stage 3: the submodule of ", Describe(first),
      " was partitioned at construction (ShardedInit) with ", part.params.size(),
      " parameter(s), but the engine groups ", end - first, " there",
      seg.persistent ? " and keeps them whole" : "",
      "; partition each submodule once, after it is complete, with the engine's options"));
}

absl::Status ShardedParams::FillSegment(int s, const NamedTensors& params, ShardedInit* init,
                                        at::Tensor dst) {
  const ShardLayout& layout = flat_->layout();
  const int first = layout.SegmentFirstParam(s), end = layout.SegmentEndParam(s);
  const ShardedInit::Part* part = init ? init->PartOf(params[first].second) : nullptr;
  if (part != nullptr) {
    ZT_RETURN_IF_ERROR(init->ReadPart(*part, dst));  // from memory, or its swap file
    init->ReleaseShardOf(params[first].second);
    return absl::OkStatus();
  }
  dst.zero_();  // padding
  const int64_t begin = segments_[s].begin / layout.world_size();
  for (int i = first; i < end; ++i) {
    const at::Tensor full = params[i].second.detach().reshape({-1});
    for (const ParamPiece& piece : layout.PiecesOf(i)) {
      if (piece.rank != group_->rank()) continue;
      dst.narrow(0, piece.shard_offset - begin, piece.numel)
          .copy_(full.narrow(0, piece.param_offset, piece.numel));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedParams::Init(const NamedTensors& params, ShardedInit* init,
                                 const ParamShardOptions& shard_options) {
  const ShardLayout& layout = flat_->layout();
  c10::NoGradGuard no_grad;
  SkipGatherOnUse skip;
  std::vector<int64_t> segment_numel;
  int64_t persistent_total = 0;
  segment_of_.assign(params.size(), 0);
  for (int s = 0; s < layout.num_segments(); ++s) {
    Segment seg;
    seg.begin = layout.SegmentBegin(s);
    seg.numel = layout.SegmentNumel(s);
    for (int p = layout.SegmentFirstParam(s); p < layout.SegmentEndParam(s); ++p) {
      seg.real_numel += layout.param_numel(p);
      segment_of_[p] = s;
    }
    seg.persistent = seg.real_numel <= options_.persistence_threshold &&
                     persistent_total + seg.real_numel <= options_.model_persistence_threshold;
    if (seg.persistent) {
      persistent_total += seg.real_numel;
      stats_.persistent_numel += seg.numel;
    }
    segment_numel.push_back(seg.numel);
    segments_.push_back(std::move(seg));
  }
  order_ = std::make_unique<FetchOrder>(std::move(segment_numel));
  order_->BeginIteration();
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i].second;
    const ShardedInit::Part* part = init ? init->PartOf(p) : nullptr;
    shapes_.push_back(part != nullptr ? init->FullShapeOf(p) : p.sizes().vec());
    if (part == nullptr) continue;
    const int s = segment_of_[i];
    const int first = layout.SegmentFirstParam(s);
    if (init->PartOf(params[first].second) != part) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ZeRO stage 3: ", Describe(static_cast<int>(i)),
          " was partitioned at construction (ShardedInit) apart from the other parameters of its "
          "submodule; partition each submodule once, after it is complete"));
    }
    if (static_cast<int>(i) == first) ZT_RETURN_IF_ERROR(CheckPart(s, *part));
  }
  // One part per segment, a gather reads exactly one part, and the shard is built a part at a
  // time from the parameters' values before they are replaced below: never whole beside them.
  std::vector<int64_t> part_starts;
  for (const Segment& seg : segments_) part_starts.push_back(seg.begin / layout.world_size());
  ParamShard::Source source;
  source.numel = layout.shard_numel();
  source.options = flat_->options();
  source.fill = [&](int s, at::Tensor dst) { return FillSegment(s, params, init, std::move(dst)); };
  ZT_ASSIGN_OR_RETURN(shard_,
                      ParamShard::Create(std::move(source), std::move(part_starts), shard_options));
  transfer_ = shard_options.transfer;
  transfer_timeout_ = shard_options.io_timeout;
  storages_.resize(params.size());
  full_.resize(params.size());
  empty_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (segments_[segment_of_[i]].persistent) continue;  // Refresh points it at its buffer
    at::Tensor p = params[i].second;
    storages_[i] = c10::Storage(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), 0, c10::DataPtr(nullptr, p.device()),
        /*allocator=*/nullptr, /*resizable=*/false));
    full_[i] = MakeGatherOnUseTensor(storages_[i], p, shapes_[i]);
    empty_[i] = MakeGatherOnUseTensor(storages_[i], p, {0});
    RegisterGatherOnUse(storages_[i].unsafeGetStorageImpl(), this, static_cast<int>(i));
    p.set_data(windows_ > 0 ? full_[i] : empty_[i]);  // the original values go with this
  }
  return absl::OkStatus();
}

ShardedParams::~ShardedParams() {
  for (int s = 0; s < static_cast<int>(segments_.size()); ++s) (void)Release(s);
  (void)comm::WaitAll(stream_ordered_);
  (void)DropStagedHosts(/*wait=*/true);
  for (const c10::Storage& st : storages_) {
    if (st) UnregisterGatherOnUse(st.unsafeGetStorageImpl());
  }
}

std::string ShardedParams::Describe(int param) const {
  return absl::StrCat("'", flat_->name(param), "' (shape [", absl::StrJoin(shapes_[param], ", "),
                      "])");
}

bool ShardedParams::Readable(int segment) const {
  const Segment& seg = segments_[segment];
  return seg.persistent || windows_ > 0 || seg.pins > 0;
}

void ShardedParams::SetShapes(bool full) {
  SkipGatherOnUse skip;
  for (int i = 0; i < flat_->num_params(); ++i) {
    if (!storages_[i] || segments_[segment_of_[i]].pins > 0) continue;
    at::Tensor p = flat_->params()[i].second;
    p.set_data(full ? full_[i] : empty_[i]);
  }
}

void ShardedParams::OpenWindow() {
  if (windows_++ == 0) SetShapes(true);
}

void ShardedParams::CloseWindow() {
  if (--windows_ == 0) SetShapes(false);
}

void ShardedParams::StartGather(int segment, bool prefetch, bool exact) {
  offload::MemoryRoleScope role(offload::MemoryRole::kGatheredParameters);
  Segment& seg = segments_[segment];
  const ShardLayout& layout = flat_->layout();
  const int64_t part_begin = seg.begin / layout.world_size();
  const int64_t part_numel = seg.numel / layout.world_size();
  seg.buffer = at::empty({seg.numel}, flat_->options());
  if (seg.secondary.defined() && !exact) {
    // hpZ: the node's ranks hold the segment between them; nothing leaves the node.
    const int k = options_.hpz_partition_size;
    for (int b = layout.SegmentFirstBucket(segment); b < layout.SegmentEndBucket(segment); ++b) {
      const LayoutBucket& bucket = layout.buckets()[b];
      seg.works.push_back(secondary_group_->AllGatherAsync(
          seg.secondary.narrow(0, (bucket.begin - seg.begin) / k, bucket.numel / k),
          seg.buffer.narrow(0, bucket.begin - seg.begin, bucket.numel)));
    }
    // The secondary holds what the forward's gather gave: rounded under qwZ (so GatheredParameters
    // gathers exactly again).
    seg.quantized = seg.secondary_quantized;
    seg.state = State::kInFlight;
    stats_.live_numel += seg.numel;
    stats_.peak_live_numel = std::max(stats_.peak_live_numel, stats_.live_numel);
    ++stats_.gathers;
    ++stats_.secondary_gathers;
    if (prefetch) ++stats_.prefetches;
    return;
  }
  absl::StatusOr<at::Tensor> part = shard_->Read(part_begin, part_numel);
  // A part in host memory (offload_param) under a model on a device goes onto the device first,
  // on the transfer stream; the gather is launched from that stream (below), so it follows the
  // copy while compute goes on.
  bool staged = false;
  if (part.ok() && part->device() != seg.buffer.device()) {
    seg.host_input = *part;
    seg.input = at::empty({part_numel}, flat_->options());
    if (transfer_ == nullptr) {
      seg.input.copy_(seg.host_input);
    } else {
      absl::StatusOr<offload::Fence> f = transfer_->Copy(seg.input, seg.host_input);
      if (f.ok()) seg.staged = *f;
      if (!f.ok()) part = f.status();
      staged = f.ok();
    }
  }
  if (part.ok()) {
    if (!seg.host_input.defined()) seg.input = *part;
  } else {
    seg.input = at::zeros({part_numel}, flat_->options());
    if (failed_.ok()) {
      failed_ =
          absl::Status(part.status().code(),
                       absl::StrCat("ZeRO stage 3 on rank ", group_->rank(), ": reading ",
                                    Describe(layout.SegmentFirstParam(segment)),
                                    "'s submodule from its shard: ", part.status().message()));
    }
  }
  seg.quantized = options_.quantize_weights && !exact;
  seg.keep_secondary = secondary_group_ != nullptr && !exact;
  auto launch = [&] {
    for (int k = layout.SegmentFirstBucket(segment); k < layout.SegmentEndBucket(segment); ++k) {
      const LayoutBucket& b = layout.buckets()[k];
      at::Tensor in = seg.input.narrow(0, b.shard_offset - part_begin, b.slice);
      at::Tensor out = seg.buffer.narrow(0, b.begin - seg.begin, b.numel);
      seg.works.push_back(seg.quantized ? comm::QuantizedAllGatherAsync(*group_, in, out)
                                        : group_->AllGatherAsync(in, out));
    }
  };
  if (staged) {
    transfer_->AfterCopies(launch);
  } else {
    launch();
  }
  seg.state = State::kInFlight;
  stats_.live_numel += seg.numel;
  stats_.peak_live_numel = std::max(stats_.peak_live_numel, stats_.live_numel);
  ++stats_.gathers;
  if (prefetch) ++stats_.prefetches;
}

absl::Status ShardedParams::Finish(int segment) {
  Segment& seg = segments_[segment];
  if (seg.state == State::kResident) return absl::OkStatus();
  const double start = Now();
  absl::Status s;
  for (comm::Work& w : seg.works) {
    absl::Status one = w.WaitOnStream();
    if (s.ok()) s = one;
    stream_ordered_.push_back(std::move(w));
  }
  seg.works.clear();
  ParkHostInput(seg);
  seg.input = at::Tensor();
  stats_.wait_seconds += Now() - start;
  if (s.ok() && !failed_.ok()) {  // gathered zeros in place of a part that could not be read
    (void)Release(segment);
    return failed_;
  }
  if (!s.ok()) {
    (void)Release(segment);
    if (failed_.ok()) {
      failed_ = absl::Status(
          s.code(), absl::StrCat("ZeRO stage 3 gather of ",
                                 Describe(flat_->layout().SegmentFirstParam(segment)),
                                 "'s submodule on rank ", group_->rank(), ": ", s.message()));
    }
    return failed_;
  }
  if (seg.keep_secondary) KeepSecondary(seg, segment);
  auto* base = static_cast<char*>(seg.buffer.data_ptr());
  const int64_t elem = seg.buffer.element_size();
  const ShardLayout& layout = flat_->layout();
  for (int p = layout.SegmentFirstParam(segment); p < layout.SegmentEndParam(segment); ++p) {
    c10::StorageImpl* st = storages_[p].unsafeGetStorageImpl();
    st->set_data_ptr_noswap(c10::DataPtr(base + (layout.param_offset(p) - seg.begin) * elem,
                                         new c10::Storage(seg.buffer.storage()), &DropStorageRef,
                                         seg.buffer.device()));
    st->set_nbytes(layout.param_numel(p) * elem);
  }
  seg.state = State::kResident;
  return absl::OkStatus();
}

void ShardedParams::ParkHostInput(Segment& seg) {
  if (!seg.host_input.defined()) return;
  staged_hosts_.emplace_back(std::move(seg.host_input), std::move(seg.staged));
  seg.host_input = at::Tensor();
  seg.staged = offload::Fence();
  (void)DropStagedHosts(/*wait=*/false);
}

absl::Status ShardedParams::DropStagedHosts(bool wait) {
  absl::Status status;
  std::vector<std::pair<at::Tensor, offload::Fence>> running;
  for (auto& [host, fence] : staged_hosts_) {
    if (!wait && !fence.done()) {
      running.emplace_back(std::move(host), std::move(fence));
      continue;
    }
    const absl::Status s = wait ? fence.Wait(transfer_timeout_) : absl::OkStatus();
    // A copy that outlived its timeout may still read the block: it is leaked, not reused.
    if (!s.ok()) new at::Tensor(host);
    status.Update(s);
  }
  staged_hosts_ = std::move(running);
  return status;
}

absl::Status ShardedParams::Release(int segment) {
  Segment& seg = segments_[segment];
  if (seg.state == State::kReleased || seg.persistent) return absl::OkStatus();
  absl::Status s;
  if (seg.state == State::kInFlight) s = comm::WaitAll(seg.works);  // its buffer is being written
  seg.works.clear();
  ParkHostInput(seg);
  seg.input = at::Tensor();
  const ShardLayout& layout = flat_->layout();
  for (int p = layout.SegmentFirstParam(segment); p < layout.SegmentEndParam(segment); ++p) {
    c10::StorageImpl* st = storages_[p].unsafeGetStorageImpl();
    st->set_data_ptr_noswap(c10::DataPtr(nullptr, seg.buffer.device()));
    st->set_nbytes(0);
  }
  seg.buffer = at::Tensor();
  seg.state = State::kReleased;
  seg.quantized = false;
  seg.keep_secondary = false;
  stats_.live_numel -= seg.numel;
  if (!s.ok() && failed_.ok()) failed_ = s;
  return s;
}

absl::Status ShardedParams::MakeRoom(int64_t numel, const std::vector<int>& keep) {
  while (stats_.live_numel + numel > options_.max_live_numel) {
    int victim = -1;
    int64_t farthest = -1;
    for (int s = 0; s < static_cast<int>(segments_.size()); ++s) {
      const Segment& seg = segments_[s];
      if (seg.state == State::kReleased || seg.persistent || seg.pins > 0 || Contains(keep, s)) {
        continue;
      }
      int64_t d = order_->ReuseDistance(s);
      if (d < 0) d = std::numeric_limits<int64_t>::max();  // not needed again: first to go
      if (d > farthest) {
        farthest = d;
        victim = s;
      }
    }
    if (victim < 0) return absl::OkStatus();  // what is needed now is larger than the budget
    ZT_RETURN_IF_ERROR(Release(victim));
  }
  return absl::OkStatus();
}

void ShardedParams::Prefetch() {
  if (options_.prefetch_numel <= 0) return;
  for (int s : order_->Upcoming(options_.prefetch_numel)) {
    const Segment& seg = segments_[s];
    if (seg.persistent || seg.state != State::kReleased) continue;
    if (stats_.live_numel + seg.numel > options_.max_live_numel) break;
    StartGather(s, /*prefetch=*/true);
  }
}

absl::Status ShardedParams::UseOne(int segment, const std::vector<int>& keep) {
  ZT_RETURN_IF_ERROR(failed_);
  Segment& seg = segments_[segment];
  if (segment == current_ && seg.state == State::kResident) return absl::OkStatus();
  // Outside a window only pinned segments are readable, and they are resident: reading them
  // (perhaps on one rank only) must not record uses or start collectives.
  if (windows_ == 0) return absl::OkStatus();
  if (segment != current_ && !order_->OnUse(segment) && order_->departures() == 1) {
    std::fprintf(stderr,
                 "zerotrain: ZeRO stage 3 on rank %d: submodules ran in another order than in "
                 "the first step (at %s's submodule); prefetching stops until the new order has "
                 "been recorded, parameters are fetched on demand meanwhile\n",
                 group_->rank(), Describe(flat_->layout().SegmentFirstParam(segment)).c_str());
  }
  if (seg.state == State::kReleased) {
    ZT_RETURN_IF_ERROR(MakeRoom(seg.numel, keep));
    StartGather(segment, /*prefetch=*/false);
  }
  ZT_RETURN_IF_ERROR(Finish(segment));
  const int previous = current_;
  current_ = segment;
  if (previous >= 0 && previous != segment && !Contains(keep, previous) &&
      segments_[previous].pins == 0) {
    const int64_t d = order_->ReuseDistance(previous);
    if (d < 0 || d > options_.max_reuse_distance) ZT_RETURN_IF_ERROR(Release(previous));
  }
  Prefetch();
  return absl::OkStatus();
}

void ShardedParams::Use(const std::vector<int>& params) {
  std::vector<int> keep;
  for (int p : params) {
    const int s = segment_of_[p];
    if (segments_[s].persistent || Contains(keep, s)) continue;
    TORCH_CHECK(Readable(s), "zerotrain: parameter ", Describe(p),
                " is partitioned by ZeRO stage 3 and not gathered here. Read it inside the "
                "engine's forward scope (Engine::BeginForward) or Backward, or gather it with "
                "GatheredParameters (Engine::GatherParameters).");
    keep.push_back(s);
  }
  for (int s : keep) {
    const absl::Status status = UseOne(s, keep);
    TORCH_CHECK(status.ok(), "zerotrain: ", status.message());
  }
}

absl::Status ShardedParams::EndIteration() {
  // The host checks of the gathers the device stream already waited for (errors, timeouts).
  absl::Status checked = comm::WaitAll(stream_ordered_);
  stream_ordered_.clear();
  checked.Update(DropStagedHosts(/*wait=*/true));
  if (!checked.ok() && failed_.ok()) {
    failed_ = absl::Status(checked.code(), absl::StrCat("ZeRO stage 3 on rank ", group_->rank(),
                                                        ": ", checked.message()));
  }
  absl::Status status = failed_;
  for (int s = 0; s < static_cast<int>(segments_.size()); ++s) {
    if (segments_[s].pins > 0) continue;
    absl::Status r = Release(s);
    if (status.ok()) status = r;
  }
  order_->EndIteration();
  order_->BeginIteration();
  stats_.order_departures = order_->departures();
  current_ = -1;
  return status;
}

absl::Status ShardedParams::Refresh() {
  for (const Segment& seg : segments_) {
    if (seg.pins > 0) {
      return absl::FailedPreconditionError(
          "ZeRO stage 3: the parameters changed while a GatheredParameters scope holds some; "
          "close it before the optimizer step or checkpoint load");
    }
  }
  // Every rank reaches the gather below whatever happened before (the ranks must pair up), and
  // a fresh shard (a loaded checkpoint) starts over: an earlier failure to read one is not kept.
  (void)EndIteration();
  failed_ = absl::OkStatus();
  for (Segment& seg : segments_) DropSecondary(seg);
  offload::MemoryRoleScope role(offload::MemoryRole::kGatheredParameters);
  // One all-gather for all persistent buckets (they are small and many: one per LayerNorm):
  // this rank's slices packed end to end, gathered, and unpacked per rank into each bucket.
  const ShardLayout& layout = flat_->layout();
  const int world = layout.world_size();
  std::vector<std::pair<int, int>> buckets;  // (segment, bucket)
  int64_t packed = 0;
  for (int s = 0; s < static_cast<int>(segments_.size()); ++s) {
    Segment& seg = segments_[s];
    if (!seg.persistent) continue;
    if (!seg.buffer.defined()) {
      seg.buffer = at::empty({seg.numel}, flat_->options());
      SkipGatherOnUse skip;
      for (int p = layout.SegmentFirstParam(s); p < layout.SegmentEndParam(s); ++p) {
        at::Tensor param = flat_->params()[p].second;
        param.set_data(
            seg.buffer.narrow(0, layout.param_offset(p) - seg.begin, layout.param_numel(p))
                .view(shapes_[p]));
      }
    }
    seg.state = State::kResident;
    for (int k = layout.SegmentFirstBucket(s); k < layout.SegmentEndBucket(s); ++k) {
      buckets.emplace_back(s, k);
      packed += layout.buckets()[k].slice;
    }
  }
  if (buckets.empty()) return absl::OkStatus();
  at::Tensor in = at::empty({packed}, flat_->options());
  at::Tensor out = at::empty({packed * world}, flat_->options());
  int64_t at = 0;
  absl::Status read;  // on failure the gather still runs (with zeros), so the ranks stay paired
  int part_of = -1;   // the segment whose part `part` holds: one read per segment
  absl::StatusOr<at::Tensor> part = absl::UnknownError("");
  for (const auto& [s, k] : buckets) {
    const LayoutBucket& b = layout.buckets()[k];
    const int64_t part_begin = segments_[s].begin / world;
    if (s != part_of) {
      part = shard_->Read(part_begin, segments_[s].numel / world);
      part_of = s;
      if (!part.ok() && read.ok()) read = part.status();
    }
    if (part.ok()) {
      in.narrow(0, at, b.slice).copy_(part->narrow(0, b.shard_offset - part_begin, b.slice));
    } else {
      in.narrow(0, at, b.slice).zero_();
    }
    at += b.slice;
  }
  absl::Status st = group_->AllGather(in, out);
  if (!read.ok()) {
    return absl::Status(read.code(), absl::StrCat("ZeRO stage 3: reading the persistent "
                                                  "parameters on rank ",
                                                  group_->rank(), ": ", read.message()));
  }
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("ZeRO stage 3: gathering the persistent "
                                                "parameters on rank ",
                                                group_->rank(), ": ", st.message()));
  }
  for (int r = 0; r < world; ++r) {
    at = 0;
    for (const auto& [s, k] : buckets) {
      const LayoutBucket& b = layout.buckets()[k];
      segments_[s]
          .buffer.narrow(0, b.begin - segments_[s].begin + r * b.slice, b.slice)
          .copy_(out.narrow(0, r * packed + at, b.slice));
      at += b.slice;
    }
  }
  return absl::OkStatus();
}

void ShardedParams::PrefetchFirst() {
  if (windows_ > 0) Prefetch();
}

absl::Status ShardedParams::Pin(const std::vector<int>& params) {
  std::vector<int> segs;
  for (int p : params) {
    const int s = segment_of_[p];
    if (!segments_[s].persistent && !Contains(segs, s)) segs.push_back(s);
  }
  for (int s : segs) ++segments_[s].pins;
  for (int s : segs) {
    // A segment the forward gathered through INT8 blocks is gathered again, exactly: a pinned
    // parameter may be written back into the shard.
    if (segments_[s].quantized && segments_[s].pins == 1) ZT_RETURN_IF_ERROR(Release(s));
    if (segments_[s].state != State::kReleased) continue;
    ZT_RETURN_IF_ERROR(MakeRoom(segments_[s].numel, segs));
    StartGather(s, /*prefetch=*/false, /*exact=*/true);
  }
  for (int s : segs) ZT_RETURN_IF_ERROR(Finish(s));
  SkipGatherOnUse skip;
  for (int p : params) {
    if (storages_[p]) flat_->params()[p].second.set_data(full_[p]);
  }
  return absl::OkStatus();
}

void ShardedParams::Unpin(const std::vector<int>& params) {
  std::vector<int> segs;
  for (int p : params) {
    const int s = segment_of_[p];
    if (!segments_[s].persistent && !Contains(segs, s)) segs.push_back(s);
  }
  for (int s : segs) {
    if (--segments_[s].pins == 0 && s != current_) (void)Release(s);
  }
  if (windows_ > 0) return;
  SkipGatherOnUse skip;
  for (int p : params) {
    if (storages_[p] && segments_[segment_of_[p]].pins == 0) {
      flat_->params()[p].second.set_data(empty_[p]);
    }
  }
}

absl::Status ShardedParams::WriteBack(int param) {
  Segment& seg = segments_[segment_of_[param]];
  DropSecondary(seg);  // the shard changes under it
  if (seg.state != State::kResident) {
    return absl::FailedPreconditionError(
        absl::StrCat("ZeRO stage 3: write-back of ", Describe(param), ", which is not gathered"));
  }
  try {
    c10::NoGradGuard no_grad;
    SkipGatherOnUse skip;
    const ShardLayout& layout = flat_->layout();
    const at::Tensor values =
        seg.buffer.narrow(0, layout.param_offset(param) - seg.begin, layout.param_numel(param));
    for (const ParamPiece& piece : layout.PiecesOf(param)) {
      if (piece.rank != group_->rank()) continue;
      ZT_RETURN_IF_ERROR(shard_->Write(
          piece.shard_offset, values.narrow(0, piece.param_offset, piece.numel).contiguous()));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("ZeRO stage 3: write-back of ", Describe(param), ": ",
                                            e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

void ShardedParams::KeepSecondary(Segment& seg, int segment) {
  seg.keep_secondary = false;
  if (seg.secondary.defined()) return;
  const ShardLayout& layout = flat_->layout();
  const int k = options_.hpz_partition_size;
  const int j = secondary_group_->rank();
  seg.secondary = at::empty({seg.numel / k}, flat_->options());
  seg.secondary_quantized = seg.quantized;
  for (int b = layout.SegmentFirstBucket(segment); b < layout.SegmentEndBucket(segment); ++b) {
    const LayoutBucket& bucket = layout.buckets()[b];
    const int64_t piece = bucket.numel / k;
    seg.secondary.narrow(0, (bucket.begin - seg.begin) / k, piece)
        .copy_(seg.buffer.narrow(0, bucket.begin - seg.begin + j * piece, piece));
  }
  stats_.secondary_numel += seg.numel / k;
}

void ShardedParams::DropSecondary(Segment& seg) {
  if (!seg.secondary.defined()) return;
  stats_.secondary_numel -= seg.secondary.numel();
  seg.secondary = at::Tensor();
}

int64_t ShardedParams::secondary_capacity_numel() const {
  if (secondary_group_ == nullptr) return 0;
  int64_t n = 0;
  for (const Segment& seg : segments_) n += seg.persistent ? 0 : seg.numel;
  return n / options_.hpz_partition_size;
}

}  // namespace zerotrain::partition
