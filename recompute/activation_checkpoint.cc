// CheckpointBlock as a LibTorch custom autograd function: forward runs the block with grad off and
// keeps only its inputs and the RNG states; backward reruns it with grad on from those states and
// backpropagates through the rerun (a reentrant backward, as torch.utils.checkpoint's reentrant
// variant does), so the block's parameters accumulate gradients there.
#include "recompute/activation_checkpoint.h"

#include <ATen/DeviceAccelerator.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

namespace zerotrain::recompute {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::mutex stats_mutex;
RecomputeStats stats;

// One accelerator device's default generator state, as forward found it.
struct DeviceRng {
  c10::Device device;
  at::Tensor state;
};

// What backward needs besides the saved tensors; travels in ctx->saved_data as a capsule because
// an IValue cannot hold a std::function.
struct CheckpointState : torch::CustomClassHolder {
  Block block;
  ActivationCheckpointOptions options;
  at::Tensor cpu_rng;
  std::vector<DeviceRng> device_rngs;   // each accelerator device an input lives on, once
  std::vector<bool> requires_grad;      // per input, as seen by forward
  std::vector<c10::Device> devices;     // per input, for moving host copies back
  std::vector<at::Tensor> host_inputs;  // per input: its pinned host copy, or undefined
  // Per device with host copies: recorded after the (asynchronous) copies were queued, so the
  // copies back wait for them even if backward runs on another stream.
  std::vector<c10::Event> copies_done;
};

at::Tensor GetRngState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetRngState(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Accelerator generators go through the generic Generator API, so this file needs no CUDA
// headers; a CPU-only run never reaches it, since only a tensor on such a device names one.
at::Generator DeviceGenerator(c10::Device device) {
  return at::globalContext().defaultGenerator(device);
}

c10::Stream CurrentStream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

// Sets the states saved in forward for the rerun and puts back the caller's states afterwards,
// also when the block (or setting a later state) throws, so recomputation leaves every random
// stream where it was.
class RngFork {
 public:
  explicit RngFork(const CheckpointState& s) {
    try {
      Swap(c10::Device(c10::kCPU), s.cpu_rng);
      for (const DeviceRng& d : s.device_rngs) Swap(d.device, d.state);
    } catch (...) {
      Restore();
      throw;
    }
  }
  ~RngFork() { Restore(); }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  static at::Generator GeneratorOf(c10::Device device) {
    return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : DeviceGenerator(device);
  }
  void Swap(c10::Device device, const at::Tensor& state) {
    at::Generator gen = GeneratorOf(device);
    current_.push_back({device, GetRngState(gen)});
    SetRngState(gen, state);
  }
  void Restore() {
    for (auto it = current_.rbegin(); it != current_.rend(); ++it) {
      SetRngState(GeneratorOf(it->device), it->state);
    }
    current_.clear();
  }

  std::vector<DeviceRng> current_;  // the caller's states, in the order they were replaced
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Function::apply has already turned grad mode off here, so the block records no graph.
  // `with_anchor` is the block's inputs plus the anchor CheckpointBlock appends.
  static variable_list forward(AutogradContext* ctx, at::TensorList with_anchor,
                               c10::intrusive_ptr<CheckpointState> state) {
    at::TensorList inputs = with_anchor.slice(0, with_anchor.size() - 1);
    state->cpu_rng = GetRngState(at::detail::getDefaultCPUGenerator());
    for (const at::Tensor& x : inputs) {
      state->requires_grad.push_back(x.defined() && x.requires_grad());
      state->devices.push_back(x.defined() ? x.device() : c10::Device(c10::kCPU));
      if (!x.defined() || !at::isAccelerator(x.device().type())) continue;
      const bool seen = std::any_of(state->device_rngs.begin(), state->device_rngs.end(),
                                    [&](const DeviceRng& d) { return d.device == x.device(); });
      if (!seen) {
        state->device_rngs.push_back({x.device(), GetRngState(DeviceGenerator(x.device()))});
      }
    }
    // save_for_backward keeps autograd's version check: an input changed in place before
    // backward makes backward fail instead of recomputing from the changed values. Inputs moved
    // to host memory are copies, so they need no check. Into pinned memory the copy is queued
    // on the input's stream and the host goes on (a pageable copy would wait for it).
    std::vector<at::Tensor> kept = inputs.vec();
    std::vector<c10::Device> copied_from;
    for (at::Tensor& x : kept) {
      const bool to_host =
          state->options.cpu_checkpointing && x.defined() && at::isAccelerator(x.device().type());
      at::Tensor host;
      if (to_host) {
        host = at::empty_like(x, x.options().device(c10::kCPU).pinned_memory(true));
        host.copy_(x.detach(), /*non_blocking=*/true);
        if (std::find(copied_from.begin(), copied_from.end(), x.device()) == copied_from.end()) {
          copied_from.push_back(x.device());
        }
        x = at::Tensor();
      }
      state->host_inputs.push_back(std::move(host));
    }
    for (const c10::Device& d : copied_from) {
      state->copies_done.emplace_back(d.type());
      state->copies_done.back().record(CurrentStream(d));
    }
    ctx->save_for_backward(kept);
    variable_list outputs = state->block(inputs.vec());
    for (const at::Tensor& y : outputs) {
      TORCH_CHECK(y.defined(), "CheckpointBlock: the block returned an undefined tensor");
      if (!at::isFloatingType(y.scalar_type()) && !at::isComplexType(y.scalar_type())) {
        ctx->mark_non_differentiable({y});
      }
    }
    ctx->set_materialize_grads(false);
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    // The engine turns grad mode on in backward only for create_graph; the nested backward below
    // builds no graph, so higher-order gradients would silently be wrong.
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "CheckpointBlock: backward with create_graph (double backward) is not supported");
    auto state =
        c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    for (const c10::Event& done : state->copies_done) {
      done.block(CurrentStream(c10::Device(done.device_type(), done.device_index())));
    }
    variable_list inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor x = state->host_inputs[i].defined() ? state->host_inputs[i] : saved[i];
      if (x.defined()) {
        x = x.to(state->devices[i], /*non_blocking=*/true).detach();
        x.requires_grad_(state->requires_grad[i]);
      }
      inputs.push_back(std::move(x));
    }
    variable_list outputs;
    {
      RngFork fork(*state);
      torch::AutoGradMode grad_on(true);
      double start = Now();
      outputs = state->block(inputs);
      if (state->options.profile) {
        std::lock_guard<std::mutex> lock(stats_mutex);
        stats.recomputations += 1;
        stats.seconds += Now() - start;
      }
    }
    TORCH_CHECK(outputs.size() == grad_outputs.size(), "CheckpointBlock: the block returned ",
                outputs.size(), " tensors on recomputation but ", grad_outputs.size(),
                " in forward");
    variable_list roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    // Without create_graph/retain_graph the rerun's graph is freed once this returns.
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    variable_list input_grads;
    for (size_t i = 0; i < inputs.size(); ++i) {
      input_grads.push_back(state->requires_grad[i] ? inputs[i].grad() : at::Tensor());
    }
    input_grads.emplace_back();  // the anchor
    input_grads.emplace_back();  // the state argument
    return input_grads;
  }
};

}  // namespace

