// //trainer:main's flags, declared with Abseil's flags library, and the checks between them (see
// main_flags.h). --help is generated from the help strings here.
#include "trainer/main_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "tools/command_line.h"

ABSL_FLAG(std::string, config, "",
          "run config, protobuf text (trainer/config/config.proto; docs/CONFIG.md); without it\n"
          "and --ds_config, the default GPT (trainer/configs/default.pbtxt)");
ABSL_FLAG(std::string, ds_config, "",
          "DeepSpeed ds_config.json (a field set in both it and --config is an error)");
ABSL_FLAG(bool, print_config, false, "print the effective config as protobuf text and exit");
ABSL_FLAG(bool, memory_summary, false, "print each rank's memory at the end of the run");
ABSL_FLAG(bool, estimate_memory, false,
          "print model-state memory per device for ZeRO stages 0-3 with and without offload, and\n"
          "a recommendation; then exit. The model is the config's, or --params with\n"
          "--largest_layer_params (both required together, as the advisor binary requires them)");
ABSL_FLAG(bool, help, false, "print this help and exit");
ABSL_FLAG(int, nproc_per_node, 0,
          "ranks on this node (0: 2; under torchrun, mpirun or Slurm the job's variables place\n"
          "this process instead)");
ABSL_FLAG(int, nnodes, 1, "nodes in a multi-node job started with this launcher");
ABSL_FLAG(int, node_rank, 0, "this node's index in [0, nnodes)");
ABSL_FLAG(std::string, master_addr, "127.0.0.1", "the address of node 0, which hosts the store");
ABSL_FLAG(int, master_port, 0,
          "the rendezvous port (0: a free one on one node, 29500 across nodes)");
ABSL_FLAG(int, local_rank, -1,
          "as DeepSpeed's launcher passes it to each rank: must equal LOCAL_RANK (-1: not given)");
ABSL_FLAG(std::string, params, "",
          "--estimate_memory: the model's parameter count (1.3B, 125M, 13e9)");
ABSL_FLAG(std::string, largest_layer_params, "",
          "--estimate_memory: the largest layer's parameter count, with --params");
ABSL_FLAG(int, gpus_per_node, 0, "--estimate_memory: devices per node (0: nproc_per_node)");
ABSL_FLAG(double, device_memory_gib, 80, "--estimate_memory: memory per device, GiB");
ABSL_FLAG(double, host_memory_gib, 0,
          "--estimate_memory: host memory per node, GiB (0: unchecked)");
ABSL_FLAG(std::string, export_hf, "",
          "load the model as --generate does and write it to this directory as a Hugging Face\n"
          "checkpoint (safetensors + config.json); then exit");
ABSL_FLAG(bool, generate, false,
          "load the model (model.init_from, or the zerotrain checkpoint run.resume_from names),\n"
          "continue --prompt or --prompt_tokens and print it; then exit");
ABSL_FLAG(std::string, prompt, "",
          "--generate: the text to continue (through data.tokenizer; without one, a token per "
          "byte)");
ABSL_FLAG(std::string, prompt_tokens, "", "--generate: the token ids to continue, ID,ID,...");
ABSL_FLAG(int, max_new_tokens, 100, "--generate: tokens to add");
ABSL_FLAG(double, temperature, 0, "--generate: sampling temperature (0: greedy)");
ABSL_FLAG(int, top_k, 0, "--generate: sample among the k likeliest tokens (0: all)");
ABSL_FLAG(int, seed, 1234, "--generate: the sampling seed");

