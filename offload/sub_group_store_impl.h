// The inside of SubGroupStore, shared by its two source files: sub_group_store.cc (the arrays:
// Create and Visit) and sub_group_grads.cc (the gradient pass). Not part of the library's API.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "offload/sub_group_store.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {

// The lower layers' messages already name the file and the operation; this adds which sub-group
// or buffer of the store it was, and keeps the code (ResourceExhausted, DataLoss, ...).
inline absl::Status StoreError(const absl::Status& s, const std::string& context) {
  return WithPrefix(s, absl::StrCat("SubGroupStore: ", context, ": "));
}

// The latest transfer that used a buffer, and how to name it in an error.
struct Transfer {
  IoHandle handle;  // default: finished, the buffer is free
  std::string what;
};

struct SubGroupStore::Impl {
  explicit Impl(const SubGroupStoreOptions& o) : o(o) {}

  int64_t Begin(int g) const { return g * o.sub_group_numel; }
  int64_t Numel(int g) const { return std::min(o.sub_group_numel, o.numel - Begin(g)); }
  int Groups() const { return static_cast<int>((o.numel - 1) / o.sub_group_numel + 1); }
  std::string Region(int g) const { return absl::StrCat(o.region_prefix, "sg", g); }
  std::string GradRegion(int g) const { return absl::StrCat(o.region_prefix, "grad", g); }
  int Bytes(size_t a) const { return o.element_bytes.empty() ? 4 : o.element_bytes[a]; }
  // Where array a of sub-group g begins in its region (and buffer): after the arrays before it,
  // each rounded up to 4 bytes, so that a 4-byte array after an odd count of 2-byte elements is
  // still aligned for its floats (all-fp32 stores need no padding).
  int64_t ArrayOffset(int g, size_t a) const {
    int64_t offset = 0;
    for (size_t b = 0; b < a; ++b) offset += (Numel(g) * Bytes(b) + 3) / 4 * 4;
    return offset;
  }
  int64_t RegionBytes(int g) const { return ArrayOffset(g, o.arrays.size()); }

  // Records the first I/O failure: the swapped state may be half-written from then on.
  absl::Status Fail(const Transfer& t, const absl::Status& s);
  absl::Status Wait(Transfer& t);
  // Starts swapping `region` in or out of `host`, recorded in `t`; `what` names it in errors.
  absl::Status Start(IoOp op, const std::string& region, void* host, Transfer& t,
                     const std::string& what);
  absl::Status Start(IoOp op, int g, int b);       // the arrays of sub-group g, buffer b
  absl::Status StartGrads(IoOp op, int g, int b);  // the gradients of sub-group g, buffer b
  absl::Status Drain();                            // every transfer, gradients' too
  // kHost: pointers into the arrays; kNvme (buffer != null): the arrays back to back in it.
  // `grads`: the view's gradients, or null.
  SubGroupView View(int g, char* buffer, const float* grads) const;
  absl::Status VisitNvme(int first, int n, Access access, bool with_grads, const VisitFn& fn);
  absl::Status Visit(int64_t begin, int64_t end, Access access, bool with_grads, const VisitFn& fn);
  absl::Status PoisonedError() const;

  // The gradient pass (sub_group_grads.cc).
  float* PassGrads(int g);                // where sub-group g's gradients are while it is open
  absl::Status OpenGrads(int g);          // zeroes them, or reads them in to accumulate
  absl::Status CloseGrads();              // hands the open sub-group to on_summed and writes it out
  absl::Status AdvanceGrads(int target);  // finishes every sub-group before target, opens it

  const SubGroupStoreOptions& o;
  std::vector<HostBlock> blocks;    // kHost: the arrays the store allocated; kNvme: the buffers
  std::vector<char*> resident;      // kHost: every array, external or not
  std::vector<Transfer> in_flight;  // kNvme: one per buffer
  // options.grads: kHost the array (one block); kNvme one buffer per state buffer, each with its
  // transfer.
  std::vector<HostBlock> grad_blocks;
  std::vector<Transfer> grad_in_flight;
  absl::Status poison;
  bool visiting = false;

  struct GradPass {
    bool active = false;
    bool accumulate = false;
    GradSumsFn on_summed;
    int open = -1;    // the sub-group whose gradients are in memory, or -1
    int next = 0;     // the first sub-group this pass has not finished
    int64_t end = 0;  // where the last range ended
  } pass;
  // The last pass finished (or none began, and the preallocated files read as zeros): only then
  // are the gradients one pass's sums, not a mix of two.
  bool grads_complete = true;
};

}  // namespace zerotrain::offload