std::vector<at::Tensor> CheckpointBlock(const Block& block, const std::vector<at::Tensor>& inputs,
                                        const ActivationCheckpointOptions& options) {
  // Nothing will be backpropagated (evaluation, inference): there is nothing to save either.
  if (!torch::GradMode::is_enabled()) return block(inputs);
  auto state = c10::make_intrusive<CheckpointState>();
  state->block = block;
  state->options = options;
  // Function::apply attaches the outputs to the graph only when an input requires grad; a block
  // whose inputs don't (token ids, a frozen embedding's output) still has parameters to train,
  // so an empty tensor that requires grad goes along as an extra input. It is never saved.
  std::vector<at::Tensor> with_anchor = inputs;
  with_anchor.push_back(at::empty({0}).requires_grad_(true));
  return CheckpointFunction::apply(at::TensorList(with_anchor), std::move(state));
}

at::Tensor CheckpointBlock(const std::function<at::Tensor(const at::Tensor&)>& block,
                           const at::Tensor& input, const ActivationCheckpointOptions& options) {
  Block wrapped = [block](const std::vector<at::Tensor>& xs) {
    return std::vector<at::Tensor>{block(xs[0])};
  };
  return CheckpointBlock(wrapped, std::vector<at::Tensor>{input}, options)[0];
}

RecomputeStats GetRecomputeStats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats;
}

void ResetRecomputeStats() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  stats = RecomputeStats{};
}

}  // namespace zerotrain::recompute
