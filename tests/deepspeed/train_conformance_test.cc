// The end-to-end conformance check: one ds_config, trained by DeepSpeed 0.19.8 and by zerotrain,
// gives the same losses. DeepSpeed (ds_train_oracle.py) trains a PyTorch copy of the trainer's
// GPT from zerotrain's initial weights on zerotrain's micro-batches (train_inputs.h), 2 ranks on
// CPU over gloo, ZeRO stages 0-3; //trainer:main trains with --ds_config on the same file. With
// gradient accumulation, clipping, weight decay and a warm-up schedule, every step's loss (mean
// over micro-batches and ranks) agrees within 1e-5 relative in fp32 and 1% in bf16. Muon (fp32,
// stages 0-3; bf16 at stage 2) is held to the same bounds, or to 4x the difference between two
// zerotrain runs on 1 and 2 threads where fp16 Newton-Schulz makes that larger (stage 0). bf16
// master weights with bf16 optimizer states (stages 1-3) and bf16 master weights alone with
// offload (stage 2, DeepSpeedCPUAdam) are held to the bf16 bounds.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/deepspeed/conformance.h"
#include "tests/deepspeed/oracle.h"
#include "tests/deepspeed/train_inputs.h"
#include "trainer/config/config_loader.h"

namespace zerotrain::testing {
namespace {

constexpr int kRanks = 2;
constexpr int kSteps = 20;
std::string g_main;  // argv[1]: //trainer:main

struct Case {
  int stage;
  bool bf16;
  // Optimizer states (and at stage 3 parameters) offloaded to host memory. DeepSpeed then steps
  // torch's AdamW on its host shard (torch_adam), zerotrain its fused CPU Adam.
  bool offload = false;
  // The optimizer section; DeepSpeed builds torch.optim.Adagrad for "Adagrad".
  bool adagrad = false;
  // "Muon": MuonWithAuxAdam, Muon for the matrices (wte and wpe too: DeepSpeed's rule excludes
  // only names with "embed" or "lm_head") and torch.optim.AdamW for the rest.
  bool muon = false;
  // bf16.bf16_master_weights_and_grads: with bf16_optimizer_states where nothing is offloaded
  // (DeepSpeed steps torch's AdamW on its bf16 master partition), alone with offload (DeepSpeed
  // requires DeepSpeedCPUAdam there, with fp32 states).
  bool bf16_master = false;
  std::string name() const {
    return absl::StrCat("stage", stage, bf16 ? "_bf16" : "_fp32", offload ? "_offload" : "",
                        adagrad ? "_adagrad" : "", muon ? "_muon" : "",
                        bf16_master ? (offload ? "_master" : "_master_states") : "");
  }
};

std::string OptimizerSection(const Case& c) {
  if (c.adagrad) {
    return R"({"type": "Adagrad", "params": {"lr": 0.03, "weight_decay": 0.01,
                 "initial_accumulator_value": 0.1}})";
  }
  if (c.muon) {
    return R"({"type": "Muon", "params": {"lr": 0.003, "momentum": 0.9, "betas": [0.9, 0.95],
                 "weight_decay": 0.1, "torch_adam": true}})";
  }
  return absl::StrFormat(R"({"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95],
                 "weight_decay": 0.1, "torch_adam": %s}})",
                         c.bf16_master && c.offload ? "false" : "true");
}

// Small buckets, so each stage reduces (and stage 3 gathers and prefetches) several of them.
// DeepSpeed's stage 3 takes Muon only without reduce_scatter; its schedulers set one lr for Muon's
// and Adam's parameters alike, Muon's cases a larger one.
std::string DsConfig(const Case& c) {
  return absl::StrFormat(
      R"({
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 0.5,
  "optimizer": %s,
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_num_steps": 8%s}},
  "zero_optimization": {"stage": %d, "reduce_bucket_size": 20000, "allgather_bucket_size": 20000,
                        "stage3_prefetch_bucket_size": 10000,
                        "stage3_param_persistence_threshold": 100%s%s},
  "bf16": {"enabled": %s%s}
})",
      OptimizerSection(c), c.muon ? R"(, "warmup_max_lr": 0.02)" : "", c.stage,
      c.muon && c.stage == 3 ? R"(, "reduce_scatter": false)" : "",
      !c.offload    ? ""
      : c.stage < 3 ? R"(, "offload_optimizer": {"device": "cpu"})"
                    : R"(, "offload_optimizer": {"device": "cpu"},)"
                      R"( "offload_param": {"device": "cpu"})",
      c.bf16 ? "true" : "false",
      !c.bf16_master ? ""
      : c.offload    ? R"(, "bf16_master_weights_and_grads": true)"
                     : R"(, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true)");
}

