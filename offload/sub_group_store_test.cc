// SubGroupStore: host and NVMe stores agree with a plain reference through random partial
// read-modify-write visits at every buffer count, start at zero, use external arrays in place,
// kWrite reads nothing and kRead writes nothing back, a truncated swap file fails the visit and
// poisons the store, a callback's error stops the visit without poisoning, and bad options or a
// too small pool fail at Create naming the cause.
#include "offload/sub_group_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

constexpr int64_t kNumel = 10007;  // 10 sub-groups of 1000 and one of 7
constexpr int64_t kSub = 1000;
constexpr int kArrays = 3;

// What the tests' visits add to element i of array a at step s: small integers, so sums are exact.
float Delta(int s, int a, int64_t i) { return static_cast<float>((s * 7 + a * 3 + i) % 13) - 6; }

struct Fixture {
  TempDir dir;
  PinnedHostPool pool = *PinnedHostPool::Create({});
  std::unique_ptr<SwapSpace> swap = testing::MakeSmallSwapSpace(dir.path());

  SubGroupStoreOptions Options(StoreDevice device, int buffer_count = 2,
                               const std::string& prefix = "rank0.") {
    SubGroupStoreOptions o;
    o.arrays = {"master", "exp_avg", "exp_avg_sq"};
    o.numel = kNumel;
    o.sub_group_numel = kSub;
    o.device = device;
    o.pool = &pool;
    o.swap = swap.get();
    o.region_prefix = prefix;
    o.buffer_count = buffer_count;
    o.io_timeout = absl::Seconds(60);
    return o;
  }
  std::unique_ptr<SubGroupStore> Make(const SubGroupStoreOptions& o) {
    absl::StatusOr<std::unique_ptr<SubGroupStore>> s = SubGroupStore::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
};

// Every array's contents, read through kRead visits.
std::vector<std::vector<float>> ReadAll(SubGroupStore& store) {
  std::vector<std::vector<float>> out(store.num_arrays(), std::vector<float>(store.numel()));
  absl::Status s = store.VisitAll(Access::kRead, [&](const SubGroupView& v) {
    for (int a = 0; a < store.num_arrays(); ++a) {
      std::copy(v.floats(a), v.floats(a) + v.numel, out[a].begin() + v.begin);
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(SubGroupStoreTest, HostAndNvmeMatchAPlainReferenceThroughRandomPartialVisits) {
  Fixture f;
  std::vector<std::unique_ptr<SubGroupStore>> stores;
  stores.push_back(f.Make(f.Options(StoreDevice::kHost)));
  for (int buffers : {1, 2, 4, 16}) {  // 16: more buffers than the 11 sub-groups
    stores.push_back(
        f.Make(f.Options(StoreDevice::kNvme, buffers, absl::StrCat("b", buffers, "."))));
  }
  for (const auto& s : stores) ASSERT_NE(s, nullptr);
  std::vector<std::vector<float>> ref(kArrays, std::vector<float>(kNumel, 0.0f));
  std::mt19937 rng(42);
  for (int step = 0; step < 40; ++step) {
    int64_t begin = std::uniform_int_distribution<int64_t>(0, kNumel - 1)(rng);
    int64_t end = std::uniform_int_distribution<int64_t>(begin + 1, kNumel)(rng);
    if (step == 0) begin = 0, end = kNumel;
    // The reference: every whole sub-group that overlaps [begin, end), by a scalar loop.
    std::vector<int> want_groups;
    for (int64_t g = begin / kSub; g * kSub < end; ++g) {
      want_groups.push_back(static_cast<int>(g));
      for (int a = 0; a < kArrays; ++a) {
        for (int64_t i = g * kSub; i < std::min((g + 1) * kSub, kNumel); ++i) {
          ref[a][i] += Delta(step, a, i);
        }
      }
    }
    for (const auto& store : stores) {
      std::vector<int> groups;
      absl::Status s = store->Visit(begin, end, Access::kReadWrite, [&](const SubGroupView& v) {
        groups.push_back(v.index);
        EXPECT_EQ(v.begin, v.index * kSub);
        EXPECT_EQ(v.numel, std::min(kSub, kNumel - v.begin));
        EXPECT_EQ(v.arrays.size(), kArrays);
        for (int a = 0; a < kArrays; ++a) {
          for (int64_t i = 0; i < v.numel; ++i) v.floats(a)[i] += Delta(step, a, v.begin + i);
        }
        return absl::OkStatus();
      });
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(groups, want_groups) << "step " << step << " [" << begin << ", " << end << ")";
    }
  }
  for (const auto& store : stores) {
    std::vector<std::vector<float>> got = ReadAll(*store);
    for (int a = 0; a < kArrays; ++a) {
      EXPECT_EQ(testing::FirstDifference(got[a].data(), ref[a].data(), kNumel * 4), "")
          << StoreDeviceName(store->options().device) << " buffers "
          << store->options().buffer_count << " array " << a;
    }
    EXPECT_TRUE(store->health().ok());
  }
}

TEST(SubGroupStoreTest, StartsAtZeroAndUsesExternalArraysInPlace) {
  Fixture f;
  std::vector<float> master(kNumel, 0.0f);
  SubGroupStoreOptions o = f.Options(StoreDevice::kHost);
  o.external = {master.data(), nullptr, nullptr};
  std::unique_ptr<SubGroupStore> host = f.Make(o);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->resident(0), master.data());
  EXPECT_EQ(host->host_bytes(), 2 * 40960);  // two arrays of 40028 bytes, rounded to 4 KiB
  EXPECT_EQ(f.pool.bytes_in_use(), host->host_bytes());
  EXPECT_EQ(host->nvme_bytes(), 0);
  std::unique_ptr<SubGroupStore> nvme = f.Make(f.Options(StoreDevice::kNvme, 3));
  ASSERT_NE(nvme, nullptr);
  EXPECT_EQ(nvme->resident(0), nullptr);
  EXPECT_EQ(nvme->host_bytes(), 3 * 12288);  // three buffers of 3 arrays * 1000 floats
  EXPECT_EQ(f.pool.bytes_in_use(), host->host_bytes() + nvme->host_bytes());
  EXPECT_EQ(nvme->nvme_bytes(), kArrays * kNumel * 4);
  EXPECT_EQ(*f.swap->region_bytes("rank0.sg10"), kArrays * 7 * 4);
  const std::vector<float> zeros(kNumel, 0.0f);
  for (SubGroupStore* s : {host.get(), nvme.get()}) {
    for (const std::vector<float>& array : ReadAll(*s)) EXPECT_EQ(array, zeros);
  }
  master.assign(kNumel, 5.0f);  // the caller's writes are the store's contents...
  absl::Status s = host->Visit(kNumel - 1, kNumel, Access::kReadWrite, [](const SubGroupView& v) {
    EXPECT_EQ(v.floats(0)[0], 5.0f);
    v.floats(0)[v.numel - 1] = 9.0f;
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(master[kNumel - 1], 9.0f);  // ...and the store's writes are the caller's.
}

TEST(SubGroupStoreTest, WriteDoesNotReadAndReadDoesNotWriteBack) {
  Fixture f;
  std::unique_ptr<SubGroupStore> store = f.Make(f.Options(StoreDevice::kNvme, 2));
  ASSERT_NE(store, nullptr);
  // A kWrite visit that read anything would fail on this emptied file.
  const std::string path = *f.swap->file_path("rank0.sg4");
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  auto pattern = [](int a, int64_t i) { return static_cast<float>(a * 100000 + i); };
  auto write = [&](const SubGroupView& v) {
    for (int a = 0; a < kArrays; ++a) {
      for (int64_t i = 0; i < v.numel; ++i) v.floats(a)[i] = pattern(a, v.begin + i);
    }
    return absl::OkStatus();
  };
  auto scribble = [](const SubGroupView& v) {
    v.floats(1)[0] = -1.0f;  // in the buffer only: kRead writes nothing back
    return absl::OkStatus();
  };
  absl::Status s = store->VisitAll(Access::kWrite, write);
  ASSERT_TRUE(s.ok()) << s;
  s = store->VisitAll(Access::kRead, scribble);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<std::vector<float>> got = ReadAll(*store);
  for (int a = 0; a < kArrays; ++a) {
    for (int64_t i = 0; i < kNumel; ++i) ASSERT_EQ(got[a][i], pattern(a, i)) << a << " " << i;
  }
}

TEST(SubGroupStoreTest, TruncatedSwapFileFailsTheVisitNamingItAndPoisonsTheStore) {
  Fixture f;
  std::unique_ptr<SubGroupStore> store = f.Make(f.Options(StoreDevice::kNvme, 2));
  ASSERT_NE(store, nullptr);
  auto add_one = [](const SubGroupView& v) {
    for (size_t k = 0; k < v.arrays.size(); ++k) {
      for (int64_t i = 0; i < v.numel; ++i) v.floats(k)[i] += 1;
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE(store->VisitAll(Access::kReadWrite, add_one).ok());
  const std::string path = *f.swap->file_path("rank0.sg3");
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  std::vector<int> seen;
  absl::Status s = store->VisitAll(Access::kReadWrite, [&](const SubGroupView& v) {
    seen.push_back(v.index);
    return add_one(v);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("SubGroupStore: swap-in of sub-group 3 (region 'rank0.sg3')"));
  EXPECT_THAT(s.message(), HasSubstr("short read of " + path));
  EXPECT_EQ(seen, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(store->health(), s);
  absl::Status later = store->Visit(0, 1, Access::kRead, add_one);
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(later.message(), HasSubstr(std::string(s.message())));
  std::printf("poisoned: %s\n", later.ToString().c_str());
  // A partial rewrite is refused too; a rewrite of everything (a checkpoint load) heals it.
  EXPECT_EQ(store->Visit(0, 1, Access::kWrite, add_one).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store
                  ->VisitAll(Access::kWrite,
                             [](const SubGroupView& v) {
                               for (size_t k = 0; k < v.arrays.size(); ++k)
                                 std::fill(v.floats(k), v.floats(k) + v.numel, 7.0f);
                               return absl::OkStatus();
                             })
                  .ok());
  EXPECT_TRUE(store->health().ok());
  ASSERT_TRUE(store
                  ->VisitAll(Access::kRead,
                             [](const SubGroupView& v) {
                               for (size_t k = 0; k < v.arrays.size(); ++k) {
                                 for (int64_t i = 0; i < v.numel; ++i) {
                                   if (v.floats(k)[i] != 7.0f)
                                     return absl::InternalError(
                                         absl::StrCat("sub-group ", v.index));
                                 }
                               }
                               return absl::OkStatus();
                             })
                  .ok());
}

TEST(SubGroupStoreTest, ACallbackThatThrowsIsAnErrorAndTheStoreStaysUsable) {
  Fixture f;
  std::unique_ptr<SubGroupStore> store = f.Make(f.Options(StoreDevice::kNvme, 2));
  ASSERT_NE(store, nullptr);
  absl::Status s = store->VisitAll(Access::kReadWrite, [](const SubGroupView& v) -> absl::Status {
    if (v.index == 1) throw std::runtime_error("kernel failed");
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("sub-group 1: kernel failed"));
  EXPECT_TRUE(store->VisitAll(Access::kRead, [](const SubGroupView&) { return absl::OkStatus(); })
                  .ok());  // not left "inside a Visit"
}

TEST(SubGroupStoreTest, CallbackErrorStopsTheVisitUnchangedWithoutPoisoning) {
  for (StoreDevice device : {StoreDevice::kHost, StoreDevice::kNvme}) {
    Fixture f;
    std::unique_ptr<SubGroupStore> store = f.Make(f.Options(device, 4));
    ASSERT_NE(store, nullptr);
    const absl::Status stop = absl::AbortedError("optimizer: NaN in sub-group 2");
    std::vector<int> seen;
    absl::Status s = store->Visit(10, kNumel, Access::kReadWrite, [&](const SubGroupView& v) {
      seen.push_back(v.index);
      for (int64_t i = 0; i < v.numel; ++i) v.floats(0)[i] = 1;
      return v.index == 2 ? stop : absl::OkStatus();
    });
    EXPECT_EQ(s, stop);
    EXPECT_EQ(seen, std::vector<int>({0, 1, 2}));
    EXPECT_TRUE(store->health().ok());
    std::vector<float> master = ReadAll(*store)[0];
    EXPECT_EQ(master[0], 1.0f);
    EXPECT_EQ(master[1999], 1.0f);
    // kHost changes in place; kNvme does not write back the sub-group whose callback failed.
    EXPECT_EQ(master[2000], device == StoreDevice::kHost ? 1.0f : 0.0f);
    EXPECT_EQ(master[3000], 0.0f);
  }
}

TEST(SubGroupStoreTest, RangesOutsideTheArraysAreRefusedAndEmptyOnesCallNothing) {
  Fixture f;
  std::unique_ptr<SubGroupStore> store = f.Make(f.Options(StoreDevice::kNvme));
  ASSERT_NE(store, nullptr);
  int calls = 0;
  auto count = [&](const SubGroupView&) {
    ++calls;
    return absl::OkStatus();
  };
  EXPECT_EQ(store->Visit(-1, 5, Access::kRead, count).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Visit(0, kNumel + 1, Access::kRead, count).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Visit(6, 5, Access::kRead, count).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->Visit(kNumel, kNumel, Access::kRead, count).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(store->Visit(999, 1001, Access::kRead, count).ok());
  EXPECT_EQ(calls, 2);
}

TEST(SubGroupStoreTest, BadOptionsNameTheFieldAndASmallPoolFailsAtCreate) {
  Fixture f;
  struct Case {
    std::function<void(SubGroupStoreOptions&)> change;
    std::string message;
  };
  float x = 0;
  const Case cases[] = {
      {[](auto& o) { o.arrays = {}; }, "SubGroupStore: arrays = {}"},
      {[](auto& o) {
         o.arrays = {"m", "v", "m"};
       },
       "arrays = {m, v, m}: names must be"},
      {[](auto& o) { o.numel = 0; }, "numel = 0: must be > 0"},
      {[](auto& o) { o.sub_group_numel = -3; }, "sub_group_numel = -3: must be > 0"},
      {[](auto& o) { o.pool = nullptr; }, "pool = null: required"},
      {[&](auto& o) { o.external = {&x}; }, "external = 1 entries: must be empty or one per"},
      {[&](auto& o) {
         o.device = StoreDevice::kNvme, o.external = {&x, &x, &x};
       },
       "external = 3 entries: only for device host"},
      {[](auto& o) { o.device = StoreDevice::kNvme, o.swap = nullptr; }, "swap = null: required"},
      {[](auto& o) { o.device = StoreDevice::kNvme, o.buffer_count = 0; },
       "SubGroupStore: buffer_count = 0: must be >= 1"},
      {[](auto& o) { o.device = StoreDevice::kNvme, o.region_prefix = "../"; },
       "SubGroupStore: sub-group 0 of 11: SwapSpace: region name '../sg0'"},
  };
  for (const Case& c : cases) {
    SubGroupStoreOptions o = f.Options(StoreDevice::kHost);
    c.change(o);
    absl::StatusOr<std::unique_ptr<SubGroupStore>> s = SubGroupStore::Create(o);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.status().message(), HasSubstr(c.message));
  }
  // Two buffers of 12288 bytes do not fit in 16 KiB: Create fails, before reserving any region.
  PinnedHostPool small = *PinnedHostPool::Create({16384});
  SubGroupStoreOptions o = f.Options(StoreDevice::kNvme, 2, "small.");
  o.pool = &small;
  absl::StatusOr<std::unique_ptr<SubGroupStore>> s = SubGroupStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.status().message(), HasSubstr("SubGroupStore: buffer 1 of 2 (12000 bytes): "));
  EXPECT_EQ(f.swap->file_path("small.sg0").status().code(), absl::StatusCode::kNotFound);
  o.device = StoreDevice::kHost;
  s = SubGroupStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.status().message(), HasSubstr("SubGroupStore: array 'master' (40028 bytes): "));
}

}  // namespace
}  // namespace zerotrain::offload
