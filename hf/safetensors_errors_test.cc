// Malformed safetensors files and index files: each header error is one message naming the file
// (and the tensor), and truncated or randomly damaged files give a clean error or a header whose
// every byte range lies inside the file, never a crash (CI runs this under ASan and UBSan).
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "checkpoint/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hf/safetensors.h"

namespace zerotrain::hf {
namespace {

using checkpoint::testing::ReadBytes;
using checkpoint::testing::TempPath;
using checkpoint::testing::WriteBytes;
using ::testing::HasSubstr;

std::string LittleEndian64(uint64_t v) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(v >> (8 * i)));
  return bytes;
}

// A file of the header `json` followed by `data_bytes` zero bytes.
std::string FileWith(const std::string& json, int data_bytes) {
  return LittleEndian64(json.size()) + json + std::string(data_bytes, '\0');
}

std::string Tensor(const std::string& name, const std::string& dtype, const std::string& shape,
                   const std::string& offsets) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                      ",\"data_offsets\":", offsets, "}");
}

struct BadFile {
  std::string bytes;
  std::string error;  // what follows "safetensors file <path>: "
};

TEST(SafetensorsErrorsTest, EveryHeaderErrorNamesTheFileAndTensor) {
  const std::string w = Tensor("w", "F32", "[2,2]", "[0,16]");
  const BadFile cases[] = {
      {std::string("\x05\x00\x00\x00\x00", 5),
       "file is 5 bytes, shorter than the 8-byte header length"},
      {LittleEndian64(uint64_t{1} << 63),
       "header length 9223372036854775808 is over the limit of 100000000 bytes"},
      {LittleEndian64(200'000'000) + "{}", "header length 200000000 is over the limit"},
      {LittleEndian64(100) + std::string(20, ' '),
       "header length 100 runs past the end of the 28-byte file"},
      {FileWith("", 0), "header:1:1: not valid JSON: the file is empty"},
      {FileWith("{\"a\":", 0),
       "header:1:6: not valid JSON: the input ends where a value should be"},
      {FileWith("{\"\xff\":1}", 0), "header:1:3: not valid JSON: invalid UTF-8 in a string"},
      {FileWith("[1,2]", 0), "header is an array, expected a JSON object"},
      {FileWith("{" + w + "," + w + "}", 16),
       "header:1:58: not valid JSON: duplicate key \"w\" (first at 1:2)"},
      {FileWith("{\"w\":1}", 0), "tensor \"w\": is an integer, expected an object"},
      {FileWith("{\"w\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4),
       "tensor \"w\": key \"dtype\" is missing"},
      {FileWith("{" + Tensor("w", "F8_E4M3", "[2]", "[0,2]") + "}", 2),
       "tensor \"w\": unknown dtype \"F8_E4M3\""},
      {FileWith("{" + Tensor("w", "F32", "[2,-1]", "[0,0]") + "}", 0),
       "tensor \"w\": negative dimension in shape [2,-1]"},
      {FileWith("{" + Tensor("w", "F32", "[2.0]", "[0,8]") + "}", 8),
       "tensor \"w\": key \"shape\": element 0 is a number, expected an integer"},
      {FileWith("{" + Tensor("w", "F32", "[4294967296,4294967296,4]", "[0,8]") + "}", 8),
       "tensor \"w\": shape [4294967296,4294967296,4] is too large"},
      {FileWith("{" + Tensor("w", "F32", "[2]", "[0]") + "}", 8),
       "tensor \"w\": data_offsets [0] are not two integers 0 <= begin <= end"},
      {FileWith("{" + Tensor("w", "F32", "[2]", "[8,0]") + "}", 8),
       "tensor \"w\": data_offsets [8,0] are not two"},
      {FileWith("{" + Tensor("w", "F32", "[2]", "[-8,0]") + "}", 8),
       "tensor \"w\": data_offsets [-8,0] are not two"},
      {FileWith("{" + Tensor("w", "F32", "[2]", "[\"0\",8]") + "}", 8),
       "tensor \"w\": key \"data_offsets\": element 0 is a string, expected an integer"},
      {FileWith("{" + Tensor("w", "F32", "[2,2]", "[0,12]") + "}", 16),
       "tensor \"w\": data_offsets [0,12] hold 12 bytes, but F32 shape [2,2] takes 16"},
      {FileWith("{" + w + "}", 12),
       "tensor \"w\": bytes [0, 16) run past the end of the file's 12 data bytes"},
      {FileWith("{" + w + "," + Tensor("v", "I64", "[2]", "[8,24]") + "}", 24),
       "tensor \"v\": bytes [8, 24) overlap tensor \"w\"'s [0, 16)"},
      {FileWith("{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0),
       "__metadata__ key \"n\" is an integer, expected a string"},
      {FileWith("{\"__metadata__\":[]}", 0), "__metadata__ is an array, expected an object"},
  };
  const std::string path = TempPath("bad.safetensors");
  for (const BadFile& c : cases) {
    WriteBytes(path, c.bytes);
    const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
    ASSERT_FALSE(header.ok()) << c.error;
    EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss) << header.status();
    EXPECT_THAT(std::string(header.status().message()),
                HasSubstr("safetensors file " + path + ": " + c.error));
  }
  const absl::StatusOr<SafetensorsHeader> missing = ReadSafetensorsHeader(TempPath("absent"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(TempPath("absent")));
  // Padding, gaps and zero-size tensors anywhere are fine.
  WriteBytes(path, FileWith("{" + Tensor("z", "U8", "[0]", "[10,10]") + "," +
                                Tensor("w", "F32", "[1]", "[4,8]") + "}     ",
                            12));
  EXPECT_TRUE(ReadSafetensorsHeader(path).ok());
}

TEST(SafetensorsErrorsTest, BoolBytesOtherThanZeroOrOneAreRefused) {
  const std::string path = TempPath("bool.safetensors");
  WriteBytes(path, FileWith("{" + Tensor("b", "BOOL", "[3]", "[0,3]") + "}", 0) +
                       std::string("\x01\x02\x00", 3));
  const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  const absl::StatusOr<at::Tensor> t = ReadSafetensorsTensor(*header, "b");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr(path + ": tensor \"b\": BOOL element 1 is byte 2, not 0 or 1"));
}

TEST(SafetensorsErrorsTest, AHeaderChangedByItsHolderIsCheckedAgain) {
  const std::string path = TempPath("changed.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", torch::ones({2, 2})}}, {}).ok());
  absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  header->tensors[0].shape = {-1, -1};  // a product of 1 from negative dimensions
  EXPECT_EQ(ReadSafetensorsTensor(*header, "w").status().code(),
            absl::StatusCode::kInvalidArgument);
  header->tensors[0].shape = {int64_t{1} << 61, 2};  // fits int64, its bytes do not
  EXPECT_EQ(ReadSafetensorsElements(*header, "w", 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  header->tensors[0].shape = {2, 2};
  header->tensors[0].dtype = at::kComplexFloat;
  EXPECT_THAT(std::string(ReadSafetensorsTensor(*header, "w").status().message()),
              HasSubstr(path + ": tensor \"w\": dtype ComplexFloat is not supported"));
}

// Reads `bytes` as a file: a clean error, or a header whose tensors all read.
bool ReadsCleanly(const std::string& path, const std::string& bytes) {
  WriteBytes(path, bytes);
  const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  if (!header.ok()) {
    EXPECT_THAT(std::string(header.status().message()), HasSubstr(path));
    return false;
  }
  const int64_t data_bytes = static_cast<int64_t>(bytes.size()) - header->data_start;
  for (const SafetensorsTensorInfo& t : header->tensors) {
    EXPECT_LE(t.end, data_bytes) << t.name;
    const absl::StatusOr<at::Tensor> read = ReadSafetensorsTensor(*header, t.name);
    if (read.ok()) {
      EXPECT_EQ(read->nbytes(), t.end - t.begin) << t.name;
    }
  }
  return true;
}

TEST(SafetensorsErrorsTest, TruncatedAndDamagedFilesNeverCrash) {
  const std::string good_path = TempPath("good.safetensors");
  ASSERT_TRUE(WriteSafetensors(good_path,
                               {{"w", torch::randn({4, 3})},
                                {"i", torch::arange(5, torch::kLong)},
                                {"flag", torch::ones({2}, torch::kBool)}},
                               {{"format", "pt"}})
                  .ok());
  std::ifstream in(good_path, std::ios::binary);
  const std::string good{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string path = TempPath("fuzzed.safetensors");
  ASSERT_TRUE(ReadsCleanly(path, good));
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(ReadsCleanly(path, good.substr(0, n))) << "truncated to " << n << " bytes";
  }
  const int64_t header_end =
      8 + static_cast<int64_t>(good[0] & 0xFF) + 256 * static_cast<int64_t>(good[1] & 0xFF);
  std::mt19937 rng(1234);
  const std::string interesting = "{}[]\",:0123456789-e. \\u\xff";
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = good;
    for (int e = 1 + static_cast<int>(rng() % 3); e > 0; --e) {
      const size_t at = rng() % static_cast<size_t>(header_end);
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          bytes[at] = static_cast<char>(rng() % 256);
          break;
        default:
          bytes[at] = interesting[rng() % interesting.size()];
      }
    }
    accepted += ReadsCleanly(path, bytes);
  }
  EXPECT_LT(accepted, 3000) << "no damage was ever noticed";
}

