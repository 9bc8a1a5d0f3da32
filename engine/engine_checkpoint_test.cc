// Engine::SaveCheckpoint / LoadCheckpoint over real ranks (SpawnRanks). Each case trains 10
// steps, saves, builds a NEW module and engine (parameters perturbed first, so only the load can
// make them right), loads and trains 10 more. Same world size and stage: the fp32 master must be
// bitwise the one of 20 straight steps in the same rank. Another world size or stage: the
// parameters must match the single-process torch::optim::AdamW reference within fp32 rounding.
// Different world sizes run in one SpawnRanks call: ranks form a sub-group of the needed size
// for the save and another for the load, on ports rank 0 picks and broadcasts.
// The second group of tests feeds LoadCheckpoint bad input and checks the errors' words; the
// third, that the RNG states come back.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/shard_file.h"
#include "engine/engine.h"
#include "engine/test_models.h"
#include "gtest/gtest.h"
#include "tests/spawn_ranks.h"
#include "tests/test_mode.h"
#include "tools/status_macros.h"

namespace zerotrain::engine {
namespace {

using testing::ModelKind;
constexpr int64_t kBatch = 12;  // divisible by every world size used (1-4)

std::string TestDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return absl::StrCat(base ? base : "/tmp", "/", name);
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

struct Case {
  std::string name;
  ModelKind model = ModelKind::kMlp;
  int save_world = 2, save_stage = 1;
  int load_world = 2, load_stage = 1;
  int gas = 1;
  Precision precision = Precision::kFloat32;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

EngineOptions OptionsFor(const Case& c, int stage) {
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = kBatch;
  o.gradient_accumulation_steps = c.gas;
  o.reduce_bucket_size = 64;
  o.allgather_bucket_size = 64;
  o.adam.lr = 1e-3;
  o.adam.weight_decay = 0.01;
  o.precision = c.precision;
  o.stage3.persistence_threshold = 0;  // these models are tiny: shard every submodule
  if (c.precision == Precision::kFloat16) {
    // Starts too high, so early steps overflow and are skipped, then regrows every 3 steps:
    // the resumed run only matches if the scaler's whole state came back.
    o.fp16.initial_scale_power = 30;
    o.fp16.loss_scale_window = 3;
    o.fp16.hysteresis = 2;
  }
  return o;
}

absl::Status Train(Engine& engine, testing::TestNet& net, const Case& c, int world, int rank,
                   int from, int to) {
  const int64_t micro = engine.batch().micro_batch_size;
  for (int step = from; step < to; ++step) {
    testing::Batch b = testing::GlobalBatch(c.model, step, kBatch);
    for (int g = 0; g < c.gas; ++g) {
      const int64_t first = (g * world + rank) * micro;
      torch::Tensor loss;
      {
        auto forward = engine.BeginForward();
        loss = testing::Loss(net, b.x.narrow(0, first, micro), b.y.narrow(0, first, micro));
      }
      ZT_RETURN_IF_ERROR(engine.Backward(loss));
      ZT_RETURN_IF_ERROR(engine.Step());
    }
  }
  return absl::OkStatus();
}

// The group of the first `world` ranks: the full one, or a new one on `port`.
absl::StatusOr<std::unique_ptr<comm::ProcessGroup>> SubGroup(int rank, int world, int port) {
  comm::RendezvousInfo info;
  info.rank = rank;
  info.world_size = world;
  info.local_rank = rank;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  return comm::ProcessGroup::Create(info, {});
}

// Every parameter's values end to end, as fp32 (gathered at stage 3).
absl::StatusOr<at::Tensor> AllParams(Engine& engine, testing::TestNet& net) {
  ZT_ASSIGN_OR_RETURN(auto gathered, engine.GatherParameters(testing::UniqueParameters(net)));
  std::vector<at::Tensor> parts;
  for (const at::Tensor& p : testing::UniqueParameters(net)) {
    parts.push_back(p.detach().reshape({-1}).to(at::kFloat));
  }
  at::Tensor all = at::cat(parts);
  ZT_RETURN_IF_ERROR(gathered->Close());
  return all;
}

absl::StatusOr<std::string> RunCase(const Case& c) {
  ZT_ASSIGN_OR_RETURN(auto full, testing::JoinGroupFromEnv());
  const int rank = full->rank();
  at::Tensor ports = at::tensor({int64_t{FreePort()}, int64_t{FreePort()}}, at::kLong);
  ZT_RETURN_IF_ERROR(full->Broadcast(ports, 0));
  const std::string dir = TestDir(c.name);
  const bool exact = c.save_world == c.load_world && c.save_stage == c.load_stage;
  at::Tensor straight_master, saved_params;
  double straight_scale = 0;
  // The mixed-dtype model has no fp32 reference to reshard against (its bf16 layer rounds
  // differently on every world size): there the load must restore the saved values bitwise.
  const bool compare_saved = !exact && c.model == ModelKind::kMixedMlp;
  std::unique_ptr<comm::ProcessGroup> save_group, load_group;
  if (rank < c.save_world) {
    comm::ProcessGroup* g = full.get();
    if (c.save_world != full->world_size()) {
      ZT_ASSIGN_OR_RETURN(save_group, SubGroup(rank, c.save_world, ports[0].item<int64_t>()));
      g = save_group.get();
    }
    auto net = testing::MakeNet(c.model);
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, OptionsFor(c, c.save_stage), g));
    ZT_RETURN_IF_ERROR(Train(*engine, *net, c, c.save_world, rank, 0, 10));
    ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(dir, "", {{"sampler", "10"}}));
    if (compare_saved) {
      ZT_ASSIGN_OR_RETURN(saved_params, AllParams(*engine, *net));
    }
    if (exact) {
      ZT_RETURN_IF_ERROR(Train(*engine, *net, c, c.save_world, rank, 10, 20));
      ZT_ASSIGN_OR_RETURN(straight_master, engine->MasterCopy());
      straight_scale = engine->loss_scale();
      if (c.precision == Precision::kFloat16 && engine->skipped_steps() == 0) {
        return absl::InternalError("fp16 case never overflowed: the scaler is not exercised");
      }
    }
  }
  ZT_RETURN_IF_ERROR(full->Barrier());
  if (rank < c.load_world) {
    comm::ProcessGroup* g = full.get();
    if (c.load_world != full->world_size()) {
      ZT_ASSIGN_OR_RETURN(load_group, SubGroup(rank, c.load_world, ports[1].item<int64_t>()));
      g = load_group.get();
    }
    auto net = testing::MakeNet(c.model);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.add_(1.0);
    }
    ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, OptionsFor(c, c.load_stage), g));
    ZT_ASSIGN_OR_RETURN(auto client, engine->LoadCheckpoint(dir));
    if (client["sampler"] != "10" || engine->optimizer_steps() + engine->skipped_steps() != 10) {
      return absl::InternalError(absl::StrCat("client state '", client["sampler"], "', ",
                                              engine->optimizer_steps(), " steps after load"));
    }
    if (compare_saved && saved_params.defined()) {
      ZT_ASSIGN_OR_RETURN(at::Tensor loaded, AllParams(*engine, *net));
      if (!at::equal(loaded, saved_params)) {
        return absl::InternalError(
            absl::StrCat("loaded parameters differ from the saved ones; max ",
                         (loaded - saved_params).abs().max().item<double>()));
      }
    }
    ZT_RETURN_IF_ERROR(Train(*engine, *net, c, c.load_world, rank, 10, 20));
    if (exact) {
      ZT_ASSIGN_OR_RETURN(at::Tensor master, engine->MasterCopy());
      if (!at::equal(master, straight_master)) {
        const double d = (master - straight_master).abs().max().item<double>();
        return absl::InternalError(absl::StrCat("resumed master differs from straight; max ", d));
      }
      if (engine->loss_scale() != straight_scale) {
        return absl::InternalError(
            absl::StrCat("loss scale ", engine->loss_scale(), " vs ", straight_scale));
      }
    } else if (!compare_saved) {
      testing::ReferenceOptions ro;
      ro.steps = 20;
      ro.batch = kBatch;
      ZT_RETURN_IF_ERROR(testing::MatchesReference(*engine, *net, c.model, ro));
    }
  }
  ZT_RETURN_IF_ERROR(full->Barrier());
  return std::string("ok");
}

class ResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(ResumeTest, ContinuesExactly) {
  const Case c = GetParam();
  std::filesystem::remove_all(TestDir(c.name));
  const int world = std::max(c.save_world, c.load_world);
  auto outcomes = zerotrain::testing::SpawnRanks(world, [c](int) { return RunCase(c); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

Case Make(std::string name, ModelKind m, int sw, int ss, int lw, int ls, int gas = 1,
          Precision p = Precision::kFloat32) {
  return Case{std::move(name), m, sw, ss, lw, ls, gas, p};
}

INSTANTIATE_TEST_SUITE_P(
    Exact, ResumeTest,
    ::testing::Values(Make("stage0", ModelKind::kMlp, 2, 0, 2, 0),
                      Make("stage1", ModelKind::kMlp, 2, 1, 2, 1),
                      Make("stage2", ModelKind::kTransformer, 2, 2, 2, 2),
                      Make("stage2_gas", ModelKind::kMlp, 2, 2, 2, 2, 2),
                      Make("stage1_bf16", ModelKind::kMlp, 2, 1, 2, 1, 1, Precision::kBFloat16),
                      Make("stage0_bf16", ModelKind::kMlp, 2, 0, 2, 0, 1, Precision::kBFloat16),
                      Make("stage2_fp16", ModelKind::kMlp, 2, 2, 2, 2, 2, Precision::kFloat16),
                      Make("stage3", ModelKind::kTransformer, 2, 3, 2, 3),
                      Make("stage3_tied_bf16", ModelKind::kTied, 2, 3, 2, 3, 1,
                           Precision::kBFloat16),
                      // fp32 and bf16 groups; at stage 0 on 4 ranks the bf16 group (90
                      // elements) is padded before the fp32 one, a gap the file must not hold.
                      Make("mixed_stage0", ModelKind::kMixedMlp, 4, 0, 4, 0),
                      Make("mixed_stage2", ModelKind::kMixedMlp, 2, 2, 2, 2)),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Reshard, ResumeTest,
    ::testing::Values(Make("w4_to_w2", ModelKind::kTransformer, 4, 2, 2, 2),
                      Make("w2_to_w4", ModelKind::kMlp, 2, 1, 4, 1),
                      Make("w1_to_w3", ModelKind::kMlp, 1, 1, 3, 1),
                      Make("stage1_to_stage2", ModelKind::kTransformer, 2, 1, 2, 2),
                      Make("stage2_to_stage0", ModelKind::kMlp, 2, 2, 3, 0),
                      Make("stage0_to_stage2", ModelKind::kMlp, 3, 0, 2, 2),
                      Make("stage3_to_stage1_w4", ModelKind::kTransformer, 2, 3, 4, 1),
                      Make("stage2_w4_to_stage3_w3", ModelKind::kTransformer, 4, 2, 3, 3),
                      Make("tied_stage3_to_stage0", ModelKind::kTied, 3, 3, 1, 0),
                      Make("mixed_stage0_w4_to_stage2_w2", ModelKind::kMixedMlp, 4, 0, 2, 2),
                      Make("mixed_stage2_w2_to_stage1_w3", ModelKind::kMixedMlp, 2, 2, 3, 1)),
    [](const auto& info) { return info.param.name; });

// --- Bad input: every error names the file (or parameter) and what is wrong. ---

// Two linear layers whose second layer's name and width are chosen by the test.
struct Named : torch::nn::Module {
  Named(const std::string& second, int64_t hidden) {
    torch::manual_seed(0);
    a = register_module("fc1", torch::nn::Linear(4, hidden));
    b = register_module(second, torch::nn::Linear(hidden, 3));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

absl::Status Expect(const absl::Status& s, const std::vector<std::string>& words,
                    const std::string& what) {
  if (s.ok()) return absl::InternalError(absl::StrCat(what, ": no error"));
  for (const std::string& w : words) {
    if (s.message().find(w) == std::string::npos) {
      return absl::InternalError(absl::StrCat(what, ": error lacks '", w, "': ", s.message()));
    }
  }
  return absl::OkStatus();
}

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

EngineOptions SmallOptions(int stage) {
  EngineOptions o;
  o.stage = stage;
  o.train_batch_size = 4;
  o.reduce_bucket_size = 8;
  return o;
}

absl::Status Step(Engine& e, Named& net) {
  torch::Tensor x = torch::ones({2, 4});
  ZT_RETURN_IF_ERROR(e.Backward(net.b(torch::tanh(net.a(x))).pow(2).mean()));
  return e.Step();
}

// Copies <base>/t to <dir>/t and points <dir>/latest at it; rank 0 only.
std::string Variant(const std::string& base, const std::string& name) {
  const std::string dir = TestDir(absl::StrCat("bad/", name));
  std::filesystem::create_directories(dir);
  std::filesystem::copy(base + "/t", dir + "/t", std::filesystem::copy_options::recursive);
  std::filesystem::copy(base + "/latest", dir + "/latest");
  return dir;
}

absl::StatusOr<std::string> BadInput() {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const int rank = group->rank();
  const std::string base = TestDir("bad/base");
  Named net("fc2", 5);
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(net, SmallOptions(1), group.get()));
  ZT_RETURN_IF_ERROR(Step(*engine, net));
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(base, "t"));
  ZT_RETURN_IF_ERROR(Expect(engine->SaveCheckpoint(base, "t"),
                            {rank == 0 ? "bad/base/latest names" : "rank(s) 0 failed"},
                            "same tag"));
  // A save killed between its manifest and `latest` leaves a complete tag `latest` does not
  // name; the resumed run reaches the same tag and must be able to write it again.
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(TestDir("bad/unlisted"), "t"));
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(TestDir("bad/unlisted"), "u"));
  if (rank == 0) ZT_RETURN_IF_ERROR(checkpoint::WriteLatest(TestDir("bad/unlisted"), "t"));
  ZT_RETURN_IF_ERROR(group->Barrier());
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(TestDir("bad/unlisted"), "u"));
  ZT_ASSIGN_OR_RETURN(const std::string latest, checkpoint::ReadLatest(TestDir("bad/unlisted")));
  if (latest != "u") return absl::InternalError("rewriting an unlisted tag did not list it");
  if (rank == 0) {
    std::filesystem::remove(Variant(base, "missing") + "/t/rank_1.zts");
    const std::string flipped = Variant(base, "flipped") + "/t/rank_0.zts";
    auto reader = checkpoint::ShardFileReader::Open(flipped);
    if (!reader.ok()) return reader.status();
    const int64_t at = reader->Find(checkpoint::kMasterArray)->data_offset + 5;
    FlipByte(flipped, at);
    FlipByte(Variant(base, "header") + "/t/rank_1.zts", 30);
    const std::string truncated = Variant(base, "truncated") + "/t/rank_0.zts";
    std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 10);
    const std::string newer = Variant(base, "newer") + "/t/manifest.ztm";
    std::fstream f(newer, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put(9);
    f.close();
    FlipByte(Variant(base, "manifest_flip") + "/t/manifest.ztm", 40);
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  auto bad = [&](const std::string& name) { return TestDir("bad/" + name); };
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(bad("missing")).status(),
                            {"rank_1.zts is missing"}, "missing shard"));
  ZT_RETURN_IF_ERROR(Expect(
      engine->LoadCheckpoint(bad("flipped")).status(),
      rank == 0
          ? std::vector<std::string>{"flipped/t/rank_0.zts", "checksum mismatch in array master"}
          : std::vector<std::string>{"rank(s) 0 failed"},
      "flipped data byte"));
  ZT_RETURN_IF_ERROR(
      // Every rank opens every file's header (to check whose file it is).
      Expect(engine->LoadCheckpoint(bad("header")).status(),
             {"header/t/rank_1.zts", "header checksum mismatch"}, "flipped header byte"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(bad("truncated")).status(),
                            {"truncated/t/rank_0.zts", "truncated"}, "truncated shard"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(bad("newer")).status(),
                            {"newer/t/manifest.ztm", "format version 9 is newer"}, "newer"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(bad("manifest_flip")).status(),
                            {"manifest_flip/t/manifest.ztm", "checksum mismatch"}, "manifest"));
  ZT_RETURN_IF_ERROR(Expect(engine->LoadCheckpoint(bad("nothing")).status(),
                            {"no checkpoint in", "bad/nothing"}, "empty directory"));
  // The failed loads left the engine as it was: a good load still works.
  ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(base).status());

  Named renamed("out", 5), reshaped("fc2", 6);
  ZT_ASSIGN_OR_RETURN(auto e1, Engine::Create(renamed, SmallOptions(2), group.get()));
  ZT_RETURN_IF_ERROR(Expect(e1->LoadCheckpoint(base).status(),
                            {"the model differs from checkpoint", "bad/base/t/manifest.ztm",
                             "'fc2.bias' [3] Float in the checkpoint and 'out.bias' [3] Float"},
                            "renamed parameter"));
  ZT_ASSIGN_OR_RETURN(auto e2, Engine::Create(reshaped, SmallOptions(0), group.get()));
  ZT_RETURN_IF_ERROR(Expect(e2->LoadCheckpoint(base).status(),
                            {"'fc2.weight' [3, 5] Float in the checkpoint and 'fc2.weight' [3, 6]"},
                            "reshaped parameter"));
  Named other("fc2", 5);
  EngineOptions sgd = SmallOptions(1);
  sgd.optimizer = OptimizerKind::kSgd;
  sgd.sgd.momentum = 0.9;
  ZT_ASSIGN_OR_RETURN(auto e3, Engine::Create(other, sgd, group.get()));
  ZT_RETURN_IF_ERROR(Expect(e3->LoadCheckpoint(base).status(),
                            {"holds optimizer states [exp_avg, exp_avg_sq] (AdamW)", "SGD"},
                            "other optimizer"));
  Named gas_net("fc2", 5);
  EngineOptions gas = SmallOptions(1);
  gas.gradient_accumulation_steps = 2;
  ZT_ASSIGN_OR_RETURN(auto e4, Engine::Create(gas_net, gas, group.get()));
  ZT_RETURN_IF_ERROR(Step(*e4, gas_net));
  ZT_RETURN_IF_ERROR(Expect(e4->SaveCheckpoint(TestDir("bad/gas")),
                            {"inside an accumulation window"}, "mid-accumulation save"));
  // Ranks given different tags: checkpoint.tag_validation Fail refuses on every rank before
  // anything is written.
  Named tag_net("fc2", 5);
  EngineOptions strict = SmallOptions(1);
  strict.tag_validation = TagValidation::kFail;
  ZT_ASSIGN_OR_RETURN(auto e5, Engine::Create(tag_net, strict, group.get()));
  ZT_RETURN_IF_ERROR(Step(*e5, tag_net));
  ZT_RETURN_IF_ERROR(Expect(
      e5->SaveCheckpoint(TestDir("bad/tags"), rank == 0 ? "a" : "b"),
      {rank == 0 ? "checkpoint tag \"a\" is not rank 1's" : "checkpoint tag \"b\" is not rank 0's",
       "checkpoint.tag_validation"},
      "different tags"));
  if (std::filesystem::exists(TestDir("bad/tags") + "/a")) {
    return absl::InternalError("a refused save wrote its tag directory");
  }
  return std::string("ok");
}

