// The gather-on-use dispatch fallback and its registry (see gather_on_use.h).
#include "partition/gather_on_use.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <unordered_map>

namespace zerotrain::partition {
namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::DeferredInit;

struct Entry {
  GatherOnUseOwner* owner;
  int id;
};

std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}

std::unordered_map<const c10::StorageImpl*, Entry>& Registry() {
  static auto* r = new std::unordered_map<const c10::StorageImpl*, Entry>();
  return *r;
}

void Collect(const at::Tensor& t, std::map<GatherOnUseOwner*, std::vector<int>>* uses) {
  if (!t.defined() || !t.key_set().has(kKey) || !t.has_storage()) return;
  const c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().find(s);
  TORCH_CHECK(it != Registry().end(),
              "zerotrain: this tensor belongs to a ZeRO stage 3 engine that no longer exists; its "
              "parameters are partitioned and cannot be read (save or gather them before the "
              "engine is destroyed)");
  (*uses)[it->second.owner].push_back(it->second.id);
}

void GatherOnUseFallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack) {
  std::map<GatherOnUseOwner*, std::vector<int>> uses;
  const size_t n = op.schema().arguments().size();
  for (const c10::IValue& v : torch::jit::last(*stack, n)) {
    if (v.isTensor()) {
      Collect(v.toTensor(), &uses);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) Collect(t, &uses);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) Collect(e.toTensor(), &uses);
      }
    }
  }
  for (auto& [owner, ids] : uses) owner->Use(ids);
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

TORCH_LIBRARY_IMPL(_, DeferredInit, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&GatherOnUseFallback>());
}

}  // namespace

void RegisterGatherOnUse(const c10::StorageImpl* storage, GatherOnUseOwner* owner, int id) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[storage] = Entry{owner, id};
}

void UnregisterGatherOnUse(const c10::StorageImpl* storage) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().erase(storage);
}

at::Tensor MakeGatherOnUseTensor(const c10::Storage& storage, const at::Tensor& like,
                                 at::IntArrayRef sizes) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage),
                                                          like.key_set().add(kKey), like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

SkipGatherOnUse::SkipGatherOnUse() : was_excluded_(c10::impl::tls_is_dispatch_key_excluded(kKey)) {
  c10::impl::tls_set_dispatch_key_excluded(kKey, true);
}

SkipGatherOnUse::~SkipGatherOnUse() {
  c10::impl::tls_set_dispatch_key_excluded(kKey, was_excluded_);
}

}  // namespace zerotrain::partition
