// WriteJson (json_value.h): compact output byte-compatible with serde_json (the safetensors
// header) and indented output laid out as Python's json.dumps(indent=n) (HF's index files).
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/json_value.h"

namespace zerotrain::checkpoint {
namespace {

void WriteString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", static_cast<int>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// The shortest of %.15g..%.17g that reads back to `d` (17 digits always do), so 0.1 stays "0.1".
std::string FormatDouble(double d) {
  if (!std::isfinite(d)) return "null";
  std::string text;
  for (int precision = 15; precision <= 17; ++precision) {
    text = absl::StrFormat("%.*g", precision, d);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == d) break;
  }
  // A double that prints like an integer must not read back as one.
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

void NewLine(int indent, int level, std::string* out) {
  if (indent <= 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void WriteValue(const JsonValue& v, int indent, int level, std::string* out) {
  switch (v.kind()) {
    case JsonValue::Kind::kNull:
      *out += "null";
      return;
    case JsonValue::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return;
    case JsonValue::Kind::kNumber:
      *out += v.is_integer() ? absl::StrCat(v.int_value()) : FormatDouble(v.double_value());
      return;
    case JsonValue::Kind::kString:
      WriteString(v.string_value(), out);
      return;
    case JsonValue::Kind::kArray: {
      out->push_back('[');
      const JsonValue::Array& elements = v.array();
      for (size_t i = 0; i < elements.size(); ++i) {
        if (i > 0) out->push_back(',');
        NewLine(indent, level + 1, out);
        WriteValue(elements[i], indent, level + 1, out);
      }
      if (!elements.empty()) NewLine(indent, level, out);
      out->push_back(']');
      return;
    }
    case JsonValue::Kind::kObject: {
      out->push_back('{');
      const JsonValue::Object& members = v.object();
      for (size_t i = 0; i < members.size(); ++i) {
        if (i > 0) out->push_back(',');
        NewLine(indent, level + 1, out);
        WriteString(members[i].first, out);
        *out += indent > 0 ? ": " : ":";
        WriteValue(members[i].second, indent, level + 1, out);
      }
      if (!members.empty()) NewLine(indent, level, out);
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

std::string WriteJson(const JsonValue& value, int indent) {
  std::string out;
  WriteValue(value, indent, 0, &out);
  return out;
}

}  // namespace zerotrain::checkpoint
