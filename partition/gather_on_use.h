// Gather on use: how ZeRO stage 3 learns that a parameter is about to be read. LibTorch's C++
// modules have no forward hooks (forward is not virtual, and nothing wraps a submodule's call),
// so no boundary can be installed around a user's submodule without changing its code. Instead a
// partitioned parameter's tensor carries an extra dispatch key, and a fallback kernel registered
// for that key runs before any operator that receives such a tensor (or a view of one, which
// inherits the key): it asks the tensor's owner to make the storage resident, then hands the
// operator on to autograd and the backend unchanged. Backward reads the tensors autograd saved,
// which are the same parameters or views of them, so it gathers again on demand too.
//
// The key is DispatchKey::DeferredInit, a wrapper key LibTorch reserves for out-of-tree use
// (torchdistx's deferred initialisation, which cannot be combined with this).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <vector>

namespace zerotrain::partition {

// Whoever owns partitioned storages (ShardedParams).
class GatherOnUseOwner {
 public:
  virtual ~GatherOnUseOwner() = default;
  // Makes the parameters (the `id`s they were registered with) resident before an operator
  // reads them; may block on communication. Throws c10::Error (which surfaces from the operator)
  // when they may not be gathered here.
  virtual void Use(const std::vector<int>& params) = 0;
};

// Storages are looked up by identity: every view of a parameter shares its StorageImpl.
void RegisterGatherOnUse(const c10::StorageImpl* storage, GatherOnUseOwner* owner, int id);
void UnregisterGatherOnUse(const c10::StorageImpl* storage);

// A tensor header for `storage` with the gather-on-use key added to `like`'s keys (dtype, device
// and the rest come from `like`), in the given contiguous shape. The storage may hold no memory.
at::Tensor MakeGatherOnUseTensor(const c10::Storage& storage, const at::Tensor& like,
                                 at::IntArrayRef sizes);

// Scope in which the fallback does not run: for the owner's own work on its tensors (set_data,
// copies into and out of resident storage).
class SkipGatherOnUse {
 public:
  SkipGatherOnUse();
  ~SkipGatherOnUse();

 private:
  bool was_excluded_;
};

}  // namespace zerotrain::partition
