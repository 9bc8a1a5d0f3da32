// Parsing of //trainer:main's flags (see main_flags.h).
#include "trainer/main_flags.h"

#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerotrain::trainer {

const char kMainUsage[] = R"(usage: bazel run //trainer:main -- [flags]

With no flags: trains the default GPT (trainer/configs/default.pbtxt) on 2 local ranks.

  --config=FILE          run config, protobuf text (trainer/config.proto; docs/CONFIG.md)
  --ds_config=FILE       DeepSpeed ds_config.json (its sections override nothing in --config:
                         a field set in both is an error)
  --print_config         print the effective config as protobuf text and exit
  --memory_summary       print each rank's memory at the end of the run
  --estimate_memory      print model-state memory per device for ZeRO stages 0-3 with and
                         without offload, and a recommendation; then exit. Takes the model from
                         the config, or --params=1.3B and --largest_layer_params=50M, with
                         --gpus_per_node (default: nproc_per_node), --nnodes,
                         --device_memory_gib (default 80), --host_memory_gib (0: unchecked)
  --nproc_per_node=N     ranks on this node (default 2; under torchrun, mpirun or Slurm the
                         job's variables place this process instead)
  --nnodes=N --node_rank=K --master_addr=HOST --master_port=PORT   multi-node placement
                         (--master_port: the rendezvous port; default a free one on one node,
                         29500 across nodes)
  --local_rank=N         as DeepSpeed's launcher passes it to each rank: must equal LOCAL_RANK
  --generate             load the model (model.init_from, or the zerotrain checkpoint
                         run.resume_from names), continue a prompt and print it; then exit.
                         --prompt=TEXT (through data.tokenizer; without one, a token per
                         byte) or --prompt_tokens=ID,ID,...,
                         --max_new_tokens (100), --temperature (0: greedy), --top_k (0: all),
                         --seed (1234)
  --export_hf=DIR        load the model as --generate does and write it as a Hugging Face
                         checkpoint (safetensors + config.json); then exit
)";

namespace {

using Setter = std::function<bool(const std::string&)>;

Setter Int(int* out) {
  return [out](const std::string& v) { return absl::SimpleAtoi(v, out); };
}
Setter PositiveInt(int* out) {
  return [out](const std::string& v) { return absl::SimpleAtoi(v, out) && *out > 0; };
}
Setter Double(double* out) {
  return [out](const std::string& v) { return absl::SimpleAtod(v, out); };
}
Setter String(std::string* out) {
  return [out](const std::string& v) {
    *out = v;
    return !v.empty();
  };
}
Setter Bool(bool* out) {
  return [out](const std::string& v) { return absl::SimpleAtob(v.empty() ? "true" : v, out); };
}

}  // namespace

absl::StatusOr<MainFlags> ParseMainFlags(int argc, const char* const* argv) {
  MainFlags f;
  // Flags a rank needs too; the rest only matter to the process that launches or advises.
  const std::map<std::string, Setter> for_ranks = {
      {"config", String(&f.config)},
      {"ds_config", String(&f.ds_config)},
      {"memory_summary", Bool(&f.memory_summary)},
  };
  const std::map<std::string, Setter> local = {
      {"print_config", Bool(&f.print_config)},
      {"estimate_memory", Bool(&f.estimate_memory)},
      {"help", Bool(&f.help)},
      {"nproc_per_node", PositiveInt(&f.nproc_per_node)},
      {"nnodes", PositiveInt(&f.nnodes)},
      {"node_rank", Int(&f.node_rank)},
      {"master_addr", String(&f.master_addr)},
      {"master_port", Int(&f.master_port)},
      {"params", String(&f.params)},
      {"largest_layer_params", String(&f.largest_layer_params)},
      {"gpus_per_node", Int(&f.gpus_per_node)},
      {"device_memory_gib", Double(&f.device_memory_gib)},
      {"host_memory_gib", Double(&f.host_memory_gib)},
      {"export_hf", String(&f.export_hf)},
      {"generate", Bool(&f.generate)},
      {"prompt", String(&f.prompt)},
      {"prompt_tokens", String(&f.prompt_tokens)},
      {"max_new_tokens", Int(&f.max_new_tokens)},
      {"temperature", Double(&f.temperature)},
      {"top_k", Int(&f.top_k)},
      {"seed", Int(&f.seed)},
      {"local_rank",
       [&f](const std::string& v) {
         return absl::SimpleAtoi(v, &f.local_rank) && f.local_rank >= 0;
       }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags are --name=value; see --help)"));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    const auto r = for_ranks.find(name);
    const auto l = local.find(name);
    const Setter* set = r != for_ranks.end() ? &r->second : l != local.end() ? &l->second : nullptr;
    if (set == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!(*set)(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " has a bad value '", value, "'"));
    }
    if (r != for_ranks.end()) f.rank_args.push_back(arg);
  }
  return f;
}

}  // namespace zerotrain::trainer
