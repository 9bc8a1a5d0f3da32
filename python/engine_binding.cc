// zerotrain._C.Engine (engine_binding.h). The Python side (zerotrain/engine.py) walks the module
// into (name, tensor, submodule) triples, frozen parameters and buffers, in the order ModelTensors
// asks.
#include "python/engine_binding.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/zero_init.h"
#include "python/loaded_config.h"
#include "python/status_error.h"
#include "python/step_monitor.h"

namespace zerotrain::python {
namespace {

namespace py = pybind11;
using Trainable = std::tuple<std::string, at::Tensor, int>;

class PyEngine {
 public:
  PyEngine(comm::ProcessGroup* group, const engine::EngineOptions& options,
           const std::vector<Trainable>& trainable, const std::vector<at::Tensor>& frozen,
           const std::vector<at::Tensor>& buffers, const monitor::MetricsOptions& metrics) {
    engine::ModelTensors model;
    for (const auto& [name, tensor, submodule] : trainable) {
      model.trainable.push_back({name, tensor, submodule});
    }
    model.frozen = frozen;
    model.buffers = buffers;
    absl::StatusOr<std::unique_ptr<engine::Engine>> made;
    {
      py::gil_scoped_release release;
      made = engine::Engine::Create(std::move(model), options, group);
    }
    engine_ = Check(std::move(made));
    absl::StatusOr<std::unique_ptr<StepMonitor>> monitor;
    {
      py::gil_scoped_release release;
      monitor = StepMonitor::Create(metrics, group, engine_.get(),
                                    options.precision == engine::Precision::kFloat16);
    }
    monitor_ = Check(std::move(monitor));
  }

  void BeginForward() {
    if (!scope_.has_value()) scope_.emplace(engine_->BeginForward());
  }
  void EndForward() { scope_.reset(); }

  void Backward(const at::Tensor& loss) {
    scope_.reset();  // a forward that raised may have left it open
    absl::Status s;
    {
      py::gil_scoped_release release;
      const auto start = std::chrono::steady_clock::now();
      s = engine_->Backward(loss);
      engine_seconds_ += SecondsSince(start);
    }
    Check(s);
    if (monitor_ != nullptr) monitor_->AddMicroLoss(loss.detach().item<double>());
  }

  void Step() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      const auto start = std::chrono::steady_clock::now();
      const bool boundary = engine_->at_accumulation_boundary();
      s = engine_->Step();
      if (s.ok() && boundary && monitor_ != nullptr) s = monitor_->AfterStep();
      engine_seconds_ += SecondsSince(start);
    }
    Check(s);
  }

  void Save(const std::string& dir, const std::string& tag,
            const std::map<std::string, std::string>& client_state) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = engine_->SaveCheckpoint(dir, tag, client_state);
    }
    Check(s);
  }

  std::map<std::string, std::string> Load(const std::string& dir, const std::string& tag) {
    absl::StatusOr<std::map<std::string, std::string>> client_state;
    {
      py::gil_scoped_release release;
      client_state = engine_->LoadCheckpoint(dir, tag);
    }
    return Check(std::move(client_state));
  }

  engine::Engine& engine() { return *engine_; }
  // Seconds the C++ engine (and the monitors) spent inside backward() and step() so far: what
  // Python's wall time of those calls adds to it is the binding's own cost.
  double engine_seconds() const { return engine_seconds_; }

 private:
  static double SecondsSince(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  double engine_seconds_ = 0;
  std::unique_ptr<engine::Engine> engine_;
  std::optional<engine::Engine::ForwardScope> scope_;
  std::unique_ptr<StepMonitor> monitor_;  // null when the config turns no monitor on
};

// zero.Init's C++ half: the parts cut as the model is built, adopted by the Engine made later.
class PyZeroInit {
 public:
  PyZeroInit(comm::ProcessGroup* group, const LoadedConfig& config)
      : options_(config.config.engine) {
    absl::StatusOr<std::unique_ptr<engine::ZeroInit>> made;
    {
      py::gil_scoped_release release;
      made = engine::ZeroInit::Create(group, &options_);
    }
    init_ = Check(std::move(made));
  }
  void PartitionOwn(const std::string& name, const std::vector<at::Tensor>& own) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = init_->PartitionOwn(name, own);
    }
    Check(s);
  }
  partition::ShardedInit* sharded_init() const { return options_.sharded_init; }

 private:
  engine::EngineOptions options_;  // its sharded_init points into init_
  std::unique_ptr<engine::ZeroInit> init_;
};

