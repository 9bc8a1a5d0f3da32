// ParseCommandLine and FlagsHelp over Abseil's flag registry (see command_line.h).
#include "tools/command_line.h"

#include <algorithm>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zerotrain::tools {
namespace {

struct Given {
  std::vector<std::string> order;  // "--name=value"
  std::map<std::string, bool> names;
};

Given& LastGiven() {
  static auto* given = new Given();
  return *given;
}

bool IsBool(const absl::CommandLineFlag& flag) { return flag.IsOfType<bool>(); }

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " (see --help)"));
}

}  // namespace

absl::Status ParseCommandLine(int argc, const char* const* argv) {
  for (auto& [name, flag] : absl::GetAllFlags()) {
    std::string unused;
    flag->ParseFrom(flag->DefaultValue(), &unused);
  }
  Given given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return Bad(absl::StrCat("unexpected argument '", arg, "': flags are --name=value"));
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no") && eq == std::string::npos) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && IsBool(*positive)) {  // --noname: a boolean's false
        flag = positive;
        negated = true;
        name = name.substr(2);
      }
    }
    if (flag == nullptr) {
      return Bad(absl::StrCat("unknown flag --", name));
    }
    if (eq == std::string::npos) {
      if (IsBool(*flag)) {
        value = negated ? "false" : "true";
      } else if (i + 1 < argc && !absl::StartsWith(argv[i + 1], "--")) {
        value = argv[++i];
      } else {
        return Bad(absl::StrCat("flag --", name, " needs a value (--", name, "=VALUE)"));
      }
    }
    std::string error;
    if ((value.empty() && !IsBool(*flag)) || !flag->ParseFrom(value, &error)) {
      return Bad(absl::StrCat("flag --", name, " has a bad value '", value, "'",
                              error.empty() || value.empty() ? "" : absl::StrCat(": ", error)));
    }
    given.order.push_back(absl::StrCat("--", name, "=", value));
    given.names[name] = true;
  }
  LastGiven() = std::move(given);
  return absl::OkStatus();
}

bool FlagGiven(absl::string_view name) { return LastGiven().names.count(std::string(name)) > 0; }

std::vector<std::string> GivenFlags() { return LastGiven().order; }

std::string FlagsHelp(absl::string_view intro, const std::vector<std::string>& files) {
  std::map<std::string, const absl::CommandLineFlag*> ours;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    for (const std::string& file : files) {
      if (absl::EndsWith(flag->Filename(), file)) ours[std::string(name)] = flag;
    }
  }
  std::string out(intro);
  for (const auto& [name, flag] : ours) {
    const std::string def = flag->DefaultValue();
    absl::StrAppend(&out, "  --", name, def.empty() ? "" : absl::StrCat("=", def), "\n");
    for (absl::string_view line : absl::StrSplit(flag->Help(), '\n')) {
      absl::StrAppend(&out, "      ", line, "\n");
    }
  }
  return out;
}

}  // namespace zerotrain::tools
