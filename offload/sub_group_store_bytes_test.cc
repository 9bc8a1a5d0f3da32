// SubGroupStore with arrays of 2-byte elements beside 4-byte ones (bf16 master weights and
// optimizer states): on the host and on NVMe every array keeps its own bytes through visits that
// change them, sub-group by sub-group (a sub-group of 3 elements too, whose floats follow two
// 6-byte arrays: each array's part of a region is rounded up to 4 bytes, under UBSan's alignment
// check in CI); the host blocks and the swap files hold numel times each array's element bytes;
// element_bytes other than 4 or 2, or not one per array, are refused.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/offload_testing.h"
#include "offload/sub_group_store.h"
#include "tools/status_macros.h"

namespace zerotrain::offload {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kNumel = 5003;  // 5 sub-groups of 1000 and one of 3
constexpr int64_t kSub = 1000;

// The 16-bit pattern element i of a 2-byte array holds after `step` visits.
uint16_t Half(int step, int64_t i) { return static_cast<uint16_t>(i * 31 + step * 7); }
float Full(int step, int64_t i) { return static_cast<float>(i % 97 + step); }

struct Stores {
  testing::TempDir dir;
  PinnedHostPool pool = *PinnedHostPool::Create({});
  std::unique_ptr<SwapSpace> swap = testing::MakeSmallSwapSpace(dir.path());

  // master in 2 bytes, exp_avg in 4, exp_avg_sq in 2.
  SubGroupStoreOptions Options(StoreDevice device) {
    SubGroupStoreOptions o;
    o.arrays = {"master", "exp_avg", "exp_avg_sq"};
    o.element_bytes = {2, 4, 2};
    o.numel = kNumel;
    o.sub_group_numel = kSub;
    o.device = device;
    o.pool = &pool;
    o.swap = swap.get();
    o.region_prefix = "rank0.";
    o.buffer_count = 2;
    o.io_timeout = absl::Seconds(60);
    return o;
  }
};

// Writes step `step`'s values into every element of the view.
absl::Status Write(const SubGroupView& v, int step) {
  for (int a : {0, 2}) {
    auto* half = static_cast<uint16_t*>(v.arrays[a]);
    for (int64_t i = 0; i < v.numel; ++i) half[i] = Half(step + a, v.begin + i);
  }
  for (int64_t i = 0; i < v.numel; ++i) v.floats(1)[i] = Full(step, v.begin + i);
  return absl::OkStatus();
}

// OK when every element holds step `step`'s values.
absl::Status Check(const SubGroupView& v, int step) {
  for (int64_t i = 0; i < v.numel; ++i) {
    const int64_t e = v.begin + i;
    for (int a : {0, 2}) {
      if (static_cast<const uint16_t*>(v.arrays[a])[i] != Half(step + a, e)) {
        return absl::InternalError(absl::StrCat("array ", a, " element ", e));
      }
    }
    if (v.floats(1)[i] != Full(step, e)) return absl::InternalError(absl::StrCat("element ", e));
  }
  return absl::OkStatus();
}

TEST(SubGroupStoreBytesTest, TwoByteArraysKeepTheirBytesOnHostAndNvme) {
  Stores s;
  for (StoreDevice device : {StoreDevice::kHost, StoreDevice::kNvme}) {
    SCOPED_TRACE(StoreDeviceName(device));
    absl::StatusOr<std::unique_ptr<SubGroupStore>> store = SubGroupStore::Create(s.Options(device));
    ASSERT_TRUE(store.ok()) << store.status();
    SubGroupStore& st = **store;
    EXPECT_EQ(st.element_bytes(0), 2);
    EXPECT_EQ(st.element_bytes(1), 4);
    ASSERT_TRUE(
        st.VisitAll(Access::kWrite, [](const SubGroupView& v) { return Write(v, 1); }).ok());
    // A read-modify-write of part of the range: its sub-groups move to step 2, whole.
    ASSERT_TRUE(st.Visit(1500, 3200, Access::kReadWrite, [](const SubGroupView& v) {
                    ZT_RETURN_IF_ERROR(Check(v, 1));
                    return Write(v, 2);
                  }).ok());
    ASSERT_TRUE(st.VisitAll(Access::kRead, [](const SubGroupView& v) {
                    return Check(v, v.index >= 1 && v.index <= 3 ? 2 : 1);
                  }).ok());
    if (device == StoreDevice::kNvme) {
      // Each array's part of a region rounded up to 4 bytes: the 3-element sub-group's 2-byte
      // arrays take 8 bytes each, so its floats start aligned.
      EXPECT_EQ(*s.swap->region_bytes("rank0.sg0"), kSub * (2 + 4 + 2));
      EXPECT_EQ(*s.swap->region_bytes("rank0.sg5"), 8 + 12 + 8);
      EXPECT_EQ(st.nvme_bytes(), 5 * kSub * (2 + 4 + 2) + 8 + 12 + 8);
    } else {
      // Each array one block of numel times its bytes, rounded up to the pool's 4 KiB: 10006 and
      // 20012 bytes take 3 and 5 pages.
      EXPECT_EQ(st.host_bytes(), 12288 + 20480 + 12288);
    }
  }
}

TEST(SubGroupStoreBytesTest, ElementBytesOtherThanFourOrTwoAreRefused) {
  Stores s;
  SubGroupStoreOptions o = s.Options(StoreDevice::kHost);
  o.element_bytes = {2, 8, 2};
  EXPECT_THAT(std::string(SubGroupStore::Create(o).status().message()),
              HasSubstr("SubGroupStore: element_bytes = 8: each must be 4 or 2"));
  o.element_bytes = {2, 4};
  EXPECT_THAT(std::string(SubGroupStore::Create(o).status().message()),
              HasSubstr("element_bytes = 2 entries: must be empty or one per array (3)"));
}

}  // namespace
}  // namespace zerotrain::offload
