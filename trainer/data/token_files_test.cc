// TokenFiles against files this test writes byte by byte in llm.c's and nanoGPT's layouts.
#include "trainer/data/token_files.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace zerotrain::trainer {
namespace {

namespace fs = std::filesystem;

std::string Dir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::create_directories(dir);
  return dir;
}

// Little-endian bytes of the low `width` bytes of each value.
std::string Bytes(const std::vector<int64_t>& values, int width) {
  std::string out;
  for (int64_t v : values) {
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  }
  return out;
}

// An llm.c shard as its data_common.py writes it: 256 int32 (magic, version, count, zeros), ids.
std::string Llmc(int32_t magic, int32_t version, const std::vector<int64_t>& ids, int width) {
  std::vector<int64_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int64_t>(ids.size());
  return Bytes(header, 4) + Bytes(ids, width);
}

std::string Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string Error(const absl::StatusOr<std::vector<uint32_t>>& r) {
  return r.ok() ? "(ok)" : std::string(r.status().message());
}

TEST(TokenFiles, ReadsLlmcUint16AndUint32AndNanoGptRaw) {
  const std::string dir = Dir("formats");
  const std::vector<int64_t> small = {0, 1, 50256, 65535, 7};
  const std::vector<int64_t> large = {0, 65536, 128255, 3, 100000};
  const std::string gpt2 = Write(dir + "/gpt2.bin", Llmc(20240520, 1, small, 2));
  const std::string llama = Write(dir + "/llama3.bin", Llmc(20240801, 7, large, 4));
  const std::string raw = Write(dir + "/train.bin", Bytes(small, 2));

  auto info = InspectTokenFile(llama);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format, TokenFileFormat::kLlmcUint32);
  EXPECT_EQ(info->num_tokens, 5);
  EXPECT_EQ(info->header_bytes, 1024);
  info = InspectTokenFile(raw);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format, TokenFileFormat::kRawUint16);

  for (const auto& [path, want] : {std::pair{gpt2, small}, {llama, large}, {raw, small}}) {
    auto ids = ReadTokenFiles({path}, 200000);
    ASSERT_TRUE(ids.ok()) << path << ": " << ids.status();
    EXPECT_EQ(std::vector<int64_t>(ids->begin(), ids->end()), want) << path;
  }
}

TEST(TokenFiles, ShardsAndGlobsAreOneStreamInTheOrderGiven) {
  const std::string dir = Dir("shards");
  // Written out of order: a glob's matches are sorted by name.
  Write(dir + "/shard_002.bin", Llmc(20240520, 1, {5, 6}, 2));
  Write(dir + "/shard_000.bin", Llmc(20240520, 1, {1, 2}, 2));
  Write(dir + "/shard_001.bin", Llmc(20240801, 7, {3, 4}, 4));
  Write(dir + "/extra.bin", Bytes({9}, 2));
  auto files = ExpandTokenFiles(dir + "/extra.bin, " + dir + "/shard_*.bin");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/extra.bin", dir + "/shard_000.bin",
                                              dir + "/shard_001.bin", dir + "/shard_002.bin"}));
  auto ids = ReadTokenFiles(*files, 10);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<uint32_t>{9, 1, 2, 3, 4, 5, 6}));

  auto none = ExpandTokenFiles(dir + "/val_*.bin");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("val_*.bin matches no file"), std::string::npos);
}

TEST(TokenFiles, BadFilesAreOneErrorNamingTheFileAndTheOffset) {
  const std::string dir = Dir("bad");
  struct Case {
    std::string name, bytes, needle;
  };
  const std::vector<Case> cases = {
      {"id.bin", Llmc(20240801, 7, {1, 2, 70000}, 4),
       "token id 70000 at byte offset 1032 is outside the vocabulary (size 50257)"},
      {"raw_id.bin", Bytes({1, 60000}, 2), "token id 60000 at byte offset 2"},
      {"version.bin", Llmc(20240520, 7, {1}, 2), "version 7 at byte offset 4"},
      {"truncated.bin", Llmc(20240520, 1, {1, 2, 3}, 2).substr(0, 1028),
       "counts 3 tokens of 2 bytes, so it should be 1030 bytes; it is 1028"},
      {"wide.bin", Llmc(20240801, 7, {1, 2}, 2), "should be 1032 bytes; it is 1028"},
      {"short.bin", Llmc(20240520, 1, {}, 2).substr(0, 100), "shorter than the 1024-byte header"},
      {"odd.bin", Bytes({1, 2}, 2) + "x", "5 bytes, an odd size"},
  };
  for (const Case& c : cases) {
    const std::string path = Write(dir + "/" + c.name, c.bytes);
    const std::string error = Error(ReadTokenFiles({path}, 50257));
    EXPECT_NE(error.find("token file " + path + ": "), std::string::npos) << error;
    EXPECT_NE(error.find(c.needle), std::string::npos) << c.name << ": " << error;
  }
  EXPECT_NE(Error(ReadTokenFiles({dir + "/missing.bin"}, 10)).find(dir + "/missing.bin"),
            std::string::npos);
}

// Every prefix of a shard, and every byte of its header flipped, is either read whole or refused
// with an error: never a crash, never a partial read taken for a whole one.
TEST(TokenFiles, TruncatedAndCorruptHeadersAreRefused) {
  const std::string dir = Dir("fuzz");
  const std::string whole = Llmc(20240801, 7, {1, 2, 3, 4}, 4);
  for (size_t n = 4; n < whole.size(); ++n) {
    const std::string path = Write(dir + "/prefix.bin", whole.substr(0, n));
    EXPECT_FALSE(ReadTokenFiles({path}, 10).ok()) << n << " bytes";
  }
  for (size_t i = 0; i < 12; ++i) {
    std::string bytes = whole;
    bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
    const std::string path = Write(dir + "/flipped.bin", bytes);
    auto ids = ReadTokenFiles({path}, 1 << 30);
    // A flipped magic makes it raw uint16 ids; any other flip breaks the version or the count.
    if (i < 4) {
      ASSERT_TRUE(ids.ok()) << i << ": " << ids.status();
      EXPECT_EQ(ids->size(), whole.size() / 2);
    } else {
      EXPECT_FALSE(ids.ok()) << "byte " << i;
    }
  }
}

}  // namespace
}  // namespace zerotrain::trainer
