// The start-up configuration table (config_table.h).
#include "trainer/config/config_table.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

using Row = std::pair<std::string, std::string>;  // dotted name, value

void Collect(const Message& m, const std::string& prefix, std::vector<Row>* rows) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);  // the set ones: what --print_config writes
  for (const FieldDescriptor* fd : fields) {
    const std::string name = prefix + fd->name();
    if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!fd->is_repeated()) {
        Collect(r->GetMessage(m, fd), name + ".", rows);
        continue;
      }
      for (int i = 0; i < r->FieldSize(m, fd); ++i) {
        Collect(r->GetRepeatedMessage(m, fd, i), absl::StrCat(name, "[", i, "]."), rows);
      }
    } else {
      rows->emplace_back(name, FieldText(m, fd));
    }
  }
}

}  // namespace

std::string ConfigTable(const TrainerConfigProto& config) {
  TrainerConfigProto effective = config;
  FillDefaults(&effective);
  std::vector<Row> rows;
  Collect(effective, "", &rows);
  std::sort(rows.begin(), rows.end());
  size_t width = 0;
  for (const Row& row : rows) width = std::max(width, row.first.size());
  std::string out = "zerotrain configuration (effective):\n";
  for (const auto& [name, value] : rows) {
    // At least three dots, so the shortest name still leads the eye to its value.
    absl::StrAppend(&out, "  ", name, " ", std::string(width - name.size() + 3, '.'), " ", value,
                    "\n");
  }
  return out;
}

}  // namespace zerotrain::trainer
