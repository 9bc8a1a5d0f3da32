// Byte and SentencePiece tokenizers (tokenizer.h). SentencePiece is Debian's libsentencepiece.
#include "models/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "models/sentencepiece_model.h"

namespace zerotrain::models {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    std::vector<uint32_t> ids;
    ids.reserve(text.size());
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (int64_t t : ids) {
      const bool printable = (t >= 0x20 && t < 0x7f) || t == '\n' || t == '\t';
      text.push_back(printable ? static_cast<char>(t) : '?');
    }
    return text;
  }
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "bytes"; }
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string path, std::unique_ptr<SentencePieceModel> p)
      : path_(std::move(path)), processor_(std::move(p)) {}

  absl::StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    std::vector<int> pieces;
    std::string error;
    if (!processor_->Encode(text, &pieces, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SentencePiece model ", path_, " cannot encode the text: ", error));
    }
    return std::vector<uint32_t>(pieces.begin(), pieces.end());
  }
  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> known;
    std::string text;
    auto flush = [&] {
      std::string piece;
      if (!known.empty() && processor_->Decode(known, &piece)) text += piece;
      known.clear();
    };
    for (int64_t id : ids) {
      if (id >= 0 && id < processor_->size()) {
        known.push_back(static_cast<int>(id));
      } else {
        flush();
        text += '?';
      }
    }
    flush();
    return text;
  }
  int64_t vocab_size() const override { return processor_->size(); }
  std::string name() const override { return path_; }

 private:
  std::string path_;
  std::unique_ptr<SentencePieceModel> processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path) {
  std::string error;
  std::unique_ptr<SentencePieceModel> processor = SentencePieceModel::Load(model_path, &error);
  if (processor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model ", model_path, " cannot be loaded: ", error));
  }
  return std::unique_ptr<Tokenizer>(
      std::make_unique<SentencePieceTokenizer>(model_path, std::move(processor)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_path) {
  if (model_path.empty()) return MakeByteTokenizer();
  return LoadSentencePiece(model_path);
}

}  // namespace zerotrain::models
