// "auto" resolution and default filling for the loaded config (config_loader.h). The "auto"
// rules are those of DeepSpeed's Hugging Face integration (transformers' HfTrainerDeepSpeedConfig,
// src/transformers/integrations/deepspeed.py): where zerotrain has the input it uses (the model
// width, run.steps, the optimizer's lr) that input, and where the Trainer reads one of its own
// TrainingArguments, that argument's default (training_args.py), as a Trainer run without the
// flag would get.
#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "models/model.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::trainer {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The message holding the last component of `path` and that component's field, or nulls.
std::pair<Message*, const FieldDescriptor*> Locate(Message* root, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  Message* m = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* fd = m->GetDescriptor()->FindFieldByName(parts[i]);
    if (fd == nullptr) return {nullptr, nullptr};
    if (i + 1 == parts.size()) return {m, fd};
    if (fd->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || fd->is_repeated()) break;
    m = m->GetReflection()->MutableMessage(m, fd);
  }
  return {nullptr, nullptr};
}

int64_t Width(const TrainerConfigProto& c) {
  return c.model().has_n_embd() ? c.model().n_embd() : models::ModelOptions{}.n_embd;
}

using Rule = std::function<void(TrainerConfigProto*)>;

// TrainingArguments' defaults, which trainer_config_process writes over these "auto" fields:
// learning_rate, [adam_beta1, adam_beta2], adam_epsilon, weight_decay, max_grad_norm.
constexpr double kHfLearningRate = 5e-5;
constexpr double kHfAdamBeta1 = 0.9;
constexpr double kHfAdamBeta2 = 0.999;
constexpr double kHfAdamEpsilon = 1e-8;
constexpr double kHfWeightDecay = 0.0;
constexpr double kHfMaxGradNorm = 1.0;
// get_warmup_steps(n) with warmup_steps = 0 (the default): ceil(n * 0). DeepSpeed's warm-up
// schedules then run max(2, 0) steps (config_schedule.cc does the same).
constexpr int64_t kHfWarmupSteps = 0;

const std::map<std::string, Rule>& Rules() {
  static const auto* rules = new std::map<std::string, Rule>{
      // The batch triple: left unset, so ResolveBatchSizes derives it from the other members.
      {"train_batch_size", [](TrainerConfigProto*) {}},
      {"train_micro_batch_size_per_gpu", [](TrainerConfigProto*) {}},
      {"gradient_accumulation_steps", [](TrainerConfigProto*) {}},
      // Placement: unset is "auto", which each rank resolves against the GPUs it sees.
      {"run.device", [](TrainerConfigProto*) {}},
      {"run.dist_backend", [](TrainerConfigProto*) {}},
      // fp16 / bf16 are the Trainer's --fp16 / --bf16 flags (or their *_full_eval forms), off
      // unless given: with both "auto" the run is fp32, as under the Trainer.
      {"fp16.enabled", [](TrainerConfigProto* c) { c->mutable_fp16()->set_enabled(false); }},
      {"bf16.enabled", [](TrainerConfigProto* c) { c->mutable_bf16()->set_enabled(false); }},
      {"gradient_clipping",
       [](TrainerConfigProto* c) { c->set_gradient_clipping(kHfMaxGradNorm); }},
      {"optimizer.params.lr",
       [](TrainerConfigProto* c) {
         c->mutable_optimizer()->mutable_params()->set_lr(kHfLearningRate);
       }},
      {"optimizer.params.betas",
       [](TrainerConfigProto* c) {
         OptimizerParams* p = c->mutable_optimizer()->mutable_params();
         p->add_betas(kHfAdamBeta1);
         p->add_betas(kHfAdamBeta2);
       }},
      {"optimizer.params.eps",
       [](TrainerConfigProto* c) {
         c->mutable_optimizer()->mutable_params()->set_eps(kHfAdamEpsilon);
       }},
      {"optimizer.params.weight_decay",
       [](TrainerConfigProto* c) {
         c->mutable_optimizer()->mutable_params()->set_weight_decay(kHfWeightDecay);
       }},
      {"zero_optimization.reduce_bucket_size",
       [](TrainerConfigProto* c) {
         c->mutable_zero_optimization()->set_reduce_bucket_size(Width(*c) * Width(*c));
       }},
      {"zero_optimization.stage3_prefetch_bucket_size",
       [](TrainerConfigProto* c) {
         c->mutable_zero_optimization()->set_stage3_prefetch_bucket_size(
             static_cast<int64_t>(0.9 * static_cast<double>(Width(*c) * Width(*c))));
       }},
      {"zero_optimization.stage3_param_persistence_threshold",
       [](TrainerConfigProto* c) {
         c->mutable_zero_optimization()->set_stage3_param_persistence_threshold(10 * Width(*c));
       }},
      {"scheduler.params.total_num_steps",
       [](TrainerConfigProto* c) {
         c->mutable_scheduler()->mutable_params()->set_total_num_steps(c->run().steps());
       }},
      {"scheduler.params.warmup_max_lr",
       [](TrainerConfigProto* c) {
         c->mutable_scheduler()->mutable_params()->set_warmup_max_lr(c->optimizer().params().lr());
       }},
      {"scheduler.params.warmup_min_lr",
       [](TrainerConfigProto* c) {
         c->mutable_scheduler()->mutable_params()->set_warmup_min_lr(0);
       }},
      {"scheduler.params.warmup_num_steps",
       [](TrainerConfigProto* c) {
         c->mutable_scheduler()->mutable_params()->set_warmup_num_steps(kHfWarmupSteps);
       }},
  };
  return *rules;
}

