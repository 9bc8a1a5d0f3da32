// Reads llm.c and nanoGPT token files (token_files.h).
#include "trainer/data/token_files.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace zerotrain::trainer {
namespace {

// The file's bytes [offset, offset + n); fewer if it is shorter.
absl::StatusOr<std::string> ReadBytes(const std::string& path, int64_t offset, int64_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("token file ", path, ": cannot open it"));
  in.seekg(offset);
  std::string bytes(n, '\0');
  in.read(bytes.data(), n);
  bytes.resize(in.gcount());
  return bytes;
}

int32_t Int32At(const std::string& bytes, int64_t i) {
  int32_t v = 0;
  std::memcpy(&v, bytes.data() + 4 * i, 4);  // little-endian on every machine we build for
  return v;
}

absl::Status CheckLlmcHeader(const std::string& path, const std::string& header, int64_t size,
                             TokenFileInfo& info) {
  const int32_t magic = Int32At(header, 0), version = Int32At(header, 1);
  const int32_t want_version = magic == kLlmcUint16Magic ? 1 : 7;
  info.format =
      magic == kLlmcUint16Magic ? TokenFileFormat::kLlmcUint16 : TokenFileFormat::kLlmcUint32;
  info.bytes_per_token = magic == kLlmcUint16Magic ? 2 : 4;
  info.header_bytes = kLlmcHeaderBytes;
  if (version != want_version) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": llm.c magic ", magic, " with version ", version,
                     " at byte offset 4; this magic's version is ", want_version));
  }
  info.num_tokens = Int32At(header, 2);
  const int64_t want_size = kLlmcHeaderBytes + info.num_tokens * info.bytes_per_token;
  if (info.num_tokens < 0 || size != want_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, ": its llm.c header (byte offset 8) counts ", info.num_tokens,
        " tokens of ", info.bytes_per_token, " bytes, so it should be ", want_size,
        " bytes; it is ", size, " (truncated or not an llm.c shard)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenFileInfo> InspectTokenFile(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("token file ", path, ": ", ec.message()));
  auto head = ReadBytes(path, 0, kLlmcHeaderBytes);
  if (!head.ok()) return head.status();
  TokenFileInfo info;
  info.path = path;
  const int64_t n = static_cast<int64_t>(size);
  if (head->size() >= 4) {
    const int32_t magic = Int32At(*head, 0);
    if (magic == kLlmcUint16Magic || magic == kLlmcUint32Magic) {
      if (n < kLlmcHeaderBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("token file ", path, ": starts with llm.c magic ", magic, " but is ", n,
                         " bytes, shorter than the ", kLlmcHeaderBytes, "-byte header"));
      }
      if (absl::Status s = CheckLlmcHeader(path, *head, n, info); !s.ok()) return s;
      return info;
    }
  }
  if (n % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": ", n,
                     " bytes, an odd size for headerless uint16 ids (nanoGPT's format), and no "
                     "llm.c magic (20240520 or 20240801) at byte offset 0"));
  }
  info.num_tokens = n / 2;
  return info;
}

absl::StatusOr<std::vector<std::string>> ExpandTokenFiles(const std::string& spec) {
  std::vector<std::string> files;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    const std::string pattern(absl::StripAsciiWhitespace(part));
    if (pattern.find_first_of("*?[") == std::string::npos) {
      files.push_back(pattern);
      continue;
    }
    glob_t g{};
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    if (matches.empty()) {
      return absl::NotFoundError(
          absl::StrCat("token files: the pattern ", pattern, " matches no file"));
    }
    std::sort(matches.begin(), matches.end());
    files.insert(files.end(), matches.begin(), matches.end());
  }
  if (files.empty()) return absl::InvalidArgumentError("token files: no file named (empty list)");
  return files;
}

absl::StatusOr<std::vector<uint32_t>> ReadTokenFiles(const std::vector<std::string>& paths,
                                                     int64_t vocab_size) {
  std::vector<uint32_t> ids;
  for (const std::string& path : paths) {
    auto info = InspectTokenFile(path);
    if (!info.ok()) return info.status();
    auto bytes = ReadBytes(path, info->header_bytes, info->num_tokens * info->bytes_per_token);
    if (!bytes.ok()) return bytes.status();
    const int64_t w = info->bytes_per_token;
    if (static_cast<int64_t>(bytes->size()) != info->num_tokens * w) {
      return absl::DataLossError(absl::StrCat("token file ", path, ": changed while being read"));
    }
    ids.reserve(ids.size() + info->num_tokens);
    for (int64_t i = 0; i < info->num_tokens; ++i) {
      uint32_t id = 0;
      std::memcpy(&id, bytes->data() + i * w, w);  // little-endian: the low bytes come first
      if (id >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token file ", path, ": token id ", id, " at byte offset ", info->header_bytes + i * w,
            " is outside the vocabulary (size ", vocab_size, ")"));
      }
      ids.push_back(id);
    }
  }
  return ids;
}

}  // namespace zerotrain::trainer
