// The local address toward MASTER_ADDR: loopback for a local master, a host address for itself,
// the named interface when GLOO_SOCKET_IFNAME is set, and errors that name what was tried. The
// expected addresses come from getifaddrs, not from the code under test.
#include "comm/local_route.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace zerotrain::comm {
namespace {

using ::testing::HasSubstr;

// The first non-loopback IPv4 address of this host and its interface, or empty strings.
std::pair<std::string, std::string> SomeHostAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::pair<std::string, std::string> found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text,
              sizeof(text));
    if (std::string(text).rfind("127.", 0) == 0) continue;
    found = {text, i->ifa_name};
    break;
  }
  freeifaddrs(list);
  return found;
}

TEST(LocalRoute, LoopbackMasterGivesLoopback) {
  for (const char* master : {"127.0.0.1", "localhost"}) {
    SCOPED_TRACE(master);
    auto route = RouteToward(master, 29500);
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(route->address, "127.0.0.1");
    EXPECT_EQ(route->interface, "lo");
    EXPECT_THAT(route->reason, HasSubstr(std::string("MASTER_ADDR=") + master));
  }
}

TEST(LocalRoute, OwnHostAddressRoutesFromItself) {
  const auto [address, interface] = SomeHostAddress();
  if (address.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  auto route = RouteToward(address, 29500);
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->address, address);
  EXPECT_EQ(route->interface, interface);
}

TEST(LocalRoute, UnknownNameIsAnErrorNamingMasterAddr) {
  auto route = RouteToward("zt-no-such-host.invalid", 29500);
  ASSERT_FALSE(route.ok());
  EXPECT_THAT(std::string(route.status().message()),
              HasSubstr("MASTER_ADDR=zt-no-such-host.invalid does not resolve"));
}

TEST(LocalRoute, NamedInterfaceWins) {
  auto lo = InterfaceRoute("lo", "GLOO_SOCKET_IFNAME");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(lo->address, "127.0.0.1");
  EXPECT_EQ(lo->reason, "GLOO_SOCKET_IFNAME=lo");
  auto missing = InterfaceRoute("zt-nope0", "GLOO_SOCKET_IFNAME");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("GLOO_SOCKET_IFNAME=zt-nope0"));

  // The variable beats the route: a master elsewhere, yet the rank stays on lo.
  setenv("ZT_TEST_IFNAME", "lo", 1);
  auto chosen = ChooseLocalRoute("192.0.2.1", 29500, "ZT_TEST_IFNAME");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->address, "127.0.0.1");
  setenv("ZT_TEST_IFNAME", "", 1);  // empty is unset, as PyTorch reads it
  chosen = ChooseLocalRoute("127.0.0.1", 29500, "ZT_TEST_IFNAME");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_THAT(chosen->reason, HasSubstr("MASTER_ADDR=127.0.0.1"));
}

TEST(LocalRoute, NcclIsPointedAtTheRouteUnlessTheUserChose) {
  unsetenv("NCCL_SOCKET_IFNAME");
  PointNcclAtRoute("127.0.0.1");
  ASSERT_NE(std::getenv("NCCL_SOCKET_IFNAME"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "lo");
  setenv("NCCL_SOCKET_IFNAME", "ib0", 1);
  PointNcclAtRoute("127.0.0.1");
  EXPECT_STREQ(std::getenv("NCCL_SOCKET_IFNAME"), "ib0");
}

TEST(LocalRoute, HintNamesTheAddressAndTheVariables) {
  const std::string hint = RouteHint({"10.1.2.3", "eth7", "the route to MASTER_ADDR=10.1.2.1"});
  EXPECT_THAT(hint, HasSubstr("advertised 10.1.2.3 (eth7), chosen by the route to "
                              "MASTER_ADDR=10.1.2.1"));
  EXPECT_THAT(hint, HasSubstr("GLOO_SOCKET_IFNAME"));
  EXPECT_THAT(hint, HasSubstr("NCCL_SOCKET_IFNAME"));
  EXPECT_EQ(hint.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace zerotrain::comm
