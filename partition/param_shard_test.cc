// ParamShard: on every device (with the model, a pool block, NVMe with none, some or all parts kept
// in host memory) and in float, bfloat16 and half, random reads and writes (within a part, whole
// parts, across parts) agree with a plain reference; resident reads are views that Write accepts
// back; host and NVMe bytes are what the parts take; a truncated swap file fails the read naming
// the file; bad arguments name the field. Built from a Source, every device asks for each part
// once, in order, at its length, and a fill's error comes back as it is.
#include "partition/param_shard.h"

#include <torch/types.h>
#include <unistd.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"

namespace zerotrain::partition {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNumel = 10007;
// Irregular parts: 1000, 1, 3999, 4999 and 8 elements.
const std::vector<int64_t> kStarts = {0, 1000, 1001, 5000, 9999};

using offload::testing::TempDir;

struct Fixture {
  TempDir dir;
  offload::PinnedHostPool pool = *offload::PinnedHostPool::Create({});
  std::unique_ptr<offload::SwapSpace> swap;

  Fixture() {
    offload::SwapSpaceOptions o;
    o.directory = dir.path();
    o.aio = {64 << 10, 4, 2};
    swap = *offload::SwapSpace::Create(o);
  }
  ParamShardOptions Options(ParamDevice device, int64_t max_in_cpu = 0) {
    ParamShardOptions o;
    o.device = device;
    o.pool = &pool;
    o.swap = swap.get();
    o.region_prefix = "rank0.";
    o.max_in_cpu = max_in_cpu;
    o.io_timeout = absl::Seconds(60);
    return o;
  }
  std::unique_ptr<ParamShard> Make(const at::Tensor& values, const ParamShardOptions& o) {
    absl::StatusOr<std::unique_ptr<ParamShard>> s = ParamShard::Create(values, kStarts, o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
};

struct Config {
  const char* name;
  ParamDevice device;
  int64_t max_in_cpu;
};
// 1001 keeps parts 0 and 1; 4000 too (part 2 would exceed it); 5000 keeps parts 0-2.
const Config kConfigs[] = {
    {"model", ParamDevice::kModel, 0},       {"host", ParamDevice::kHost, 0},
    {"nvme0", ParamDevice::kNvme, 0},        {"nvme1001", ParamDevice::kNvme, 1001},
    {"nvme4000", ParamDevice::kNvme, 4000},  {"nvme5000", ParamDevice::kNvme, 5000},
    {"nvme_all", ParamDevice::kNvme, kNumel}};

// A range of the kind picked by `kind`: within a part, an exact part, across parts, everything.
std::pair<int64_t, int64_t> RandomRange(std::mt19937_64& gen, int kind) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  const int p = static_cast<int>(uniform(0, kStarts.size() - 1));
  const int64_t pb = kStarts[p];
  const int64_t pe = p + 1 < static_cast<int>(kStarts.size()) ? kStarts[p + 1] : kNumel;
  switch (kind) {
    case 0: {
      const int64_t b = uniform(pb, pe - 1);
      return {b, uniform(1, pe - b)};
    }
    case 1:
      return {pb, pe - pb};
    case 2: {
      const int64_t b = uniform(0, kNumel - 1);
      return {b, uniform(0, kNumel - b)};
    }
    default:
      return {0, kNumel};
  }
}

TEST(ParamShardTest, RandomReadsAndWritesMatchAReference) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(absl::StrCat(c.name, " ", c10::toString(dtype)));
      Fixture f;
      torch::manual_seed(1);
      const at::Tensor ref = at::randn({kNumel}).to(dtype);
      std::unique_ptr<ParamShard> shard = f.Make(ref.clone(), f.Options(c.device, c.max_in_cpu));
      ASSERT_NE(shard, nullptr);
      EXPECT_EQ(shard->numel(), kNumel);
      EXPECT_EQ(shard->dtype(), dtype);
      EXPECT_EQ(shard->num_parts(), 5);
      std::mt19937_64 gen(7);
      for (int step = 0; step < 60; ++step) {
        // Reads (every step) and writes (every other step) each cycle through all range kinds.
        auto [b, n] = RandomRange(gen, (step / 2) % 4);
        if (step % 2 == 1) {
          // Every fifth write comes strided, as a slice of a caller's bigger tensor would.
          at::Tensor w = step % 5 == 0 ? at::randn({2 * n}).to(dtype).slice(0, 0, 2 * n, 2)
                                       : at::randn({n}).to(dtype);
          absl::Status s = shard->Write(b, w);
          ASSERT_TRUE(s.ok()) << s << " at step " << step;
          ref.narrow(0, b, n).copy_(w);
        }
        std::tie(b, n) = RandomRange(gen, step % 4);
        absl::StatusOr<at::Tensor> got = shard->Read(b, n);
        ASSERT_TRUE(got.ok()) << got.status() << " at step " << step;
        ASSERT_EQ(got->dim(), 1);
        ASSERT_EQ(got->scalar_type(), dtype);
        ASSERT_TRUE(at::equal(*got, ref.narrow(0, b, n))) << "Read(" << b << ", " << n << ")";
      }
      absl::StatusOr<at::Tensor> all = shard->Read(0, kNumel);
      ASSERT_TRUE(all.ok()) << all.status();
      EXPECT_TRUE(at::equal(*all, ref));
      // No Read copy or swap buffer outlives its tensor.
      *all = at::Tensor();
      EXPECT_EQ(f.pool.bytes_in_use(), shard->host_bytes());
    }
  }
}

