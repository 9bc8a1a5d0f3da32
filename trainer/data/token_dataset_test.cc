// LoadTokens against the bytes it was given: the embedded corpus against corpus/fortunes.txt read
// from runfiles, text and token files written here, the split sizes, the window contents, and
// one error per bad-file case naming the file.
#include "trainer/data/token_dataset.h"

#include <gtest/gtest.h>
#include <torch/types.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "trainer/data/corpus.h"

namespace zerotrain::trainer {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string WriteBytes(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

DataOptions FileOptions(DataSource source, const std::string& path, double eval = 0.1) {
  DataOptions o;
  o.source = source;
  o.path = path;
  o.eval_fraction = eval;
  return o;
}

TEST(CorpusTest, EmbeddedBytesAreTheShippedFile) {
  std::ifstream in("trainer/data/corpus/fortunes.txt", std::ios::binary);
  ASSERT_TRUE(in.good()) << "runfile trainer/data/corpus/fortunes.txt";
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(EmbeddedCorpus(), file.str());
  EXPECT_GT(EmbeddedCorpus().size(), 300u * 1024);
  EXPECT_LT(EmbeddedCorpus().size(), 500u * 1024);
}

TEST(TokenDatasetTest, EmbeddedSplitAndWindows) {
  const int64_t t = 64;
  auto data = LoadTokens(DataOptions{}, 256, t);
  ASSERT_TRUE(data.ok()) << data.status();
  const std::string_view corpus = EmbeddedCorpus();
  const auto n = static_cast<int64_t>(corpus.size());
  EXPECT_EQ(data->eval_tokens(), static_cast<int64_t>(n * 0.1));
  EXPECT_EQ(data->train_tokens() + data->eval_tokens(), n);
  EXPECT_EQ(data->NumTrainWindows(), (data->train_tokens() - 1) / t);
  Batch b = data->TrainBatch({0, 5, data->NumTrainWindows() - 1});
  Batch e = data->EvalBatch({1});
  ASSERT_EQ(b.x.sizes(), (std::vector<int64_t>{3, t}));
  EXPECT_EQ(b.x.scalar_type(), torch::kLong);
  const int64_t windows[] = {0, 5, data->NumTrainWindows() - 1};
  for (int i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < t; ++j) {
      const int64_t at = windows[i] * t + j;
      ASSERT_EQ(b.x[i][j].item<int64_t>(), static_cast<unsigned char>(corpus[at]));
      ASSERT_EQ(b.y[i][j].item<int64_t>(), static_cast<unsigned char>(corpus[at + 1]));
    }
  }
  const int64_t eval_at = data->train_tokens() + t;
  EXPECT_EQ(e.x[0][0].item<int64_t>(), static_cast<unsigned char>(corpus[eval_at]));
  EXPECT_THROW(data->EvalBatch({data->NumEvalWindows()}), c10::Error);
}

TEST(TokenDatasetTest, TextFileIsOneTokenPerByte) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>(i % 256);
  auto data = LoadTokens(FileOptions(DataSource::kText, WriteBytes("t.txt", text), 0.0), 256, 16);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train_tokens(), 500);
  EXPECT_EQ(data->eval_tokens(), 0);
  EXPECT_EQ(data->NumEvalWindows(), 0);
  Batch b = data->TrainBatch({2});
  EXPECT_EQ(b.x[0][3].item<int64_t>(), (2 * 16 + 3) % 256);
  EXPECT_EQ(data->source(), TempPath("t.txt"));
}

TEST(TokenDatasetTest, TokenFileRoundTrip) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>((i * 7919) % 65536));
  const std::string path = TempPath("t.bin");
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok());
  std::ifstream in(path, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(raw.size(), 2000u);
  EXPECT_EQ(static_cast<unsigned char>(raw[2]), tokens[1] & 0xff);  // little-endian
  EXPECT_EQ(static_cast<unsigned char>(raw[3]), tokens[1] >> 8);
  auto data = LoadTokens(FileOptions(DataSource::kTokens, path, 0.25), 65536, 10);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train_tokens(), 750);
  Batch b = data->TrainBatch({3});
  Batch e = data->EvalBatch({0});
  for (int j = 0; j < 10; ++j) {
    EXPECT_EQ(b.x[0][j].item<int64_t>(), tokens[30 + j]);
    EXPECT_EQ(b.y[0][j].item<int64_t>(), tokens[31 + j]);
    EXPECT_EQ(e.x[0][j].item<int64_t>(), tokens[750 + j]);
  }
}