TEST(SafetensorsErrorsTest, IndexErrorsNameTheIndexAndKey) {
  const std::string dir = TempPath("index");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors.index.json";
  WriteBytes(path,
             "{\"metadata\": {\"total_size\": 8}, \"weight_map\": "
             "{\"a.weight\": \"model-00001-of-00002.safetensors\", \"b\": \"sub/b.safetensors\"}}");
  const auto index = ReadSafetensorsIndex(path);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(*index, (std::map<std::string, std::string>{
                        {"a.weight", dir + "/model-00001-of-00002.safetensors"},
                        {"b", dir + "/sub/b.safetensors"}}));
  const std::pair<std::string, std::string> cases[] = {
      {"{\"weight_map\": {\"a\": \"x\"",
       ":1:25: not valid JSON: the input ends inside the object opened at 1:16"},
      {"[]", "is an array, expected a JSON object"},
      {"{\"metadata\": {}}", "key \"weight_map\" is missing"},
      {"{\"weight_map\": []}", "key \"weight_map\" is an array, expected an object"},
      {"{\"metadata\": 1, \"weight_map\": {}}", "key \"metadata\" is an integer"},
      {"{\"weight_map\": {\"a\": 1}}", "weight_map key \"a\" is an integer, expected a string"},
      {"{\"weight_map\": {\"a\": \"../x\"}}", "weight_map key \"a\": shard file \"../x\" is not"},
      {"{\"weight_map\": {\"a\": \"/etc/x\"}}", "weight_map key \"a\": shard file \"/etc/x\""},
  };
  for (const auto& [text, error] : cases) {
    WriteBytes(path, text);
    const auto bad = ReadSafetensorsIndex(path);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
    // A syntax error follows the path with ":line:column:", the others with ": ".
    EXPECT_THAT(std::string(bad.status().message()),
                HasSubstr("safetensors index " + path + (error[0] == ':' ? "" : ": ") + error));
  }
  const auto missing = ReadSafetensorsIndex(dir + "/absent.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir + "/absent.json"));
}

}  // namespace
}  // namespace zerotrain::hf
