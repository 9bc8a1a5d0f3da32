// Internal interface between the optimizer front ends (adam.cc, sgd.cc, ...) and the per-ISA
// kernels. Each ISA file fills one KernelTable; the front ends validate, resolve the path and
// call the table's functions on cache-sized chunks [begin, end) of one shard.
#pragma once

#include <cstdint>

#include "optim/precision.h"
#include "tools/cpu_dispatch.h"

namespace zerotrain::optim::internal {

// The pointers of one shard a kernel streams over. `state` holds the optimizer's fp32 state
// arrays (Adam: exp_avg, exp_avg_sq, max_exp_avg_sq; SGD: momentum buffer; Adagrad: sum);
// unused ones are null. `out` is the optional low-precision copy of the updated parameters.
struct Streams {
  float* param = nullptr;
  const void* grad = nullptr;
  float* state[3] = {nullptr, nullptr, nullptr};
  void* out = nullptr;
};

// Per-step scalars, already folded (bias corrections, 1/grad_scale) in double by the caller.
struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps;
  float step_size;       // lr / bias_correction1
  float inv_sqrt_bias2;  // 1 / sqrt(bias_correction2)
  float param_decay;     // 1 - lr * weight_decay for AdamW, else 1
  float l2;              // weight_decay for Adam (added to the gradient), else 0
  float grad_mul;        // 1 / grad_scale
  bool amsgrad;
};

struct SgdScalars {
  float lr, momentum, one_minus_dampening, weight_decay, grad_mul;
  bool use_momentum;  // momentum != 0
  bool first_step;    // the momentum buffer is set to the gradient, as torch does
  bool nesterov;
};

struct AdagradScalars {
  float clr;  // lr / (1 + (step - 1) * lr_decay)
  float eps, weight_decay, grad_mul;
};

// LAMB runs in two passes (the trust ratio needs whole-tensor norms between them). As in
// DeepSpeed's FusedLamb, the update direction is u = m / (sqrt(v + eps_in_sqrt) + eps) + wd * p,
// without bias correction; that goes into the step size.
struct LambScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float eps_in_sqrt;  // eps when eps_inside_sqrt, else 0
  float eps;          // eps otherwise, else 0
  float weight_decay, grad_mul;
  float neg_step_trust;  // -step_size * the shard's trust ratio (apply pass only)
};

struct SquaredNorms {
  double param = 0.0;
  double update = 0.0;
};

// How a kernel reads gradients and writes the parameter copy: the copy's type, or none.
struct StreamTypes {
  DType grad = DType::kFloat32;
  bool has_out = false;
  DType out = DType::kBFloat16;
};

struct KernelTable {
  void (*adam)(const AdamScalars&, const StreamTypes&, const Streams&, int64_t begin, int64_t end);
  void (*sgd)(const SgdScalars&, const StreamTypes&, const Streams&, int64_t begin, int64_t end);
  void (*adagrad)(const AdagradScalars&, const StreamTypes&, const Streams&, int64_t begin,
                  int64_t end);
  // Sum of x*x over [begin, end): fp32 partial sums of at most 128 terms per lane, added up in
  // double.
  double (*sum_squares)(const void* data, DType dtype, int64_t begin, int64_t end);
  bool (*has_inf_or_nan)(const void* data, DType dtype, int64_t begin, int64_t end);
  // LAMB pass 1: moments updated in place; returns |p|^2 and |update|^2 over the range.
  SquaredNorms (*lamb_moments)(const LambScalars&, const StreamTypes&, const Streams&,
                               int64_t begin, int64_t end);
  // LAMB pass 2: p += neg_step_trust * update, recomputed from the moments (no gradient read).
  void (*lamb_apply)(const LambScalars&, const StreamTypes&, const Streams&, int64_t begin,
                     int64_t end);
};

const KernelTable& ScalarKernelTable();
const KernelTable& Avx2KernelTable();
const KernelTable& Avx512KernelTable();

// The table of a resolved (concrete) path.
const KernelTable& KernelTableFor(SimdPath path);

}  // namespace zerotrain::optim::internal