// zerotrain's own sections: the model, data and run, and a CSV of the losses at full precision.
std::string RunPbtxt(const std::string& output_dir) {
  return absl::StrCat(R"(model { name: "gpt" n_layer: 2 n_head: 4 n_embd: 64 block_size: 32 }
data { source: "embedded" seed: 7 }
csv_monitor { enabled: true job_name: "t" }
run { steps: )",
                      kSteps, R"( seed: 3 eval_interval: 0 eval_iters: 1 sample_tokens: 1
      output_dir: ")",
                      output_dir, "\" }\n");
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// The "loss" column of the trainer's metrics.csv, one value per step.
std::vector<double> CsvLosses(const std::string& csv) {
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  std::vector<double> out;
  if (lines.empty()) return out;
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  const auto column = std::find(header.begin(), header.end(), "loss") - header.begin();
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    double v = NAN;
    if (column < static_cast<long>(fields.size()) && absl::SimpleAtod(fields[column], &v)) {
      out.push_back(v);
    }
  }
  return out;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool bf16 : {false, true}) cases.push_back({stage, bf16});
  }
  cases.push_back({2, false, true});
  cases.push_back({3, true, true});
  cases.push_back({.stage = 2, .bf16 = false, .adagrad = true});
  for (int stage = 0; stage <= 3; ++stage) cases.push_back({.stage = stage, .muon = true});
  cases.push_back({.stage = 2, .bf16 = true, .muon = true});
  for (int stage = 1; stage <= 3; ++stage) {
    cases.push_back({.stage = stage, .bf16 = true, .bf16_master = true});
  }
  cases.push_back({.stage = 2, .bf16 = true, .offload = true, .bf16_master = true});
  return cases;
}

// Muon unclipped before Newton-Schulz (stage 0) is where fp16 products amplify thread-order
// roundings beyond 1e-5 (measured: stage 0 1.1e-4, stages 1-3 below 5e-6).
bool NeedsThreadFloor(const Case& c) { return c.muon && c.stage == 0; }

class TrainConformance : public ::testing::TestWithParam<Case> {
 protected:
  // Writes every case's inputs and runs DeepSpeed once for all of them.
  static void SetUpTestSuite() {
    dir_ = new std::string(OracleTempDir("train_conformance"));
    OracleTempDir("train_conformance/cases");
    oracle_ = new absl::StatusOr<google::protobuf::Struct>(absl::InternalError("not run"));
    absl::Status written = absl::OkStatus();
    for (const Case& c : Cases()) {
      const std::string base = *dir_ + "/cases/" + c.name();
      Write(base + ".json", DsConfig(c));
      Write(base + ".pbtxt", RunPbtxt(*dir_ + "/zerotrain_" + c.name()));
      if (NeedsThreadFloor(c)) {
        Write(base + "_threads.pbtxt", RunPbtxt(*dir_ + "/threads_" + c.name()));
      }
      auto config = Load(c);
      if (written.ok()) written = config.status();
      if (!config.ok()) continue;
      if (written.ok() && c.stage == 0 && !c.bf16) {
        written = WriteModelAndBatches(*config, kRanks, kSteps, *dir_);
      }
      if (written.ok()) written = WriteInitialWeights(*config, base + ".pt");
    }
    if (!written.ok()) {
      *oracle_ = written;
      return;
    }
    // The pbtxt files sit beside the ds_configs; the oracle reads only the *.json ones.
    auto out = RunOracle("tests/deepspeed/ds_train_oracle.py", {*dir_, std::to_string(kSteps)},
                         {.deadline = std::chrono::seconds(600), .env = {}});
    *oracle_ = out.ok() ? ParseJsonObject(*out) : out.status();
  }

  static absl::StatusOr<trainer::TrainerConfig> Load(const Case& c) {
    const std::string base = *dir_ + "/cases/" + c.name();
    std::vector<std::string> warnings;
    auto proto = trainer::LoadConfigProto({base + ".pbtxt", base + ".json"}, &warnings);
    if (!proto.ok()) return proto.status();
    return trainer::ValidateConfig(*proto, kRanks, &warnings);
  }

  static std::string* dir_;
  static absl::StatusOr<google::protobuf::Struct>* oracle_;
};

std::string* TrainConformance::dir_ = nullptr;
absl::StatusOr<google::protobuf::Struct>* TrainConformance::oracle_ = nullptr;

// The largest |got - want| / |want| over the steps; each step beyond `tolerance` is a failure.
double ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                   double tolerance, const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double relative = std::abs(got[i] - want[i]) / std::abs(want[i]);
    worst = std::max(worst, relative);
    EXPECT_LE(relative, tolerance)
        << what << ", step " << i + 1 << ": zerotrain " << got[i] << ", DeepSpeed " << want[i];
  }
  return worst;
}

