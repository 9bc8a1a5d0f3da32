// optimizer {type, params} → EngineOptions (config_validate_sections.h), with DeepSpeed 0.19.8's
// semantics: the params a type takes are those of the class DeepSpeed's engine builds for it on
// the configured path (_configure_basic_optimizer), plus the keys the engine reads itself.
// "Adam"/"AdamW" are FusedAdam, whose adam_w_mode the engine defaults to true (decoupled weight
// decay, i.e. AdamW); torch.optim.AdamW (or Adam with adam_w_mode false) with torch_adam; or
// DeepSpeedCPUAdam with offload_optimizer. "SGD" is torch.optim.SGD; "Adagrad" is
// torch.optim.Adagrad, or DeepSpeedCPUAdagrad with offload_optimizer; "Lamb" is FusedLamb; "Muon"
// is MuonWithAuxAdam (Muon for matrices, Adam for the rest: engine/muon_gradients.h). Types
// match in any case, as DeepSpeed lower-cases them. tests/deepspeed/optimizer_keys_conformance_test
// checks every path's keywords and defaults against DeepSpeed itself.
#include <algorithm>
#include <regex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/status_macros.h"
#include "trainer/config/config_validate_sections.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;

absl::Status Invalid(const std::string& path, double value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, " = ", value, ": ", why));
}

// A parameter the type's constructor does not take is an error, as the Python TypeError is.
absl::Status CheckParamNames(const OptimizerParams& p, const std::string& type,
                             const std::vector<std::string>& allowed) {
  std::vector<const FieldDescriptor*> set;
  p.GetReflection()->ListFields(p, &set);
  for (const FieldDescriptor* fd : set) {
    if (std::find(allowed.begin(), allowed.end(), fd->name()) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer.params.", fd->name(),
                                                     ": not a parameter of ", type, " (it takes ",
                                                     absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// The names `type` takes, then the values every type checks alike. maximize (torch's) would
// ascend the gradient; the engine descends.
absl::Status CheckParams(const OptimizerParams& p, const std::string& type,
                         const std::vector<std::string>& allowed) {
  ZT_RETURN_IF_ERROR(CheckParamNames(p, type, allowed));
  if (p.maximize()) {
    return absl::InvalidArgumentError(
        "optimizer.params.maximize = true: not supported by zerotrain (gradient ascent)");
  }
  if (!(p.lr() >= 0)) return Invalid("optimizer.params.lr", p.lr(), "must be >= 0");
  if (!(p.weight_decay() >= 0)) {
    return Invalid("optimizer.params.weight_decay", p.weight_decay(), "must be >= 0");
  }
  return absl::OkStatus();
}

// [beta1, beta2], default [0.9, 0.999], each in [0, 1); into the effective params.
absl::StatusOr<std::vector<double>> Betas(const OptimizerParams& p, OptimizerParams* eff) {
  std::vector<double> betas(p.betas().begin(), p.betas().end());
  if (betas.empty()) betas = {0.9, 0.999};
  if (betas.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.params.betas = [",
                                                   absl::StrJoin(betas, ", "),
                                                   "]: expected two values [beta1, beta2]"));
  }
  for (int i = 0; i < 2; ++i) {
    if (!(betas[i] >= 0 && betas[i] < 1)) {
      return Invalid(absl::StrCat("optimizer.params.betas[", i, "]"), betas[i],
                     "must be in [0, 1)");
    }
  }
  eff->add_betas(betas[0]);
  eff->add_betas(betas[1]);
  return betas;
}

// DeepSpeedCPUAdagrad (and Muon's offload) keep their states in the parameters' dtype with
// fp32_optimizer_states false; zerotrain's are fp32 there. DeepSpeedCPUAdam's false is taken
// (Bf16MasterToEngine). Elsewhere DeepSpeed pops it unused.
absl::Status CheckFp32States(const OptimizerParams& p) {
  if (!p.has_fp32_optimizer_states() || p.fp32_optimizer_states()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "optimizer.params.fp32_optimizer_states = false: not supported by zerotrain for this "
      "optimizer (its states are always fp32; Adam/AdamW under offload_optimizer takes it)");
}

// The class DeepSpeed's get_optimizer_configuration picks for Adam/AdamW, and its keywords: the
// engine pops adam_w_mode, torch_adam and fp32_optimizer_states (and with torch_adam, foreach)
// before passing the rest on.
struct AdamClass {
  std::string name;
  std::vector<std::string> params;
};

AdamClass AdamClassFor(const OptimizerParams& p, bool adamw, bool offloaded) {
  std::vector<std::string> engine = {"adam_w_mode",  "torch_adam", "fp32_optimizer_states",
                                     "lr",           "betas",      "eps",
                                     "weight_decay", "amsgrad"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), engine.begin(), engine.end());
    return more;
  };
  const std::vector<std::string> torch = {"maximize", "foreach", "capturable", "differentiable",
                                          "fused"};
  if (p.torch_adam() && adamw) return {"AdamW with torch_adam (torch.optim.AdamW)", with(torch)};
  if (p.torch_adam()) {
    std::vector<std::string> adam = torch;
    adam.push_back("decoupled_weight_decay");
    return {"Adam with torch_adam and adam_w_mode false (torch.optim.Adam)", with(adam)};
  }
  if (offloaded) {
    return {"Adam with offload_optimizer (DeepSpeedCPUAdam)", with({"bias_correction"})};
  }
  return {"Adam (DeepSpeed's FusedAdam)", with({"bias_correction", "set_grad_none"})};
}

