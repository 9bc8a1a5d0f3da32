// optimizer {type, params} → EngineOptions (config_validate_sections.h), with DeepSpeed's
// semantics: "Adam" is DeepSpeed's FusedAdam, whose adam_w_mode defaults to true (decoupled weight
// decay, i.e. AdamW); "AdamW" is always decoupled; "SGD" is torch.optim.SGD. Types match in any
// case, as DeepSpeed lower-cases them.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::Status CommonChecks(const OptimizerParams& p) {
  if (!(p.lr() >= 0)) return Invalid("optimizer.params.lr", p.lr(), "must be >= 0");
  if (!(p.weight_decay() >= 0)) {
    return Invalid("optimizer.params.weight_decay", p.weight_decay(), "must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status AdamFromConfig(const OptimizerParams& p, bool adamw_type, engine::EngineOptions* e,
                            OptimizerParams* eff) {
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
  const double eps = p.has_eps() ? p.eps() : 1e-8;
  if (!(eps >= 0)) return Invalid("optimizer.params.eps", eps, "must be >= 0");
  e->optimizer = engine::OptimizerKind::kAdam;
  e->adam.lr = p.lr();
  e->adam.beta1 = betas[0];
  e->adam.beta2 = betas[1];
  e->adam.eps = eps;
  e->adam.weight_decay = p.weight_decay();
  e->adam.adamw = adamw_type || !p.has_adam_w_mode() || p.adam_w_mode();
  e->adam.bias_correction = !p.has_bias_correction() || p.bias_correction();
  e->adam.amsgrad = p.amsgrad();
  eff->set_lr(p.lr());
  eff->add_betas(betas[0]);
  eff->add_betas(betas[1]);
  eff->set_eps(eps);
  eff->set_weight_decay(p.weight_decay());
  eff->set_bias_correction(e->adam.bias_correction);
  eff->set_amsgrad(e->adam.amsgrad);
  eff->set_adam_w_mode(e->adam.adamw);
  return absl::OkStatus();
}

absl::Status SgdFromConfig(const OptimizerParams& p, engine::EngineOptions* e,
                           OptimizerParams* eff) {
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

}  // namespace

absl::Status OptimizerToEngine(const TrainerConfigProto& config, engine::EngineOptions* engine,
                               TrainerConfigProto* effective) {
  const std::string type = absl::AsciiStrToLower(config.optimizer().type());
  const OptimizerParams& p = config.optimizer().params();
  OptimizerParams* eff = effective->mutable_optimizer()->mutable_params();
  eff->Clear();
  const std::vector<std::string> adam = {"lr",           "betas",           "eps",
                                         "weight_decay", "bias_correction", "amsgrad",
                                         "adam_w_mode",  "torch_adam"};
  const std::vector<std::string> sgd = {"lr", "momentum", "dampening", "weight_decay", "nesterov"};
  if (type == "adam" || type == "adamw") {
    const std::string name = type == "adam" ? "Adam" : "AdamW";
    if (auto s = CheckParamNames(p, name, adam); !s.ok()) return s;
    if (auto s = CommonChecks(p); !s.ok()) return s;
    effective->mutable_optimizer()->set_type(name);
    return AdamFromConfig(p, type == "adamw", engine, eff);
  }
  if (type == "sgd") {
    if (auto s = CheckParamNames(p, "SGD", sgd); !s.ok()) return s;
    if (auto s = CommonChecks(p); !s.ok()) return s;
    effective->mutable_optimizer()->set_type("SGD");
    return SgdFromConfig(p, engine, eff);
  }
  for (const char* known : {"lamb", "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "lion",
                            "muadam", "muadamw", "musgd"}) {
    if (type == known) {
      return absl::UnimplementedError(absl::StrCat(
          "optimizer.type = \"", config.optimizer().type(),
          "\": DeepSpeed optimizer not supported by the zerotrain engine (Adam, AdamW, SGD are)"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.type = \"", config.optimizer().type(),
                   "\": unknown optimizer (known: Adam, AdamW, SGD)"));
}

}  // namespace zerotrain::trainer
