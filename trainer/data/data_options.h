// DataOptions: where the trainer's tokens come from and how they are split and sampled.
#pragma once

#include <cstdint>
#include <string>

namespace zerotrain::trainer {

enum class DataSource {
  kEmbedded,  // the corpus compiled into the binary (byte-level)
  kText,      // a UTF-8 text file, one token per byte
  kImages,    // image files: CIFAR-10's binary records (docs/DATA.md)
  kTokens,    // token files: llm.c shards (uint16 or uint32 ids) or nanoGPT's uint16 (docs/DATA.md)
};

struct DataOptions {
  DataSource source = DataSource::kEmbedded;
  std::string path;       // kText: one file; kTokens, kImages: files and globs, comma-separated
  std::string tokenizer;  // kText: a SentencePiece .model file; "" = one token per byte
  double eval_fraction = 0.1;  // the tail of the token stream held out for eval loss
  uint64_t seed = 1234;        // sampler order; the same seed gives the same batches
};

}  // namespace zerotrain::trainer