absl::Status AdamFromConfig(const OptimizerParams& p, bool adamw_type, bool offloaded,
                            engine::EngineOptions* e, OptimizerParams* eff) {
  // The engine's effective adam_w_mode: AdamW always, Adam unless adam_w_mode is false.
  const bool adamw = adamw_type || !p.has_adam_w_mode() || p.adam_w_mode();
  const AdamClass cls = AdamClassFor(p, adamw, offloaded);
  ZT_RETURN_IF_ERROR(CheckParams(p, cls.name, cls.params));
  ZT_ASSIGN_OR_RETURN(const std::vector<double> betas, Betas(p, eff));
  const double eps = p.has_eps() ? p.eps() : 1e-8;
  if (!(eps >= 0)) return Invalid("optimizer.params.eps", eps, "must be >= 0");
  // torch.optim.AdamW's own default; FusedAdam's, DeepSpeedCPUAdam's and torch.optim.Adam's is 0.
  const double weight_decay =
      p.has_weight_decay() || !(p.torch_adam() && adamw) ? p.weight_decay() : 1e-2;
  e->optimizer = engine::OptimizerKind::kAdam;
  e->adam.lr = p.lr();
  e->adam.beta1 = betas[0];
  e->adam.beta2 = betas[1];
  e->adam.eps = eps;
  e->adam.weight_decay = weight_decay;
  e->adam.adamw = adamw || p.decoupled_weight_decay();
  // torch's Adam(W) always corrects the bias (and takes no bias_correction).
  e->adam.bias_correction = !p.has_bias_correction() || p.bias_correction();
  e->adam.amsgrad = p.amsgrad();
  eff->set_lr(p.lr());
  eff->set_eps(eps);
  eff->set_weight_decay(weight_decay);
  eff->set_bias_correction(e->adam.bias_correction);
  eff->set_amsgrad(e->adam.amsgrad);
  eff->set_adam_w_mode(e->adam.adamw);
  eff->set_torch_adam(p.torch_adam());
  // DeepSpeedCPUAdam's: false keeps the moments in the master's dtype (bf16 under
  // bf16.bf16_master_weights_and_grads, else fp32 as always): Bf16MasterToEngine reads it.
  if (p.has_fp32_optimizer_states()) eff->set_fp32_optimizer_states(p.fp32_optimizer_states());
  return absl::OkStatus();
}

absl::Status SgdFromConfig(const OptimizerParams& p, engine::EngineOptions* e,
                           OptimizerParams* eff) {
  ZT_RETURN_IF_ERROR(CheckParams(p, "SGD (torch.optim.SGD)",
                                 {"lr", "momentum", "dampening", "weight_decay", "nesterov",
                                  "maximize", "foreach", "differentiable", "fused"}));
  if (!(p.momentum() >= 0))
    return Invalid("optimizer.params.momentum", p.momentum(), "must be >= 0");
  if (p.nesterov() && (p.momentum() <= 0 || p.dampening() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.params.nesterov = true: needs momentum > 0 and dampening 0 (momentum = ",
        p.momentum(), ", dampening = ", p.dampening(), ")"));
  }
  e->optimizer = engine::OptimizerKind::kSgd;
  e->sgd.lr = p.lr();
  e->sgd.momentum = p.momentum();
  e->sgd.dampening = p.dampening();
  e->sgd.weight_decay = p.weight_decay();
  e->sgd.nesterov = p.nesterov();
  eff->set_lr(p.lr());
  eff->set_momentum(p.momentum());
  eff->set_dampening(p.dampening());
  eff->set_weight_decay(p.weight_decay());
  eff->set_nesterov(p.nesterov());
  return absl::OkStatus();
}

