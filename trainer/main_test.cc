// //trainer:main as a user runs it, in a child process: a short 2-rank run whose loss falls and
// whose monitors are written; the banner, configuration table and summary naming the device and
// offload tiers; a rank killed mid-run ends the job within seconds with that rank named; resumes
// (on other world sizes too) that continue the straight run's weights and data; SIGTERM at
// start-up, mid-training and during a save ending the job cleanly (exit 3, nothing left); and each
// kind of bad input (a placement that cannot work included, from our launcher or in a rank of
// another one) exits 2 with one line naming the field or file and value, having written nothing;
// two default runs at once on one machine do not meet, and a port in use is one line.
// Every run here is a CPU run: main() hides any GPU from the children.
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "comm/shm_names.h"
#include "gtest/gtest.h"
#include "trainer/main_runner.h"

namespace {

namespace fs = std::filesystem;
using zerotrain::trainer::testing::Dir;
using zerotrain::trainer::testing::Read;
using zerotrain::trainer::testing::Result;
using zerotrain::trainer::testing::RunMain;
using zerotrain::trainer::testing::StepLosses;
using zerotrain::trainer::testing::WriteConfig;

TEST(MainTest, TwoRankRunLearnsAndWritesItsMonitors) {
  const std::string dir = Dir("learn");
  const std::string out_dir = dir + "/out";
  const Result r = RunMain({"--config=" + WriteConfig(dir, out_dir, 30)}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<double> losses = StepLosses(r.out);
  ASSERT_GE(losses.size(), 3u) << r.out;
  EXPECT_LT(losses.back(), losses.front() - 0.5) << r.out;  // from ~5.5 nats at random init
  EXPECT_NE(r.out.find("2 ranks (gloo), ZeRO stage 2, bf16"), std::string::npos) << r.out;
  // "auto" found no GPU: the CPU, over Gloo; nothing offloaded; no device memory to report.
  EXPECT_NE(r.out.find("zerotrain: device cpu | offload: optimizer states -> none, params -> none"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n         offload: optimizer states -> none, params -> none\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("cuda"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sample (20 tokens"), std::string::npos) << r.out;
  // The effective configuration, once (rank 0), before training: given values, a derived one
  // (8 = micro 4 x 2 ranks) and a default.
  const std::string header = "zerotrain configuration (effective):\n";
  const size_t table = r.out.find(header);
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(header, table + 1), std::string::npos) << r.out;
  EXPECT_LT(table, r.out.find("step ")) << r.out;
  for (const char* line :
       {R"(\n  zero_optimization\.stage \.+ 2\n)", R"(\n  optimizer\.params\.lr \.+ 0\.003\n)",
        R"(\n  optimizer\.type \.+ "AdamW"\n)", R"(\n  train_batch_size \.+ 8\n)",
        R"(\n  fp16\.initial_scale_power \.+ 16\n)"}) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(line))) << line << "\n" << r.out;
  }
  const std::string csv = Read(out_dir + "/t/metrics.csv");
  EXPECT_NE(csv.find("loss"), std::string::npos);
  int tfevents = 0;
  for (const auto& e : fs::directory_iterator(out_dir + "/t")) {
    tfevents += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(tfevents, 1);
}

// --print_config prints protobuf text and nothing else: the table is for training runs.
TEST(MainTest, PrintConfigIsProtobufTextWithoutTheTable) {
  const std::string dir = Dir("print_config");
  const Result r =
      RunMain({"--config=" + WriteConfig(dir, dir + "/out", 3), "--print_config"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("zero_optimization {\n  stage: 2\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("zerotrain configuration"), std::string::npos) << r.out;
}

// comms_logger's filter and verbose lines: only the listed ops, in the table and line by line.
TEST(MainTest, CommsLoggerPrintsOnlyTheProfiledOps) {
  const std::string dir = Dir("comms");
  const Result r = RunMain(
      {"--config=" + WriteConfig(dir, dir + "/out", 3,
                                 {{"comms",
                                   "comms_logger { enabled: true verbose: true prof_all: false "
                                   "prof_ops: [\"all_gather_into_tensor\"] }"}})},
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("comm op: all_gather "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("comm op: reduce_scatter"), std::string::npos) << r.out;
  const size_t table = r.out.find("collectives of rank 0 (prof_ops):");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nall_gather ", table), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nreduce_scatter ", table), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nall_reduce ", table), std::string::npos) << r.out;
}

TEST(MainTest, SharedMemoryBackendTrainsLikeGloo) {
  // Both transports sum two ranks' gradients in the same order, so the same run prints the same
  // losses; the banner names the transport.
  std::vector<std::vector<double>> losses;
  for (const std::string backend : {"gloo", "shm"}) {
    const std::string dir = Dir("backend_" + backend);
    const Result r =
        RunMain({"--config=" + WriteConfig(dir, dir + "/out", 10,
                                           {{"print", "steps_per_print: 1"},
                                            {"run", "run { steps: 10 seed: 1 output_dir: \"" + dir +
                                                        "/out\" eval_interval: 0 eval_iters: 2 "
                                                        "sample_tokens: 0 dist_backend: \"" +
                                                        backend + "\" }"}})},
                dir);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    losses.push_back(StepLosses(r.out));
    ASSERT_EQ(losses.back().size(), 10u) << r.out;
    EXPECT_NE(r.out.find("2 ranks (" + backend + ")"), std::string::npos) << r.out;
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(losses[1].back(), losses[1].front());
}

// The shipped NVMe offload config (stage 3, optimizer states swapped to /tmp) on a tiny model: the
// banner and the summary name the tiers, and the summary says how much went to and from NVMe.
TEST(MainTest, BannerAndSummaryNameTheOffloadTiers) {
  const std::string dir = Dir("offload_tiers");
  const std::string pbtxt = dir + "/run.pbtxt";
  std::ofstream(pbtxt) << "model { name: \"gpt\" n_layer: 2 n_head: 2 n_embd: 64 block_size: 32 }\n"
                          "run { steps: 2 seed: 1 output_dir: \""
                       << dir << "/out\" eval_interval: 0 eval_iters: 1 sample_tokens: 0 }\n";
  const Result r =
      RunMain({"--config=" + pbtxt, "--ds_config=trainer/configs/offload_nvme.json"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ZeRO stage 3"), std::string::npos) << r.out;
  const std::string tiers = "offload: optimizer states -> nvme (/tmp), params -> none";
  EXPECT_NE(r.out.find("zerotrain: device cpu | " + tiers + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n         " + tiers + "\n"), std::string::npos) << r.out;
  // What the NVMe tier cost: the optimizer states went out and came back every step.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(NVMe traffic, rank 0: read ([0-9.]+) MiB, written ([0-9.]+) MiB)")))
      << r.out;
  EXPECT_GT(std::stod(m[1]), 0) << r.out;
  EXPECT_GT(std::stod(m[2]), 0) << r.out;
}

// A rank of another launcher (torchrun's variables) checks its placement before the rendezvous:
// rank 1 of 2, whose rank 0 never comes, fails at once instead of after the store's timeout.
TEST(MainTest, RankOfAnotherLauncherRefusesABadPlacementBeforeTheRendezvous) {
  const std::string dir = Dir("torchrun_rank");
  const std::string out_dir = dir + "/out";
  const std::vector<std::string> torchrun = {"RANK=1",
                                             "WORLD_SIZE=2",
                                             "LOCAL_RANK=1",
                                             "LOCAL_WORLD_SIZE=2",
                                             "MASTER_ADDR=127.0.0.1",
                                             "MASTER_PORT=29511"};
  for (const auto& [name, run, needle] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"cuda", "device: \"cuda\"", "run.device = \"cuda\": "},
           {"nccl", "dist_backend: \"nccl\"", "run.dist_backend = \"nccl\": NCCL needs a GPU"}}) {
    SCOPED_TRACE(name);
    const std::string config = WriteConfig(
        dir, out_dir, 3, {{"run", "run { steps: 3 output_dir: \"" + out_dir + "\" " + run + " }"}});
    const Result r = RunMain({"--config=" + config}, dir, nullptr, torchrun);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(r.seconds, 30.0);  // the rendezvous would wait 300 s for rank 0
    EXPECT_FALSE(fs::exists(out_dir));
  }
}

// A --master_port another process listens on: one line naming it and the flag, exit 2, before
// any rank starts or anything is written.
TEST(MainTest, PortInUseIsOneLineAndExit2) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  const std::string dir = Dir("port_in_use");
  const Result r =
      RunMain({"--config=" + WriteConfig(dir, dir + "/out", 3), "--master_port=" + port}, dir);
  close(fd);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("port " + port + " (--master_port) is in use"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pass --master_port=PORT"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/out"));
  EXPECT_LT(r.seconds, 30.0);
}

// More local ranks than the cores the job may use: a warning naming both counts, and the run goes
// on. The test gives its children one core (sched_setaffinity is inherited).
TEST(MainTest, MoreRanksThanCoresIsAWarning) {
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const std::string dir = Dir("oversubscribed");
  const Result r = RunMain({"--config=" + WriteConfig(dir, dir + "/out", 2)}, dir);
  sched_setaffinity(0, sizeof(all), &all);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("zerotrain: warning: 2 local ranks (--nproc_per_node) but 1 core(s) "
                       "available to this job"),
            std::string::npos)
      << r.err;
}

// All child pids of `parent` (the launcher's ranks).
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> kids;
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  for (pid_t p; in >> p;) kids.push_back(p);
  return kids;
}

TEST(MainTest, KilledRankStopsTheJobWithinSeconds) {
  const std::string dir = Dir("kill");
  double killed_at = 0;
  const Result r =
      RunMain({"--config=" + WriteConfig(dir, dir + "/out", 100000)}, dir, [&](pid_t launcher) {
        // Wait until training runs (the first progress line), then kill
        // rank 1.
        for (int i = 0; i < 600 && StepLosses(Read(dir + "/stdout")).empty(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        const std::vector<pid_t> ranks = Children(launcher);
        ASSERT_EQ(ranks.size(), 2u);
        kill(ranks[1], SIGKILL);
        killed_at =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                .count();
      });
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("died from signal 9"), std::string::npos) << r.err;
  EXPECT_LT(now - killed_at, 10.0);
}

// The final fp32 master of the checkpoint `latest` names in `dir`.
std::vector<float> FinalMaster(const std::string& dir) {
  auto reader = zerotrain::checkpoint::CheckpointReader::Open(dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return {};
  // Parameter by parameter: stage 3 checkpoints have padding between submodules.
  std::vector<float> master;
  for (int i = 0; i < (*reader)->num_params(); ++i) {
    auto values = (*reader)->ReadParam(i);
    EXPECT_TRUE(values.ok()) << values.status();
    if (!values.ok()) return {};
    master.insert(master.end(), values->begin(), values->end());
  }
  return master;
}

// The final fp32 masters of two runs' latest checkpoints agree within fp32 rounding (another
// world size sums the gradients in another order).
void ExpectSameFinalMaster(const std::string& want_dir, const std::string& got_dir) {
  const std::vector<float> want = FinalMaster(want_dir);
  const std::vector<float> got = FinalMaster(got_dir);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / (1e-6 + 1e-5 * std::abs(want[i])));
  }
  EXPECT_LE(worst, 1.0) << "worst element off by " << worst << "x the tolerance";
}

// 12 steps straight, and 6 steps + a checkpoint + a new job (on 3 ranks instead of 2, and at
// ZeRO stage 3 instead of 2, so the shards are re-sliced and the GPT's parameters are gathered
// on use, with the optimizer state on NVMe) resuming for 6 more, end with the same fp32 master
// weights: the sampler position, lr schedule, optimizer state and step counters all came back.
// Equal within fp32 rounding, not bitwise: 3 ranks sum the gradient in another order.
TEST(MainTest, ResumedRunContinuesWhereItStopped) {
  const std::string dir = Dir("resume");
  const std::map<std::string, std::string> fp32 = {
      {"bf16", "bf16 { enabled: false }"},
      {"scheduler",
       "scheduler { type: \"WarmupLR\" params { warmup_num_steps: 8 warmup_max_lr: 0.001 } }"},
      {"micro", "train_batch_size: 12"}};
  auto with_run = [&](std::map<std::string, std::string> m, const std::string& run) {
    m["run"] = run;
    return m;
  };
  const std::string common = " seed: 1 eval_interval: 0 eval_iters: 1 sample_tokens: 0";
  std::map<std::string, std::string> stage3 = fp32;
  std::filesystem::create_directories(dir + "/nvme");
  stage3["zero"] =
      "zero_optimization { stage: 3 reduce_bucket_size: 20000 "
      "stage3_param_persistence_threshold: 200 "  // the LayerNorms (128) stay whole
      "sub_group_size: 5000 offload_optimizer { device: \"nvme\" nvme_path: \"" +
      dir + "/nvme\" buffer_count: 2 } }";
  const Result straight =
      RunMain({"--config=" + WriteConfig(dir, "", 0,
                                         with_run(fp32,
                                                  "run { steps: 12 save_interval: 12 "
                                                  "output_dir: \"" +
                                                      dir + "/a\"" + common + " }"))},
              dir);
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const Result first =
      RunMain({"--config=" + WriteConfig(dir, "", 0,
                                         with_run(fp32,
                                                  "run { steps: 6 save_interval: 6 "
                                                  "output_dir: \"" +
                                                      dir + "/b\"" + common + " }"))},
              dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Result resumed =
      RunMain({"--nproc_per_node=3",
               "--config=" +
                   WriteConfig(dir, "", 0,
                               with_run(stage3, "run { steps: 12 save_interval: 12 output_dir: \"" +
                                                    dir + "/b\" resume_from: \"" + dir +
                                                    "/b/checkpoints\"" + common + " }"))},
              dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + dir + "/b/checkpoints at step 6"), std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("step 12/12"), std::string::npos) << resumed.out;
  ExpectSameFinalMaster(dir + "/a/checkpoints", dir + "/b/checkpoints");
  // The resumed job appended to the first job's CSV: steps 1..12 are all there, once.
  const std::string csv = Read(dir + "/b/t/metrics.csv");
  for (int step : {1, 6, 7, 12}) {
    EXPECT_NE(csv.find("\n" + std::to_string(step) + ","), std::string::npos) << step;
  }
}

// The CSV rows of `csv` that hold column `column` (by the header), counted by step.
std::map<int, int> RowsWith(const std::string& csv, const std::string& column) {
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream h(line);
  for (std::string f; std::getline(h, f, ',');) header.push_back(f);
  const size_t at = std::find(header.begin(), header.end(), column) - header.begin();
  std::map<int, int> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream r(line);
    for (std::string f; std::getline(r, f, ',');) fields.push_back(f);
    if (at < fields.size() && !fields[at].empty()) ++rows[std::stoi(fields[0])];
  }
  return rows;
}

// A job of 2 ranks x micro-batch 3 x accumulation 2 saves at step 4 and runs on to step 6 (as if
// stopped before its next save, `latest` is set back to step 4); a job of 4 ranks x micro-batch 3
// x accumulation 1 resumes it. Counted in micro-steps the data position would skip 48 samples;
// in samples, the final master equals a straight 2-rank run's (within fp32 rounding), which it
// cannot if any sample was skipped or read twice. The CSV lists every step once.
TEST(MainTest, AResumeOnMoreRanksReadsEverySampleOnceAndListsEveryStepOnce) {
  const std::string dir = Dir("elastic");
  std::map<std::string, std::string> config = {
      {"bf16", "bf16 { enabled: false }"},
      {"scheduler",
       "scheduler { type: \"WarmupLR\" params { warmup_num_steps: 8 warmup_max_lr: 0.001 } }"},
      {"micro", "train_batch_size: 12 train_micro_batch_size_per_gpu: 3"}};
  const std::string common = " seed: 1 eval_interval: 0 eval_iters: 1 sample_tokens: 0";
  auto run = [&](const std::string& out, int steps, int save_interval, int ranks,
                 const std::string& extra = "") {
    config["run"] = "run { steps: " + std::to_string(steps) +
                    " save_interval: " + std::to_string(save_interval) + " output_dir: \"" + dir +
                    "/" + out + "\"" + common + extra + " }";
    return RunMain({"--nproc_per_node=" + std::to_string(ranks),
                    "--config=" + WriteConfig(dir, "", 0, config)},
                   dir);
  };
  const Result straight = run("a", 8, 8, 2);
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const Result first = run("b", 6, 4, 2);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::ofstream(dir + "/b/checkpoints/latest") << "global_step4\n";
  const Result resumed = run("b", 8, 8, 4, " resume_from: \"" + dir + "/b/checkpoints\"");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("data position restored: sample 48 of epoch 0"), std::string::npos)
      << resumed.out;
  ExpectSameFinalMaster(dir + "/a/checkpoints", dir + "/b/checkpoints");
  const std::string csv = Read(dir + "/b/t/metrics.csv");
  std::map<int, int> once;
  for (int step = 1; step <= 8; ++step) once[step] = 1;
  EXPECT_EQ(RowsWith(csv, "loss"), once) << csv;
  for (const auto& [step, n] : RowsWith(csv, "eval_loss")) EXPECT_EQ(n, 1) << step << "\n" << csv;
}

// A job sent SIGTERM (as a user or batch system stops it): `when` returns once the moment has
// come. The launcher forwards the signal (or, with to_ranks, the ranks get it directly, as from a
// batch system that signals every process), every rank stops after the same step and unwinds,
// and the job exits 3 within seconds, leaving no shared-memory segment, no swap or temporary
// file, and `latest` on a complete checkpoint.
void ExpectCleanStop(const std::string& name, const std::map<std::string, std::string>& replace,
                     const std::function<bool(const std::string& dir, pid_t launcher)>& when,
                     bool to_ranks = false) {
  SCOPED_TRACE(name);
  const std::string dir = Dir(name);
  fs::create_directories(dir + "/nvme");
  pid_t launcher = -1;
  double signalled_at = 0;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::map<std::string, std::string> config = replace;
  for (auto& [key, text] : config) text = std::regex_replace(text, std::regex("DIR"), dir);
  const Result r =
      RunMain({"--config=" + WriteConfig(dir, dir + "/out", 100000, config)}, dir, [&](pid_t pid) {
        launcher = pid;
        for (int i = 0; i < 1200 && !when(dir, pid); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(25));
        }
        if (to_ranks) {
          for (pid_t rank : Children(pid)) kill(rank, SIGTERM);
        } else {
          kill(pid, SIGTERM);
        }
        signalled_at = now();
      });
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(now() - signalled_at, 15.0);
  if (!StepLosses(r.out).empty()) {  // training had begun: the ranks stopped between steps
    EXPECT_NE(r.err.find("stopped after step"), std::string::npos) << r.err;
  }
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    EXPECT_NE(zerotrain::comm::LauncherOfShmSegment(e.path().filename()), launcher) << e.path();
  }
  for (const auto& e : fs::recursive_directory_iterator(dir + "/nvme")) {
    ADD_FAILURE() << "left behind: " << e.path();
  }
  if (fs::exists(dir + "/out/checkpoints")) {
    for (const auto& e : fs::recursive_directory_iterator(dir + "/out/checkpoints")) {
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    }
  }
  if (fs::exists(dir + "/out/checkpoints/latest")) {
    auto reader = zerotrain::checkpoint::CheckpointReader::Open(dir + "/out/checkpoints");
    EXPECT_TRUE(reader.ok()) << reader.status();
  }
}

TEST(MainTest, SigtermStopsTheJobCleanlyAtStartUpMidTrainingAndDuringASave) {
  const std::string shm =
      "run { steps: 100000 seed: 1 output_dir: \"DIR/out\" eval_interval: 0 "
      "eval_iters: 1 sample_tokens: 0 dist_backend: \"shm\"";
  // At start-up: as soon as the ranks exist (they are joining, mapping the segment, building).
  ExpectCleanStop("stop_startup", {{"run", shm + " }"}}, [](const std::string&, pid_t launcher) {
    if (Children(launcher).size() != 2) return false;
    // Past loading the binary: the ranks have their handlers and are joining or building.
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    return true;
  });
  // Mid-training, with the optimizer states in NVMe swap files.
  ExpectCleanStop(
      "stop_training",
      {{"run", shm + " }"},
       {"zero",
        "zero_optimization { stage: 3 reduce_bucket_size: 20000 sub_group_size: 5000 "
        "offload_optimizer { device: \"nvme\" nvme_path: \"DIR/nvme\" buffer_count: 2 } }"}},
      [](const std::string& dir, pid_t) {
        return !StepLosses(Read(dir + "/stdout")).empty() && !fs::is_empty(dir + "/nvme");
      });
  // Mid-training, the signal sent to the ranks rather than to the launcher.
  ExpectCleanStop(
      "stop_ranks_directly", {{"run", shm + " }"}},
      [](const std::string& dir, pid_t) { return !StepLosses(Read(dir + "/stdout")).empty(); },
      /*to_ranks=*/true);
  // During a save: one every step, so the signal lands in or next to one.
  ExpectCleanStop("stop_saving", {{"run", shm + " save_interval: 1 }"}},
                  [](const std::string& dir, pid_t) {
                    return Read(dir + "/stdout").find("checkpoint at step 2") != std::string::npos;
                  });
}

struct BadCase {
  std::string name;
  std::map<std::string, std::string> replace;  // config entries
  std::vector<std::string> flags;              // instead of --config when set
  std::string needle;                          // must appear in the one error line
};

TEST(MainTest, BadInputExits2WithOneLineAndWritesNothing) {
  const std::string root = Dir("bad");
  std::ofstream(root + "/a_file") << "not a directory\n";
  fs::create_directories(root + "/earlier/checkpoints");
  std::ofstream(root + "/trailing_comma.json") << "{\n  \"train_micro_batch_size_per_gpu\": 4,\n"
                                                  "  \"zero_optimization\": {\"stage\": 2},\n}\n";
  std::ofstream(root + "/truncated.json") << "{\"train_micro_batch_size_per_gpu\": 4,\n"
                                             " \"zero_optimization\": {\"stage\": 2}";
  std::ofstream(root + "/nan.json")
      << "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_clipping\": NaN}";
  std::ofstream(root + "/duplicate.json") << "{\"train_micro_batch_size_per_gpu\": 4, "
                                             "\"train_micro_batch_size_per_gpu\": 8}";
  std::ofstream(root + "/earlier/checkpoints/latest") << "global_step3\n";
  const std::vector<BadCase> cases = {
      {"malformed", {{"zero", "zero_optimization { stage: }"}}, {}, "run.pbtxt"},
      {"unknown_key", {{"typo", "steps_per_prnt: 3"}}, {}, "steps_per_prnt"},
      {"unknown_model", {{"model", "model { name: \"bert\" }"}}, {}, "bert"},
      {"init_from_missing",
       {{"model", "model { init_from: \"" + root + "/no_model\" }"}},
       {},
       "model.init_from = \"" + root + "/no_model\": no file or directory"},
      {"unknown_optimizer", {{"optimizer", "optimizer { type: \"Adafactor\" }"}}, {}, "Adafactor"},
      {"missing_data",
       {{"data", "data { source: \"text\" path: \"/nonexistent/corpus.txt\" }"}},
       {},
       "/nonexistent/corpus.txt"},
      {"batch_triple", {{"train", "train_batch_size: 7"}}, {}, "train_batch_size=7"},
      {"negative_lr",
       {{"optimizer", "optimizer { type: \"AdamW\" params { lr: -0.1 } }"}},
       {},
       "-0.1"},
      {"unwritable_output",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/a_file/out\" }"}},
       {},
       root + "/a_file/out"},
      {"missing_config_file", {}, {"--config=/nonexistent/run.pbtxt"}, "/nonexistent/run.pbtxt"},
      {"missing_checkpoint",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/out2\" resume_from: \"" + root +
                    "/no_checkpoints\" }"}},
       {},
       "run.resume_from"},
      {"unknown_flag", {}, {"--stepz=3"}, "--stepz"},
      {"zero_ranks", {}, {"--nproc_per_node=0"}, "--nproc_per_node"},
      {"block_longer_than_data",
       {{"model", "model { name: \"gpt\" n_layer: 1 n_head: 1 n_embd: 8 block_size: 1000000 }"}},
       {},
       "block_size"},
      {"cuda_without_gpu",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/out3\" device: \"cuda\" }"}},
       {},
       "run.device = \"cuda\": "},
      {"nccl_without_gpu",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/out4\" dist_backend: \"nccl\" }"}},
       {},
       "run.dist_backend = \"nccl\": NCCL needs a GPU"},
      {"nccl_on_cpu",
       {{"run", "run { steps: 3 output_dir: \"" + root +
                    "/out5\" device: \"cpu\" dist_backend: \"nccl\" }"}},
       {},
       "run.dist_backend = \"nccl\": NCCL moves CUDA tensors only"},
      {"unknown_device",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/out6\" device: \"tpu\" }"}},
       {},
       "run.device = \"tpu\""},
      {"comm_timeout",
       {{"run", "run { steps: 3 output_dir: \"" + root + "/out7\" comm_timeout_s: 0 }"}},
       {},
       "run.comm_timeout_s = 0: must be in [1, 86400] seconds"},
      // Root may write anywhere the permission bits forbid, but not here: found by trying.
      {"output_dir_cannot_be_created",
       {{"run", "run { steps: 3 output_dir: \"/proc/zerotrain_out/run\" }"}},
       {},
       "run.output_dir = \"/proc/zerotrain_out/run\": cannot create /proc/zerotrain_out"},
      {"zero_accumulation",
       {{"gas", "gradient_accumulation_steps: 0"}},
       {},
       "gradient_accumulation_steps = 0: must be at least 1"},
      {"zero_micro_batch",
       {{"micro", "train_micro_batch_size_per_gpu: 0"}},
       {},
       "train_micro_batch_size_per_gpu = 0: must be at least 1"},
      {"json_trailing_comma",
       {},
       {"--ds_config=" + root + "/trailing_comma.json"},
       root + "/trailing_comma.json:3:36: not valid JSON: a trailing comma before '}'"},
      {"json_truncated",
       {},
       {"--ds_config=" + root + "/truncated.json"},
       root +
           "/truncated.json:2:35: not valid JSON: the input ends inside the object opened at 1:1"},
      {"json_nan", {}, {"--ds_config=" + root + "/nan.json"}, root + "/nan.json:1:60: "},
      {"json_duplicate_key",
       {},
       {"--ds_config=" + root + "/duplicate.json"},
       "duplicate key \"train_micro_batch_size_per_gpu\""},
      {"token_glob_matches_nothing",
       {{"data", "data { source: \"tokens\" path: \"" + root + "/none_*.bin\" }"}},
       {},
       root + "/none_*.bin matches no file"},
      {"earlier_checkpoints",
       {{"run", "run { steps: 3 save_interval: 1 output_dir: \"" + root + "/earlier\" }"}},
       {},
       "already holds an earlier run's checkpoints"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = Dir("bad_" + c.name);
    const std::string out_dir = dir + "/out";
    std::vector<std::string> flags = {"--config=" + WriteConfig(dir, out_dir, 3, c.replace)};
    if (!c.flags.empty()) flags = c.flags;
    const Result r = RunMain(flags, dir);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out_dir)) << "wrote " << out_dir;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// DeepSpeed's variable, in minutes, fills run.comm_timeout_s when the config leaves it unset;
