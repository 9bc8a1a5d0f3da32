// TokenFiles: the token files users' data preparation already writes, read as one stream of ids
// (docs/DATA.md, "Token files"). llm.c's shards: a header of 256 little-endian int32 (magic,
// version, token count; 20240520/1 holds uint16 ids as for GPT-2, 20240801/7 uint32 ids as for
// Llama 3), then the ids; nanoGPT's: uint16 ids, no header. Several files, and globs, are one
// dataset in the order given, each glob's matches sorted. LoadTokens (token_dataset.h) reads
// data.source "tokens" through this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

enum class TokenFileFormat {
  kLlmcUint16,  // llm.c, magic 20240520, version 1
  kLlmcUint32,  // llm.c, magic 20240801, version 7
  kRawUint16,   // nanoGPT's train.bin / val.bin
};

struct TokenFileInfo {
  std::string path;
  TokenFileFormat format = TokenFileFormat::kRawUint16;
  int64_t header_bytes = 0;  // 1024 for llm.c, 0 for raw
  int64_t bytes_per_token = 2;
  int64_t num_tokens = 0;
};

inline constexpr int32_t kLlmcUint16Magic = 20240520;
inline constexpr int32_t kLlmcUint32Magic = 20240801;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// Which format `path` holds and how many tokens, from its header and size. A file that starts
// with an llm.c magic is an llm.c shard and must be a whole one (its version, and a size that
// matches its token count); anything else is raw uint16 and must have an even size.
absl::StatusOr<TokenFileInfo> InspectTokenFile(const std::string& path);

// Comma-separated paths and globs -> the files, in the order given, each glob's matches sorted.
// A glob that matches nothing is an error naming it.
absl::StatusOr<std::vector<std::string>> ExpandTokenFiles(const std::string& spec);

// Every id of `paths`, in order. An id >= vocab_size is an error naming the file, the id and its
// byte offset.
absl::StatusOr<std::vector<uint32_t>> ReadTokenFiles(const std::vector<std::string>& paths,
                                                     int64_t vocab_size);

}  // namespace zerotrain::trainer