// torch.optim.Adagrad, or with offload_optimizer DeepSpeedCPUAdagrad, which has no lr_decay or
// initial_accumulator_value (its TypeError is this refusal) and takes an amsgrad it ignores. Both
// default lr to 1e-2 (not the 1e-3 of the proto's declared default).
absl::Status AdagradFromConfig(const OptimizerParams& p, bool offloaded, engine::EngineOptions* e,
                               OptimizerParams* eff) {
  ZT_RETURN_IF_ERROR(
      offloaded ? CheckParams(p, "Adagrad with offload_optimizer (DeepSpeedCPUAdagrad)",
                              {"lr", "eps", "weight_decay", "amsgrad", "fp32_optimizer_states"})
                : CheckParams(p, "Adagrad (torch.optim.Adagrad)",
                              {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                               "foreach", "maximize", "differentiable", "fused"}));
  if (offloaded) ZT_RETURN_IF_ERROR(CheckFp32States(p));
  const double lr = p.has_lr() ? p.lr() : 1e-2;
  const double eps = p.has_eps() ? p.eps() : 1e-10;
  for (const auto& [name, value] : {std::pair<const char*, double>{"eps", eps},
                                    {"lr_decay", p.lr_decay()},
                                    {"initial_accumulator_value", p.initial_accumulator_value()}}) {
    if (!(value >= 0)) {
      return Invalid(absl::StrCat("optimizer.params.", name), value, "must be >= 0");
    }
  }
  e->optimizer = engine::OptimizerKind::kAdagrad;
  e->adagrad.lr = lr;
  e->adagrad.lr_decay = p.lr_decay();
  e->adagrad.weight_decay = p.weight_decay();
  e->adagrad.eps = eps;
  e->adagrad_initial_accumulator = p.initial_accumulator_value();
  eff->set_lr(lr);
  eff->set_eps(eps);
  eff->set_weight_decay(p.weight_decay());
  if (!offloaded) {
    eff->set_lr_decay(p.lr_decay());
    eff->set_initial_accumulator_value(p.initial_accumulator_value());
  } else {
    eff->set_amsgrad(p.amsgrad());
  }
  return absl::OkStatus();
}

// DeepSpeed's FusedLamb, which refuses amsgrad. DeepSpeed also asserts
// zero_allow_untested_optimizer at ZeRO stages 1-3, as FusedLamb is not among its ZeRO-tested
// optimizers.
absl::Status LambFromConfig(const TrainerConfigProto& config, engine::EngineOptions* e,
                            OptimizerParams* eff) {
  const OptimizerParams& p = config.optimizer().params();
  ZT_RETURN_IF_ERROR(CheckParams(p, "Lamb (FusedLamb)",
                                 {"lr", "bias_correction", "betas", "eps", "eps_inside_sqrt",
                                  "weight_decay", "max_coeff", "min_coeff", "amsgrad"}));
  if (p.amsgrad()) {
    return absl::InvalidArgumentError(
        "optimizer.params.amsgrad = true: FusedLamb does not support the AMSGrad variant");
  }
  if (e->stage > 0 && !config.zero_allow_untested_optimizer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.type = \"", config.optimizer().type(), "\" at ZeRO stage ", e->stage,
        ": DeepSpeed needs zero_allow_untested_optimizer: true for FusedLamb under ZeRO"));
  }
  ZT_ASSIGN_OR_RETURN(const std::vector<double> betas, Betas(p, eff));
  const double eps = p.has_eps() ? p.eps() : 1e-8;
  // eps = 0 divides 0 by 0 wherever the gradients have been 0 so far.
  if (!(eps > 0)) return Invalid("optimizer.params.eps", eps, "must be > 0");
  const double max_coeff = p.has_max_coeff() ? p.max_coeff() : 10.0;
  const double min_coeff = p.has_min_coeff() ? p.min_coeff() : 0.01;
  if (!(min_coeff >= 0 && min_coeff <= max_coeff)) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.params.min_coeff = ", min_coeff,
                                                   ", max_coeff = ", max_coeff,
                                                   ": need 0 <= min_coeff <= max_coeff"));
  }
  e->optimizer = engine::OptimizerKind::kLamb;
  e->lamb.lr = p.lr();
  e->lamb.beta1 = betas[0];
  e->lamb.beta2 = betas[1];
  e->lamb.eps = eps;
  e->lamb.eps_inside_sqrt = p.eps_inside_sqrt();
  e->lamb.weight_decay = p.weight_decay();
  e->lamb.bias_correction = !p.has_bias_correction() || p.bias_correction();
  e->lamb.max_coeff = max_coeff;
  e->lamb.min_coeff = min_coeff;
  eff->set_lr(p.lr());
  eff->set_eps(eps);
  eff->set_eps_inside_sqrt(e->lamb.eps_inside_sqrt);
  eff->set_weight_decay(p.weight_decay());
  eff->set_bias_correction(e->lamb.bias_correction);
  eff->set_max_coeff(max_coeff);
  eff->set_min_coeff(min_coeff);
  eff->set_amsgrad(false);
  return absl::OkStatus();
}

