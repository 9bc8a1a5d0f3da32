// ImageDataset: labelled 32x32 colour images in CIFAR-10's binary layout (docs/DATA.md), the
// image classifiers' data: one record per image, a label byte then 3072 pixel bytes (the red
// plane, then green, then blue, each 32 rows of 32). Several files and globs are one dataset; the
// last eval_fraction of the images is held out. Batches are normalised with CIFAR-10's channel
// means and deviations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/data_options.h"
#include "trainer/data/dataset.h"

namespace zerotrain::trainer {

inline constexpr int64_t kImageSide = 32;
inline constexpr int64_t kImageBytes = 3 * kImageSide * kImageSide;
inline constexpr int64_t kImageRecordBytes = 1 + kImageBytes;

class ImageDataset : public Dataset {
 public:
  ImageDataset(std::vector<uint8_t> records, int64_t train_images, std::string source);

  // An item is one image: window w of a split is its w-th image.
  int64_t NumTrainWindows() const override { return train_; }
  int64_t NumEvalWindows() const override { return images() - train_; }
  Batch TrainBatch(const std::vector<int64_t>& windows) const override;
  Batch EvalBatch(const std::vector<int64_t>& windows) const override;
  int64_t train_tokens() const override { return train_; }
  int64_t eval_tokens() const override { return images() - train_; }
  const char* unit() const override { return "images"; }
  const std::string& source() const override { return source_; }

 private:
  int64_t images() const { return static_cast<int64_t>(records_.size()) / kImageRecordBytes; }
  Batch Gather(int64_t first, int64_t count, const std::vector<int64_t>& windows) const;

  std::vector<uint8_t> records_;
  int64_t train_;
  std::string source_;
};

// Reads options.path (files and globs, comma-separated). Errors name the file and value: a size
// that is not a whole number of records, a label >= num_classes (with its byte offset), no
// image in a split.
absl::StatusOr<std::unique_ptr<ImageDataset>> LoadImages(const DataOptions& options,
                                                         int64_t num_classes);

}  // namespace zerotrain::trainer
