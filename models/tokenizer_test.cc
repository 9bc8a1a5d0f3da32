// Tokenizers against SentencePiece's own command-line tools (Debian's sentencepiece package, the
// reference): a model trained here with spm_train on the embedded corpus encodes each line as
// spm_encode does and decodes it back exactly; bad model files are one error naming the file;
// bytes map to themselves.
#include "models/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/deepspeed/oracle.h"

namespace zerotrain::models {
namespace {

std::string g_spm_encode, g_spm_train;  // from argv: $(rootpaths //third_party:spm_tools)

std::vector<std::string> CorpusLines(size_t n) {
  std::ifstream in("trainer/data/corpus/fortunes.txt");
  std::vector<std::string> lines;
  for (std::string line; lines.size() < n && std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// A model trained on the corpus: byte fallback, no normalisation, so every line round-trips.
std::string TrainModel(const std::string& dir) {
  const std::string prefix = dir + "/m";
  auto out = zerotrain::testing::RunProgram(
      {g_spm_train, "--input=trainer/data/corpus/fortunes.txt", "--model_prefix=" + prefix,
       "--vocab_size=400", "--byte_fallback=true", "--normalization_rule_name=identity",
       "--remove_extra_whitespaces=false", "--input_sentence_size=4000", "--minloglevel=2"});
  EXPECT_TRUE(out.ok()) << out.status();
  return prefix + ".model";
}

TEST(SentencePieceTest, EncodesAsSpmEncodeAndRoundTrips) {
  const std::string dir = zerotrain::testing::OracleTempDir("spm");
  const std::string model = TrainModel(dir);
  auto tokenizer = LoadSentencePiece(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 400);
  EXPECT_EQ((*tokenizer)->name(), model);

  const std::vector<std::string> lines = CorpusLines(200);
  ASSERT_EQ(lines.size(), 200u);
  std::ofstream(dir + "/lines.txt") << absl::StrJoin(lines, "\n") << "\n";
  auto encoded = zerotrain::testing::RunProgram(
      {g_spm_encode, "--model=" + model, "--output_format=id", "--input=" + dir + "/lines.txt"});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  std::vector<std::string> reference = absl::StrSplit(*encoded, '\n', absl::SkipEmpty());
  ASSERT_EQ(reference.size(), lines.size());
  size_t pieces = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto ids = (*tokenizer)->Encode(lines[i]);
    ASSERT_TRUE(ids.ok()) << ids.status();
    std::vector<uint32_t> want;
    for (absl::string_view id : absl::StrSplit(reference[i], ' ', absl::SkipEmpty())) {
      uint32_t v;
      ASSERT_TRUE(absl::SimpleAtoi(id, &v)) << reference[i];
      want.push_back(v);
    }
    ASSERT_EQ(*ids, want) << lines[i];
    pieces += ids->size();
    EXPECT_EQ((*tokenizer)->Decode(std::vector<int64_t>(ids->begin(), ids->end())), lines[i]);
  }
  // A trained vocabulary (144 pieces beyond the 256 bytes): clearly fewer pieces than bytes.
  size_t bytes = 0;
  for (const std::string& l : lines) bytes += l.size();
  EXPECT_LT(pieces, bytes * 9 / 10);
  // Ids outside the vocabulary decode to '?', between the pieces around them.
  auto hello = (*tokenizer)->Encode("hello");
  ASSERT_TRUE(hello.ok());
  std::vector<int64_t> ids(hello->begin(), hello->end());
  ids.push_back(400);
  EXPECT_EQ((*tokenizer)->Decode(ids), "hello?");
}

TEST(SentencePieceTest, BadModelFilesNameTheFile) {
  const std::string dir = zerotrain::testing::OracleTempDir("spm_bad");
  auto missing = LoadSentencePiece(dir + "/none.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir + "/none.model"), std::string::npos)
      << missing.status();
  std::ofstream(dir + "/junk.model") << "not a model";
  auto junk = LoadSentencePiece(dir + "/junk.model");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find(dir + "/junk.model"), std::string::npos) << junk.status();
}

TEST(ByteTokenizerTest, BytesAreIds) {
  auto bytes = LoadTokenizer("");
  ASSERT_TRUE(bytes.ok());
  auto ids = (*bytes)->Encode("Az\n\xff");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint32_t>{'A', 'z', '\n', 0xff}));
  EXPECT_EQ((*bytes)->Decode({'A', 'z', '\n', 0xff}), "Az\n?");
  EXPECT_EQ((*bytes)->vocab_size(), 256);
}

}  // namespace
}  // namespace zerotrain::models

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // $(rootpaths) lists spm_decode, spm_encode, spm_train.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() >= 10 && a.compare(a.size() - 10, 10, "spm_encode") == 0) {
      zerotrain::models::g_spm_encode = a;
    }
    if (a.size() >= 9 && a.compare(a.size() - 9, 9, "spm_train") == 0) {
      zerotrain::models::g_spm_train = a;
    }
  }
  if (zerotrain::models::g_spm_encode.empty() || zerotrain::models::g_spm_train.empty()) {
    std::fprintf(stderr, "usage: tokenizer_test <spm_encode> <spm_train>\n");
    return 2;
  }
  return RUN_ALL_TESTS();
}