// model.adam_params and model.muon_params over DeepSpeed's rule; each pattern compiled once.
absl::StatusOr<engine::UseMuonFn> UseMuonFromConfig(const ModelConfig& model) {
  auto compile = [](const google::protobuf::RepeatedPtrField<std::string>& patterns,
                    const char* field) -> absl::StatusOr<std::vector<std::regex>> {
    std::vector<std::regex> out;
    for (int i = 0; i < patterns.size(); ++i) {
      try {
        out.emplace_back(patterns[i]);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(
            absl::StrCat("model.", field, "[", i, "] = \"", patterns[i],
                         "\": not a regular expression (", e.what(), ")"));
      }
    }
    return out;
  };
  ZT_ASSIGN_OR_RETURN(std::vector<std::regex> adam, compile(model.adam_params(), "adam_params"));
  ZT_ASSIGN_OR_RETURN(std::vector<std::regex> muon, compile(model.muon_params(), "muon_params"));
  if (adam.empty() && muon.empty()) return engine::UseMuonFn(engine::DeepSpeedUsesMuon);
  return engine::UseMuonFn(
      [adam, muon](const std::string& name, const std::vector<int64_t>& shape) {
        const auto any = [&](const std::vector<std::regex>& res) {
          return std::any_of(res.begin(), res.end(),
                             [&](const std::regex& re) { return std::regex_match(name, re); });
        };
        if (any(adam)) return false;
        return any(muon) || engine::DeepSpeedUsesMuon(name, shape);
      });
}

// DeepSpeed's MuonWithAuxAdam: the engine hands the Muon half lr, momentum, weight_decay and
// ns_method, the Adam half lr, betas, eps and weight_decay, muon_lr/adam_lr over lr; the Adam half
// is torch.optim.AdamW with torch_adam (FusedAdam, DeepSpeedCPUAdam otherwise, the same update).
// DeepSpeed's ZeRO 3 refuses Muon with reduce_scatter, which it defaults to true.
absl::Status MuonFromConfig(const TrainerConfigProto& config, engine::EngineOptions* e,
                            OptimizerParams* eff) {
  const OptimizerParams& p = config.optimizer().params();
  ZT_RETURN_IF_ERROR(CheckParams(
      p, "Muon (MuonWithAuxAdam)",
      {"lr", "muon_lr", "adam_lr", "momentum", "weight_decay", "ns_method", "betas", "eps",
       "adam_w_mode", "torch_adam", "foreach", "fp32_optimizer_states", "nesterov"}));
  if (p.has_nesterov() && !p.nesterov()) {
    return absl::InvalidArgumentError(
        "optimizer.params.nesterov = false: DeepSpeed's Muon ignores it and always uses "
        "Nesterov momentum, as zerotrain does; remove the key");
  }
  if (e->stage == 3 && e->reduce_scatter) {
    return absl::InvalidArgumentError(
        "optimizer.type = \"Muon\" at ZeRO stage 3 needs zero_optimization.reduce_scatter: "
        "false (DeepSpeed: \"Muon and reduce scatter cannot be used together\")");
  }
  ZT_RETURN_IF_ERROR(CheckFp32States(p));
  OptimizerParams given = p;
  if (given.betas().empty()) {
    given.add_betas(0.9);
    given.add_betas(0.95);
  }
  ZT_ASSIGN_OR_RETURN(const std::vector<double> betas, Betas(given, eff));
  const double eps = p.has_eps() ? p.eps() : 1e-10;
  if (!(eps >= 0)) return Invalid("optimizer.params.eps", eps, "must be >= 0");
  const double momentum = p.has_momentum() ? p.momentum() : 0.95;
  if (!(momentum >= 0 && momentum < 1)) {
    return Invalid("optimizer.params.momentum", momentum, "must be in [0, 1)");
  }
  auto method = optim::ParseNsMethod(p.has_ns_method() ? p.ns_method() : "gram");
  if (!method.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.params.", method.status().message()));
  }
  const double muon_lr = p.has_muon_lr() ? p.muon_lr() : p.has_lr() ? p.lr() : 0.02;
  const double adam_lr = p.has_adam_lr() ? p.adam_lr() : p.has_lr() ? p.lr() : 3e-4;
  if (!(muon_lr >= 0)) return Invalid("optimizer.params.muon_lr", muon_lr, "must be >= 0");
  if (!(adam_lr >= 0)) return Invalid("optimizer.params.adam_lr", adam_lr, "must be >= 0");
  e->optimizer = engine::OptimizerKind::kMuon;
  engine::MuonOptions& m = e->muon;
  m.lr = muon_lr;
  m.momentum = momentum;
  m.weight_decay = p.weight_decay();
  m.ns_method = *method;
  m.adam.lr = adam_lr;
  m.adam.beta1 = betas[0];
  m.adam.beta2 = betas[1];
  m.adam.eps = eps;
  m.adam.weight_decay = p.weight_decay();
  m.adam.adamw = !p.has_adam_w_mode() || p.adam_w_mode();
  ZT_ASSIGN_OR_RETURN(m.use_muon, UseMuonFromConfig(config.model()));
  // DeepSpeed's engine clips the raw gradients at stage 0 (MuonWithAuxAdam then runs Muon on
  // them); its ZeRO optimizers orthogonalise first and clip the updates.
  m.orthogonalize_clipped = e->stage == 0;
  eff->set_lr(p.has_lr() ? p.lr() : muon_lr);
  eff->set_muon_lr(muon_lr);
  eff->set_adam_lr(adam_lr);
  eff->set_momentum(momentum);
  eff->set_weight_decay(p.weight_decay());
  eff->set_ns_method(optim::NsMethodName(*method));
  eff->set_eps(eps);
  eff->set_adam_w_mode(m.adam.adamw);
  return absl::OkStatus();
}

}  // namespace

