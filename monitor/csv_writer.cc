// CSV writing: header handling, one flushed line per step, the file opened at the first line,
// dropping the rows a resumed run writes again.
#include "monitor/csv_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "monitor/output_dir.h"
#include "tools/status_macros.h"

namespace zerotrain::monitor {

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

absl::StatusOr<std::unique_ptr<CsvWriter>> CsvWriter::Open(const std::string& dir,
                                                           const std::string& file_name,
                                                           bool append) {
  ZT_RETURN_IF_ERROR(MakeOutputDir(dir, "csv_output_path"));
  const std::string path = absl::StrCat(dir, "/", file_name);
  std::string header;
  if (append) {
    std::ifstream in(path);
    if (in) std::getline(in, header);
  }
  return std::unique_ptr<CsvWriter>(new CsvWriter(path, append, header));
}

CsvWriter::~CsvWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status CsvWriter::WriteLine(const std::string& line) {
  if (file_ == nullptr) {
    file_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
    if (file_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("csv_output_path: cannot open '", path_, "': ", std::strerror(errno)));
    }
  }
  if (std::fputs(line.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write to '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CsvWriter::DeclareColumns(const std::vector<std::string>& names) {
  if (!columns_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("csv '", path_, "': the columns are already fixed"));
  }
  if (names.empty()) return absl::InvalidArgumentError("csv: a row needs at least one metric");
  std::vector<std::string> header_fields{"step", "wall_time"};
  for (const std::string& name : names) {
    if (std::find(columns_.begin(), columns_.end(), name) != columns_.end()) {
      columns_.clear();
      return absl::InvalidArgumentError(
          absl::StrCat("csv '", path_, "': metric '", name, "' given twice"));
    }
    columns_.push_back(name);
    header_fields.push_back(CsvField(name));
  }
  const std::string header = absl::StrJoin(header_fields, ",");
  if (existing_header_.empty()) {
    pending_header_ = header;  // written with the first row
    return absl::OkStatus();
  }
  if (existing_header_ != header) {
    columns_.clear();
    return absl::FailedPreconditionError(
        absl::StrCat("csv '", path_, "' has header '", existing_header_, "' but this run writes '",
                     header, "'; use another csv_output_path or job_name"));
  }
  return absl::OkStatus();
}

absl::Status CsvWriter::Write(int64_t step, absl::Span<const Scalar> scalars, double wall_time) {
  if (columns_.empty()) {
    std::vector<std::string> names;
    for (const Scalar& s : scalars) names.push_back(s.name);
    ZT_RETURN_IF_ERROR(DeclareColumns(names));
  }
  std::map<std::string, double> values;
  for (const Scalar& s : scalars) values[s.name] = s.value;
  if (values.size() != scalars.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("csv '", path_, "': a metric is given twice at step ", step));
  }
  std::string line = absl::StrFormat("%d,%.3f", step, wall_time < 0 ? WallTimeNow() : wall_time);
  size_t used = 0;
  for (const std::string& c : columns_) {
    line += ',';
    auto it = values.find(c);
    if (it == values.end()) continue;
    absl::StrAppendFormat(&line, "%.9g", it->second);
    ++used;
  }
  if (used != values.size()) {
    for (const Scalar& s : scalars) {
      if (std::find(columns_.begin(), columns_.end(), s.name) == columns_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "csv '", path_, "': metric '", s.name, "' at step ", step,
            " is not a column (the columns are fixed by DeclareColumns or the first row)"));
      }
    }
  }
  if (!pending_header_.empty()) {
    ZT_RETURN_IF_ERROR(WriteLine(pending_header_));
    pending_header_.clear();
  }
  return WriteLine(line);
}

absl::Status CsvWriter::DropRowsAfter(int64_t step) {
  if (file_ != nullptr) std::fflush(file_);
  // The file is created by the first row; a resume into a fresh directory has none to drop.
  if (access(path_.c_str(), F_OK) != 0 && errno == ENOENT) return absl::OkStatus();
  std::ifstream in(path_);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read '", path_, "' to drop rows after step ", step));
  }
  std::string kept, line;
  for (bool first = true; std::getline(in, line); first = false) {
    // Only whole lines (a crash can cut the last one) whose step is at most `step`.
    if (in.eof()) break;
    int64_t row_step = 0;
    const bool header = first && line.rfind("step,", 0) == 0;
    const bool row = absl::SimpleAtoi(line.substr(0, line.find(',')), &row_step);
    if (header || (row && row_step <= step)) absl::StrAppend(&kept, line, "\n");
  }
  in.close();
  const std::string tmp = path_ + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "w");
  bool written = out != nullptr && std::fputs(kept.c_str(), out) >= 0;
  if (out != nullptr) written = std::fclose(out) == 0 && written;
  if (!written || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat("cannot rewrite '", path_,
                                            "' without the rows after step ", step, ": ", reason));
  }
  if (file_ == nullptr) return absl::OkStatus();  // opened, appending, by the next row
  std::fclose(file_);
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot reopen '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zerotrain::monitor
