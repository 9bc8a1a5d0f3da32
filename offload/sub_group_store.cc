// SubGroupStore: the optimizer's per-element state (fp32 or 2-byte arrays), resident in host memory
// or swapped to NVMe one sub-group region at a time through a few buffers that read ahead and write
// behind.
#include "offload/sub_group_store.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "offload/sub_group_store_impl.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {

const char* StoreDeviceName(StoreDevice d) { return d == StoreDevice::kHost ? "host" : "nvme"; }

namespace {

template <typename T>
absl::Status Bad(const char* field, const T& value, const std::string& rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("SubGroupStore: ", field, " = ", value, ": ", rule));
}

absl::Status CheckOptions(const SubGroupStoreOptions& o) {
  const std::string arrays = absl::StrCat("{", absl::StrJoin(o.arrays, ", "), "}");
  if (o.arrays.empty()) return Bad("arrays", arrays, "name at least one array");
  std::set<std::string> seen;
  for (const std::string& a : o.arrays) {
    if (a.empty() || !seen.insert(a).second) {
      return Bad("arrays", arrays, absl::StrCat("names must be non-empty and unique ('", a, "')"));
    }
  }
  if (o.numel <= 0) return Bad("numel", o.numel, "must be > 0");
  if (o.sub_group_numel <= 0) return Bad("sub_group_numel", o.sub_group_numel, "must be > 0");
  if ((o.numel - 1) / o.sub_group_numel >= INT_MAX) {
    return Bad("sub_group_numel", o.sub_group_numel,
               absl::StrCat("too small for numel ", o.numel, ": sub-groups are numbered by int"));
  }
  if (!o.element_bytes.empty() && o.element_bytes.size() != o.arrays.size()) {
    return Bad("element_bytes", absl::StrCat(o.element_bytes.size(), " entries"),
               absl::StrCat("must be empty or one per array (", o.arrays.size(), ")"));
  }
  for (int b : o.element_bytes) {
    if (b != 4 && b != 2) return Bad("element_bytes", b, "each must be 4 or 2");
  }
  if (o.pool == nullptr) return Bad("pool", "null", "required");
  const std::string device = StoreDeviceName(o.device);
  if (!o.external.empty() && o.external.size() != o.arrays.size()) {
    return Bad("external", absl::StrCat(o.external.size(), " entries"),
               absl::StrCat("must be empty or one per array (", o.arrays.size(), ")"));
  }
  if (o.device == StoreDevice::kHost) return absl::OkStatus();
  if (!o.external.empty()) {
    return Bad("external", absl::StrCat(o.external.size(), " entries"),
               "only for device host (device is " + device + ")");
  }
  if (o.swap == nullptr) return Bad("swap", "null", "required for device " + device);
  if (o.buffer_count < 1) return Bad("buffer_count", o.buffer_count, "must be >= 1");
  if (o.io_timeout <= absl::ZeroDuration()) {
    return Bad("io_timeout", absl::FormatDuration(o.io_timeout), "must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SubGroupStore::Impl::Fail(const Transfer& t, const absl::Status& s) {
  absl::Status e = StoreError(s, t.what);
  if (poison.ok()) poison = e;
  return e;
}

absl::Status SubGroupStore::Impl::Wait(Transfer& t) {
  absl::Status s = t.handle.Wait(o.io_timeout);
  // A transfer past its timeout keeps its handle, so that later waits (and the destructor) still
  // know the buffer is in use.
  if (t.handle.done()) t.handle = IoHandle();
  return s.ok() ? s : Fail(t, s);
}

absl::Status SubGroupStore::Impl::Start(IoOp op, const std::string& region, void* host, Transfer& t,
                                        const std::string& what) {
  t.what = absl::StrCat(op == IoOp::kRead ? "swap-in" : "swap-out", " of ", what, " (region '",
                        region, "')");
  absl::StatusOr<IoHandle> h =
      op == IoOp::kRead ? o.swap->SwapIn(region, host) : o.swap->SwapOut(region, host);
  if (!h.ok()) return Fail(t, h.status());
  t.handle = *h;
  return absl::OkStatus();
}

absl::Status SubGroupStore::Impl::Start(IoOp op, int g, int b) {
  return Start(op, Region(g), blocks[b].data(), in_flight[b], absl::StrCat("sub-group ", g));
}

absl::Status SubGroupStore::Impl::StartGrads(IoOp op, int g, int b) {
  return Start(op, GradRegion(g), grad_blocks[b].data(), grad_in_flight[b],
               absl::StrCat("the gradients of sub-group ", g));
}

absl::Status SubGroupStore::Impl::Drain() {
  absl::Status first;
  for (Transfer& t : in_flight) first.Update(Wait(t));
  for (Transfer& t : grad_in_flight) first.Update(Wait(t));
  return first;
}

SubGroupView SubGroupStore::Impl::View(int g, char* buffer, const float* grads) const {
  SubGroupView v{g, Begin(g), Numel(g), {}, grads};
  for (size_t a = 0; a < o.arrays.size(); ++a) {
    v.arrays.push_back(buffer != nullptr ? buffer + ArrayOffset(g, a)
                                         : resident[a] + v.begin * Bytes(a));
  }
  return v;
}

absl::Status SubGroupStore::Impl::PoisonedError() const {
  return absl::FailedPreconditionError(
      absl::StrCat("SubGroupStore: unusable after an earlier I/O error (the swapped state may be "
                   "half-written): ",
                   poison.message()));
}

// Item j of the n sub-groups from `first` uses buffer j % B. A buffer is free for item k once the
// write-out of item k - B finished. Before fn(j), swap-ins are started in order for the items up
// to j + B - 1 whose buffers are free; only item j's own buffer is waited for, so the write-out
// of item j - 1 overlaps fn(j) instead of delaying it, and its buffer's read-ahead starts at the
// next round. kWrite starts no swap-ins: fn overwrites the whole buffer.
absl::Status SubGroupStore::Impl::VisitNvme(int first, int n, Access access, bool with_grads,
                                            const VisitFn& fn) {
  const int buffers = static_cast<int>(in_flight.size());
  auto busy = [&](int b) {
    return !in_flight[b].handle.done() || (with_grads && !grad_in_flight[b].handle.done());
  };
  auto wait = [&](int b) -> absl::Status {
    ZT_RETURN_IF_ERROR(Wait(in_flight[b]));
    return with_grads ? Wait(grad_in_flight[b]) : absl::OkStatus();
  };
  int next = 0;  // the first item whose buffer has not been claimed yet
  auto claim = [&](int j) -> absl::Status {
    for (; next < n && next < j + buffers; ++next) {
      const int b = next % buffers;
      if (next > j && busy(b)) break;
      ZT_RETURN_IF_ERROR(wait(b));
      if (access == Access::kWrite) continue;
      ZT_RETURN_IF_ERROR(Start(IoOp::kRead, first + next, b));
      if (with_grads) ZT_RETURN_IF_ERROR(StartGrads(IoOp::kRead, first + next, b));
    }
    return absl::OkStatus();
  };
  absl::Status status;
  for (int j = 0; j < n && status.ok(); ++j) {
    const int b = j % buffers;
    status = claim(j);
    if (status.ok()) status = wait(b);
    if (status.ok()) status = claim(j);  // that wait may have freed buffers for the read-ahead
    if (!status.ok()) break;
    const float* grads = with_grads ? grad_blocks[b].as<float>() : nullptr;
    absl::Status fn_status = fn(View(first + j, blocks[b].as<char>(), grads));
    if (!fn_status.ok()) {
      Drain().IgnoreError();  // an I/O failure here poisons the store; fn's error comes first
      return fn_status;
    }
    if (access != Access::kRead) status = Start(IoOp::kWrite, first + j, b);
  }
  absl::Status drained = Drain();
  return status.ok() ? drained : status;
}

SubGroupStore::SubGroupStore(const SubGroupStoreOptions& options)
    : options_(options), impl_(std::make_unique<Impl>(options_)) {}

SubGroupStore::~SubGroupStore() {
  bool busy = false;
  for (auto* transfers : {&impl_->in_flight, &impl_->grad_in_flight}) {
    for (Transfer& t : *transfers) {
      t.handle.Wait(options_.io_timeout).IgnoreError();
      busy = busy || !t.handle.done();
    }
  }
  // A transfer still running after its timeout reads or writes its buffer: leaking the buffers is
  // better than letting the pool hand that memory to someone else.
  if (busy) {
    static_cast<void>(new std::vector<HostBlock>(std::move(impl_->blocks)));
    static_cast<void>(new std::vector<HostBlock>(std::move(impl_->grad_blocks)));
  }
}

namespace {

// `count` zero-filled blocks of `bytes` from the pool, named `what` in an error.
absl::Status AllocateBlocks(PinnedHostPool* pool, int count, int64_t bytes, const std::string& what,
                            std::vector<HostBlock>* out) {
  for (int b = 0; b < count; ++b) {
    absl::StatusOr<HostBlock> block = pool->Allocate(bytes);
    if (!block.ok()) {
      return StoreError(block.status(),
                        absl::StrCat(what, count > 1 ? absl::StrCat(" ", b, " of ", count) : "",
                                     " (", bytes, " bytes)"));
    }
    std::memset(block->data(), 0, bytes);
    out->push_back(*std::move(block));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SubGroupStore>> SubGroupStore::Create(
    const SubGroupStoreOptions& options) {
  ZT_RETURN_IF_ERROR(CheckOptions(options));
  std::unique_ptr<SubGroupStore> store(new SubGroupStore(options));
  Impl& m = *store->impl_;
  const SubGroupStoreOptions& o = store->options_;
  if (o.device == StoreDevice::kHost) {
    for (int a = 0; a < store->num_arrays(); ++a) {
      if (!o.external.empty() && o.external[a] != nullptr) {
        m.resident.push_back(static_cast<char*>(o.external[a]));
        continue;
      }
      ZT_RETURN_IF_ERROR(AllocateBlocks(o.pool, 1, o.numel * m.Bytes(a),
                                        absl::StrCat("array '", o.arrays[a], "'"), &m.blocks));
      m.resident.push_back(m.blocks.back().as<char>());
    }
    const int64_t grad_bytes = o.numel * int64_t{sizeof(float)};
    if (o.grads) {
      ZT_RETURN_IF_ERROR(AllocateBlocks(o.pool, 1, grad_bytes, "gradients", &m.grad_blocks));
    }
    return store;
  }
  // Buffers before regions: a pool limit then fails before any file is made. Sub-group 0 is never
  // shorter than the others.
  const int groups = m.Groups();
  const int buffers = std::min(o.buffer_count, groups);
  ZT_RETURN_IF_ERROR(AllocateBlocks(o.pool, buffers, m.RegionBytes(0), "buffer", &m.blocks));
  m.in_flight.resize(buffers);
  if (o.grads) {
    ZT_RETURN_IF_ERROR(AllocateBlocks(o.pool, buffers, m.Numel(0) * int64_t{sizeof(float)},
                                      "gradient buffer", &m.grad_blocks));
    m.grad_in_flight.resize(buffers);
  }
  for (int g = 0; g < groups; ++g) {
    absl::Status s = o.swap->Reserve(m.Region(g), m.RegionBytes(g));
    if (s.ok() && o.grads)
      s = o.swap->Reserve(m.GradRegion(g), m.Numel(g) * int64_t{sizeof(float)});
    if (!s.ok()) return StoreError(s, absl::StrCat("sub-group ", g, " of ", groups));
  }
  return store;
}

absl::Status SubGroupStore::Visit(int64_t begin, int64_t end, Access access, const VisitFn& fn) {
  return impl_->Visit(begin, end, access, /*with_grads=*/false, fn);
}

absl::Status SubGroupStore::VisitWithGrads(Access access, const VisitFn& fn) {
  if (!options_.grads || access == Access::kWrite) {
    return absl::InvalidArgumentError(
        absl::StrCat("SubGroupStore: VisitWithGrads needs the grads option and kRead or kReadWrite",
                     options_.grads ? " (got kWrite)" : " (the store keeps no gradients)"));
  }
  if (impl_->pass.active || !impl_->grads_complete) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SubGroupStore: VisitWithGrads ",
        impl_->pass.active ? "during a gradient pass (call FinishGrads first)"
                           : "after a gradient pass that did not finish (its sums are partial)"));
  }
  return impl_->Visit(0, numel(), access, /*with_grads=*/true, fn);
}

absl::Status SubGroupStore::Impl::Visit(int64_t begin, int64_t end, Access access, bool with_grads,
                                        const VisitFn& fn) {
  // Overwriting everything (a checkpoint load) leaves nothing half-written behind, so it is the
  // one visit a poisoned store allows, and its success heals the store.
  const bool rewrite_all = access == Access::kWrite && begin == 0 && end == o.numel;
  if (!poison.ok() && !rewrite_all) return PoisonedError();
  if (begin < 0 || end > o.numel || begin > end) {
    return absl::InvalidArgumentError(
        absl::StrCat("SubGroupStore: Visit(", begin, ", ", end,
                     "): need 0 <= begin <= end <= numel = ", o.numel));
  }
  if (begin == end) return absl::OkStatus();
  // The buffers and their transfers belong to one visit at a time.
  if (visiting) return absl::FailedPreconditionError("SubGroupStore: Visit inside a Visit");
  const int first = static_cast<int>(begin / o.sub_group_numel);
  const int n = static_cast<int>((end - 1) / o.sub_group_numel) - first + 1;
  visiting = true;
  // A callback that throws (LibTorch inside an optimizer) is an error like any other, so the
  // visit still drains its transfers and the caller still gets a Status.
  const VisitFn guarded = [&fn](const SubGroupView& v) -> absl::Status {
    try {
      return fn(v);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("sub-group ", v.index, ": ", e.what()));
    }
  };
  absl::Status status;
  if (o.device == StoreDevice::kNvme) {
    if (rewrite_all) poison = absl::OkStatus();  // set again if this visit fails too
    status = VisitNvme(first, n, access, with_grads, guarded);
  } else {
    for (int g = first; g < first + n && status.ok(); ++g) {
      const float* grads = with_grads ? grad_blocks[0].as<float>() + Begin(g) : nullptr;
      status = guarded(View(g, nullptr, grads));
    }
  }
  visiting = false;
  if (rewrite_all && !status.ok() && poison.ok()) poison = status;
  return status;
}

void* SubGroupStore::resident(int array) const {
  if (options_.device != StoreDevice::kHost || array < 0 || array >= num_arrays()) return nullptr;
  return impl_->resident[array];
}

int SubGroupStore::element_bytes(int array) const { return impl_->Bytes(array); }

int SubGroupStore::num_sub_groups() const { return impl_->Groups(); }

// The blocks' capacities (sizes rounded up to the pool's alignment): what the pool accounts.
int64_t SubGroupStore::host_bytes() const {
  int64_t total = 0;
  for (const HostBlock& b : impl_->blocks) total += b.capacity();
  for (const HostBlock& b : impl_->grad_blocks) total += b.capacity();
  return total;
}

int64_t SubGroupStore::nvme_bytes() const {
  if (options_.device != StoreDevice::kNvme) return 0;
  int64_t bytes = options_.grads ? options_.numel * int64_t{sizeof(float)} : 0;
  for (int g = 0; g < impl_->Groups(); ++g) bytes += impl_->RegionBytes(g);
  return bytes;
}

absl::Status SubGroupStore::health() const { return impl_->poison; }

}  // namespace zerotrain::offload