TEST(ParamShardTest, ResidentReadsAreViewsThatWriteAcceptsBack) {
  Fixture f;
  const at::Tensor values = at::arange(kNumel, at::kFloat);
  std::unique_ptr<ParamShard> model = f.Make(values, f.Options(ParamDevice::kModel));
  std::unique_ptr<ParamShard> host = f.Make(values.clone(), f.Options(ParamDevice::kHost));
  std::unique_ptr<ParamShard> nvme = f.Make(values.clone(), f.Options(ParamDevice::kNvme, 1001));
  for (ParamShard* s : {model.get(), host.get(), nvme.get()}) {
    SCOPED_TRACE(ParamDeviceName(s->options().device));
    at::Tensor view = *s->Read(990, 11);  // parts 0 and 1: kept by nvme too
    EXPECT_EQ(view.data_ptr(), s->Read(990, 11)->data_ptr());
    view.fill_(-1.0f);
    ASSERT_TRUE(s->Write(990, view).ok());
    EXPECT_TRUE(at::equal(*s->Read(985, 20),
                          at::cat({at::arange(985, 990, at::kFloat), at::full({11}, -1.0f),
                                   at::arange(1001, 1005, at::kFloat)})));
  }
  EXPECT_EQ(values[1000].item<float>(),
            -1.0f);  // kModel's shard is the caller's tensor
  // A swapped part's Read is a copy: changing it changes nothing until it is written.
  at::Tensor copy = *nvme->Read(1001, 3999);
  EXPECT_NE(copy.data_ptr(), nvme->Read(1001, 3999)->data_ptr());
  copy.fill_(5.0f);
  EXPECT_EQ(nvme->Read(1001, 1)->item<float>(), 1001.0f);
  ASSERT_TRUE(nvme->Write(1001, copy).ok());
  EXPECT_EQ(nvme->Read(4999, 2)->sum().item<float>(), 5.0f + 5000.0f);
}

