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

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/state_dict_writer.h"
#include "tools/command_line.h"
#include "tools/status_macros.h"

ABSL_FLAG(std::string, checkpoint_dir, "",
          "the directory holding `latest` and the tag directories (a run's\n"
          "<output_dir>/checkpoints), required");
ABSL_FLAG(std::string, tag, "", "the tag to read (default: the one <checkpoint_dir>/latest names)");
ABSL_FLAG(std::string, output, "", "the state dict to write, required");
ABSL_FLAG(bool, help, false, "print this help and exit");

namespace zerotrain::checkpoint {
namespace {

struct Flags {
  std::string checkpoint_dir, tag, output;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  ZT_RETURN_IF_ERROR(tools::ParseCommandLine(argc, argv));
  Flags f{absl::GetFlag(FLAGS_checkpoint_dir), absl::GetFlag(FLAGS_tag),
          absl::GetFlag(FLAGS_output)};
  for (const char* required : {"checkpoint_dir", "output"}) {
    if (!tools::FlagGiven(required) && !absl::GetFlag(FLAGS_help)) {
      return absl::InvalidArgumentError(absl::StrCat("--", required, " is required (see --help)"));
    }
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
    std::fprintf(stderr, "consolidate: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_help)) {
    std::printf("%s", zerotrain::tools::FlagsHelp(
                          "usage: consolidate --checkpoint_dir=DIR [--tag=TAG] --output=FILE\n"
                          "Writes one fp32 state dict (torch.save's format) from a zerotrain "
                          "checkpoint.\nEvery shard file is checked against the manifest "
                          "(identity and whole-file CRC32C)\nbefore anything is written.\n\n",
                          {"checkpoint/consolidate.cc"})
                          .c_str());
    return 0;
  }
  int64_t params = 0, bytes = 0;
  const absl::Status s = Consolidate(*flags, &params, &bytes);
  if (!s.ok()) {
    std::fprintf(stderr, "consolidate: %s\n", std::string(s.message()).c_str());
    // A checkpoint that is not there or not one is bad input, as a bad flag is.
    return absl::IsNotFound(s) || absl::IsInvalidArgument(s) ? 2 : 1;
  }
  std::printf("consolidate: %lld fp32 parameters (%lld bytes) written to %s\n",
              static_cast<long long>(params), static_cast<long long>(bytes), flags->output.c_str());
  return 0;
}
