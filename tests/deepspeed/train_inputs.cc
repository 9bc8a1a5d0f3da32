// train_inputs.h: the trainer's initial weights and micro-batches, written for DeepSpeed. Each
// follows what trainer/training_run.cc does, through the same functions (MakeGpt, LoadTokens,
// DistributedSampler); if the trainer changes how it seeds or samples, the conformance test's
// first step disagrees and says so.
#include "tests/deepspeed/train_inputs.h"

#include <torch/nn/module.h>

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/state_dict_writer.h"
#include "models/causal_lm.h"
#include "models/model.h"
#include "tools/status_macros.h"
#include "trainer/data/sampler.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::testing {
namespace {

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

void AppendInt64(const at::Tensor& t, std::string* bytes) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  bytes->append(reinterpret_cast<const char*>(c.data_ptr<int64_t>()), c.numel() * sizeof(int64_t));
}

}  // namespace

absl::Status WriteModelAndBatches(const trainer::TrainerConfig& config, int ranks, int64_t steps,
                                  const std::string& dir) {
  const models::ModelOptions& m = config.model;
  ZT_RETURN_IF_ERROR(WriteText(
      dir + "/model.json",
      absl::StrFormat(R"({"vocab_size": %d, "block_size": %d, "n_layer": %d, "n_head": %d, )"
                      R"("n_embd": %d})",
                      m.vocab_size, m.block_size, m.n_layer, m.n_head, m.n_embd)));
  ZT_ASSIGN_OR_RETURN(const trainer::TokenDataset data,
                      trainer::LoadTokens(config.data, m.vocab_size, m.block_size));
  const int64_t micro = config.batch.micro_batch_size;
  const int64_t gas = config.batch.gradient_accumulation_steps;
  std::string bytes;
  AppendInt64(at::tensor({int64_t{ranks}, steps, gas, micro, m.block_size}), &bytes);
  for (int rank = 0; rank < ranks; ++rank) {
    ZT_ASSIGN_OR_RETURN(auto sampler,
                        trainer::DistributedSampler::Create(data.NumTrainWindows(), ranks, rank,
                                                            micro, config.data.seed));
    for (int64_t i = 0; i < steps * gas; ++i) {
      const trainer::Batch b = sampler.NextBatch(data);
      if (b.x.size(1) != m.block_size) {
        return absl::InternalError(absl::StrCat("a batch of ", b.x.size(1), " tokens, not ",
                                                m.block_size,
                                                ": the batch file assumes full ones"));
      }
      AppendInt64(b.x, &bytes);
      AppendInt64(b.y, &bytes);
    }
  }
  return WriteText(dir + "/batches.bin", bytes);
}

absl::Status WriteInitialWeights(const trainer::TrainerConfig& config, const std::string& path) {
  // As TrainModel's Setup: the run's seed, then the model (the data draws nothing in between).
  torch::manual_seed(config.run.seed);
  models::SubmoduleHook after_submodule;
  if (config.engine.stage == 3) {
    // The trainer partitions each submodule here; partitioning draws nothing, so building with a
    // hook that keeps everything gives the same values in full.
    after_submodule = [](const std::string&, torch::nn::Module&) {};
  }
  ZT_ASSIGN_OR_RETURN(const std::shared_ptr<models::TrainerModel> model,
                      models::MakeModel(config.model, after_submodule));
  ZT_ASSIGN_OR_RETURN(auto writer, checkpoint::StateDictWriter::Open(path));
  for (const auto& item : model->named_parameters()) {
    const at::Tensor p = item.value().detach().to(at::kFloat).contiguous();
    ZT_RETURN_IF_ERROR(writer->Add(item.key(), p.sizes().vec(), p.data_ptr<float>()));
  }
  return writer->Finish();
}

}  // namespace zerotrain::testing