void SetDefault(Message* m, const FieldDescriptor* fd) {
  const Reflection* r = m->GetReflection();
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      r->SetInt32(m, fd, fd->default_value_int32());
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->SetInt64(m, fd, fd->default_value_int64());
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->SetUInt32(m, fd, fd->default_value_uint32());
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(m, fd, fd->default_value_uint64());
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->SetDouble(m, fd, fd->default_value_double());
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(m, fd, fd->default_value_float());
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(m, fd, fd->default_value_bool());
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, fd, fd->default_value_string());
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      r->SetEnum(m, fd, fd->default_value_enum());
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

}  // namespace

absl::Status ResolveAutoFields(const std::vector<std::string>& auto_fields, const std::string& file,
                               TrainerConfigProto* config) {
  // The scheduler's rules read the optimizer's lr: resolve everything else first.
  std::vector<std::string> ordered = auto_fields;
  std::stable_partition(ordered.begin(), ordered.end(),
                        [](const std::string& path) { return path.rfind("scheduler.", 0) != 0; });
  for (const std::string& path : ordered) {
    auto [parent, fd] = Locate(config, path);
    if (fd == nullptr)
      return absl::InternalError(absl::StrCat(file, ": ", path, ": no such field"));
    const Reflection* r = parent->GetReflection();
    const bool given = fd->is_repeated() ? r->FieldSize(*parent, fd) > 0 : r->HasField(*parent, fd);
    if (given) continue;  // the pbtxt supplied the value "auto" stands for
    auto rule = Rules().find(path);
    if (rule == Rules().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", path,
                       " is \"auto\", which zerotrain cannot resolve (Hugging Face's Trainer "
                       "does not fill it in either, and DeepSpeed rejects the string): give it a "
                       "value"));
    }
    rule->second(config);
  }
  return absl::OkStatus();
}

void FillDefaults(Message* config) {
  const Reflection* r = config->GetReflection();
  for (int i = 0; i < config->GetDescriptor()->field_count(); ++i) {
    const FieldDescriptor* fd = config->GetDescriptor()->field(i);
    if (fd->is_repeated()) continue;
    if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      std::unique_ptr<Message> section(r->GetMessage(*config, fd).New());
      section->CopyFrom(r->GetMessage(*config, fd));
      FillDefaults(section.get());
      if (section->ByteSizeLong() > 0) r->MutableMessage(config, fd)->CopyFrom(*section);
    } else if (!r->HasField(*config, fd) && fd->has_default_value()) {
      SetDefault(config, fd);
    }
  }
}

}  // namespace zerotrain::trainer