TEST(CheckpointErrors, NameTheFileAndTheProblem) {
  std::filesystem::remove_all(TestDir("bad"));
  auto outcomes = zerotrain::testing::SpawnRanks(2, [](int) { return BadInput(); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

// --- RNG states: each rank's CPU generator, and each CUDA generator it uses, come back on a load
// at the same world size (rank r gets rank r's) and are left alone on another world size. ---

at::Tensor Draw(const c10::Device& d) {
  return torch::rand({4}, torch::TensorOptions().device(d)).cpu();
}

absl::StatusOr<std::string> RngRoundTrip(const std::string& name,
                                         const std::vector<c10::Device>& devices) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  const int rank = group->rank();
  const std::string dir = TestDir(name);
  const std::string where = absl::StrCat("rank ", rank, ": ");
  torch::manual_seed(100 + rank);  // a load that mixed up the ranks' states would show
  Named net("fc2", 5);
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(net, SmallOptions(1), group.get()));
  ZT_RETURN_IF_ERROR(Step(*engine, net));
  ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(dir, "t"));
  std::vector<at::Tensor> want;
  for (const c10::Device& d : devices) want.push_back(Draw(d));
  // The current device's entry exists exactly when CUDA is available; without it the file holds
  // what it held before CUDA states were saved.
  ZT_ASSIGN_OR_RETURN(auto reader, checkpoint::CheckpointReader::Open(dir, "t"));
  const bool has_cuda = torch::cuda::is_available();
  auto entry = reader->ReadRankBytes(rank, "cuda_rng_state_0");
  if (has_cuda ? !entry.ok() : !absl::IsNotFound(entry.status())) {
    return absl::InternalError(absl::StrCat(
        where, "CUDA ", has_cuda ? "" : "not ",
        "available, cuda_rng_state_0: ", entry.ok() ? "present" : entry.status().ToString()));
  }
  torch::manual_seed(7);
  ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(dir, "t").status());
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!at::equal(Draw(devices[i]), want[i])) {
      return absl::InternalError(
          absl::StrCat(where, devices[i].str(), "'s generator is not the saved one after load"));
    }
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  if (rank == 0) {
    ZT_ASSIGN_OR_RETURN(auto single, SubGroup(0, 1, FreePort()));
    Named other("fc2", 5);
    ZT_ASSIGN_OR_RETURN(auto e1, Engine::Create(other, SmallOptions(1), single.get()));
    torch::manual_seed(7);
    std::vector<at::Tensor> fresh;
    for (const c10::Device& d : devices) fresh.push_back(Draw(d));
    torch::manual_seed(7);
    ZT_RETURN_IF_ERROR(e1->LoadCheckpoint(dir, "t").status());
    for (size_t i = 0; i < devices.size(); ++i) {
      if (!at::equal(Draw(devices[i]), fresh[i])) {
        return absl::InternalError(absl::StrCat(where, "a load on another world size changed ",
                                                devices[i].str(), "'s generator"));
      }
    }
  }
  ZT_RETURN_IF_ERROR(group->Barrier());
  return std::string("ok");
}