// a malformed one is bad input before any rank starts.
TEST(MainTest, DeepSpeedTimeoutFillsAnUnsetCommTimeout) {
  const std::string dir = Dir("ds_timeout");
  const std::string out_dir = dir + "/out";
  const std::string unset = WriteConfig(Dir("ds_timeout_unset"), out_dir, 3);
  Result r =
      RunMain({"--config=" + unset, "--print_config"}, dir, nullptr, {"DEEPSPEED_TIMEOUT=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("comm_timeout_s: 120\n"), std::string::npos) << r.out;
  r = RunMain({"--config=" + unset, "--print_config"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("comm_timeout_s: 300\n"), std::string::npos) << r.out;
  const std::string set =
      WriteConfig(dir, out_dir, 3,
                  {{"run", "run { steps: 3 output_dir: \"" + out_dir + "\" comm_timeout_s: 9 }"}});
  r = RunMain({"--config=" + set, "--print_config"}, dir, nullptr, {"DEEPSPEED_TIMEOUT=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("comm_timeout_s: 9\n"), std::string::npos) << r.out;
  for (const char* bad : {"ten", "0", "2.5"}) {
    SCOPED_TRACE(bad);
    r = RunMain({"--config=" + unset}, dir, nullptr, {std::string("DEEPSPEED_TIMEOUT=") + bad});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(
        r.err.find(std::string("DEEPSPEED_TIMEOUT='") + bad + "' is not a whole number of minutes"),
        std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out_dir));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!zerotrain::trainer::testing::StartCpuTests(&argc, argv, 1,
                                                  "main_test <path of //trainer:main>"))
    return 2;
  return RUN_ALL_TESTS();
}
