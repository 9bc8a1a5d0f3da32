// zerotrain._C, the extension module under python/zerotrain/: the process group, the DeepSpeed
// configuration and the Engine. It holds no ZeRO logic of its own: a Python module's tensors become
// the Engine's ModelTensors, a ds_config goes through trainer/config exactly as //trainer:main
// reads it, and every call is the C++ Engine's, made with the GIL released (a Python autograd
// Function in the model takes the GIL back when backward reaches it).
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "comm/comm_log.h"
#include "python/engine_binding.h"
#include "python/loaded_config.h"
#include "python/status_error.h"
#include "tools/status_macros.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::python {
namespace {

namespace py = pybind11;

std::unique_ptr<comm::ProcessGroup> JoinGroup(const std::string& backend, double timeout_s,
                                              bool log_ops) {
  comm::GroupOptions options;
  const std::optional<comm::BackendKind> kind = comm::BackendNamed(backend);
  if (!kind.has_value()) {
    RaiseStatus(absl::InvalidArgumentError(
        absl::StrCat("init_distributed: dist_backend '", backend, "' is none of gloo, nccl, shm")));
  }
  options.backend = *kind;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  options.log_ops = log_ops;
  py::gil_scoped_release release;
  absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> group =
      [&]() -> absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> {
    ZT_ASSIGN_OR_RETURN(comm::RendezvousInfo info, comm::RendezvousFromEnv());
    return comm::ProcessGroup::Create(info, options);
  }();
  py::gil_scoped_acquire acquire;
  return Check(std::move(group));
}

}  // namespace

LoadedConfig LoadConfig(const std::string& path, const std::optional<std::string>& json_text,
                        int world_size) {
  LoadedConfig out;
  trainer::ConfigSources sources;
  sources.ds_json_path = path;
  sources.ds_json_text = json_text;
  TrainerConfigProto proto = Check(trainer::LoadConfigProto(sources, &out.warnings));
  out.config = Check(trainer::ValidateConfig(proto, world_size, &out.warnings));
  return out;
}

}  // namespace zerotrain::python

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace zerotrain;          // NOLINT: the bindings name many of its types
  using namespace zerotrain::python;  // NOLINT
  m.doc() = "zerotrain's C++ engine (use the zerotrain package, not this module)";
  m.attr("TORCH_VERSION") = ZT_TORCH_VERSION;

  py::class_<comm::ProcessGroup>(m, "ProcessGroup")
      .def_property_readonly("rank", &comm::ProcessGroup::rank)
      .def_property_readonly("world_size", &comm::ProcessGroup::world_size)
      // The config's comms_logger (verbose, prof_all, prof_ops), as //trainer:main reports it.
      .def("print_each_op",
           [](comm::ProcessGroup& g, const LoadedConfig& c) {
             comm::PrintEachOp(c.config.comms_logger, g.log());
           })
      .def("comms_report", [](comm::ProcessGroup& g, const LoadedConfig& c) {
        return comm::Report(c.config.comms_logger, g.log());
      });
  m.def("join_group", &JoinGroup, py::arg("backend"), py::arg("timeout_s"), py::arg("log_ops"),
        "The torchrun/mpirun/srun variables' rendezvous; collective.");

  py::class_<LoadedConfig>(m, "Config")
      .def_property_readonly("warnings", [](const LoadedConfig& c) { return c.warnings; })
      .def_property_readonly("stage", [](const LoadedConfig& c) { return c.config.engine.stage; })
      .def_property_readonly("train_batch_size",
                             [](const LoadedConfig& c) { return c.config.batch.train_batch_size; })
      .def_property_readonly("micro_batch_size",
                             [](const LoadedConfig& c) { return c.config.batch.micro_batch_size; })
      .def_property_readonly(
          "gradient_accumulation_steps",
          [](const LoadedConfig& c) { return c.config.batch.gradient_accumulation_steps; })
      .def_property_readonly(
          "precision",
          [](const LoadedConfig& c) { return engine::PrecisionName(c.config.engine.precision); })
      .def_property_readonly(
          "gradient_clipping",
          [](const LoadedConfig& c) { return c.config.engine.gradient_clipping; })
      .def_property_readonly(
          "has_scheduler",
          [](const LoadedConfig& c) {
            return !std::holds_alternative<std::monostate>(c.config.engine.lr_schedule);
          })
      .def_property_readonly("comms_logger",
                             [](const LoadedConfig& c) { return c.config.comms_logger.enabled; })
      .def_property_readonly("comm_timeout_s",
                             [](const LoadedConfig& c) { return c.config.run.comm_timeout_s; })
      .def_property_readonly("effective", [](const LoadedConfig& c) {
        return trainer::PrintConfig(c.config.effective);
      });
  m.def("load_config", &LoadConfig, py::arg("path"), py::arg("json_text"), py::arg("world_size"),
        "A ds_config file, or (json_text set) a dict's JSON that errors call `path`.");

  BindEngine(m);
}
