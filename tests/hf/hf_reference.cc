// Running tests/hf's Python scripts in the project venv (hf_reference.h).
#include "tests/hf/hf_reference.h"

#include "absl/strings/ascii.h"
#include "hf/safetensors.h"
#include "tests/deepspeed/oracle.h"
#include "tools/status_macros.h"

namespace zerotrain::testing {

absl::StatusOr<std::string> HfModelsDir() {
  static const absl::StatusOr<std::string>* dir = [] {
    const std::string d = OracleTempDir("hf_models");
    absl::StatusOr<std::string> out = RunOracle("tests/hf/make_models.py", {d});
    return new absl::StatusOr<std::string>(out.ok() ? absl::StatusOr<std::string>(d)
                                                    : out.status());
  }();
  return *dir;
}

absl::StatusOr<at::Tensor> ReadTensor(const std::string& file, const std::string& name) {
  ZT_ASSIGN_OR_RETURN(const hf::SafetensorsHeader header, hf::ReadSafetensorsHeader(file));
  return hf::ReadSafetensorsTensor(header, name);
}

absl::StatusOr<at::Tensor> HfExpected(const std::string& name) {
  ZT_ASSIGN_OR_RETURN(const std::string dir, HfModelsDir());
  return ReadTensor(dir + "/expected.safetensors", name);
}

absl::StatusOr<HfRun> RunExportedInTransformers(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(const std::string models, HfModelsDir());
  const std::string out = dir + ".logits.safetensors";
  ZT_ASSIGN_OR_RETURN(
      const std::string printed,
      RunOracle("tests/hf/run_exported.py", {dir, models + "/expected.safetensors", out}));
  HfRun run;
  run.model_class = std::string(absl::StripAsciiWhitespace(printed));
  ZT_ASSIGN_OR_RETURN(run.logits, ReadTensor(out, "logits"));
  return run;
}

}  // namespace zerotrain::testing
