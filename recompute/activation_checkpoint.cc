// CheckpointBlock as a LibTorch custom autograd function: forward runs the block with grad off and
// keeps only its inputs and the RNG states; backward reruns it with grad on from those states and
// backpropagates through the rerun (a reentrant backward, as torch.utils.checkpoint's reentrant
// variant does), so the block's parameters accumulate gradients there.
#include "recompute/activation_checkpoint.h"

#include <torch/torch.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

namespace zerotrain::recompute {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::mutex stats_mutex;
RecomputeStats stats;

// What backward needs besides the saved tensors; travels in ctx->saved_data as a capsule because
// an IValue cannot hold a std::function.
struct CheckpointState : torch::CustomClassHolder {
  Block block;
  ActivationCheckpointOptions options;
  at::Tensor cpu_rng;
  std::optional<c10::Device> cuda_device;  // the first CUDA input's device
  at::Tensor cuda_rng;
  std::vector<bool> requires_grad;      // per input, as seen by forward
  std::vector<c10::Device> devices;     // per input, for moving host copies back
  std::vector<at::Tensor> host_inputs;  // per input: its host copy, or undefined if not moved
};

at::Tensor GetRngState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetRngState(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The CUDA generator goes through the generic Generator API, so this file needs no CUDA headers
// and a CPU-only LibTorch never reaches it (cuda_device stays empty without CUDA inputs).
at::Generator CudaGenerator(c10::Device device) {
  return at::globalContext().defaultGenerator(device);
}

// Sets the states saved in forward for the rerun and puts back the caller's states afterwards,
// also when the block throws, so recomputation leaves the random streams where they were.
class RngFork {
 public:
  explicit RngFork(const CheckpointState& s) : s_(s) {
    current_cpu_ = GetRngState(at::detail::getDefaultCPUGenerator());
    SetRngState(at::detail::getDefaultCPUGenerator(), s_.cpu_rng);
    if (s_.cuda_device) {
      current_cuda_ = GetRngState(CudaGenerator(*s_.cuda_device));
      SetRngState(CudaGenerator(*s_.cuda_device), s_.cuda_rng);
    }
  }
  ~RngFork() {
    SetRngState(at::detail::getDefaultCPUGenerator(), current_cpu_);
    if (s_.cuda_device) SetRngState(CudaGenerator(*s_.cuda_device), current_cuda_);
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  const CheckpointState& s_;
  at::Tensor current_cpu_, current_cuda_;
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
      if (!state->cuda_device && x.defined() && x.is_cuda()) state->cuda_device = x.device();
    }
    if (state->cuda_device && at::globalContext().hasCUDA()) {
      state->cuda_rng = GetRngState(CudaGenerator(*state->cuda_device));
    } else {
      state->cuda_device.reset();
    }
    // save_for_backward keeps autograd's version check: an input changed in place before
    // backward makes backward fail instead of recomputing from the changed values. Inputs moved
    // to host memory are copies, so they need no check.
    std::vector<at::Tensor> kept = inputs.vec();
    for (at::Tensor& x : kept) {
      const bool to_host = state->options.cpu_checkpointing && x.defined() && !x.is_cpu();
      state->host_inputs.push_back(to_host ? x.detach().to(c10::kCPU) : at::Tensor());
      if (to_host) x = at::Tensor();
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
    variable_list inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor x = state->host_inputs[i].defined() ? state->host_inputs[i] : saved[i];
      if (x.defined()) {
        x = x.to(state->devices[i]).detach();
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