namespace zerotrain::trainer {
namespace {

// The flags a rank needs too; the rest only matter to the process that launches or advises.
constexpr const char* kForRanks[] = {"config", "ds_config", "memory_summary"};

absl::Status Refuse(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(why, " (see --help)"));
}

// Pairs that cannot mean anything together, and values out of range: refused, never ignored.
absl::Status CheckTogether(const MainFlags& f) {
  using tools::FlagGiven;
  for (const char* g :
       {"prompt", "prompt_tokens", "max_new_tokens", "temperature", "top_k", "seed"}) {
    if (FlagGiven(g) && !f.generate) return Refuse(absl::StrCat("--", g, " needs --generate"));
  }
  if (f.generate && !f.export_hf.empty()) {
    return Refuse("--generate and --export_hf are two runs: give one of them");
  }
  if (f.print_config && (f.generate || !f.export_hf.empty() || f.estimate_memory)) {
    return Refuse("--print_config prints the config and exits: give it alone");
  }
  if (f.estimate_memory && (f.generate || !f.export_hf.empty())) {
    return Refuse("--estimate_memory prints an estimate and exits: give it alone");
  }
  if (FlagGiven("params") != FlagGiven("largest_layer_params")) {
    return Refuse(
        "--params and --largest_layer_params go together (the largest layer sets the "
        "gathered-parameter and offload-buffer terms; without both, the config's model is used)");
  }
  for (const char* g : {"params", "largest_layer_params", "gpus_per_node", "device_memory_gib",
                        "host_memory_gib"}) {
    if (FlagGiven(g) && !f.estimate_memory) {
      return Refuse(absl::StrCat("--", g, " needs --estimate_memory"));
    }
  }
  if (f.nproc_per_node < 0) return Refuse("--nproc_per_node must be at least 1");
  if (FlagGiven("nproc_per_node") && f.nproc_per_node == 0) {
    return Refuse("--nproc_per_node=0: must be at least 1");
  }
  if (f.nnodes < 1) return Refuse(absl::StrCat("--nnodes=", f.nnodes, ": must be at least 1"));
  if (f.local_rank < -1) return Refuse(absl::StrCat("--local_rank=", f.local_rank, ": negative"));
  return absl::OkStatus();
}

}  // namespace

std::string MainUsage() {
  return tools::FlagsHelp(
      "usage: bazel run //trainer:main -- [flags]   (--name=value or --name value)\n\n"
      "With no flags: trains the default GPT (trainer/configs/default.pbtxt) on 2 local ranks.\n\n",
      {"trainer/main_flags.cc"});
}

absl::StatusOr<MainFlags> ParseMainFlags(int argc, const char* const* argv) {
  if (absl::Status s = tools::ParseCommandLine(argc, argv); !s.ok()) return s;
  MainFlags f;
  f.config = absl::GetFlag(FLAGS_config);
  f.ds_config = absl::GetFlag(FLAGS_ds_config);
  f.print_config = absl::GetFlag(FLAGS_print_config);
  f.estimate_memory = absl::GetFlag(FLAGS_estimate_memory);
  f.memory_summary = absl::GetFlag(FLAGS_memory_summary);
  f.help = absl::GetFlag(FLAGS_help);
  f.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  f.nnodes = absl::GetFlag(FLAGS_nnodes);
  f.node_rank = absl::GetFlag(FLAGS_node_rank);
  f.master_addr = absl::GetFlag(FLAGS_master_addr);
  f.master_port = absl::GetFlag(FLAGS_master_port);
  f.local_rank = absl::GetFlag(FLAGS_local_rank);
  f.params = absl::GetFlag(FLAGS_params);
  f.largest_layer_params = absl::GetFlag(FLAGS_largest_layer_params);
  f.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  f.device_memory_gib = absl::GetFlag(FLAGS_device_memory_gib);
  f.host_memory_gib = absl::GetFlag(FLAGS_host_memory_gib);
  f.export_hf = absl::GetFlag(FLAGS_export_hf);
  f.generate = absl::GetFlag(FLAGS_generate);
  f.prompt = absl::GetFlag(FLAGS_prompt);
  f.prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  f.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  f.temperature = absl::GetFlag(FLAGS_temperature);
  f.top_k = absl::GetFlag(FLAGS_top_k);
  f.seed = absl::GetFlag(FLAGS_seed);
  if (f.help) return f;
  if (absl::Status s = CheckTogether(f); !s.ok()) return s;
  for (const std::string& given : tools::GivenFlags()) {
    for (const char* name : kForRanks) {
      if (given.rfind(absl::StrCat("--", name, "="), 0) == 0) f.rank_args.push_back(given);
    }
  }
  return f;
}

}  // namespace zerotrain::trainer