TEST(ParamShardTest, ASourceFillsEachPartOnceInOrder) {
  Fixture f;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name);
    std::vector<std::pair<int, int64_t>> asked;  // (part, length)
    ParamShard::Source source;
    source.numel = kNumel;
    source.options = at::TensorOptions(at::kFloat);
    source.fill = [&](int p, at::Tensor dst) {
      asked.push_back({p, dst.numel()});
      dst.copy_(at::arange(kStarts[p], kStarts[p] + dst.numel(), at::kFloat));
      return absl::OkStatus();
    };
    ParamShardOptions o = f.Options(c.device, c.max_in_cpu);
    o.region_prefix = absl::StrCat(c.name, ".");
    absl::StatusOr<std::unique_ptr<ParamShard>> shard = ParamShard::Create(source, kStarts, o);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(asked, (std::vector<std::pair<int, int64_t>>{
                         {0, 1000}, {1, 1}, {2, 3999}, {3, 4999}, {4, 8}}));
    EXPECT_TRUE(at::equal(*(*shard)->Read(0, kNumel), at::arange(kNumel, at::kFloat)));
    source.fill = [](int p, at::Tensor) {
      return p == 3 ? absl::DataLossError("part 3 is gone") : absl::OkStatus();
    };
    o.region_prefix = absl::StrCat(c.name, ".failed.");
    EXPECT_EQ(ParamShard::Create(source, kStarts, o).status(),
              absl::DataLossError("part 3 is gone"));
  }
}

