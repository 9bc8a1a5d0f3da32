// //checkpoint:consolidate — zerotrain's zero_to_fp32: turns a sharded training-state checkpoint
// (any world size, any stage) into one fp32 state dict in torch.save's format, without starting
// any ranks. It streams parameter by parameter: memory stays near the largest parameter plus the
// shard reader's buffers.
//   bazel run //checkpoint:consolidate -- --checkpoint_dir=DIR [--tag=TAG] --output=model.pt
// (--help prints the usage).
// Python: torch.load("model.pt"); C++: torch::pickle_load(bytes).toGenericDict().
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/state_dict_writer.h"
#include "tools/status_macros.h"

namespace zerotrain::checkpoint {
namespace {

constexpr char kUsage[] =
    "usage: consolidate --checkpoint_dir=DIR [--tag=TAG] --output=FILE\n"
    "  Writes one fp32 state dict (torch.save's format) from a zerotrain checkpoint.\n"
    "  --checkpoint_dir  the directory holding `latest` and the tag directories\n"
    "  --tag             the tag to read (default: the one DIR/latest names)\n"
    "  --output          the state dict to write\n"
    "  Every shard file is checked against the manifest (identity and whole-file CRC32C)\n"
    "  before anything is written.\n";

struct Flags {
  std::string checkpoint_dir, tag, output;
  bool help = false;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq),
                      value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (name == "--help" || name == "-h") {
      f.help = true;
      return f;
    } else if (name == "--checkpoint_dir") {
      f.checkpoint_dir = value;
    } else if (name == "--tag") {
      f.tag = value;
    } else if (name == "--output") {
      f.output = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", a, "'"));
    }
  }
  if (f.checkpoint_dir.empty() || f.output.empty()) {
    return absl::InvalidArgumentError("--checkpoint_dir and --output are required");
  }
  return f;
}

absl::Status Consolidate(const Flags& f, int64_t* params, int64_t* bytes) {
  ZT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(f.checkpoint_dir, f.tag));
  // Whole files before any output: a file changed after the save is refused, not consolidated.
  ZT_RETURN_IF_ERROR(reader->VerifyFileChecksums());
  ZT_ASSIGN_OR_RETURN(auto writer, StateDictWriter::Open(f.output));
  // The engine lays parameters out in reverse registration order; the state dict keeps the
  // module's own order, as named_parameters() lists it.
  for (int i = reader->num_params() - 1; i >= 0; --i) {
    const ParameterEntry& p = reader->manifest().params(i);
    ZT_ASSIGN_OR_RETURN(std::vector<float> values, reader->ReadParam(i));
    ZT_RETURN_IF_ERROR(writer->Add(p.name(), {p.shape().begin(), p.shape().end()}, values.data()));
    *params += p.numel();
  }
  ZT_RETURN_IF_ERROR(writer->Finish());
  *bytes = writer->bytes_written();
  return absl::OkStatus();
}

}  // namespace
}  // namespace zerotrain::checkpoint

int main(int argc, char** argv) {
  using namespace zerotrain::checkpoint;
  auto flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "consolidate: %s\n%s", std::string(flags.status().message()).c_str(),
                 kUsage);
    return 2;
  }
  if (flags->help) {
    std::printf("%s", kUsage);
    return 0;
  }
  int64_t params = 0, bytes = 0;
  const absl::Status s = Consolidate(*flags, &params, &bytes);
  if (!s.ok()) {
    std::fprintf(stderr, "consolidate: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("consolidate: %lld fp32 parameters (%lld bytes) written to %s\n",
              static_cast<long long>(params), static_cast<long long>(bytes), flags->output.c_str());
  return 0;
}
