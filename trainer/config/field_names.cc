// Nearest field names and section paths for config typos (see field_names.h).
#include "trainer/config/field_names.h"

#include <algorithm>
#include <deque>
#include <regex>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The dotted path from `root` to the first field whose message type is `type` ("" for root).
std::string PathTo(const Descriptor& root, const std::string& type) {
  if (root.full_name() == type) return "";
  std::deque<std::pair<const Descriptor*, std::string>> queue = {{&root, ""}};
  std::vector<const Descriptor*> seen = {&root};
  while (!queue.empty()) {
    auto [d, path] = queue.front();
    queue.pop_front();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* fd = d->field(i);
      const Descriptor* m = fd->message_type();
      if (m == nullptr || std::find(seen.begin(), seen.end(), m) != seen.end()) continue;
      const std::string here = path.empty() ? fd->name() : absl::StrCat(path, ".", fd->name());
      if (m->full_name() == type) return here;
      seen.push_back(m);
      queue.emplace_back(m, here);
    }
  }
  return "";
}

}  // namespace

std::string NearestName(const std::vector<std::string>& candidates, const std::string& name) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 4) + 1;  // further is another word
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (!best.empty() || name.size() < 4) return best;
  for (const std::string& candidate : candidates) {
    if (absl::StartsWith(candidate, name)) return candidate;  // a name cut short
  }
  return "";
}

std::string DidYouMean(const std::vector<std::string>& candidates, const std::string& name) {
  const std::string nearest = NearestName(candidates, name);
  return nearest.empty() ? "" : absl::StrCat(" (did you mean ", nearest, "?)");
}

std::string DidYouMean(const Descriptor& d, const std::string& name) {
  std::vector<std::string> fields;
  for (int i = 0; i < d.field_count(); ++i) fields.push_back(d.field(i)->name());
  return DidYouMean(fields, name);
}

std::string ExplainTextFormatError(const Descriptor& root, const std::string& error) {
  static const std::regex kUnknown("Message type \"([^\"]+)\" has no field named \"([^\"]+)\"\\.?");
  std::smatch m;
  if (!std::regex_search(error, m, kUnknown)) return error;
  const Descriptor* section = root.file()->pool()->FindMessageTypeByName(m[1].str());
  if (section == nullptr) return error;
  const std::string path = PathTo(root, m[1].str());
  const std::string field = m[2].str();
  return absl::StrCat(m.prefix().str(), path.empty() ? field : absl::StrCat(path, ".", field),
                      ": unknown field", DidYouMean(*section, field), m.suffix().str());
}

}  // namespace zerotrain::trainer
