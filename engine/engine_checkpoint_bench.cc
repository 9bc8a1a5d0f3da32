// engine_checkpoint_bench: save and load time of a training-state checkpoint of zero_bench's
// ~50M-parameter transformer at ZeRO stage 2 on local ranks, against the same disk's sequential
// write and read speed measured in the same run: every rank writes (and fsyncs) and then reads a
// plain file as large as its shard file, concurrently, as the ranks do when saving and loading.
//   bazel run -c opt //engine:engine_checkpoint_bench [-- --world=2 --dir=/tmp/zt-ckpt-bench]
// Before each read the files are dropped from the page cache (fsync, then
// posix_fadvise(DONTNEED)), so both reads come from the disk; both writes include fsync.
#include <fcntl.h>
#include <torch/nn/modules/transformercoder.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/comm.h"
#include "comm/launcher.h"
#include "engine/engine.h"

namespace zerotrain::engine {
namespace {

constexpr int64_t kDim = 512, kLayers = 16, kSeq = 32, kMicro = 4;

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "engine_checkpoint_bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds to write `bytes` to `path` in 8 MiB blocks and fsync, or to read them back.
double RawWrite(const std::string& path, int64_t bytes) {
  std::vector<char> block(8 << 20, 'z');
  const double start = Now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (int64_t done = 0; done < bytes;) {
    const int64_t n = std::min<int64_t>(block.size(), bytes - done);
    if (write(fd, block.data(), n) != n) Check(absl::InternalError("raw write failed: " + path));
    done += n;
  }
  fsync(fd);
  close(fd);
  return Now() - start;
}

// Evicts a written file's pages from the page cache, so the next read goes to the disk.
void DropFromCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

double RawRead(const std::string& path) {
  std::vector<char> block(8 << 20);
  const double start = Now();
  const int fd = open(path.c_str(), O_RDONLY);
  while (read(fd, block.data(), block.size()) > 0) {
  }
  close(fd);
  return Now() - start;
}

// The slowest rank's time: the operation is done when every rank is.
double MaxOverRanks(comm::ProcessGroup* group, double seconds) {
  at::Tensor t = at::full({1}, seconds, at::kDouble);
  Check(group->AllReduce(t, comm::ReduceOp::kMax));
  return t.item<double>();
}

int RunRank(const std::string& dir) {
  auto info = comm::RendezvousFromEnv();
  Check(info.status());
  auto group = comm::ProcessGroup::Create(*info, {});
  Check(group.status());
  comm::ProcessGroup* g = group->get();
  torch::manual_seed(0);
  auto layer =
      torch::nn::TransformerEncoderLayerOptions(kDim, 8).dim_feedforward(4 * kDim).dropout(0.0);
  torch::nn::TransformerEncoder model(torch::nn::TransformerEncoderOptions(layer, kLayers));
  EngineOptions o;
  o.stage = 2;
  o.train_micro_batch_size_per_gpu = kMicro;
  o.reduce_bucket_size = 1 << 22;
  auto engine = Engine::Create(*model, o, g);
  Check(engine.status());
  // One step, so the optimizer states exist and hold real values.
  Check((*engine)->Backward(model->forward(torch::randn({kSeq, kMicro, kDim})).pow(2).mean()));
  Check((*engine)->Step());

  std::error_code ignored;
  if (g->rank() == 0) std::filesystem::remove_all(dir + "/ckpt", ignored);
  Check(g->Barrier());
  double start = Now();
  Check((*engine)->SaveCheckpoint(dir + "/ckpt", "bench"));
  const double save = MaxOverRanks(g, Now() - start);
  const std::string shard = dir + "/ckpt/bench/rank_" + std::to_string(g->rank()) + ".zts";
  const int64_t shard_bytes = std::filesystem::file_size(shard);
  at::Tensor total = at::full({1}, static_cast<double>(shard_bytes), at::kDouble);
  Check(g->AllReduce(total, comm::ReduceOp::kSum));

  DropFromCache(shard);
  if (g->rank() == 0) DropFromCache(dir + "/ckpt/bench/manifest.ztm");
  Check(g->Barrier());
  start = Now();
  Check((*engine)->LoadCheckpoint(dir + "/ckpt", "bench").status());
  const double load = MaxOverRanks(g, Now() - start);

  const std::string raw = dir + "/raw_" + std::to_string(g->rank());
  Check(g->Barrier());
  const double raw_write = MaxOverRanks(g, RawWrite(raw, shard_bytes));
  DropFromCache(raw);
  Check(g->Barrier());
  const double raw_read = MaxOverRanks(g, RawRead(raw));
  std::filesystem::remove(raw);
  if (g->rank() == 0) {
    const double mb = total.item<double>() / 1e6;
    std::printf(
        "engine_checkpoint_bench: %lld parameters, %d ranks, stage 2, fp32 AdamW; "
        "checkpoint %.0f MB in all (master + 2 moments)\n\n",
        static_cast<long long>((*engine)->flat_params().layout().numel()), g->world_size(), mb);
    std::printf(
        "| operation | seconds | MB/s | raw disk MB/s (same bytes, same ranks) | ratio |\n"
        "|---|---|---|---|---|\n");
    std::printf("| save (write + fsync + rename, manifest, latest) | %.3f | %.0f | %.0f | %.2f |\n",
                save, mb / save, mb / raw_write, raw_write / save);
    std::printf("| load (read, verify CRC32C, re-slice) | %.3f | %.0f | %.0f | %.2f |\n", load,
                mb / load, mb / raw_read, raw_read / load);
  }
  return 0;
}

}  // namespace
}  // namespace zerotrain::engine

int main(int argc, char** argv) {
  int world = 2;
  std::string dir = "/tmp/zt-ckpt-bench";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool ok = false;
    if (a.rfind("--world=", 0) == 0) ok = absl::SimpleAtoi(a.substr(8), &world) && world > 0;
    if (a.rfind("--dir=", 0) == 0) ok = !(dir = a.substr(6)).empty();
    if (!ok) {
      std::fprintf(stderr, "engine_checkpoint_bench: bad flag %s (--world=N --dir=PATH)\n",
                   a.c_str());
      return 2;
    }
  }
  if (std::getenv("RANK") != nullptr) {
    zerotrain::comm::DieWithLauncher();
    return zerotrain::engine::RunRank(dir);
  }
  std::filesystem::create_directories(dir);
  zerotrain::comm::LaunchOptions launch;
  launch.nproc_per_node = world;
  launch.master_port = 29760;
  launch.args = {"--dir=" + dir};
  const absl::Status s = zerotrain::comm::LaunchRanks(launch);
  if (!s.ok()) {
    std::fprintf(stderr, "engine_checkpoint_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
