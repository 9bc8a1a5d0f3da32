// tensorboard, csv_monitor, comms_logger and aio (config_validate_sections.h).
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/config/config_validate_sections.h"

namespace zerotrain::trainer {
namespace {

// DeepSpeed's comm function names → the comm layer's (comm/types.h CollectiveName).
const std::map<std::string, std::string>& OpNames() {
  static const auto* names = new std::map<std::string, std::string>{
      {"all_reduce", "all_reduce"},
      {"reduce_scatter", "reduce_scatter"},
      {"reduce_scatter_tensor", "reduce_scatter"},
      {"reduce_scatter_fn", "reduce_scatter"},
      {"all_gather", "all_gather"},
      {"all_gather_into_tensor", "all_gather"},
      {"allgather_fn", "all_gather"},
      {"all_to_all", "all_to_all"},
      {"all_to_all_single", "all_to_all"},
      {"broadcast", "broadcast"},
      {"barrier", "barrier"},
  };
  return *names;
}

absl::Status CommsFromConfig(const CommsLoggerConfig& c, CommsLoggerOptions* out,
                             CommsLoggerConfig* effective) {
  out->enabled = c.enabled();
  out->verbose = c.verbose();
  out->prof_all = c.prof_all();
  out->debug = c.debug();
  effective->clear_prof_ops();
  for (int i = 0; i < c.prof_ops_size(); ++i) {
    auto it = OpNames().find(c.prof_ops(i));
    if (it == OpNames().end()) {
      std::vector<std::string> known;
      for (const auto& [name, unused] : OpNames()) known.push_back(name);
      return absl::InvalidArgumentError(absl::StrCat(
          "comms_logger.prof_ops[", i, "] = \"", c.prof_ops(i),
          "\": not a collective zerotrain logs (known: ", absl::StrJoin(known, ", "), ")"));
    }
    out->prof_ops.push_back(it->second);
    effective->add_prof_ops(it->second);
  }
  return absl::OkStatus();
}

// aio → EngineOptions::offload_optimizer.aio, checked against what AsyncFileIO accepts (the swap
// I/O of offload_optimizer.device "nvme"); checked whatever the device, as a bad value is still a
// mistake.
absl::Status AioFromConfig(const AioConfig& a, engine::AioOptions* out) {
  const std::pair<int64_t, const char*> sizes[] = {
      {a.block_size(), "aio.block_size"},
      {a.queue_depth(), "aio.queue_depth"},
      {a.intra_op_parallelism(), "aio.intra_op_parallelism"},
  };
  for (const auto& [value, name] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " = ", value, ": must be positive"));
    }
  }
  if (a.block_size() % engine::kIoAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("aio.block_size = ", a.block_size(),
                                                   ": must be a multiple of ", engine::kIoAlignment,
                                                   " bytes (the O_DIRECT unit)"));
  }
  if (a.queue_depth() > 1024 || a.intra_op_parallelism() > 1024 ||
      a.queue_depth() * a.intra_op_parallelism() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("aio.queue_depth x aio.intra_op_parallelism = ", a.queue_depth(), " x ",
                     a.intra_op_parallelism(), ": at most 1024 transfers in flight"));
  }
  out->block_size = a.block_size();
  out->queue_depth = static_cast<int>(a.queue_depth());
  out->thread_count = static_cast<int>(a.intra_op_parallelism());
  return absl::OkStatus();
}

}  // namespace

absl::Status MonitorsFromConfig(const TrainerConfigProto& c, TrainerConfig* out,
                                std::vector<std::string>* warnings) {
  const std::string& dir = c.run().output_dir();
  monitor::MetricsOptions& m = out->metrics;
  m.tensorboard = c.tensorboard().enabled();
  m.tensorboard_output_path =
      c.tensorboard().output_path().empty() ? dir : c.tensorboard().output_path();
  m.csv = c.csv_monitor().enabled();
  m.csv_output_path = c.csv_monitor().output_path().empty() ? dir : c.csv_monitor().output_path();
  // MetricsOptions has one job name: tensorboard's when it is on, else csv_monitor's.
  m.job_name = m.tensorboard || !m.csv ? c.tensorboard().job_name() : c.csv_monitor().job_name();
  if (m.tensorboard && m.csv && c.tensorboard().job_name() != c.csv_monitor().job_name()) {
    warnings->push_back(absl::StrCat("csv_monitor.job_name = \"", c.csv_monitor().job_name(),
                                     "\": both monitors use tensorboard.job_name \"", m.job_name,
                                     "\""));
  }
  if (m.job_name.empty()) {
    return absl::InvalidArgumentError("tensorboard.job_name = \"\": must not be empty");
  }
  out->effective.mutable_tensorboard()->set_output_path(m.tensorboard_output_path);
  out->effective.mutable_csv_monitor()->set_output_path(m.csv_output_path);
  if (absl::Status s = CommsFromConfig(c.comms_logger(), &out->comms_logger,
                                       out->effective.mutable_comms_logger());
      !s.ok()) {
    return s;
  }
  const absl::Status aio = AioFromConfig(c.aio(), &out->engine.offload_optimizer.aio);
  out->engine.offload_param.aio = out->engine.offload_optimizer.aio;
  return aio;
}

}  // namespace zerotrain::trainer
