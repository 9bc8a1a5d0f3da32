// Flag parsing for the advisor binary: a small table of flag name -> setter.
#include "trainer/advisor/advisor_flags.h"

#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/status_macros.h"

namespace zerotrain::advisor {
namespace {

absl::Status BadValue(const std::string& flag, const std::string& text, const char* want) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text, "' is not ", want));
}

absl::StatusOr<double> ParseDouble(const std::string& flag, const std::string& text) {
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return BadValue(flag, text, "a number");
  return v;
}

absl::StatusOr<bool> ParseBool(const std::string& flag, const std::string& text) {
  bool v = false;
  if (!absl::SimpleAtob(text, &v)) return BadValue(flag, text, "true or false");
  return v;
}

}  // namespace

absl::StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& text) {
  std::string number = text;
  double scale = 1;
  if (!number.empty()) {
    switch (absl::ascii_toupper(number.back())) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) number.pop_back();
  }
  double v = 0;
  if (!absl::SimpleAtod(number, &v) || !std::isfinite(v) || v < 0 || v * scale > 9e18) {
    return BadValue(flag, text, "a count >= 0 (e.g. 125M, 1.3B, 13e9)");
  }
  return static_cast<int64_t>(std::llround(v * scale));
}

absl::StatusOr<AdvisorInput> ParseAdvisorFlags(const std::vector<std::string>& args) {
  AdvisorInput in;
  bool have_params = false, have_layer = false, have_device = false;
  using Setter = std::function<absl::Status(const std::string& flag, const std::string& value)>;
  auto count = [](int64_t* field, bool* seen = nullptr) -> Setter {
    return [field, seen](const std::string& f, const std::string& v) -> absl::Status {
      ZT_ASSIGN_OR_RETURN(*field, ParseCount(f, v));
      if (seen) *seen = true;
      return absl::OkStatus();
    };
  };
  auto real = [](double* field, bool* seen = nullptr) -> Setter {
    return [field, seen](const std::string& f, const std::string& v) -> absl::Status {
      ZT_ASSIGN_OR_RETURN(*field, ParseDouble(f, v));
      if (seen) *seen = true;
      return absl::OkStatus();
    };
  };
  auto boolean = [](bool* field) -> Setter {
    return [field](const std::string& f, const std::string& v) -> absl::Status {
      ZT_ASSIGN_OR_RETURN(*field, ParseBool(f, v));
      return absl::OkStatus();
    };
  };
  const std::map<std::string, Setter> setters = {
      {"params", count(&in.total_params, &have_params)},
      {"largest_layer_params", count(&in.largest_layer_params, &have_layer)},
      {"gpus_per_node", count(&in.gpus_per_node)},
      {"nodes", count(&in.nodes)},
      {"device_memory_gib", real(&in.device_memory_gib, &have_device)},
      {"host_memory_gib", real(&in.host_memory_gib)},
      {"activation_fraction", real(&in.activation_fraction)},
      {"additional_buffer_factor", real(&in.additional_buffer_factor)},
      {"prefer_larger_batches", boolean(&in.prefer_larger_batches)},
      {"zero_init", boolean(&in.zero_init)},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg = arg.substr(2);
    std::string name = arg, value;
    const size_t eq = arg.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    auto it = setters.find(name);
    if (it == setters.end())
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    const bool is_bool = name == "prefer_larger_batches" || name == "zero_init";
    if (!inline_value) {
      if (is_bool) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
    }
    ZT_RETURN_IF_ERROR(it->second(name, value));
  }
  if (!have_params) return absl::InvalidArgumentError("--params: required");
  if (!have_layer) return absl::InvalidArgumentError("--largest_layer_params: required");
  if (!have_device) return absl::InvalidArgumentError("--device_memory_gib: required");
  ZT_RETURN_IF_ERROR(ValidateAdvisorInput(in));
  return in;
}

std::string AdvisorUsage() {
  return "usage: advisor --params=N --largest_layer_params=N --device_memory_gib=G\n"
         "               [--gpus_per_node=1] [--nodes=1] [--host_memory_gib=0 (unknown)]\n"
         "               [--activation_fraction=0.25] [--prefer_larger_batches]\n"
         "               [--additional_buffer_factor=1.5] [--zero_init=true]\n"
         "Counts take K/M/B/T suffixes (1.3B). Prints model-state memory per device and per host\n"
         "for ZeRO stages 0-3 with and without offload, and the configuration to use.\n";
}

}  // namespace zerotrain::advisor
