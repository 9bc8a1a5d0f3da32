// StateDictWriter's files read back through LibTorch's own torch.save reader
// (torch::pickle_load), an independent implementation of the format: names, shapes, values and
// order must survive, for 2-d, 1-d and 0-d tensors.
#include "checkpoint/state_dict_writer.h"

#include <torch/serialize.h>
#include <torch/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gtest/gtest.h"

namespace zerotrain::checkpoint {
namespace {

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(StateDictWriterTest, TorchPickleLoadReadsItBack) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/model.pt";
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, torch::Tensor>> want = {
      {"h.0.attn.c_attn.weight", torch::randn({300, 100})},
      {"wte.weight", torch::randn({256, 8})},
      {"ln_f.bias", torch::randn({7})},
      {"scalar", torch::randn({})},
  };
  auto writer = StateDictWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const auto& [name, t] : want) {
    ASSERT_TRUE((*writer)->Add(name, t.sizes().vec(), t.data_ptr<float>()).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Finish";
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->bytes_written(), static_cast<int64_t>(std::filesystem::file_size(path)));

  const c10::IValue loaded = torch::pickle_load(ReadAll(path));
  ASSERT_TRUE(loaded.isGenericDict());
  const c10::impl::GenericDict dict = loaded.toGenericDict();
  ASSERT_EQ(dict.size(), want.size());
  size_t i = 0;
  for (const auto& item : dict) {  // insertion order is kept
    ASSERT_LT(i, want.size());
    EXPECT_EQ(item.key().toStringRef(), want[i].first);
    const torch::Tensor got = item.value().toTensor();
    EXPECT_EQ(got.sizes(), want[i].second.sizes()) << want[i].first;
    EXPECT_TRUE(torch::equal(got, want[i].second)) << want[i].first;
    ++i;
  }
}

TEST(StateDictWriterTest, UnfinishedWriterLeavesNoFile) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/abandoned.pt";
  {
    auto writer = StateDictWriter::Open(path);
    ASSERT_TRUE(writer.ok());
    const float x[3] = {1, 2, 3};
    ASSERT_TRUE((*writer)->Add("x", {3}, x).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(StateDictWriterTest, UnwritableDirectoryIsAnError) {
  auto writer = StateDictWriter::Open("/nonexistent-dir/model.pt");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/nonexistent-dir"), absl::string_view::npos)
      << writer.status();
}

}  // namespace
}  // namespace zerotrain::checkpoint