absl::Status OptimizerToEngine(const TrainerConfigProto& config, engine::EngineOptions* engine,
                               TrainerConfigProto* effective) {
  const std::string type = absl::AsciiStrToLower(config.optimizer().type());
  const OptimizerParams& p = config.optimizer().params();
  OptimizerParams* eff = effective->mutable_optimizer()->mutable_params();
  eff->Clear();
  if (type != "muon" &&
      (config.model().adam_params_size() > 0 || config.model().muon_params_size() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.", config.model().adam_params_size() > 0 ? "adam_params" : "muon_params",
        ": only for optimizer.type \"Muon\" (the optimizer is \"", config.optimizer().type(),
        "\")"));
  }
  if (p.has_max_grad_norm()) {
    return absl::InvalidArgumentError(
        "optimizer.params.max_grad_norm: DeepSpeed refuses it as an optimizer parameter; use "
        "gradient_clipping");
  }
  // DeepSpeed's zero_use_cpu_optimizer; ZeroToEngine/OffloadToEngine have run.
  const bool offloaded = engine->offload_optimizer.device != engine::OffloadDevice::kNone;
  if (type == "adam" || type == "adamw") {
    effective->mutable_optimizer()->set_type(type == "adam" ? "Adam" : "AdamW");
    return AdamFromConfig(p, type == "adamw", offloaded, engine, eff);
  }
  if (type == "sgd") {
    effective->mutable_optimizer()->set_type("SGD");
    return SgdFromConfig(p, engine, eff);
  }
  if (type == "adagrad") {
    effective->mutable_optimizer()->set_type("Adagrad");
    return AdagradFromConfig(p, offloaded, engine, eff);
  }
  if (type == "lamb") {
    effective->mutable_optimizer()->set_type("Lamb");
    return LambFromConfig(config, engine, eff);
  }
  if (type == "muon") {
    effective->mutable_optimizer()->set_type("Muon");
    return MuonFromConfig(config, engine, eff);
  }
  for (const char* known :
       {"onebitadam", "zerooneadam", "onebitlamb", "lion", "muadam", "muadamw", "musgd"}) {
    if (type == known) {
      return absl::UnimplementedError(
          absl::StrCat("optimizer.type = \"", config.optimizer().type(),
                       "\": DeepSpeed optimizer not supported by the zerotrain engine (Adam, "
                       "AdamW, SGD, Adagrad, Lamb, Muon are)"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.type = \"", config.optimizer().type(),
                   "\": unknown optimizer (known: Adam, AdamW, SGD, Adagrad, Lamb, Muon)"));
}

}  // namespace zerotrain::trainer
