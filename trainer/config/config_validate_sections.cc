// The trainer's own sections and the monitors (config_validate_sections.h).
#include "trainer/config/config_validate_sections.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "hf/hf_config.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "tools/status_macros.h"
#include "trainer/data/token_files.h"

namespace zerotrain::trainer {
namespace {

template <typename T>
absl::Status Invalid(const std::string& path, const T& value, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, " = ", value, ": ", why));
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// number_checkpoints (DeepSpeed: how many checkpoints the model makes) → every k-th block.
absl::StatusOr<int64_t> CheckpointEvery(const TrainerConfigProto& c, int64_t n_layer,
                                        std::vector<std::string>* warnings) {
  if (c.model().has_checkpoint_every()) return c.model().checkpoint_every();
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing();
  if (ac.has_number_checkpoints()) {
    if (ac.number_checkpoints() <= 0) {
      return Invalid("activation_checkpointing.number_checkpoints", ac.number_checkpoints(),
                     "must be positive");
    }
    // n_layer itself is checked later (ValidateModelOptions); here it only must not divide by 0.
    if (n_layer <= 0) return 0;
    return CeilDiv(n_layer, std::min(ac.number_checkpoints(), n_layer));
  }
  if (c.has_activation_checkpointing()) {
    warnings->push_back(
        "activation_checkpointing: neither number_checkpoints nor "
        "model.checkpoint_every is set, so no block is checkpointed");
  }
  return 0;
}

void WarnModelParallelKeys(const ActivationCheckpointingConfig& ac,
                           std::vector<std::string>* warnings) {
  const std::pair<bool, const char*> keys[] = {
      {ac.partition_activations(), "partition_activations"},
      {ac.contiguous_memory_optimization(), "contiguous_memory_optimization"},
      {ac.synchronize_checkpoint_boundary(), "synchronize_checkpoint_boundary"},
  };
  for (const auto& [set, name] : keys) {
    if (set) {
      warnings->push_back(absl::StrCat("activation_checkpointing.", name,
                                       " = true: ignored; it needs model parallelism, which "
                                       "zerotrain does not have"));
    }
  }
}

}  // namespace

absl::Status CheckBatchFields(const TrainerConfigProto& c) {
  const std::pair<const char*, std::optional<int64_t>> fields[] = {
      {"train_batch_size",
       c.has_train_batch_size() ? std::optional<int64_t>(c.train_batch_size()) : std::nullopt},
      {"train_micro_batch_size_per_gpu",
       c.has_train_micro_batch_size_per_gpu()
           ? std::optional<int64_t>(c.train_micro_batch_size_per_gpu())
           : std::nullopt},
      {"gradient_accumulation_steps", c.has_gradient_accumulation_steps()
                                          ? std::optional<int64_t>(c.gradient_accumulation_steps())
                                          : std::nullopt},
  };
  for (const auto& [name, value] : fields) {
    if (value && *value < 1) {
      return Invalid(name, *value, "must be at least 1 (leave it out, or \"auto\", to derive it)");
    }
  }
  return absl::OkStatus();
}

