// The command line of //trainer:main: which config to load, what to do with it (train, print it,
// estimate memory, generate from the model, export it) and how to place the ranks (launcher flags,
// as torchrun spells them).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zerotrain::trainer {

struct MainFlags {
  std::string config;     // --config=run.pbtxt
  std::string ds_config;  // --ds_config=ds_config.json
  bool print_config = false;
  bool estimate_memory = false;
  bool memory_summary = false;
  bool help = false;
  // Launcher; nproc_per_node 0 = the default (2 local ranks) unless a job's variables are set.
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port on one node, 29500 across nodes (comm::LaunchOptions)
  // DeepSpeed's launcher appends --local_rank=N to each rank's arguments; -1 = not given.
  int local_rank = -1;
  // Advisor inputs (--estimate_memory); 0 = take them from the config's model.
  std::string params;  // counts like 1.3B or 125M
  std::string largest_layer_params;
  int gpus_per_node = 0;  // 0 = nproc_per_node (default 2)
  double device_memory_gib = 80;
  double host_memory_gib = 0;  // 0 = not checked
  // Single-process model modes (model_tool.h): --generate and --export_hf=DIR.
  std::string export_hf;
  bool generate = false;
  std::string prompt, prompt_tokens;
  int max_new_tokens = 100;
  double temperature = 0;  // 0 = greedy
  int top_k = 0;
  int seed = 1234;
  // The flags each rank is started with: the config flags, never the launcher's.
  std::vector<std::string> rank_args;
};

// Parses through Abseil's flags (tools/command_line.h): --name=value and --name value. An
// unknown flag, a bad value or a pair that cannot go together (--prompt without --generate,
// --generate with --export_hf, --print_config with either, --params without
// --largest_layer_params) is an InvalidArgument naming them. Call once per process at a time:
// the flags are global.
absl::StatusOr<MainFlags> ParseMainFlags(int argc, const char* const* argv);

// --help, generated from the flags' own help strings.
std::string MainUsage();

}  // namespace zerotrain::trainer