TEST(ParamShardTest, HostAndNvmeBytes) {
  Fixture f;
  const at::Tensor values = at::zeros({kNumel}, at::kBFloat16);
  auto round = [](int64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  std::unique_ptr<ParamShard> model = f.Make(values, f.Options(ParamDevice::kModel));
  EXPECT_EQ(model->host_bytes(), 0);
  EXPECT_EQ(model->nvme_bytes(), 0);
  EXPECT_EQ(f.pool.bytes_in_use(), 0);
  std::unique_ptr<ParamShard> host = f.Make(values, f.Options(ParamDevice::kHost));
  EXPECT_EQ(host->host_bytes(), round(kNumel * 2));
  EXPECT_EQ(host->nvme_bytes(), 0);
  EXPECT_EQ(f.pool.bytes_in_use(), host->host_bytes());
  host.reset();
  {
    std::unique_ptr<ParamShard> none = f.Make(values, f.Options(ParamDevice::kNvme, 0));
    EXPECT_EQ(none->host_bytes(), 0);
    EXPECT_EQ(none->nvme_bytes(), kNumel * 2);
    EXPECT_EQ(f.pool.bytes_in_use(), 0);  // the staging block went back
    int64_t regions = 0;
    for (int p = 0; p < 5; ++p) regions += *f.swap->region_bytes(absl::StrCat("rank0.p", p));
    EXPECT_EQ(regions, kNumel * 2);
    at::Tensor part = *none->Read(1001, 3999);  // a pool block, until the tensor dies
    EXPECT_GT(f.pool.bytes_in_use(), 0);
    part = at::Tensor();
    EXPECT_EQ(f.pool.bytes_in_use(), 0);
  }
  ParamShardOptions o = f.Options(ParamDevice::kNvme, 4000);
  o.region_prefix = "rank1.";
  std::unique_ptr<ParamShard> some = f.Make(values, o);
  EXPECT_EQ(some->host_bytes(), round(1001 * 2));
  EXPECT_EQ(some->nvme_bytes(), (kNumel - 1001) * 2);
  EXPECT_EQ(f.swap->region_bytes("rank1.p1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*f.swap->region_bytes("rank1.p2"), 3999 * 2);
}

TEST(ParamShardTest, TruncatedSwapFileFailsTheReadNamingIt) {
  Fixture f;
  std::unique_ptr<ParamShard> shard =
      f.Make(at::ones({kNumel}, at::kFloat), f.Options(ParamDevice::kNvme, 1001));
  ASSERT_NE(shard, nullptr);
  const std::string path = *f.swap->file_path("rank0.p2");
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  for (auto [b, n] : {std::pair<int64_t, int64_t>{1001, 3999}, {2000, 10}, {0, kNumel}}) {
    absl::StatusOr<at::Tensor> r = shard->Read(b, n);
    ASSERT_FALSE(r.ok()) << "Read(" << b << ", " << n << ")";
    EXPECT_THAT(r.status().message(), HasSubstr(path));
    EXPECT_THAT(r.status().message(),
                HasSubstr("ParamShard: swap-in of part 2 (region 'rank0.p2'): "));
  }
  // A partial write has to read the part first, so it cannot succeed either.
  absl::Status w = shard->Write(4000, at::zeros({2000}, at::kFloat));
  EXPECT_FALSE(w.ok());
  EXPECT_THAT(w.message(), HasSubstr(path));
  // The failure stays with part 2: the write still reached part 3, and the shard stays usable.
  absl::StatusOr<at::Tensor> rest = shard->Read(5000, kNumel - 5000);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_TRUE(at::equal(rest->narrow(0, 0, 1000), at::zeros({1000})));
  EXPECT_EQ(rest->sum().item<float>(), kNumel - 6000);
}

TEST(ParamShardTest, BadArgumentsNameTheField) {
  Fixture f;
  const at::Tensor v = at::zeros({kNumel});
  auto create = [&](const at::Tensor& values, std::vector<int64_t> starts,
                    const ParamShardOptions& o) {
    return ParamShard::Create(values, std::move(starts), o).status();
  };
  auto with = [&](ParamDevice d, auto change) {
    ParamShardOptions o = f.Options(d);
    change(o);
    return o;
  };
  const ParamShardOptions host = f.Options(ParamDevice::kHost);
  const std::vector<std::pair<absl::Status, std::string>> cases = {
      {create(at::Tensor(), kStarts, host), "values = undefined"},
      {create(at::zeros({2, 5}), {0}, host), "values.dim() = 2"},
      {create(at::zeros({20}).slice(0, 0, 20, 2), {0}, host), "values.is_contiguous() = false"},
      {create(at::zeros({0}), {0}, host), "values.numel() = 0"},
      {create(v, {}, host), "part_starts = {}"},
      {create(v, {1, 5}, host), "part_starts = {1, 5}: must start at 0"},
      {create(v, {0, 5, 5}, host), "part_starts = {0, 5, 5}: must be strictly increasing"},
      {create(v, {0, kNumel}, host), "part_starts = {0, 10007}: each must be < values.numel()"},
      {create(v, kStarts, with(ParamDevice::kHost, [](auto& o) { o.pool = nullptr; })),
       "pool = null: required for device cpu"},
      {create(v, kStarts, with(ParamDevice::kNvme, [](auto& o) { o.swap = nullptr; })),
       "swap = null: required for device nvme"},
      {create(v, kStarts, with(ParamDevice::kNvme, [](auto& o) { o.max_in_cpu = -1; })),
       "max_in_cpu = -1"},
      {create(v, kStarts, with(ParamDevice::kNvme, [](auto& o) { o.io_timeout = {}; })),
       "io_timeout = 0"},
  };
  for (const auto& [status, field] : cases) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("ParamShard: " + field)) << status;
  }
  std::unique_ptr<ParamShard> shard = f.Make(v, f.Options(ParamDevice::kNvme));
  EXPECT_EQ(shard->Read(kNumel, 0)->numel(),
            0);  // empty ranges are fine, even past the parts
  EXPECT_TRUE(shard->Write(kNumel, at::zeros({0})).ok());
  EXPECT_EQ(shard->Read(-1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Read(kNumel - 1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard->Write(kNumel - 1, at::zeros({2})).code(), absl::StatusCode::kInvalidArgument);
  absl::Status dtype = shard->Write(0, at::zeros({2}, at::kDouble));
  EXPECT_EQ(dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("Double"));
  // A region name SwapSpace refuses keeps SwapSpace's code and says which part it was.
  absl::Status name =
      create(v, kStarts, with(ParamDevice::kNvme, [](auto& o) { o.region_prefix = ".hidden"; }));
  EXPECT_EQ(name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(name.message(), HasSubstr("ParamShard: reservation of part 0"));
}

}  // namespace
}  // namespace zerotrain::partition