absl::Status RunFromConfig(const TrainerConfigProto& c, RunOptions* run) {
  const RunConfig& r = c.run();
  if (r.steps() <= 0) return Invalid("run.steps", r.steps(), "must be positive");
  if (r.eval_interval() < 0) return Invalid("run.eval_interval", r.eval_interval(), "must be >= 0");
  if (r.eval_iters() <= 0) return Invalid("run.eval_iters", r.eval_iters(), "must be positive");
  if (r.sample_tokens() < 0) return Invalid("run.sample_tokens", r.sample_tokens(), "must be >= 0");
  if (r.output_dir().empty()) return Invalid("run.output_dir", "\"\"", "must name a directory");
  if (r.save_interval() < 0) return Invalid("run.save_interval", r.save_interval(), "must be >= 0");
  if (r.keep_last_checkpoints() < 0) {
    return Invalid("run.keep_last_checkpoints", r.keep_last_checkpoints(),
                   "must be >= 0 (0 keeps every checkpoint)");
  }
  if (c.steps_per_print() < 0) {
    return Invalid("steps_per_print", c.steps_per_print(), "must be >= 0 (0: no progress lines)");
  }
  run->steps = r.steps();
  run->seed = r.seed();
  run->output_dir = r.output_dir();
  run->eval_interval = r.eval_interval();
  run->eval_iters = r.eval_iters();
  run->steps_per_print = c.steps_per_print();
  run->wall_clock_breakdown = c.wall_clock_breakdown();
  run->sample_tokens = r.sample_tokens();
  run->save_interval = r.save_interval();
  run->resume_from = r.resume_from();
  run->check_calls = r.check_calls();
  constexpr int64_t kMaxCommTimeout = 24 * 3600;  // comm::GroupOptions' limit
  if (r.comm_timeout_s() < 1 || r.comm_timeout_s() > kMaxCommTimeout) {
    return Invalid("run.comm_timeout_s", r.comm_timeout_s(),
                   "must be in [1, 86400] seconds (the longest a collective may wait for a peer)");
  }
  run->comm_timeout_s = r.comm_timeout_s();
  if (r.stop_timeout_s() < 1 || r.stop_timeout_s() > kMaxCommTimeout) {
    return Invalid("run.stop_timeout_s", r.stop_timeout_s(),
                   "must be in [1, 86400] seconds (how long a stopping rank may take to save)");
  }
  run->stop_timeout_s = r.stop_timeout_s();
  run->save_on_stop = r.save_on_stop();
  const std::string device = absl::AsciiStrToLower(r.device());
  if (device == "auto") {
    run->device = DeviceRequest::kAuto;
  } else if (device == "cuda") {
    run->device = DeviceRequest::kCuda;
  } else if (device == "cpu") {
    run->device = DeviceRequest::kCpu;
  } else {
    return Invalid("run.device", absl::StrCat("\"", r.device(), "\""),
                   "expected auto, cuda or cpu (each rank uses cuda:LOCAL_RANK; no index here)");
  }
  const std::string backend = absl::AsciiStrToLower(r.dist_backend());
  run->dist_backend = comm::BackendNamed(backend);
  if (!run->dist_backend.has_value() && backend != "auto") {
    return Invalid("run.dist_backend", absl::StrCat("\"", r.dist_backend(), "\""),
                   "unknown backend (known: auto, nccl, gloo, shm)");
  }
  if (run->dist_backend == comm::BackendKind::kNccl && run->device == DeviceRequest::kCpu) {
    return Invalid("run.dist_backend", "\"nccl\"",
                   "NCCL moves CUDA tensors only, and run.device is \"cpu\"; use \"gloo\" or "
                   "\"shm\" for CPU ranks");
  }
  return absl::OkStatus();
}

