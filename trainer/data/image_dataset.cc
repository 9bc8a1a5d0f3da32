// Reading CIFAR-10 records and gathering normalised image batches (image_dataset.h).
#include "trainer/data/image_dataset.h"

#include <torch/types.h>

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"
#include "trainer/data/token_files.h"

namespace zerotrain::trainer {
namespace {

// CIFAR-10's per-channel mean and standard deviation of pixel/255.
constexpr float kMean[3] = {0.4914f, 0.4822f, 0.4465f};
constexpr float kStd[3] = {0.2470f, 0.2435f, 0.2616f};

absl::Status Append(const std::string& path, int64_t num_classes, std::vector<uint8_t>* records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("image file ", path, ": cannot open it"));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (n == 0 || n % kImageRecordBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image file ", path, ": ", n, " bytes, not a whole number of ", kImageRecordBytes,
        "-byte records (a label byte and 32x32x3 pixels, CIFAR-10's binary layout)"));
  }
  for (int64_t at = 0; at < n; at += kImageRecordBytes) {
    if (bytes[at] >= num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("image file ", path, ": label ", static_cast<int>(bytes[at]),
                       " at byte offset ", at, " is not below model.num_classes ", num_classes));
    }
  }
  records->insert(records->end(), bytes.begin(), bytes.end());
  return absl::OkStatus();
}

}  // namespace

ImageDataset::ImageDataset(std::vector<uint8_t> records, int64_t train_images, std::string source)
    : records_(std::move(records)), train_(train_images), source_(std::move(source)) {}

Batch ImageDataset::TrainBatch(const std::vector<int64_t>& windows) const {
  return Gather(0, train_, windows);
}

Batch ImageDataset::EvalBatch(const std::vector<int64_t>& windows) const {
  return Gather(train_, images() - train_, windows);
}

Batch ImageDataset::Gather(int64_t first, int64_t count,
                           const std::vector<int64_t>& windows) const {
  const int64_t b = static_cast<int64_t>(windows.size());
  at::Tensor x = torch::empty({b, 3, kImageSide, kImageSide}, torch::kFloat);
  at::Tensor y = torch::empty({b}, torch::kLong);
  float* xp = x.data_ptr<float>();
  int64_t* yp = y.data_ptr<int64_t>();
  const int64_t plane = kImageSide * kImageSide;
  for (int64_t i = 0; i < b; ++i) {
    TORCH_CHECK(windows[i] >= 0 && windows[i] < count, "image ", windows[i],
                " is outside a split of ", count);
    const uint8_t* r = records_.data() + (first + windows[i]) * kImageRecordBytes;
    yp[i] = r[0];
    for (int64_t j = 0; j < kImageBytes; ++j) {
      const int c = static_cast<int>(j / plane);
      xp[i * kImageBytes + j] = (r[1 + j] / 255.0f - kMean[c]) / kStd[c];
    }
  }
  return {x, y};
}

absl::StatusOr<std::unique_ptr<ImageDataset>> LoadImages(const DataOptions& options,
                                                         int64_t num_classes) {
  if (options.path.empty())
    return absl::InvalidArgumentError("data.path is empty; name image files");
  ZT_ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandTokenFiles(options.path));
  std::vector<uint8_t> records;
  for (const std::string& file : files) ZT_RETURN_IF_ERROR(Append(file, num_classes, &records));
  const int64_t total = static_cast<int64_t>(records.size()) / kImageRecordBytes;
  const int64_t eval = static_cast<int64_t>(static_cast<double>(total) * options.eval_fraction);
  if (total - eval < 1 || (options.eval_fraction > 0 && eval < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data '", options.path, "' has ", total, " images: with data.eval_fraction ",
                     options.eval_fraction, " a split would have none"));
  }
  return std::make_unique<ImageDataset>(std::move(records), total - eval, options.path);
}

}  // namespace zerotrain::trainer
