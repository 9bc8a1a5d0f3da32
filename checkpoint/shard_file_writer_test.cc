// ShardStreamWriter: pieces arriving interleaved across arrays give, byte for byte, the file the
// format (shard_file.h) describes, built here field by field; its size and CRC32C are the file's
// own; an incomplete or overfull array is refused and leaves nothing behind.
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "checkpoint/crc32c.h"
#include "checkpoint/little_endian.h"
#include "checkpoint/shard_file.h"
#include "checkpoint/test_files.h"
#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

using testing::ReadBytes;
using testing::TempPath;

struct Expected {
  std::string name;
  ArrayDType dtype;
  std::string bytes;
};

// The file from the format's definition: header, identity, table with a CRC per chunk, data.
std::string FileOf(const std::vector<Expected>& arrays, const ShardIdentity& id, uint32_t chunk) {
  std::string table;
  EncodeIdentity(id, &table);
  std::string data;
  for (const Expected& a : arrays) {
    PutLittleEndian(&table, a.name.size(), 4);
    table += a.name;
    table.push_back(static_cast<char>(a.dtype));
    PutLittleEndian(&table, a.bytes.size() / ArrayDTypeSize(a.dtype), 8);
    for (size_t at = 0; at < a.bytes.size(); at += chunk) {
      const size_t n = std::min<size_t>(chunk, a.bytes.size() - at);
      PutLittleEndian(&table, Crc32c(a.bytes.data() + at, n), 4);
    }
    data += a.bytes;
  }
  std::string head(kShardMagic, 8);
  PutLittleEndian(&head, kShardFormatVersion, 4);
  PutLittleEndian(&head, chunk, 4);
  PutLittleEndian(&head, table.size(), 8);
  PutLittleEndian(&head, Crc32c((head + table).data(), head.size() + table.size()), 4);
  return head + table + data;
}

std::string BytesOf(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(ShardStreamWriter, InterleavedPiecesGiveTheFormatsFile) {
  std::vector<float> master(1003), moment(1003);
  std::iota(master.begin(), master.end(), 0.25f);
  std::iota(moment.begin(), moment.end(), -7.0f);
  const std::string rng = "generator state";
  const ShardIdentity id{42, "t", 3, 1, 2, 3};
  const uint32_t chunk = 64;  // 16 floats: pieces straddle chunk boundaries
  const std::string path = TempPath("stream.zts");
  auto w = ShardStreamWriter::Open(path,
                                   {{"master", ArrayDType::kFloat32, 1003},
                                    {"exp_avg", ArrayDType::kFloat32, 1003},
                                    {"rng", ArrayDType::kBytes, 15}},
                                   id, chunk);
  ASSERT_TRUE(w.ok()) << w.status();
  // A sub-group at a time, every array's piece of it, pieces of uneven sizes.
  int64_t at = 0;
  for (int64_t piece : {1, 15, 16, 17, 300, 0, 654}) {
    ASSERT_TRUE(w->Append(0, master.data() + at, piece).ok());
    ASSERT_TRUE(w->Append(1, moment.data() + at, piece).ok());
    at += piece;
  }
  ASSERT_EQ(at, 1003);
  ASSERT_TRUE(w->Append(2, rng.data(), 15).ok());
  auto written = w->Commit();
  ASSERT_TRUE(written.ok()) << written.status();

  const std::string want = FileOf({{"master", ArrayDType::kFloat32, BytesOf(master)},
                                   {"exp_avg", ArrayDType::kFloat32, BytesOf(moment)},
                                   {"rng", ArrayDType::kBytes, rng}},
                                  id, chunk);
  const std::string got = ReadBytes(path);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the streamed file differs from the format's";
  EXPECT_EQ(written->size, static_cast<int64_t>(got.size()));
  EXPECT_EQ(written->crc32c, Crc32c(got.data(), got.size()));
  auto r = ShardFileReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> back(1003);
  ASSERT_TRUE(r->ReadRange("exp_avg", 0, 1003, back.data()).ok());
  EXPECT_EQ(back, moment);
}

TEST(ShardStreamWriter, RefusesAnIncompleteOrOverfullArrayAndLeavesNothing) {
  const std::string dir = TempPath("refused");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/f.zts";
  std::vector<float> v(10, 1.0f);
  {
    auto w = ShardStreamWriter::Open(path, {{"a", ArrayDType::kFloat32, 10}}, std::nullopt);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append(0, v.data(), 6).ok());
    const absl::Status over = w->Append(0, v.data(), 5);
    EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(over.message().find("'a'"), std::string::npos) << over;
    EXPECT_EQ(w->Append(1, v.data(), 1).code(), absl::StatusCode::kInvalidArgument);
    auto short_file = w->Commit();
    ASSERT_EQ(short_file.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(short_file.status().message().find("24 of its 40 bytes"), std::string::npos)
        << short_file.status();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a refused file left something in " << dir;
  EXPECT_EQ(ShardStreamWriter::Open(
                path, {{"a", ArrayDType::kFloat32, 1}, {"a", ArrayDType::kBytes, 1}}, std::nullopt)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

}  // namespace
}  // namespace zerotrain::checkpoint