namespace {

// One architecture field of model { }: applied when given; with a checkpoint's config.json, a
// given value must agree with it (the weights' shapes follow config.json).
template <typename T>
absl::Status ApplyModelField(const char* name, bool given, T value, bool from_checkpoint,
                             T* field) {
  if (!given) return absl::OkStatus();
  if (from_checkpoint && *field != value) {
    return Invalid(absl::StrCat("model.", name), value,
                   absl::StrCat("model.init_from's config.json says ", *field,
                                "; leave it out to take the checkpoint's"));
  }
  *field = value;
  return absl::OkStatus();
}

absl::Status ApplyModelFields(const ModelConfig& m, bool ckpt, models::ModelOptions* o) {
  for (absl::Status s : {
           ApplyModelField("vocab_size", m.has_vocab_size(), m.vocab_size(), ckpt, &o->vocab_size),
           ApplyModelField("block_size", m.has_block_size(), m.block_size(), ckpt, &o->block_size),
           ApplyModelField("n_layer", m.has_n_layer(), m.n_layer(), ckpt, &o->n_layer),
           ApplyModelField("n_head", m.has_n_head(), m.n_head(), ckpt, &o->n_head),
           ApplyModelField("n_embd", m.has_n_embd(), m.n_embd(), ckpt, &o->n_embd),
           ApplyModelField("gelu_tanh", m.has_gelu_tanh(), m.gelu_tanh(), ckpt, &o->gelu_tanh),
           ApplyModelField("n_kv_head", m.has_n_kv_head(), m.n_kv_head(), ckpt, &o->n_kv_head),
           ApplyModelField("intermediate_size", m.has_intermediate_size(), m.intermediate_size(),
                           ckpt, &o->intermediate_size),
           ApplyModelField("rope_theta", m.has_rope_theta(), m.rope_theta(), ckpt, &o->rope_theta),
           ApplyModelField("rms_norm_eps", m.has_rms_norm_eps(), m.rms_norm_eps(), ckpt,
                           &o->rms_norm_eps),
           ApplyModelField("tie_word_embeddings", m.has_tie_word_embeddings(),
                           m.tie_word_embeddings(), ckpt, &o->tie_word_embeddings),
       }) {
    if (!s.ok()) return s;
  }
  if (m.has_dropout()) o->dropout = m.dropout();  // training only: not in the architecture
  return absl::OkStatus();
}

void SetEffectiveModel(const models::ModelOptions& o, ModelConfig* e) {
  e->set_name(models::ModelName(o));
  if (o.family == models::ModelFamily::kResNet) {
    e->set_num_classes(o.num_classes);
    e->set_checkpoint_every(o.checkpoint_every);
    return;
  }
  e->set_vocab_size(o.vocab_size);
  e->set_block_size(o.block_size);
  e->set_n_layer(o.n_layer);
  e->set_n_head(o.n_head);
  e->set_n_embd(o.n_embd);
  e->set_checkpoint_every(o.checkpoint_every);
  if (!o.init_from.empty()) e->set_init_from(o.init_from);
  if (o.family == models::ModelFamily::kGpt2) {
    e->set_dropout(o.dropout);
    e->set_gelu_tanh(o.gelu_tanh);
    return;
  }
  e->set_n_kv_head(o.n_kv_head > 0 ? o.n_kv_head : o.n_head);
  e->set_intermediate_size(o.intermediate_size > 0
                               ? o.intermediate_size
                               : models::LlamaDefaultIntermediateSize(o.n_embd));
  e->set_rope_theta(o.rope_theta);
  e->set_rms_norm_eps(o.rms_norm_eps);
  e->set_tie_word_embeddings(o.tie_word_embeddings);
}

}  // namespace

absl::Status ModelFromConfig(const TrainerConfigProto& c, TrainerConfig* out,
                             std::vector<std::string>* warnings) {
  const ModelConfig& m = c.model();
  models::ModelOptions& g = out->model;
  const std::string name = absl::AsciiStrToLower(m.name());
  bool from_checkpoint = false;
  if (!m.init_from().empty()) {
    g.init_from = m.init_from();
    // The checkpoint's config.json, when it has one, gives the family and the architecture.
    absl::StatusOr<bool> read = hf::ReadHfArchitecture(g.init_from, &g);
    if (!read.ok())
      return Invalid("model.init_from", "\"" + g.init_from + "\"",
                     std::string(read.status().message()));
    from_checkpoint = *read;
  }
  if (!from_checkpoint || m.has_name()) {
    models::ModelFamily family;
    if (name == "gpt" || name == "gpt2") {
      family = models::ModelFamily::kGpt2;
    } else if (name == "llama") {
      family = models::ModelFamily::kLlama;
    } else if (name == "resnet18" || name == "resnet50") {
      family = models::ModelFamily::kResNet;
      g.depth = name == "resnet18" ? 18 : 50;
    } else {
      return Invalid("model.name", absl::StrCat("\"", m.name(), "\""),
                     "unknown model (known: gpt, gpt2, llama, resnet18, resnet50)");
    }
    if (from_checkpoint && family != g.family) {
      return Invalid("model.name", absl::StrCat("\"", m.name(), "\""),
                     absl::StrCat("model.init_from's config.json holds a ",
                                  models::ModelFamilyName(g.family), " model"));
    }
    g.family = family;
    g.name = m.name();
  }
  if (g.family == models::ModelFamily::kResNet) {
    for (const auto& [field, given] :
         std::vector<std::pair<const char*, bool>>{{"vocab_size", m.has_vocab_size()},
                                                   {"block_size", m.has_block_size()},
                                                   {"n_layer", m.has_n_layer()},
                                                   {"n_head", m.has_n_head()},
                                                   {"n_embd", m.has_n_embd()}}) {
      if (given) {
        return Invalid(absl::StrCat("model.", field), "(set)",
                       absl::StrCat("does not apply to model.name \"", m.name(), "\""));
      }
    }
    if (m.has_num_classes()) g.num_classes = m.num_classes();
  } else if (m.has_num_classes()) {
    return Invalid("model.num_classes", m.num_classes(),
                   "applies to the image classifiers (resnet18, resnet50) only");
  }
  ZT_RETURN_IF_ERROR(ApplyModelFields(m, from_checkpoint, &g));
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing();
  WarnModelParallelKeys(ac, warnings);
  // A ResNet's checkpointable units are its residual blocks (8 in ResNet-18, 16 in ResNet-50).
  const int64_t units =
      g.family == models::ModelFamily::kResNet ? (g.depth == 50 ? 16 : 8) : g.n_layer;
  absl::StatusOr<int64_t> every = CheckpointEvery(c, units, warnings);
  if (!every.ok()) return every.status();
  g.checkpoint_every = *every;
  g.cpu_checkpointing = ac.cpu_checkpointing();
  g.profile_checkpointing = ac.profile();
  out->activation_checkpointing.cpu_checkpointing = ac.cpu_checkpointing();
  out->activation_checkpointing.profile = ac.profile();
  if (absl::Status s = models::ValidateModelOptions(g); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", s.message()));
  }
  SetEffectiveModel(g, out->effective.mutable_model());
  return absl::OkStatus();
}

