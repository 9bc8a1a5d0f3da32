// Choosing the dataset by data.source (load_dataset.h).
#include "trainer/data/load_dataset.h"

#include "trainer/data/image_dataset.h"
#include "trainer/data/token_dataset.h"

namespace zerotrain::trainer {

absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const DataOptions& options,
                                                     const DatasetShape& shape) {
  if (options.source == DataSource::kImages) {
    absl::StatusOr<std::unique_ptr<ImageDataset>> images = LoadImages(options, shape.num_classes);
    if (!images.ok()) return images.status();
    return std::unique_ptr<Dataset>(std::move(*images));
  }
  absl::StatusOr<TokenDataset> tokens = LoadTokens(options, shape.vocab_size, shape.block_size);
  if (!tokens.ok()) return tokens.status();
  return std::unique_ptr<Dataset>(std::make_unique<TokenDataset>(std::move(*tokens)));
}

}  // namespace zerotrain::trainer