void ExpectError(const absl::StatusOr<TokenDataset>& got, const std::vector<std::string>& parts) {
  ASSERT_FALSE(got.ok());
  for (const std::string& p : parts) {
    EXPECT_NE(got.status().message().find(p), std::string::npos)
        << "'" << p << "' missing from: " << got.status();
  }
}

// An llm.c shard of uint32 ids, its header written field by field as llm.c's scripts do.
std::string WriteLlmcUint32(const std::string& name, const std::vector<uint32_t>& ids) {
  std::string bytes(1024 + 4 * ids.size(), '\0');
  auto put = [&bytes](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, 20240801);
  put(4, 7);
  put(8, static_cast<uint32_t>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) put(1024 + 4 * i, ids[i]);
  return WriteBytes(name, bytes);
}

TEST(TokenDatasetTest, Uint32ShardsByGlobAreOneStream) {
  const int64_t vocab = 128256;  // Llama 3's
  std::vector<uint32_t> all;
  for (int i = 0; i < 600; ++i) all.push_back(static_cast<uint32_t>((i * 104729) % vocab));
  // Written out of order: the glob's matches are sorted, so shard_0 comes first.
  WriteLlmcUint32("shard_1.bin", std::vector<uint32_t>(all.begin() + 250, all.end()));
  WriteLlmcUint32("shard_0.bin", std::vector<uint32_t>(all.begin(), all.begin() + 250));
  auto data = LoadTokens(FileOptions(DataSource::kTokens, TempPath("shard_*.bin"), 0.0), vocab, 20);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->train_tokens(), 600);
  bool above_uint16 = false;
  for (int64_t w = 0; w < data->NumTrainWindows(); ++w) {
    Batch b = data->TrainBatch({w});
    for (int j = 0; j < 20; ++j) {
      ASSERT_EQ(b.x[0][j].item<int64_t>(), all[w * 20 + j]);
      ASSERT_EQ(b.y[0][j].item<int64_t>(), all[w * 20 + j + 1]);
      above_uint16 |= all[w * 20 + j] > 65535;
    }
  }
  EXPECT_TRUE(above_uint16) << "the test should carry ids that need 32 bits";
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, TempPath("shard_*.bin")), 1000, 20),
              {TempPath("shard_0.bin"), "outside the vocabulary"});
}

TEST(TokenDatasetTest, BadFilesNameTheFile) {
  const std::string missing = TempPath("no_such_file.txt");
  ExpectError(LoadTokens(FileOptions(DataSource::kText, missing), 256, 8), {missing, "No such"});
  const std::string empty = WriteBytes("empty.txt", "");
  ExpectError(LoadTokens(FileOptions(DataSource::kText, empty), 256, 8), {empty, "empty"});
  const std::string dir = TempPath("");
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, dir), 256, 8), {dir, "directory"});
  const std::string odd = WriteBytes("odd.bin", std::string(101, '\0'));
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, odd), 256, 8), {odd, "101 bytes", "odd"});
  std::vector<uint16_t> ids(100, 3);
  ids[40] = 300;
  const std::string big = TempPath("big.bin");
  ASSERT_TRUE(WriteTokenFile(big, ids).ok());
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, big), 256, 8),
              {big, "id 300", "byte offset 80", "size 256"});
  const std::string text = WriteBytes("hi.txt", "hello \xc3\xa9 world, long enough for a block");
  ExpectError(LoadTokens(FileOptions(DataSource::kText, text, 0.0), 128, 8),
              {text, "byte 195", "offset 6"});
  const std::string short_file = WriteBytes("short.txt", std::string(40, 'x'));
  ExpectError(LoadTokens(FileOptions(DataSource::kText, short_file, 0.5), 256, 32),
              {short_file, "40 tokens", "block_size + 1 = 33"});
  ExpectError(LoadTokens(FileOptions(DataSource::kText, "", 0.1), 256, 8), {"data.path"});
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, "", 0.1), 256, 8), {"data.path"});
  const std::string none = TempPath("nothing_*.bin");
  ExpectError(LoadTokens(FileOptions(DataSource::kTokens, none), 256, 8), {none, "matches no"});
  ExpectError(LoadTokens(FileOptions(DataSource::kEmbedded, "", 1.0), 256, 8),
              {"data.eval_fraction", "got 1"});
}

}  // namespace
}  // namespace zerotrain::trainer
