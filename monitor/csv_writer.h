// CsvWriter: one wide CSV file per run (columns step, wall_time, then one per metric), instead of
// DeepSpeed's one file per metric, so a run is one file a spreadsheet or pandas opens at once.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "monitor/scalar.h"

namespace zerotrain::monitor {

class CsvWriter {
 public:
  // Creates `dir` if needed; <dir>/<file_name> itself is created (or, for a run that starts from
  // step 0, truncated) only by the first line written, so a run that fails before its first row
  // leaves no empty file. With `append` (a resumed run) the rows go after the existing ones, and
  // when the file already has a header the columns must be the same.
  static absl::StatusOr<std::unique_ptr<CsvWriter>> Open(
      const std::string& dir, const std::string& file_name = "metrics.csv", bool append = false);
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;

  // Fixes the metric columns (after step and wall_time), for a caller whose rows differ: a column
  // may then be left empty in any row. The header goes out with the first row. Only before the
  // first Write.
  absl::Status DeclareColumns(const std::vector<std::string>& names);

  // One row. Unless DeclareColumns was called, the first call fixes the columns (in the order
  // given) and writes the header; later rows may leave a column out (empty cell) but not bring a
  // new name. Each row is flushed, so a crash loses at most the row being written. wall_time < 0
  // means now.
  absl::Status Write(int64_t step, absl::Span<const Scalar> scalars, double wall_time = -1.0);

  // For a resumed run: removes the rows of steps after `step` (written by the run that saved at
  // `step` before it stopped, and about to be written again) and any partial last line, so no
  // step appears twice. Rewrites the file crash-safely (a temporary renamed over it).
  absl::Status DropRowsAfter(int64_t step);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  CsvWriter(std::string path, bool append, std::string existing_header)
      : path_(std::move(path)), append_(append), existing_header_(std::move(existing_header)) {}
  absl::Status WriteLine(const std::string& line);

  std::string path_;
  bool append_;
  std::FILE* file_ = nullptr;         // opened by the first WriteLine
  std::string existing_header_;       // header line already in the file, "" for a new file
  std::string pending_header_;        // header to write before the first row
  std::vector<std::string> columns_;  // metric columns after step and wall_time
};

// A CSV field, quoted when it holds a comma, quote or line break.
std::string CsvField(const std::string& s);

}  // namespace zerotrain::monitor
