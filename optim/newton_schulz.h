// NewtonSchulz: Muon's orthogonalisation of a gradient matrix (the "zeroth power" U V^T of
// G = U S V^T, approximately), by DeepSpeed 0.19.8's two iterations: the quintic Newton-Schulz
// iteration on G itself ("standard") and its Gram form on G G^T with a restart ("gram", the
// default). The iterations are matrix products, so unlike the rest of optim/ this takes LibTorch
// tensors: the products are LibTorch's GEMMs in the dtype DeepSpeed computes in, so the numerics
// are those of DeepSpeed's eager torch on the same device (a CUDA tensor runs on the GPU).
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zerotrain::optim {

enum class NsMethod { kStandard, kGram };

// "standard" or "gram", as DeepSpeed's ns_method key spells them.
absl::StatusOr<NsMethod> ParseNsMethod(absl::string_view name);
const char* NsMethodName(NsMethod method);

// The dtype the iteration runs in on `device`, as DeepSpeed chooses it: "gram" in fp16 where
// half-precision GEMMs are supported (a CUDA device; a CPU whose oneDNN has fp16 kernels, e.g. one
// with AVX512-FP16), else fp32; "standard" in bf16.
at::ScalarType NsComputeDtype(NsMethod method, const c10::Device& device);

// The orthogonalised matrix of g (2-D, any float dtype), in NsComputeDtype(method, g.device()),
// after `steps` iterations (DeepSpeed always runs 5).
at::Tensor Orthogonalize(const at::Tensor& g, NsMethod method, int steps = 5);

// Muon's update of one weight matrix from its (nesterov) blend of gradient and momentum:
// Orthogonalize(u) scaled by sqrt(max(1, rows / cols)), in u's dtype (DeepSpeed's muon_update
// after the momentum).
at::Tensor MuonUpdate(const at::Tensor& u, NsMethod method, int steps = 5);

}  // namespace zerotrain::optim
