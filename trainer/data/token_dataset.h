// TokenDataset: the trainer's token stream (the embedded corpus, a text file, or token files of
// uint16 or uint32 ids: llm.c's shards and nanoGPT's, docs/DATA.md), split into a training part and
// a held-out tail for the eval loss, and cut into non-overlapping windows of block_size + 1 tokens
// (inputs and shifted targets).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/data_options.h"
#include "trainer/data/dataset.h"

namespace zerotrain::trainer {

class TokenDataset : public Dataset {
 public:
  TokenDataset(std::vector<uint32_t> tokens, int64_t train_tokens, int64_t block_size,
               std::string source);

  // Window w of a split covers tokens [w*T, w*T + T] of that split: x is the first T, y the
  // last T. Every window lies inside its split, so no target crosses from train into eval.
  int64_t NumTrainWindows() const override;
  int64_t NumEvalWindows() const override;
  Batch TrainBatch(const std::vector<int64_t>& windows) const override;
  Batch EvalBatch(const std::vector<int64_t>& windows) const override;

  int64_t train_tokens() const override { return train_tokens_; }
  int64_t eval_tokens() const override {
    return static_cast<int64_t>(tokens_.size()) - train_tokens_;
  }
  int64_t block_size() const { return block_size_; }
  // "embedded corpus" or the file path
  const std::string& source() const override { return source_; }

 private:
  Batch Gather(int64_t split_begin, int64_t split_tokens,
               const std::vector<int64_t>& windows) const;

  std::vector<uint32_t> tokens_;
  int64_t train_tokens_;
  int64_t block_size_;
  std::string source_;
};

// Loads the tokens DataOptions names and splits them: the last eval_fraction of the stream is
// held out (rounded down to whole tokens). Errors name the file (or data field) and the value:
// a missing, unreadable or empty file, a glob that matches nothing, a token file that is neither
// a whole llm.c shard nor an even-sized nanoGPT file, a token id >= vocab_size (with its byte
// offset), a split too short for one window of block_size + 1 tokens.
absl::StatusOr<TokenDataset> LoadTokens(const DataOptions& options, int64_t vocab_size,
                                        int64_t block_size);

// Writes tokens as headerless little-endian uint16 (nanoGPT's layout, one that LoadTokens reads
// for DataSource::kTokens).
absl::Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace zerotrain::trainer
