// Dataset: what the sampler and the training loop read, whatever the data: numbered training and
// held-out items (token windows, images) gathered into batches of inputs and targets.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zerotrain::trainer {

// Inputs x and targets y: token ids and next tokens, int64 [B, T]; or images float
// [B, 3, H, W] and labels int64 [B].
struct Batch {
  at::Tensor x, y;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t NumTrainWindows() const = 0;
  virtual int64_t NumEvalWindows() const = 0;
  virtual Batch TrainBatch(const std::vector<int64_t>& windows) const = 0;
  virtual Batch EvalBatch(const std::vector<int64_t>& windows) const = 0;
  // Sizes for the report, in the data's units ("tokens" or "images").
  virtual int64_t train_tokens() const = 0;
  virtual int64_t eval_tokens() const = 0;
  virtual const char* unit() const { return "tokens"; }
  virtual const std::string& source() const = 0;
};

}  // namespace zerotrain::trainer
