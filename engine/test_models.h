// Test support for the engine: tiny networks (an MLP, the same MLP half in bf16, a pre-norm
// transformer block, one with a tied matrix and a submodule called twice, a stack of layers), a
// wide one whose model states dominate memory, deterministic global batches, the process-group
// join SpawnRanks children use, and the independent reference: a plain single-process LibTorch
// loop with torch::optim::AdamW (or another optimizer the test supplies).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/comm.h"

namespace zerotrain::engine {
class Engine;
}

namespace zerotrain::engine::testing {

// kMixedMlp is kMlp with its second layer in bf16 (two dtype groups in an fp32 engine).
enum class ModelKind { kMlp, kTransformer, kTied, kStack, kMixedMlp };
const char* ModelName(ModelKind kind);

struct TestNet : torch::nn::Module {
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

// Six 1024x1024 linear layers (6.3M parameters): large enough that the model states dominate a
// process's memory, for the tests that hold each stage to what it should hold.
struct WideMlp : TestNet {
  // The bucket size (reduce and all-gather) its memory tests use: 1/24 of the model. Stage 2
  // double-buffers two buckets in backward, which must stay below the half of the gradients it
  // saves over stage 1 on two ranks (at 1/6 of the model per bucket the two were equal).
  static constexpr int64_t kBucketNumel = 1 << 18;
  WideMlp();
  torch::Tensor forward(const torch::Tensor& x) override;
  std::vector<torch::nn::Linear> layers;
};

// Same weights in every process for the same kind (seeded inside).
std::shared_ptr<TestNet> MakeNet(ModelKind kind);

// kStack built layer by layer with its own seed, calling `after_layer` on each layer right after
// it is built (where a model opts in to partitioning at construction). MakeNet(kStack) is
// MakeStack(seed 100, no callback).
std::shared_ptr<TestNet> MakeStack(uint64_t seed,
                                   const std::function<void(torch::nn::Module&)>& after_layer);

struct Batch {
  torch::Tensor x, y;
};
// The global batch of step `step`, identical in every process.
Batch GlobalBatch(ModelKind kind, int step, int64_t size);

// The module's parameters, each once (LibTorch lists a shared tensor under every name).
std::vector<torch::Tensor> UniqueParameters(torch::nn::Module& net);

// Mean squared error computed in fp32 whatever the model's dtype, on the model's device.
torch::Tensor Loss(TestNet& net, const torch::Tensor& x, const torch::Tensor& y);

absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> JoinGroupFromEnv(
    const comm::GroupOptions& options = {});

// A reference optimizer's step over the parameters it was made for, reading their .grad().
using ReferenceStep = std::function<void()>;

struct ReferenceOptions {
  int steps = 20;
  int64_t batch = 16;
  double lr = 1e-3;
  double weight_decay = 0.01;
  double clip = 0;                     // max global norm, 0 = off
  torch::Device device = torch::kCPU;  // where the net and its optimizer run
  // Another optimizer than torch::optim::AdamW(lr, weight_decay): made once for the net's unique
  // parameters (lr and weight_decay above are then unused).
  std::function<ReferenceStep(const std::vector<torch::Tensor>& params)> make_optimizer;
};

struct ReferenceRun {
  std::shared_ptr<TestNet> net;
  std::vector<double> losses;  // full-batch loss before each step
};

ReferenceRun RunReference(ModelKind kind, const ReferenceOptions& options);

// "" when every parameter of `got` matches the same-named one of `want` within
// atol + rtol * |want|; otherwise the worst element, named.
std::string CompareParams(TestNet& got, TestNet& want, double atol, double rtol);

// `steps` optimizer steps (one micro-batch each) in which every rank trains on the whole
// GlobalBatch(kind, step, batch), the forward inside the engine's forward scope.
absl::Status TrainSteps(Engine& engine, TestNet& net, ModelKind kind, int steps, int64_t batch);
// The same for steps [first, last), appending each step's loss to `losses` when given.
absl::Status TrainStepRange(Engine& engine, TestNet& net, ModelKind kind, int first, int last,
                            int64_t batch, std::vector<double>* losses = nullptr);

// "" when the parameters of `got` (under engine `got_engine`) equal those of `want` (under
// `want_engine`) bit for bit, both gathered at stage 3; otherwise the worst element, named.
absl::StatusOr<std::string> GatheredDifference(Engine& got_engine, TestNet& got,
                                               Engine& want_engine, TestNet& want);

// OK when the engine's parameters of `net` (gathered, at stage 3) match a single-process
// RunReference(kind, options) within 1e-6 + 1e-5 * |want|; InternalError naming the worst element.
absl::Status MatchesReference(Engine& engine, TestNet& net, ModelKind kind,
                              const ReferenceOptions& options);

}  // namespace zerotrain::engine::testing
