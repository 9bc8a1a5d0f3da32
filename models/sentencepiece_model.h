// SentencePieceModel: Debian's libsentencepiece behind a header of plain standard types, reached
// through a shim library loaded at run time (sentencepiece_shim.cc says why). Its own header also
// declares absl::string_view as std::string_view, which clashes with Debian's Abseil.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zerotrain::models {

class SentencePieceModel {
 public:
  // Loads a .model file; on failure returns null and sets *error.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text) const;
  int size() const;  // pieces

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zerotrain::models
