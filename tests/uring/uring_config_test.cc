/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/config, the keys of `driver = uring` ports: the shipped config/uring-a.ini and uring-b.ini
 * load; a uring port needs only ip; keys of the other driver are refused; bad ports, modes and
 * interface names are refused with file:line and the key. No EAL, no socket.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "runtime/runtime.h"
#include "uring/uring_port.h"

namespace droce {
namespace {

class TempFile {
  public:
    explicit TempFile(const std::string& text) {
        static int n = 0;
        path_ = "/tmp/droce-uring-config-test-" + std::to_string(::getpid()) + "-" +
                std::to_string(n++) + ".ini";
        std::ofstream(path_, std::ios::binary) << text;
    }
    ~TempFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

/** A one-port uring file with @p port_lines after the [port0] line (line 4 on). */
std::string file(const std::string& port_lines) {
    return "[device]\n"  // 1
           "name = u0\n" // 2
           "[port0]\n"   // 3
           + port_lines; // 4 ...
}

std::string load_error(const std::string& text) {
    TempFile f(text);
    std::string err;
    EXPECT_FALSE(load_config(f.path(), &err));
    return err;
}

TEST(UringConfig, ShippedConfigsLoad) {
    const char* dir = std::getenv("DROCE_CONFIG_DIR");
    for (const char* name : {"uring-a.ini", "uring-b.ini"}) {
        std::string err;
        auto f = load_config(std::string(dir ? dir : "config") + "/" + name, &err);
        ASSERT_TRUE(f) << err;
        const PortConfig& pc = f->devices[0].ports[0];
        EXPECT_EQ(pc.driver, PortDriverKind::uring);
        EXPECT_TRUE(pc.ip.ipv4);
        EXPECT_EQ(pc.interface, "lo");
        EXPECT_EQ(pc.udp_port, 4791);
        EXPECT_EQ(pc.mtu, 0u); // the interface's, at bring-up
        EXPECT_TRUE(f->devices[0].eal.empty());
    }
}

TEST(UringConfig, OnlyIpIsRequired) {
    TempFile f(file("driver = uring\nip = 127.0.0.9/8\nudp_port = 5000\npeer_udp_port = 5001\n"
                    "recv_mode = batched\nmtu = 1500\nsend_zc = on\nsend_zc_min = 2048\n"));
    std::string err;
    auto c = load_config(f.path(), &err);
    ASSERT_TRUE(c) << err;
    const PortConfig& pc = c->devices[0].ports[0];
    EXPECT_EQ(pc.udp_port, 5000);
    EXPECT_EQ(pc.peer_udp_port, 5001);
    EXPECT_EQ(pc.recv_mode, "batched");
    EXPECT_EQ(pc.send_zc, "on");
    EXPECT_EQ(pc.send_zc_min, 2048u);
    EXPECT_EQ(pc.mtu, 1500u);
    EXPECT_TRUE(pc.devargs.empty());
    EXPECT_EQ(pc.mac, wire::MacAddr{}); // the driver derives one
    EXPECT_FALSE(pc.share);             // off by default: a port in use is EADDRINUSE
}

TEST(UringConfig, ShareYesOrNo) {
    for (const char* v : {"yes", "no"}) {
        TempFile f(file(std::string("driver = uring\nip = 127.0.0.9/8\nshare = ") + v + "\n"));
        std::string err;
        auto c = load_config(f.path(), &err);
        ASSERT_TRUE(c) << err;
        EXPECT_EQ(c->devices[0].ports[0].share, std::string(v) == "yes");
    }
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\nshare = 1\n"))
                  .find(":6: [port0] share: \"1\" is not yes or no"),
              std::string::npos);
    EXPECT_NE(load_error(file("devargs = net_ring0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n"
                              "share = yes\n"))
                  .find(":7: [port0] share: only for driver = uring"),
              std::string::npos);
}

TEST(UringConfig, PacketReceiveModeIsAValue) {
    TempFile f(file("driver = uring\nip = 127.0.0.9/8\nrecv_mode = packet\n"));
    std::string err;
    auto c = load_config(f.path(), &err);
    ASSERT_TRUE(c) << err;
    EXPECT_EQ(c->devices[0].ports[0].recv_mode, "packet");
}

TEST(UringConfig, TaskrunIsAutoSignalOrCoop) {
    for (const char* v : {"auto", "signal", "coop"}) {
        TempFile f(file(std::string("driver = uring\nip = 127.0.0.9/8\ntaskrun = ") + v + "\n"));
        std::string err;
        auto c = load_config(f.path(), &err);
        ASSERT_TRUE(c) << err;
        EXPECT_EQ(c->devices[0].ports[0].taskrun, v);
    }
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\ntaskrun = poll\n"))
                  .find("[port0] taskrun: \"poll\" is not auto, signal or coop"),
              std::string::npos);
    // A key of the uring driver only.
    EXPECT_NE(load_error(file("driver = dpdk\ndevargs = net_null0\nmac = 02:00:00:00:00:01\n"
                              "ip = 10.0.0.1/24\ntaskrun = coop\n"))
                  .find("taskrun"),
              std::string::npos);
}

TEST(UringConfig, GsoIsAutoOnOrOffAndAutoByDefault) {
    for (const char* v : {"auto", "on", "off"}) {
        TempFile f(file(std::string("driver = uring\nip = 127.0.0.9/8\ngso = ") + v + "\n"));
        std::string err;
        auto c = load_config(f.path(), &err);
        ASSERT_TRUE(c) << err;
        EXPECT_EQ(c->devices[0].ports[0].gso, v);
    }
    TempFile f(file("driver = uring\nip = 127.0.0.9/8\n"));
    std::string err;
    auto c = load_config(f.path(), &err);
    ASSERT_TRUE(c) << err;
    EXPECT_EQ(c->devices[0].ports[0].gso, "auto");
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\ngso = yes\n"))
                  .find(":6: [port0] gso: \"yes\" is not auto, on or off"),
              std::string::npos);
    EXPECT_NE(load_error(file("devargs = net_ring0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n"
                              "gso = on\n"))
                  .find("[port0] gso: only for driver = uring"),
              std::string::npos);
}

