// Directory creation for the metrics writers: std::filesystem, errors turned into Status.
#include "monitor/output_dir.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace zerotrain::monitor {

absl::Status MakeOutputDir(const std::string& dir, const std::string& what) {
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty directory path"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot create directory '", dir, "': ", ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": '", dir, "' exists and is not a directory"));
  }
  // create_directories succeeds on an existing read-only directory; the open would fail later
  // with a less helpful message.
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": directory '", dir, "' is not writable"));
  }
  return absl::OkStatus();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace zerotrain::monitor
