// SubGroupStore's gradients: passes of increasing ranges (with gaps, accumulating or not) give
// what a scalar reference gives, on the host and on NVMe at every buffer count; on_summed sees
// each sub-group once, in order, with its final values; visits read the gradients beside the
// state and never change them; misuse fails naming the call; a damaged gradient file poisons the
// store.
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"
#include "offload/sub_group_store.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNumel = 5003;  // 5 sub-groups of 1000 and one of 3
constexpr int64_t kSub = 1000;

class GradStores {
 public:
  GradStores() : swap_(testing::MakeSmallSwapSpace(dir_.path())) {}
  std::unique_ptr<SubGroupStore> Make(StoreDevice device, int buffers, bool grads = true) {
    SubGroupStoreOptions o;
    o.arrays = {"master", "exp_avg"};
    o.numel = kNumel;
    o.sub_group_numel = kSub;
    o.device = device;
    o.pool = &pool_;
    o.swap = swap_.get();
    o.region_prefix = absl::StrCat("s", ++made_, ".");
    o.buffer_count = buffers;
    o.io_timeout = absl::Seconds(60);
    o.grads = grads;
    absl::StatusOr<std::unique_ptr<SubGroupStore>> s = SubGroupStore::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  // Two NVMe stores of 2 buffers, with and without gradients.
  std::pair<std::unique_ptr<SubGroupStore>, std::unique_ptr<SubGroupStore>> WithAndWithout() {
    return {Make(StoreDevice::kNvme, 2), Make(StoreDevice::kNvme, 2, /*grads=*/false)};
  }
  SwapSpace& swap() { return *swap_; }

 private:
  testing::TempDir dir_;
  PinnedHostPool pool_ = *PinnedHostPool::Create({});
  std::unique_ptr<SwapSpace> swap_;
  int made_ = 0;
};

// The gradients as a visit sees them, and whether the state stayed what `state` says.
std::vector<float> ReadGrads(SubGroupStore& store, float state) {
  std::vector<float> out(kNumel, -1.0f);
  absl::Status s = store.VisitWithGrads(Access::kRead, [&](const SubGroupView& v) {
    EXPECT_NE(v.grads, nullptr);
    std::copy(v.grads, v.grads + v.numel, out.begin() + v.begin);
    for (size_t k = 0; k < v.arrays.size(); ++k) {
      EXPECT_EQ(*std::min_element(v.floats(k), v.floats(k) + v.numel), state) << v.index;
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(SubGroupGradsTest, PassesMatchAScalarReferenceOnHostAndNvme) {
  GradStores f;
  std::vector<std::unique_ptr<SubGroupStore>> stores;
  stores.push_back(f.Make(StoreDevice::kHost, 1));
  for (int buffers : {1, 2, 4, 16}) stores.push_back(f.Make(StoreDevice::kNvme, buffers));
  for (const auto& s : stores) ASSERT_NE(s, nullptr);
  std::vector<float> ref(kNumel, 0.0f);
  std::mt19937 rng(7);
  for (int pass = 0; pass < 12; ++pass) {
    const bool accumulate = pass % 3 != 0;
    if (!accumulate) std::fill(ref.begin(), ref.end(), 0.0f);
    // Increasing ranges with gaps (what no range covers stays zero, or as it was).
    std::vector<std::pair<int64_t, std::vector<float>>> ranges;
    for (int64_t at = std::uniform_int_distribution<int64_t>(0, 300)(rng); at < kNumel;) {
      const int64_t n = std::min(kNumel - at, std::uniform_int_distribution<int64_t>(1, 2500)(rng));
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>((pass * 5 + at + i) % 11) - 5;
      for (int64_t i = 0; i < n; ++i) ref[at + i] += values[i];
      ranges.push_back({at, std::move(values)});
      at += n + std::uniform_int_distribution<int64_t>(0, 1200)(rng);
    }
    for (const auto& store : stores) {
      std::vector<float> summed(kNumel, -1.0f);
      std::vector<int64_t> begins;
      ASSERT_TRUE(store
                      ->BeginGrads(accumulate,
                                   [&](int64_t begin, const float* g, int64_t n) {
                                     begins.push_back(begin);
                                     std::copy(g, g + n, summed.begin() + begin);
                                     return absl::OkStatus();
                                   })
                      .ok());
      for (const auto& [at, values] : ranges) {
        absl::Status s = store->AddGrads(at, values.data(), static_cast<int64_t>(values.size()));
        ASSERT_TRUE(s.ok()) << s;
      }
      ASSERT_TRUE(store->FinishGrads().ok());
      const std::string what = absl::StrCat(StoreDeviceName(store->options().device), " buffers ",
                                            store->options().buffer_count, " pass ", pass);
      EXPECT_EQ(begins, std::vector<int64_t>({0, 1000, 2000, 3000, 4000, 5000})) << what;
      EXPECT_EQ(testing::FirstDifference(summed.data(), ref.data(), kNumel * 4), "") << what;
      const std::vector<float> got = ReadGrads(*store, 0.0f);
      EXPECT_EQ(testing::FirstDifference(got.data(), ref.data(), kNumel * 4), "") << what;
    }
  }
  // A kReadWrite visit with gradients steps the state and leaves the gradients as they were.
  for (const auto& store : stores) {
    ASSERT_TRUE(store
                    ->VisitWithGrads(Access::kReadWrite,
                                     [](const SubGroupView& v) {
                                       for (size_t k = 0; k < v.arrays.size(); ++k)
                                         std::fill(v.floats(k), v.floats(k) + v.numel, 2.0f);
                                       return absl::OkStatus();
                                     })
                    .ok());
    const std::vector<float> got = ReadGrads(*store, 2.0f);
    EXPECT_EQ(testing::FirstDifference(got.data(), ref.data(), kNumel * 4), "");
    EXPECT_TRUE(store->health().ok());
  }
}

TEST(SubGroupGradsTest, GradientsCountInTheStoresBytes) {
  GradStores f;
  auto [with, without] = f.WithAndWithout();
  ASSERT_TRUE(with != nullptr && without != nullptr);
  EXPECT_EQ(with->nvme_bytes(), kNumel * 4 * 3);
  EXPECT_EQ(without->nvme_bytes(), kNumel * 4 * 2);
  // Two gradient buffers of one sub-group each, rounded up to the pool's 4 KiB.
  EXPECT_EQ(with->host_bytes() - without->host_bytes(), 2 * 4096);
  std::unique_ptr<SubGroupStore> host = f.Make(StoreDevice::kHost, 1);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->nvme_bytes(), 0);
  EXPECT_GE(host->host_bytes(), kNumel * 4 * 3);
}

TEST(SubGroupGradsTest, MisuseFailsNamingTheCall) {
  GradStores f;
  auto [store, plain] = f.WithAndWithout();
  ASSERT_TRUE(store != nullptr && plain != nullptr);
  const float one[4] = {1, 1, 1, 1};
  auto nothing = [](const SubGroupView&) { return absl::OkStatus(); };
  EXPECT_EQ(plain->BeginGrads(false, {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plain->VisitWithGrads(Access::kRead, nothing).message(),
              HasSubstr("keeps no gradients"));
  EXPECT_EQ(store->VisitWithGrads(Access::kWrite, nothing).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store->AddGrads(0, one, 4).message(), HasSubstr("outside a gradient pass"));
  ASSERT_TRUE(store->BeginGrads(false, {}).ok());
  ASSERT_TRUE(store->AddGrads(2000, one, 4).ok());
  EXPECT_THAT(store->VisitWithGrads(Access::kRead, nothing).message(),
              HasSubstr("during a gradient pass"));
  const absl::Status back = store->AddGrads(1999, one, 4);
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.message(), HasSubstr("AddGrads(1999, 4)"));
  EXPECT_THAT(back.message(), HasSubstr("had reached 2004"));
  EXPECT_THAT(store->FinishGrads().message(), HasSubstr("outside a gradient pass"));
  // A new pass starts over, and an error in on_summed ends it as it is.
  ASSERT_TRUE(store
                  ->BeginGrads(false,
                               [](int64_t begin, const float*, int64_t) {
                                 return begin == 3000 ? absl::AbortedError("stop")
                                                      : absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(store->AddGrads(kNumel - 4, one, 4).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(store->health().ok());
  EXPECT_THAT(store->AddGrads(kNumel - 1, one, 1).message(), HasSubstr("outside a gradient pass"));
  // Until a pass finishes the gradients are a mix of two: visits refuse them.
  EXPECT_THAT(store->VisitWithGrads(Access::kRead, nothing).message(), HasSubstr("did not finish"));
  ASSERT_TRUE(store->BeginGrads(false, {}).ok());
  ASSERT_TRUE(store->FinishGrads().ok());
  EXPECT_TRUE(store->VisitWithGrads(Access::kRead, nothing).ok());
}

TEST(SubGroupGradsTest, ADamagedGradientFileFailsNamingItAndPoisonsTheStore) {
  GradStores f;
  std::unique_ptr<SubGroupStore> store = f.Make(StoreDevice::kNvme, 2);
  ASSERT_NE(store, nullptr);
  const std::vector<float> ones(kNumel, 1.0f);
  ASSERT_TRUE(store->BeginGrads(false, {}).ok());
  ASSERT_TRUE(store->AddGrads(0, ones.data(), kNumel).ok());
  ASSERT_TRUE(store->FinishGrads().ok());
  const std::string path = *f.swap().file_path("s1.grad2");
  ASSERT_EQ(truncate(path.c_str(), 100), 0);
  // Accumulating reads sub-group 2's gradients back: the short read fails the pass.
  ASSERT_TRUE(store->BeginGrads(true, {}).ok());
  const absl::Status s = store->AddGrads(0, ones.data(), kNumel);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("swap-in of the gradients of sub-group 2 (region 's1.grad2')"));
  EXPECT_EQ(store->health(), s);
  EXPECT_EQ(store->BeginGrads(false, {}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      store->VisitWithGrads(Access::kRead, [](const SubGroupView&) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace zerotrain::offload