TEST(UringConfig, BadLinesAreRefusedWithLineAndKey) {
    EXPECT_NE(load_error(file("driver = uring\n")).find(":3: [port0]: missing required key \"ip\""),
              std::string::npos);
    EXPECT_NE(load_error(file("driver = kernel\nip = 127.0.0.9/8\n"))
                  .find(":4: [port0] driver: \"kernel\" is not dpdk or uring"),
              std::string::npos);
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\ndevargs = net_ring0\n"))
                  .find(":6: [port0] devargs: only for driver = dpdk"),
              std::string::npos);
    EXPECT_NE(load_error(file("devargs = net_ring0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n"
                              "udp_port = 5000\n"))
                  .find(":7: [port0] udp_port: only for driver = uring"),
              std::string::npos);
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\nudp_port = 0\n"))
                  .find(":6: [port0] udp_port: \"0\" is not a number in 1..65535"),
              std::string::npos);
    EXPECT_NE(
        load_error(file("driver = uring\nip = 127.0.0.9/8\nrecv_mode = fast\n"))
            .find(":6: [port0] recv_mode: \"fast\" is not auto, multishot, batched or packet"),
        std::string::npos);
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\nsend_zc = yes\n"))
                  .find(":6: [port0] send_zc: \"yes\" is not auto, on or off"),
              std::string::npos);
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\nsend_zc_min = 70000\n"))
                  .find(":6: [port0] send_zc_min:"),
              std::string::npos);
    EXPECT_NE(load_error(file("devargs = net_ring0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n"
                              "send_zc = on\n"))
                  .find("[port0] send_zc: only for driver = uring"),
              std::string::npos);
    EXPECT_NE(load_error(file("driver = uring\nip = 127.0.0.9/8\ninterface = a/b\n"))
                  .find(":6: [port0] interface:"),
              std::string::npos);
    // A dpdk port still needs devargs and mac.
    EXPECT_NE(load_error(file("ip = 10.0.0.1/24\n")).find("missing required key \"devargs\""),
              std::string::npos);
}

} // namespace
} // namespace droce

namespace droce {
namespace {

/** A Runtime lists each uring port's own counters in its device's registry ("port1/uring"), so
 *  that telemetry and droce-stat show them beside the device's. */
TEST(UringRuntime, PortCountersAreInTheDeviceRegistry) {
    // A UDP port of this process's own: uring tests may run beside this one on 4791.
    const int udp = 20000 + static_cast<int>(::getpid() % 20000);
    TempFile f("[device]\nname = u0\n[port0]\ndriver = uring\nip = 127.0.0.1/8\ninterface = lo\n"
               "udp_port = " +
               std::to_string(udp) + "\npeer_udp_port = " + std::to_string(udp) + "\n");
    std::string err;
    RuntimeOptions opts;
    opts.telemetry = false;
    auto rt = Runtime::create(f.path(), opts, &err);
    ASSERT_TRUE(rt) << err;
    ASSERT_EQ(rt->num_devices(), 1u);
    std::vector<std::string> names;
    rt->device(0).counter_registry().for_each(
        [&](std::string_view scope, std::string_view name, std::uint64_t) {
            if (scope == "port1/uring") names.emplace_back(name);
        });
    ASSERT_EQ(names.size(), uring::kNumPortCounters);
    EXPECT_EQ(names.front(), uring::to_string(static_cast<uring::PortCounter>(0)));
    EXPECT_NE(std::find(names.begin(), names.end(), "tx_gso_sends"), names.end());
}

} // namespace
} // namespace droce
