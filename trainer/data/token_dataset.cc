// Reading the token stream, checking it, splitting it and gathering windows into batches.
#include "trainer/data/token_dataset.h"

#include <torch/types.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/tokenizer.h"
#include "tools/status_macros.h"
#include "trainer/data/corpus.h"
#include "trainer/data/token_files.h"

namespace zerotrain::trainer {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("data.path is empty; name a data file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open data file '", path, "': ", std::strerror(errno)));
  }
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) {
    return absl::DataLossError(
        absl::StrCat("cannot read data file '", path, "': ", std::strerror(err)));
  }
  if (bytes.empty())
    return absl::InvalidArgumentError(absl::StrCat("data file '", path, "' is empty"));
  return bytes;
}

// One token per byte; every byte must be a valid id.
absl::StatusOr<std::vector<uint32_t>> BytesToTokens(std::string_view bytes, int64_t vocab_size,
                                                    const std::string& source) {
  std::vector<uint32_t> tokens(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char b = static_cast<unsigned char>(bytes[i]);
    if (b >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": byte ", static_cast<int>(b), " at offset ", i,
                       " is not a token id of a model with vocab_size ", vocab_size,
                       " (byte-level text needs 256)"));
    }
    tokens[i] = b;
  }
  return tokens;
}

// The text through a SentencePiece model, whose every piece must be a token of the model.
absl::StatusOr<std::vector<uint32_t>> Tokenize(const std::string& text, const DataOptions& options,
                                               int64_t vocab_size) {
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<models::Tokenizer> tokenizer,
                      models::LoadSentencePiece(options.tokenizer));
  if (tokenizer->vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer ", options.tokenizer, " has ", tokenizer->vocab_size(),
        " pieces, more than model.vocab_size ", vocab_size, " (set it to at least that)"));
  }
  return tokenizer->Encode(text);
}

absl::StatusOr<std::vector<uint32_t>> ReadStream(const DataOptions& options, int64_t vocab_size) {
  switch (options.source) {
    case DataSource::kEmbedded:
      return BytesToTokens(EmbeddedCorpus(), vocab_size, "the embedded corpus");
    case DataSource::kText: {
      ZT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(options.path));
      if (options.tokenizer.empty()) {
        return BytesToTokens(bytes, vocab_size, absl::StrCat("text file '", options.path, "'"));
      }
      return Tokenize(bytes, options, vocab_size);
    }
    case DataSource::kTokens: {
      if (options.path.empty()) {
        return absl::InvalidArgumentError("data.path is empty; name token files or a glob");
      }
      ZT_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandTokenFiles(options.path));
      return ReadTokenFiles(files, vocab_size);
    }
    case DataSource::kImages:
      return absl::InvalidArgumentError("data.source \"images\" holds no tokens (LoadImages)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data.source has unknown value ", static_cast<int>(options.source)));
}

}  // namespace

TokenDataset::TokenDataset(std::vector<uint32_t> tokens, int64_t train_tokens, int64_t block_size,
                           std::string source)
    : tokens_(std::move(tokens)),
      train_tokens_(train_tokens),
      block_size_(block_size),
      source_(std::move(source)) {}

int64_t TokenDataset::NumTrainWindows() const { return (train_tokens_ - 1) / block_size_; }

int64_t TokenDataset::NumEvalWindows() const {
  return eval_tokens() > 0 ? (eval_tokens() - 1) / block_size_ : 0;
}

Batch TokenDataset::TrainBatch(const std::vector<int64_t>& windows) const {
  return Gather(0, train_tokens_, windows);
}

Batch TokenDataset::EvalBatch(const std::vector<int64_t>& windows) const {
  return Gather(train_tokens_, eval_tokens(), windows);
}

Batch TokenDataset::Gather(int64_t split_begin, int64_t split_tokens,
                           const std::vector<int64_t>& windows) const {
  const int64_t b = static_cast<int64_t>(windows.size()), t = block_size_;
  at::Tensor x = torch::empty({b, t}, torch::kLong);
  at::Tensor y = torch::empty({b, t}, torch::kLong);
  int64_t* xp = x.data_ptr<int64_t>();
  int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t start = windows[i] * t;
    TORCH_CHECK(windows[i] >= 0 && start + t < split_tokens, "window ", windows[i],
                " is outside a split of ", split_tokens, " tokens");
    const uint32_t* src = tokens_.data() + split_begin + start;
    for (int64_t j = 0; j < t; ++j) {
      xp[i * t + j] = src[j];
      yp[i * t + j] = src[j + 1];
    }
  }
  return {x, y};
}

absl::StatusOr<TokenDataset> LoadTokens(const DataOptions& options, int64_t vocab_size,
                                        int64_t block_size) {
  if (!(options.eval_fraction >= 0.0 && options.eval_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.eval_fraction must be in [0, 1), got ", options.eval_fraction));
  }
  if (block_size <= 0 || vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("LoadTokens needs a positive block_size (",
                                                   block_size, ") and vocab_size (", vocab_size,
                                                   ")"));
  }
  ZT_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, ReadStream(options, vocab_size));
  const std::string source =
      options.source == DataSource::kEmbedded ? "embedded corpus" : options.path;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t eval = static_cast<int64_t>(static_cast<double>(total) * options.eval_fraction);
  const int64_t train = total - eval;
  const int64_t window = block_size + 1;
  if (train < window || (options.eval_fraction > 0 && eval < window)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data '", source, "' has ", total, " tokens: with data.eval_fraction ",
        options.eval_fraction, " the training split has ", train, " and the eval split ", eval,
        ", but each needs at least block_size + 1 = ", window));
  }
  return TokenDataset(std::move(tokens), train, block_size, source);
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::string bytes(tokens.size() * 2, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    bytes[2 * i] = static_cast<char>(tokens[i] & 0xff);
    bytes[2 * i + 1] = static_cast<char>(tokens[i] >> 8);
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create token file '", path, "': ", std::strerror(errno)));
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::DataLossError(absl::StrCat("cannot write token file '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
