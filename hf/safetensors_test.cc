// safetensors files against the format's specification rather than against this code: a file
// packed byte by byte from the spec is read back, the writer's bytes equal a hand-built file, every
// dtype round-trips, element ranges equal slices of the whole, and sharded checkpoints follow
// transformers' names and split. Header errors and fuzzing: safetensors_errors_test.cc.
#include "hf/safetensors.h"

#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "checkpoint/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerotrain::hf {
namespace {

using checkpoint::testing::ReadBytes;
using checkpoint::testing::TempPath;
using checkpoint::testing::WriteBytes;
using ::testing::HasSubstr;

at::Tensor MustRead(const SafetensorsHeader& header, const std::string& name) {
  absl::StatusOr<at::Tensor> t = ReadSafetensorsTensor(header, name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : at::Tensor();
}

TEST(SafetensorsTest, ReadsAFilePackedByHandFromTheSpec) {
  std::string json =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
      "\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]},"
      "\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[32,38]},"
      "\"f\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[38,40]},"
      "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2,1],\"data_offsets\":[40,42]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[42,43]},"
      "\"__metadata__\":{\"format\":\"pt\"}}";
  while (json.size() % 8 != 0) json += ' ';
  ASSERT_LT(json.size(), 65536u);
  std::string file = {
      static_cast<char>(json.size() & 0xFF), static_cast<char>(json.size() >> 8), 0, 0, 0, 0, 0, 0};
  file += json;
  file += std::string("\x00\x00\x80\x3F\x00\x00\x20\xC0\x00\x00\x00\x3F\x00\x00\x40\x40", 16);
  file += std::string(8, '\xFF') + "\x08\x07\x06\x05\x04\x03\x02\x01";  // -1, 0x0102030405060708
  file += std::string("\x80\x3F\x00\xC0\x20\x3E", 6);                   // bf16 1, -2, 0.15625
  file += std::string("\x00\x3C", 2);                                   // f16 1
  file += std::string("\x01\x00", 2);                                   // true, false
  file += "\xC8";                                                       // 200
  const std::string path = TempPath("by_hand.safetensors");
  WriteBytes(path, file);

  const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->data_start, 8 + static_cast<int64_t>(json.size()));
  EXPECT_EQ(header->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  std::vector<std::string> order;
  for (const SafetensorsTensorInfo& t : header->tensors) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"w", "i", "h", "f", "b", "u"}));  // by offset
  EXPECT_EQ(header->Find("h")->begin, 32);
  EXPECT_EQ(header->Find("h")->end, 38);

  const at::Tensor w = MustRead(*header, "w");
  EXPECT_EQ(w.scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(w, torch::tensor({1.0f, -2.5f, 0.5f, 3.0f}).reshape({2, 2})));
  const at::Tensor i = MustRead(*header, "i");
  EXPECT_EQ(i.scalar_type(), at::kLong);
  EXPECT_EQ(i[0].item<int64_t>(), -1);
  EXPECT_EQ(i[1].item<int64_t>(), 0x0102030405060708);
  const at::Tensor h = MustRead(*header, "h");
  EXPECT_EQ(h.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(torch::equal(h.to(at::kFloat), torch::tensor({1.0f, -2.0f, 0.15625f})));
  const at::Tensor f = MustRead(*header, "f");
  EXPECT_EQ(f.scalar_type(), at::kHalf);
  EXPECT_EQ(f.to(at::kFloat).item<float>(), 1.0f);
  const at::Tensor b = MustRead(*header, "b");
  EXPECT_EQ(b.scalar_type(), at::kBool);
  EXPECT_EQ(b.sizes(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(b[0][0].item<bool>());
  EXPECT_FALSE(b[1][0].item<bool>());
  const at::Tensor u = MustRead(*header, "u");
  EXPECT_EQ(u.scalar_type(), at::kByte);
  EXPECT_EQ(u.dim(), 0);
  EXPECT_EQ(u.item<uint8_t>(), 200);
}

TEST(SafetensorsTest, WriterBytesEqualAHandBuiltFile) {
  // Order: I64, F32, BF16, BOOL (the Python library's larger-dtype-first), not by name.
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[16,20]},"
      "\"d\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[20,20]}}";
  ASSERT_EQ(json.size(), 250u);
  const std::string want = std::string("\x00\x01\x00\x00\x00\x00\x00\x00", 8) + json + "      " +
                           std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8) +
                           std::string("\x00\x00\x80\x3F\x00\x00\x00\xC0", 8) +
                           std::string("\x80\x3F\x00\x3F", 4);
  const std::string path = TempPath("exact.safetensors");
  const absl::Status s = WriteSafetensors(path,
                                          {{"b", torch::tensor({1.0f, -2.0f})},
                                           {"a", torch::tensor({1.0f, 0.5f}).to(at::kBFloat16)},
                                           {"d", torch::zeros({0}, torch::kBool)},
                                           {"c", torch::tensor(int64_t{7})}},
                                          {{"format", "pt"}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReadBytes(path), want);
}

TEST(SafetensorsTest, EveryDtypeRoundTrips) {
  torch::manual_seed(7);
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f64", torch::randn({3, 2}, torch::kDouble)},
      {"f32", torch::randn({5})},
      {"f16", torch::randn({2, 3}).to(at::kHalf)},
      {"bf16", torch::randn({7}).to(at::kBFloat16)},
      {"i64", torch::randint(-(int64_t{1} << 62), int64_t{1} << 62, {4}, torch::kLong)},
      {"i32", torch::randint(-(1 << 30), 1 << 30, {3}, torch::kInt)},
      {"i16", torch::randint(-30000, 30000, {3}, torch::kShort)},
      {"i8", torch::randint(-128, 128, {9}, torch::kChar)},
      {"u8", torch::randint(0, 256, {1, 1, 3}, torch::kByte)},
      {"bool", torch::randint(0, 2, {6}).to(at::kBool)},
      {"empty", torch::zeros({3, 0, 2})},
      {"scalar", torch::tensor(2.5)},
      {"transposed", torch::arange(12, torch::kFloat).reshape({3, 4}).t()},
  };
  const std::string path = TempPath("all_dtypes.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {}).ok());
  const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_TRUE(header->metadata.empty());
  ASSERT_EQ(header->tensors.size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    const at::Tensor got = MustRead(*header, name);
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), want.sizes()) << name;
    EXPECT_TRUE(torch::equal(got, want)) << name;
    const SafetensorsTensorInfo* info = header->Find(name);
    EXPECT_EQ((header->data_start + info->begin) % want.element_size(), 0) << name << " aligned";
  }
}

