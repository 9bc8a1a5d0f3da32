// LoadDataset: the Dataset data.source names, for the model the run trains: token windows of
// block_size + 1 for a language model (token_dataset.h), images for a classifier
// (image_dataset.h).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "trainer/data/data_options.h"
#include "trainer/data/dataset.h"

namespace zerotrain::trainer {

struct DatasetShape {
  int64_t vocab_size = 0;   // token data
  int64_t block_size = 0;   // token data
  int64_t num_classes = 0;  // images
};

absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const DataOptions& options,
                                                     const DatasetShape& shape);

}  // namespace zerotrain::trainer
