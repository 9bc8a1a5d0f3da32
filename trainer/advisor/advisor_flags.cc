// The advisor binary's flags, declared with Abseil's flags library (see advisor_flags.h); --help
// is generated from the help strings here. Only //trainer/advisor:advisor links them:
// //trainer:main has its own --params and friends for --estimate_memory.
#include "trainer/advisor/advisor_flags.h"

#include <cmath>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "tools/command_line.h"
#include "tools/status_macros.h"
#include "trainer/advisor/parse_count.h"

ABSL_FLAG(std::string, params, "", "the model's parameter count, required (1.3B, 125M, 13e9)");
ABSL_FLAG(std::string, largest_layer_params, "",
          "the largest layer's parameter count, required (it sets the gathered-parameter and\n"
          "offload-buffer terms)");
ABSL_FLAG(double, device_memory_gib, 0, "memory per device, GiB, required");
ABSL_FLAG(std::string, gpus_per_node, "1", "devices per node");
ABSL_FLAG(std::string, nodes, "1", "nodes");
ABSL_FLAG(double, host_memory_gib, 0, "host memory per node, GiB (0: not checked)");
ABSL_FLAG(double, activation_fraction, 0.25, "the share of device memory kept for activations");
ABSL_FLAG(double, additional_buffer_factor, 1.5, "DeepSpeed's margin on offloaded host memory");
ABSL_FLAG(bool, prefer_larger_batches, false,
          "recommend the stage that leaves the most memory for activations");
ABSL_FLAG(bool, zero_init, true, "parameters partitioned as the model is built (zero.Init)");
ABSL_FLAG(bool, bf16_master_weights, false,
          "bf16 master weights and gradients (DeepSpeed's bf16_master_weights_and_grads)");
ABSL_FLAG(int32_t, zero_hpz_partition_size, 1,
          "ZeRO++ hpZ: stage 3 keeps a secondary copy of the parameters sharded over this many "
          "devices (a node); 0 or 1 = off");
ABSL_FLAG(bool, bf16_optimizer_states, false,
          "bf16 optimizer states too (needs --bf16_master_weights)");
ABSL_FLAG(bool, help, false, "print this help and exit");

namespace zerotrain::advisor {
namespace {

absl::Status Required(const char* name) {
  return absl::InvalidArgumentError(absl::StrCat("--", name, ": required (see --help)"));
}

}  // namespace

absl::StatusOr<AdvisorInput> ParseAdvisorFlags(const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"advisor"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  ZT_RETURN_IF_ERROR(tools::ParseCommandLine(static_cast<int>(argv.size()), argv.data()));
  AdvisorInput in;
  if (absl::GetFlag(FLAGS_help)) return in;
  if (!tools::FlagGiven("params")) return Required("params");
  if (!tools::FlagGiven("largest_layer_params")) return Required("largest_layer_params");
  if (!tools::FlagGiven("device_memory_gib")) return Required("device_memory_gib");
  ZT_ASSIGN_OR_RETURN(in.total_params, ParseCount("params", absl::GetFlag(FLAGS_params)));
  ZT_ASSIGN_OR_RETURN(
      in.largest_layer_params,
      ParseCount("largest_layer_params", absl::GetFlag(FLAGS_largest_layer_params)));
  ZT_ASSIGN_OR_RETURN(in.gpus_per_node,
                      ParseCount("gpus_per_node", absl::GetFlag(FLAGS_gpus_per_node)));
  ZT_ASSIGN_OR_RETURN(in.nodes, ParseCount("nodes", absl::GetFlag(FLAGS_nodes)));
  in.device_memory_gib = absl::GetFlag(FLAGS_device_memory_gib);
  in.host_memory_gib = absl::GetFlag(FLAGS_host_memory_gib);
  in.activation_fraction = absl::GetFlag(FLAGS_activation_fraction);
  in.additional_buffer_factor = absl::GetFlag(FLAGS_additional_buffer_factor);
  in.prefer_larger_batches = absl::GetFlag(FLAGS_prefer_larger_batches);
  in.zero_init = absl::GetFlag(FLAGS_zero_init);
  in.bf16_master_weights = absl::GetFlag(FLAGS_bf16_master_weights);
  in.bf16_optimizer_states = absl::GetFlag(FLAGS_bf16_optimizer_states);
  in.zero_hpz_partition_size = absl::GetFlag(FLAGS_zero_hpz_partition_size);
  ZT_RETURN_IF_ERROR(ValidateAdvisorInput(in));
  return in;
}

bool AdvisorHelpRequested() { return absl::GetFlag(FLAGS_help); }

std::string AdvisorUsage() {
  return tools::FlagsHelp(
      "usage: advisor --params=N --largest_layer_params=N --device_memory_gib=G [flags]\n"
      "Prints model-state memory per device and per host for ZeRO stages 0-3 with and without\n"
      "offload, and the configuration to use. Counts take K/M/B/T suffixes (1.3B).\n\n",
      {"trainer/advisor/advisor_flags.cc"});
}

}  // namespace zerotrain::advisor