// Opens what data.path names before any rank starts: a text file, or every token file the list
// and globs expand to (headers and sizes only; the ids are checked as they are read).
absl::Status CheckDataFiles(const std::string& source, const std::string& path) {
  if (source == "text") {
    if (std::ifstream(path).good()) return absl::OkStatus();
    return absl::NotFoundError(std::string("cannot read: ") + std::strerror(errno));
  }
  ZT_ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandTokenFiles(path));
  if (source == "images") return absl::OkStatus();  // sizes and labels: LoadImages
  for (const std::string& file : files) {
    if (absl::StatusOr<TokenFileInfo> info = InspectTokenFile(file); !info.ok()) {
      return info.status();
    }
  }
  return absl::OkStatus();
}

absl::Status DataFromConfig(const TrainerConfigProto& c, DataOptions* data,
                            TrainerConfigProto* effective) {
  const DataConfig& d = c.data();
  const std::string source = absl::AsciiStrToLower(d.source());
  if (source == "embedded") {
    data->source = DataSource::kEmbedded;
  } else if (source == "text" || source == "tokens" || source == "images") {
    data->source = source == "text"     ? DataSource::kText
                   : source == "tokens" ? DataSource::kTokens
                                        : DataSource::kImages;
    if (d.path().empty())
      return Invalid("data.path", "\"\"", "data.source " + source + " needs a file");
    if (absl::Status s = CheckDataFiles(source, d.path()); !s.ok()) {
      return Invalid("data.path", "\"" + d.path() + "\"", std::string(s.message()));
    }
    data->path = d.path();
  } else {
    return Invalid("data.source", "\"" + d.source() + "\"",
                   "expected embedded, text, tokens or images");
  }
  if (!d.tokenizer().empty()) {
    if (data->source != DataSource::kText) {
      return Invalid("data.tokenizer", "\"" + d.tokenizer() + "\"",
                     "a tokenizer applies to data.source \"text\" only");
    }
    if (absl::StatusOr<std::unique_ptr<models::Tokenizer>> t =
            models::LoadSentencePiece(d.tokenizer());
        !t.ok()) {
      return Invalid("data.tokenizer", "\"" + d.tokenizer() + "\"",
                     std::string(t.status().message()));
    }
    data->tokenizer = d.tokenizer();
    effective->mutable_data()->set_tokenizer(d.tokenizer());
  }
  if (d.has_eval_fraction()) data->eval_fraction = d.eval_fraction();
  if (d.has_seed()) data->seed = d.seed();
  if (!(data->eval_fraction >= 0 && data->eval_fraction < 1)) {
    return Invalid("data.eval_fraction", data->eval_fraction, "must be in [0, 1)");
  }
  effective->mutable_data()->set_source(source);
  effective->mutable_data()->set_eval_fraction(data->eval_fraction);
  effective->mutable_data()->set_seed(data->seed);
  return absl::OkStatus();
}

}  // namespace zerotrain::trainer