TEST_P(TrainConformance, LossesMatchDeepSpeedStepByStep) {
  const Case& c = GetParam();
  ASSERT_TRUE(oracle_->ok()) << oracle_->status();
  const auto& fields = (*oracle_)->fields();
  for (const std::string& name : {c.name(), Case{1, c.bf16}.name()}) {
    ASSERT_TRUE(fields.contains(name)) << "DeepSpeed gave nothing for " << name;
    ASSERT_EQ(Numbers(fields.at(name)).size(), static_cast<size_t>(kSteps)) << name;
  }
  const std::vector<double> expected = Numbers(fields.at(c.name()));

  const std::string base = *dir_ + "/cases/" + c.name();
  // The launcher gives each rank one intra-op thread unless OMP_NUM_THREADS says otherwise.
  const auto train = [&](const std::string& config, const std::string& out,
                         const std::map<std::string, std::string>& env) -> std::vector<double> {
    auto run = RunProgram({g_main, "--config=" + config, "--ds_config=" + base + ".json",
                           absl::StrCat("--master_port=", FreePort())},
                          {.deadline = std::chrono::seconds(300), .env = env});
    EXPECT_TRUE(run.ok()) << run.status();
    const std::vector<double> losses = CsvLosses(Read(*dir_ + "/" + out + "/t/metrics.csv"));
    EXPECT_EQ(losses.size(), expected.size()) << (run.ok() ? *run : "");
    return losses;
  };
  const std::vector<double> got = train(base + ".pbtxt", "zerotrain_" + c.name(), {});
  ASSERT_EQ(got.size(), expected.size());
  double tolerance = c.bf16 ? 1e-2 : 1e-5;
  if (NeedsThreadFloor(c)) {
    // Newton-Schulz multiplies in fp16 here as in DeepSpeed (oneDNN's fp16 GEMMs, on a CPU with
    // AVX512-FP16), whose roundings change with the threads that split a product; 20 steps of
    // unclipped Muon (stage 0) grow that to ~1e-4 of the loss. The same run on 2 threads measures
    // that floor, and DeepSpeed must come within 4x of it (a Newton-Schulz iteration fewer moves
    // the losses by 3e-3 at stage 2, 8e-2 at stage 0).
    const std::vector<double> threads =
        train(base + "_threads.pbtxt", "threads_" + c.name(), {{"OMP_NUM_THREADS", "2"}});
    ASSERT_EQ(threads.size(), expected.size());
    double floor = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      floor = std::max(floor, std::abs(threads[i] - got[i]) / std::abs(got[i]));
    }
    EXPECT_LE(floor, 1e-3) << "zerotrain on 1 and on 2 threads";
    tolerance = std::max(tolerance, 4 * floor);
    std::printf("%s: zerotrain on 1 and 2 threads differ by up to %.2e\n", c.name().c_str(), floor);
  }

  // The run must learn, or equal losses would prove little: 20 steps take a random GPT well
  // below its first loss.
  EXPECT_LT(expected.back(), expected.front() - 0.3);
  // The issue's bounds: fp32 1e-5, bf16 1%, against DeepSpeed at the same stage.
  const double worst = ExpectClose(got, expected, tolerance, c.name());
  std::printf("%s: DeepSpeed's loss %.4f -> %.4f over %d steps; largest relative difference %.2e\n",
              c.name().c_str(), expected.front(), expected.back(), kSteps, worst);
  if (c.bf16) {
    // Tighter in bf16, against DeepSpeed's ZeRO optimizer. At stage 0 DeepSpeed 0.19.8 steps bf16
    // through another optimizer (its unfused FP16_Optimizer in bf16 mode), which drifts up to
    // ~1% from its own ZeRO stages; zerotrain's stage 0 follows the ZeRO stages (same initial
    // weights at stages 0-2), so it is held to stage 1's losses instead.
    // With bf16 master weights and states DeepSpeed's stage 3 steps torch's AdamW in bf16 on the
    // parameter partition itself and ends 0.6% above its own stages 1-2 (loss 3.314 against
    // 3.293 at step 20); zerotrain computes in fp32 at every stage and ends with its stages 1-2,
    // 0.4% below DeepSpeed's stage 3 (measured 4.1e-3): that case is held to 5e-3.
    const Case zero{std::max(c.stage, 1), true, c.offload, c.adagrad, c.muon, c.bf16_master};
    const double tight_bound = c.bf16_master && c.stage == 3 && !c.offload ? 5e-3 : 1e-3;
    const double tight = ExpectClose(got, Numbers(fields.at(zero.name())), tight_bound,
                                     c.name() + " against DeepSpeed's " + zero.name());
    std::printf("%s: largest relative difference from DeepSpeed's %s %.2e\n", c.name().c_str(),
                zero.name().c_str(), tight);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, TrainConformance, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace zerotrain::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_conformance_test <path of //trainer:main>\n");
    return 2;
  }
  zerotrain::testing::g_main = argv[1];
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // CPU runs on both sides, whatever the machine
  return RUN_ALL_TESTS();
}