void ExpectRngRoundTrip(const std::string& name, const std::vector<c10::Device>& devices) {
  std::filesystem::remove_all(TestDir(name));
  auto outcomes =
      zerotrain::testing::SpawnRanks(2, [&](int) { return RngRoundTrip(name, devices); });
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.status.ok()) << zerotrain::testing::FormatOutcomes(outcomes);
  }
}

TEST(CheckpointRng, CpuStatePerRank) { ExpectRngRoundTrip("rng_cpu", {c10::Device(c10::kCPU)}); }

// Built with --config=cuda, the test links LibTorch's CUDA libraries (engine/BUILD); tools/
// gpu_check.sh runs it on a GPU machine.
TEST(CheckpointRng, CudaStatePerRank) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device visible, or built without --config=cuda (LibTorch's CUDA "
                    "libraries not linked)";
  }
  ExpectRngRoundTrip("rng_cuda", {c10::Device(c10::kCPU), c10::Device(c10::kCUDA, 0)});
}

// --- Crash safety: a rank saving in a loop is SIGKILLed at a random moment (SpawnRanks'
// deadline); afterwards `latest` must name a complete, loadable checkpoint. The instances share
// one directory and each resumes from it, so half-written tags of earlier kills are met again.

absl::StatusOr<std::string> SaveForever(const std::string& dir) {
  ZT_ASSIGN_OR_RETURN(auto group, testing::JoinGroupFromEnv());
  Case c;
  c.model = ModelKind::kTransformer;
  auto net = testing::MakeNet(c.model);
  ZT_ASSIGN_OR_RETURN(auto engine, Engine::Create(*net, OptionsFor(c, 1), group.get()));
  if (std::filesystem::exists(dir + "/latest"))
    ZT_RETURN_IF_ERROR(engine->LoadCheckpoint(dir).status());
  for (int step = 0;; ++step) {
    ZT_RETURN_IF_ERROR(Train(*engine, *net, c, 1, 0, step % 20, step % 20 + 1));
    ZT_RETURN_IF_ERROR(engine->SaveCheckpoint(dir));
  }
}