// GatheredParameters for a `with` block: Close is collective, so it runs without the GIL.
class PyGathered {
 public:
  explicit PyGathered(std::unique_ptr<engine::Engine::GatheredParameters> open)
      : open_(std::move(open)) {}
  void Close() {
    if (open_ == nullptr) return;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = open_->Close();
    }
    open_.reset();
    Check(s);
  }

 private:
  std::unique_ptr<engine::Engine::GatheredParameters> open_;
};

std::unique_ptr<PyGathered> Gather(PyEngine& e, const std::vector<at::Tensor>& params,
                                   int modifier_rank) {
  absl::StatusOr<std::unique_ptr<engine::Engine::GatheredParameters>> open;
  {
    py::gil_scoped_release release;
    open = e.engine().GatherParameters(params, modifier_rank);
  }
  return std::make_unique<PyGathered>(Check(std::move(open)));
}

engine::EngineOptions OptionsFor(const trainer::TrainerConfig& config, const std::string& device) {
  engine::EngineOptions options = config.engine;
  try {
    options.device = c10::Device(device);
  } catch (const c10::Error& e) {
    RaiseStatus(absl::InvalidArgumentError(
        absl::StrCat("device '", device, "': ", e.what_without_backtrace())));
  }
  return options;
}

}  // namespace

void BindEngine(py::module_& m) {
  py::class_<PyZeroInit>(m, "ZeroInit")
      .def(py::init<comm::ProcessGroup*, const LoadedConfig&>(), py::arg("group"),
           py::arg("config"), py::keep_alive<1, 2>())
      .def("partition_own", &PyZeroInit::PartitionOwn, py::arg("name"), py::arg("own"));
  py::class_<PyGathered>(m, "GatheredParameters").def("close", &PyGathered::Close);
  py::class_<PyEngine>(m, "Engine")
      .def(py::init([](comm::ProcessGroup* group, const LoadedConfig& config,
                       const std::string& device, const std::vector<Trainable>& trainable,
                       const std::vector<at::Tensor>& frozen,
                       const std::vector<at::Tensor>& buffers, const PyZeroInit* zero_init) {
             engine::EngineOptions options = OptionsFor(config.config, device);
             if (zero_init != nullptr) options.sharded_init = zero_init->sharded_init();
             return std::make_unique<PyEngine>(group, options, trainable, frozen, buffers,
                                               config.config.metrics);
           }),
           py::arg("group"), py::arg("config"), py::arg("device"), py::arg("trainable"),
           py::arg("frozen"), py::arg("buffers"), py::arg("zero_init"), py::keep_alive<1, 2>(),
           py::keep_alive<1, 8>())
      .def("begin_forward", &PyEngine::BeginForward)
      .def("end_forward", &PyEngine::EndForward)
      .def("backward", &PyEngine::Backward, py::arg("loss"))
      .def("step", &PyEngine::Step)
      .def("save_checkpoint", &PyEngine::Save, py::arg("dir"), py::arg("tag"),
           py::arg("client_state"))
      .def("load_checkpoint", &PyEngine::Load, py::arg("dir"), py::arg("tag"))
      .def("gather", &Gather, py::arg("params"), py::arg("modifier_rank"))
      .def_property_readonly("lr", [](PyEngine& e) { return e.engine().lr(); })
      .def_property_readonly("next_lr", [](PyEngine& e) { return e.engine().next_lr(); })
      .def("set_lr", [](PyEngine& e, double lr) { e.engine().set_lr(lr); })
      .def_property_readonly("grad_norm", [](PyEngine& e) { return e.engine().last_grad_norm(); })
      .def_property_readonly("micro_steps", [](PyEngine& e) { return e.engine().micro_steps(); })
      .def_property_readonly("optimizer_steps",
                             [](PyEngine& e) { return e.engine().optimizer_steps(); })
      .def_property_readonly("skipped_steps",
                             [](PyEngine& e) { return e.engine().skipped_steps(); })
      .def_property_readonly("loss_scale", [](PyEngine& e) { return e.engine().loss_scale(); })
      .def_property_readonly("engine_seconds", &PyEngine::engine_seconds)
      .def_property_readonly("at_accumulation_boundary",
                             [](PyEngine& e) { return e.engine().at_accumulation_boundary(); })
      .def("full_shape", [](PyEngine& e, const at::Tensor& p) { return e.engine().FullShape(p); });
}

}  // namespace zerotrain::python
