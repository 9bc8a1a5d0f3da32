// Tokenizer: text to token ids and back, for the trainer's text data, its end-of-run sample and
// --generate's prompt. Bytes (one token per byte, ids 0-255) unless the run names a SentencePiece
// model (data.tokenizer): Llama 2's, T5's and most tokenizers trained with Google's SentencePiece
// ship as such a .model file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const = 0;
  // Ids the tokenizer does not have become '?'; bytes: those other than printable ASCII, newline
  // and tab too (the sample is printed on a terminal).
  virtual std::string Decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string name() const = 0;  // "bytes" or the model file
};

std::unique_ptr<Tokenizer> MakeByteTokenizer();

// Loads a SentencePiece model file (spm_train's <prefix>.model). A missing or malformed file is
// one error naming it.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path);

// The byte tokenizer for "", else LoadSentencePiece(model_path).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_path);

}  // namespace zerotrain::models
