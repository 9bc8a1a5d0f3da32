// Checks that cc_proto (tools/proto.bzl) yields a usable library: encode, decode, text format.
#include <google/protobuf/text_format.h>

#include <string>

#include "gtest/gtest.h"
#include "tools/proto_rule_test.pb.h"

namespace zerotrain::tools {
namespace {

TEST(CcProto, BinaryRoundTrip) {
  ProtoRuleSample in;
  in.set_name("bucket");
  in.set_count(5e8);
  in.add_values(0.5f);
  in.add_values(-2.0f);
  in.mutable_inner()->set_on(true);
  std::string wire;
  ASSERT_TRUE(in.SerializeToString(&wire));
  ProtoRuleSample out;
  ASSERT_TRUE(out.ParseFromString(wire));
  EXPECT_EQ(out.name(), "bucket");
  EXPECT_EQ(out.count(), 500000000);
  ASSERT_EQ(out.values_size(), 2);
  EXPECT_EQ(out.values(1), -2.0f);
  EXPECT_TRUE(out.inner().on());
}

TEST(CcProto, TextFormatRejectsUnknownField) {
  ProtoRuleSample msg;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString("name: 'x' count: 3", &msg));
  EXPECT_EQ(msg.count(), 3);
  EXPECT_FALSE(google::protobuf::TextFormat::ParseFromString("nmae: 'x'", &msg));
}

}  // namespace
}  // namespace zerotrain::tools