TEST(SafetensorsTest, ElementRangesEqualSlicesOfTheWhole) {
  torch::manual_seed(3);
  const std::string path = TempPath("elements.safetensors");
  ASSERT_TRUE(WriteSafetensors(path,
                               {{"w", torch::randn({3, 4, 5})},
                                {"h", torch::randn({7}).to(at::kBFloat16)},
                                {"i", torch::arange(6, torch::kLong).reshape({2, 3})}},
                               {})
                  .ok());
  const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  for (const std::string name : {"w", "h", "i"}) {
    const at::Tensor flat = MustRead(*header, name).flatten();
    const int64_t numel = flat.numel();
    for (int64_t first = 0; first <= numel; ++first) {
      for (int64_t count = 0; first + count <= numel; ++count) {
        const absl::StatusOr<at::Tensor> part =
            ReadSafetensorsElements(*header, name, first, count);
        ASSERT_TRUE(part.ok()) << part.status();
        ASSERT_EQ(part->dim(), 1);
        ASSERT_TRUE(torch::equal(*part, flat.slice(0, first, first + count)))
            << name << " [" << first << ", +" << count << ")";
      }
    }
  }
  const int64_t big = std::numeric_limits<int64_t>::max();
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{
           {-1, 1}, {0, -1}, {0, 61}, {60, 1}, {61, 0}, {1, big}, {big, big}}) {
    const absl::StatusOr<at::Tensor> part = ReadSafetensorsElements(*header, "w", first, count);
    ASSERT_FALSE(part.ok()) << first << " " << count;
    EXPECT_EQ(part.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(std::string(part.status().message()),
                HasSubstr(absl::StrCat(path, ": tensor \"w\": elements from ", first, " (", count,
                                       " of them) are not inside its 60 elements")));
  }
  const absl::StatusOr<at::Tensor> missing = ReadSafetensorsTensor(*header, "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path + ": tensor \"nope\""));
  EXPECT_EQ(ReadSafetensorsElements(*header, "nope", 0, 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, WriterRefusesBadTensorsAndLeavesNothing) {
  const std::string dir = TempPath("refused");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"kept", torch::ones({2})}}, {}).ok());
  const std::string before = ReadBytes(path);
  const std::vector<std::pair<std::vector<std::pair<std::string, at::Tensor>>, std::string>> cases =
      {
          {{{"x", torch::ones({1})}, {"x", torch::ones({1})}}, "tensor \"x\": duplicate name"},
          {{{"__metadata__", torch::ones({1})}}, "tensor \"__metadata__\": the name is reserved"},
          {{{"bad\xff", torch::ones({1})}}, "tensor \"bad\xff\": the name is not valid UTF-8"},
          {{{"u", at::Tensor()}}, "tensor \"u\": undefined tensor"},
          {{{"c", torch::ones({2}, torch::kComplexFloat)}}, "tensor \"c\": dtype ComplexFloat"},
      };
  for (const auto& [tensors, error] : cases) {
    const absl::Status s = WriteSafetensors(path, tensors, {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << error;
    EXPECT_THAT(std::string(s.message()), HasSubstr("safetensors file " + path + ": " + error));
  }
  EXPECT_EQ(ReadBytes(path), before);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.exists();
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
}

TEST(SafetensorsTest, ShardsAreSplitAndNamedAsTransformersDoes) {
  const std::string dir = TempPath("sharded");
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const std::string name : {"a", "b", "big", "c", "d", "e"}) {
    tensors.push_back({name, torch::rand({name == "big" ? 100 : 10})});  // 400 or 40 bytes
  }
  // huggingface_hub: a tensor over the limit is a shard of its own, listed before the shard then
  // being filled.
  const absl::StatusOr<std::vector<std::string>> written =
      WriteShardedSafetensors(dir, tensors, 100, {{"format", "pt"}});
  ASSERT_TRUE(written.ok()) << written.status();
  std::vector<std::string> want_files;
  for (int i = 1; i <= 4; ++i) {
    want_files.push_back(absl::StrCat(dir, "/model-0000", i, "-of-00004.safetensors"));
  }
  want_files.push_back(dir + "/model.safetensors.index.json");
  EXPECT_EQ(*written, want_files);
  EXPECT_EQ(ReadBytes(dir + "/model.safetensors.index.json"),
            "{\n  \"metadata\": {\n    \"total_size\": 600\n  },\n  \"weight_map\": {\n"
            "    \"a\": \"model-00002-of-00004.safetensors\",\n"
            "    \"b\": \"model-00002-of-00004.safetensors\",\n"
            "    \"big\": \"model-00001-of-00004.safetensors\",\n"
            "    \"c\": \"model-00003-of-00004.safetensors\",\n"
            "    \"d\": \"model-00003-of-00004.safetensors\",\n"
            "    \"e\": \"model-00004-of-00004.safetensors\"\n  }\n}\n");
  const auto index = ReadSafetensorsIndex(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    const absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(index->at(name));
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->metadata.at("format"), "pt");
    EXPECT_TRUE(torch::equal(MustRead(*header, name), want)) << name;
  }

  const std::string single = TempPath("single");
  std::filesystem::create_directories(single);
  const auto one = WriteShardedSafetensors(single, tensors, 1 << 20, {});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, std::vector<std::string>{single + "/model.safetensors"});
  EXPECT_FALSE(std::filesystem::exists(single + "/model.safetensors.index.json"));
  EXPECT_EQ(ReadSafetensorsHeader(single + "/model.safetensors")->tensors.size(), 6u);
}

}  // namespace
}  // namespace zerotrain::hf