class CrashTest : public ::testing::TestWithParam<int> {};

TEST_P(CrashTest, LatestIsAlwaysLoadable) {
  const std::string dir = TestDir("crash");
  zerotrain::testing::SpawnOptions options;
  options.deadline = std::chrono::milliseconds(GetParam());
  auto outcomes = zerotrain::testing::SpawnRanks(
      1, [dir](int) { return SaveForever(dir); }, options);
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_EQ(outcomes[0].status.code(), absl::StatusCode::kDeadlineExceeded)
      << zerotrain::testing::FormatOutcomes(outcomes);
  if (!std::filesystem::exists(dir + "/latest")) return;  // killed before the first save ended
  auto reader = checkpoint::CheckpointReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->VerifyFileChecksums().ok()) << (*reader)->VerifyFileChecksums();
  std::vector<float> all((*reader)->numel());
  for (const std::string& a : {std::string(checkpoint::kMasterArray), std::string("exp_avg")}) {
    ASSERT_TRUE((*reader)->ReadFlat(a, 0, (*reader)->numel(), all.data()).ok());
  }
  int tags = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) tags += entry.is_directory();
  std::cout << "after " << GetParam() << " ms: latest " << (*reader)->manifest().tag() << ", "
            << tags << " tag directories\n";
}

// Kill times spread over the first saves; the short mode (tests/test_mode.h) keeps every other.
std::vector<int> KillTimes() {
  const std::vector<int> all = {700, 1100, 1350, 1500, 1730, 1910, 2200, 2450};
  if (zerotrain::testing::FullTestMode()) return all;
  return {all[0], all[2], all[4], all[6]};
}
INSTANTIATE_TEST_SUITE_P(KillAfterMs, CrashTest, ::testing::ValuesIn(KillTimes()));

}  // namespace
}  // namespace zerotrain::engine
