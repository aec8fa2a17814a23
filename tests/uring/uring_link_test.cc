/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * drivers/uring link state (LinkWatch, UringPort::link_up) on a veth pair in a network namespace
 * of the test's own: the process moves into a new namespace (unshare CLONE_NEWNET as root, else
 * in a new user namespace where the kernel allows it; skipped otherwise), so the interfaces
 * vanish with it. iproute2 (`ip`) changes the interfaces; after each change link_up() must follow
 * within kMaxReactMs (the time seen is printed): the peer taken down (carrier lost), the
 * interface itself taken down, its address removed (IPv4 and IPv6), the pair deleted. While the
 * link is down a datagram to the port is not delivered (rx_dropped_link_down); once it is up again
 * one is. An interface deleted and created again under its name is followed, by a port in packet
 * receive mode too (a frame sent from the veth's other end arrives before and after).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "uring/link_watch.h"
#include "uring/uring_port.h"

namespace {

using namespace droce;
using droce::uring::LinkWatch;
using droce::uring::PortCounter;
using droce::uring::UringPort;
using droce::uring::UringPortConfig;

// The netlink read runs at most once a millisecond on a coarse clock (a jiffy, up to 4 ms); the
// rest is a loaded 2-core host's scheduling.
constexpr double kMaxReactMs = 200;
const wire::Ipv6Addr kAddr = wire::ipv4_mapped({10, 55, 0, 1});
constexpr std::uint16_t kPort = 4791;

bool write_file(const char* path, const std::string& s) {
    const int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
    close(fd);
    return ok;
}

/** "" when this process is now in a network namespace of its own, else why not. */
std::string own_netns() {
    if (unshare(CLONE_NEWNET) == 0) return "";
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
        return std::string("unshare(CLONE_NEWUSER | CLONE_NEWNET): ") + std::strerror(errno);
    // Root in the new user namespace, so that `ip` (a child) keeps the capabilities.
    if (!write_file("/proc/self/setgroups", "deny") ||
        !write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
        return "cannot map root in the new user namespace";
    return "";
}

bool sh(const std::string& cmd) {
    return std::system(("timeout 10 " + cmd + " > /dev/null 2>&1").c_str()) == 0;
}

/** Polls @p f until it returns @p want or 2 s pass; the milliseconds it took, or -1. */
template <class F>
double until(F f, bool want) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = t0 + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < limit) {
        if (f() == want)
            return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return -1;
}

/** Sends one small datagram to the port's address from a socket of this namespace. */
void poke() {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(kPort);
    std::memcpy(&to.sin_addr, kAddr.data() + 12, 4);
    const char msg[16] = "link test";
    EXPECT_EQ(sendto(fd, msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(sizeof msg))
        << std::strerror(errno);
    close(fd);
}

/** rx_burst for up to @p ms: the frames it delivered (given back). */
unsigned drain(UringPort& p, int ms) {
    unsigned n = 0;
    const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < limit) {
        PktBuf* bufs[16];
        const std::uint16_t got = p.rx_burst(bufs, 16);
        n += got;
        p.free_bulk(bufs, got);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return n;
}

/** A port on the fixture's address (lwa's), the interface found from it. */
std::unique_ptr<UringPort> port_on_lwa(std::string* err) {
    UringPortConfig c;
    c.addr = kAddr;
    c.udp_port = kPort;
    return UringPort::create(c, err);
}

class UringLink : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        skip_ = own_netns();
        if (skip_.empty() && !sh("ip link set lo up")) skip_ = "no iproute2 (ip)";
    }
    void SetUp() override {
        if (!skip_.empty()) GTEST_SKIP() << skip_;
        ASSERT_TRUE(sh("ip link add lwa type veth peer name lwb"));
        ASSERT_TRUE(sh("ip addr add 10.55.0.1/24 dev lwa"));
        ASSERT_TRUE(sh("ip link set lwa up"));
        ASSERT_TRUE(sh("ip link set lwb up"));
    }
    void TearDown() override {
        if (skip_.empty()) (void)sh("ip link del lwa");
    }
    static std::string skip_;
};
std::string UringLink::skip_;

TEST_F(UringLink, WatchFollowsCarrierAdminStateAddressAndDeletion) {
    std::string err;
    auto w = LinkWatch::open("lwa", true, kAddr, &err);
    ASSERT_TRUE(w) << err;
    EXPECT_TRUE(w->netlink()) << w->fallback_reason();
    EXPECT_TRUE(w->follows_address());
    ASSERT_GE(until([&] { return w->up(); }, true), 0) << "veth up with carrier";
    struct Step {
        const char* cmd;
        bool up;
    };
    for (const Step s : {Step{"ip link set lwb down", false}, Step{"ip link set lwb up", true},
                         Step{"ip link set lwa down", false}, Step{"ip link set lwa up", true},
                         Step{"ip addr del 10.55.0.1/24 dev lwa", false},
                         Step{"ip addr add 10.55.0.1/24 dev lwa", true}}) {
        const std::uint64_t before = w->events();
        ASSERT_TRUE(sh(s.cmd)) << s.cmd;
        const double ms = until([&] { return w->up(); }, s.up);
        std::printf("  %-36s -> link %s after %.2f ms\n", s.cmd, s.up ? "up" : "down", ms);
        ASSERT_GE(ms, 0) << s.cmd << ": link_up() never became " << s.up;
        EXPECT_LE(ms, kMaxReactMs) << s.cmd;
        EXPECT_GT(w->events(), before) << s.cmd << ": seen without a netlink announcement";
    }
    EXPECT_EQ(w->overruns(), 0u);
    ASSERT_TRUE(sh("ip link del lwa"));
    EXPECT_GE(until([&] { return w->up(); }, false), 0) << "interface deleted";
}

TEST_F(UringLink, AnInterfaceCreatedAgainUnderItsNameIsFollowed) {
    std::string err;
    auto p = port_on_lwa(&err);
    ASSERT_TRUE(p) << err;
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0);
    const std::uint32_t old_index = p->link_watch().ifindex();
    ASSERT_TRUE(sh("ip link del lwa"));
    ASSERT_GE(until([&] { return p->link_up(); }, false), 0) << "interface deleted";
    // Created again, first without the address: up only once the address is back.
    ASSERT_TRUE(sh("ip link add lwa type veth peer name lwb"));
    ASSERT_TRUE(sh("ip link set lwa up"));
    ASSERT_TRUE(sh("ip link set lwb up"));
    EXPECT_EQ(until([&] { return p->link_up(); }, true), -1) << "up without its address";
    ASSERT_TRUE(sh("ip addr add 10.55.0.1/24 dev lwa"));
    const double ms = until([&] { return p->link_up(); }, true);
    std::printf("  interface created again -> link up after %.2f ms\n", ms);
    ASSERT_GE(ms, 0) << "the new interface of the same name is not followed";
    EXPECT_NE(p->link_watch().ifindex(), old_index);
    EXPECT_EQ(p->link_watch().recreations(), 1u);
    // The receive socket, bound to the address, gets datagrams again.
    (void)p->rx_burst(nullptr, 0);
    poke();
    EXPECT_EQ(drain(*p, 100), 1u) << "not delivered after the interface came back";
}

/**
 * Sends one IPv4/UDP datagram to the port's address and port as a frame on lwb, the veth's other
 * end, so that it arrives on lwa from outside (a socket of this namespace would send to its own
 * address over lo, where a packet socket on lwa sees nothing). @return whether it was sent.
 */
bool poke_from_peer() {
    const int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_IP));
    if (fd < 0) return false;
    std::uint8_t mac[6] = {};
    if (FILE* f = std::fopen("/sys/class/net/lwa/address", "r")) {
        unsigned m[6] = {};
        if (std::fscanf(f, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) == 6)
            for (int i = 0; i < 6; ++i)
                mac[i] = static_cast<std::uint8_t>(m[i]);
        std::fclose(f);
    }
    std::uint8_t d[20 + 8 + 16] = {0x45, 0, 0, sizeof d, 0, 0, 0x40, 0, 64, 17};
    const std::uint8_t src[4] = {10, 55, 0, 2};
    std::memcpy(d + 12, src, 4);
    std::memcpy(d + 16, kAddr.data() + 12, 4);
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2)
        sum += static_cast<std::uint32_t>(d[i] << 8 | d[i + 1]);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = ~((sum & 0xffff) + (sum >> 16)) & 0xffff;
    d[10] = static_cast<std::uint8_t>(sum >> 8);
    d[11] = static_cast<std::uint8_t>(sum);
    d[20] = 0x30; // UDP source port 12345
    d[21] = 0x39;
    d[22] = kPort >> 8;
    d[23] = kPort & 0xff;
    d[25] = 8 + 16;
    std::memcpy(d + 28, "link test frame", 16);
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_protocol = htons(ETH_P_IP);
    to.sll_ifindex = static_cast<int>(if_nametoindex("lwb"));
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, mac, 6);
    const bool ok = sendto(fd, d, sizeof d, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) ==
                    static_cast<ssize_t>(sizeof d);
    close(fd);
    return ok;
}

/** A port in packet receive mode on lwa that has received a frame from the veth's peer. */
void packet_port_on_lwa(std::unique_ptr<UringPort>* out) {
    UringPortConfig c;
    c.addr = kAddr;
    c.udp_port = kPort;
    c.interface = "lwa";
    c.recv_mode = droce::uring::RecvMode::packet;
    std::string err;
    auto p = UringPort::create(c, &err);
    ASSERT_TRUE(p) << err;
    ASSERT_TRUE(p->packet_socket());
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0);
    (void)p->rx_burst(nullptr, 0);
    ASSERT_TRUE(poke_from_peer()) << std::strerror(errno);
    ASSERT_EQ(drain(*p, 100), 1u) << "a frame from the peer before the interface went";
    *out = std::move(p);
}

TEST_F(UringLink, APacketModePortReceivesAgainFromAnInterfaceCreatedAgain) {
    std::unique_ptr<UringPort> p;
    ASSERT_NO_FATAL_FAILURE(packet_port_on_lwa(&p));
    ASSERT_TRUE(sh("ip link del lwa"));
    ASSERT_GE(until([&] { return p->link_up(); }, false), 0) << "interface deleted";
    ASSERT_TRUE(sh("ip link add lwa type veth peer name lwb"));
    ASSERT_TRUE(sh("ip addr add 10.55.0.1/24 dev lwa"));
    ASSERT_TRUE(sh("ip link set lwa up"));
    ASSERT_TRUE(sh("ip link set lwb up"));
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0) << "the new interface not followed";
    (void)drain(*p, 20); // the burst that sees the new index binds the packet socket to it
    EXPECT_EQ(p->counter(PortCounter::packet_rebinds), 1u);
    EXPECT_EQ(p->counter(PortCounter::packet_rebind_failed), 0u);
    ASSERT_TRUE(poke_from_peer()) << std::strerror(errno);
    EXPECT_EQ(drain(*p, 100), 1u) << "the packet socket still listens on the deleted interface";
}

TEST_F(UringLink, APacketModePortReceivesAgainAfterItsInterfaceWentToAnotherNamespaceAndBack) {
    // The interface keeps its index, but the kernel unhooked the packet socket when it left.
    std::unique_ptr<UringPort> p;
    ASSERT_NO_FATAL_FAILURE(packet_port_on_lwa(&p));
    const unsigned index = if_nametoindex("lwa");
    const std::string away = "droce-lw-" + std::to_string(getpid());
    if (!sh("ip netns add " + away)) GTEST_SKIP() << "ip netns add refused here";
    const bool moved = sh("ip link set lwa netns " + away);
    if (moved) {
        EXPECT_GE(until([&] { return p->link_up(); }, false), 0) << "the interface left";
        (void)drain(*p, 20);
        EXPECT_TRUE(sh("ip -n " + away + " link set lwa netns " + std::to_string(getpid())));
    }
    (void)sh("ip netns del " + away);
    ASSERT_TRUE(moved);
    ASSERT_TRUE(sh("ip addr add 10.55.0.1/24 dev lwa"));
    ASSERT_TRUE(sh("ip link set lwa up"));
    ASSERT_TRUE(sh("ip link set lwb up"));
    ASSERT_EQ(if_nametoindex("lwa"), index) << "the move kept the index";
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0) << "the interface is back";
    (void)drain(*p, 20);
    EXPECT_GE(p->counter(PortCounter::packet_rebinds), 1u);
    ASSERT_TRUE(poke_from_peer()) << std::strerror(errno);
    EXPECT_EQ(drain(*p, 200), 1u) << "the packet socket is still unhooked";
}

TEST_F(UringLink, AnInterfaceRenamedToItsNameWithTheAddressIsUpAtOnce) {
    // The interface deleted, then another one that already holds the address renamed to its name.
    // The kernel announces the address again for the rename, but that may come before the link's
    // announcement with the new name (then ignored: not yet our index); the watch also asks.
    std::string err;
    auto w = LinkWatch::open("lwa", true, kAddr, &err);
    ASSERT_TRUE(w) << err;
    ASSERT_GE(until([&] { return w->up(); }, true), 0);
    ASSERT_TRUE(sh("ip link del lwa"));
    ASSERT_GE(until([&] { return w->up(); }, false), 0) << "interface deleted";
    ASSERT_TRUE(sh("ip link add lwx type veth peer name lwb"));
    ASSERT_TRUE(sh("ip addr add 10.55.0.1/24 dev lwx"));
    ASSERT_TRUE(sh("ip link set lwx name lwa"));
    ASSERT_TRUE(sh("ip link set lwa up"));
    ASSERT_TRUE(sh("ip link set lwb up"));
    const double ms = until([&] { return w->up(); }, true);
    std::printf("  interface renamed to the name, address held -> up after %.2f ms\n", ms);
    EXPECT_GE(ms, 0) << "the renamed interface's address was never seen";
    EXPECT_EQ(w->recreations(), 1u);
}

TEST_F(UringLink, Ipv6AddressIsFollowed) {
    ASSERT_TRUE(sh("ip addr add fd55::1/64 dev lwa nodad"));
    wire::Ipv6Addr a6{0xfd, 0x55};
    a6[15] = 1;
    std::string err;
    auto w = LinkWatch::open("lwa", false, a6, &err);
    ASSERT_TRUE(w) << err;
    EXPECT_TRUE(w->follows_address());
    ASSERT_GE(until([&] { return w->up(); }, true), 0);
    ASSERT_TRUE(sh("ip addr del fd55::1/64 dev lwa"));
    EXPECT_GE(until([&] { return w->up(); }, false), 0) << "IPv6 address removed";
    ASSERT_TRUE(sh("ip addr add fd55::1/64 dev lwa nodad"));
    EXPECT_GE(until([&] { return w->up(); }, true), 0) << "IPv6 address back";
}

TEST_F(UringLink, AddressOfTheSubnetIsNotFollowed) {
    std::string err;
    auto w = LinkWatch::open("lwa", true, wire::ipv4_mapped({10, 55, 0, 9}), &err);
    ASSERT_TRUE(w) << err;
    EXPECT_FALSE(w->follows_address());
    EXPECT_GE(until([&] { return w->up(); }, true), 0);
}

// A config copied from `interface = lo` to a host whose address is on another interface: the port
// works as configured, and says once (config_note, printed by lib/runtime) where the address is.
TEST_F(UringLink, AnInterfaceThatDoesNotHoldTheAddressIsNamedInANote) {
    std::string err;
    UringPortConfig c;
    c.addr = kAddr;
    c.udp_port = kPort;
    c.interface = "lo";
    auto wrong = UringPort::create(c, &err);
    ASSERT_TRUE(wrong) << err;
    EXPECT_EQ(wrong->interface(), "lo");
    EXPECT_NE(wrong->config_note().find("the address is on interface lwa, not on interface = lo"),
              std::string::npos)
        << wrong->config_note();
    wrong.reset();
    c.interface = "lwa";
    auto right = UringPort::create(c, &err);
    ASSERT_TRUE(right) << err;
    EXPECT_EQ(right->config_note(), "");
    right.reset();
    auto found = port_on_lwa(&err);
    ASSERT_TRUE(found) << err;
    EXPECT_EQ(found->config_note(), "");
}

TEST_F(UringLink, NoSuchInterfaceIsAnError) {
    std::string err;
    EXPECT_FALSE(LinkWatch::open("lw-none", true, kAddr, &err));
    EXPECT_NE(err.find("lw-none"), std::string::npos) << err;
}

TEST_F(UringLink, PortDeliversNothingWhileItsLinkIsDown) {
    std::string err;
    auto p = port_on_lwa(&err);
    ASSERT_TRUE(p) << err;
    EXPECT_EQ(p->interface(), "lwa");
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0);
    (void)p->rx_burst(nullptr, 0); // arm the receive
    poke();
    EXPECT_EQ(drain(*p, 100), 1u) << "link up: delivered";

    // The peer down: lwa loses its carrier but keeps its address and routes, so the kernel still
    // delivers a local datagram to the socket; the port must not hand it on.
    ASSERT_TRUE(sh("ip link set lwb down"));
    const double ms = until([&] { return p->link_up(); }, false);
    std::printf("  carrier lost -> UringPort::link_up() false after %.2f ms\n", ms);
    ASSERT_GE(ms, 0);
    EXPECT_LE(ms, kMaxReactMs);
    const std::uint64_t rx_before = p->counter(PortCounter::rx_packets);
    poke();
    EXPECT_EQ(drain(*p, 100), 0u) << "link down: delivered anyway";
    EXPECT_EQ(p->counter(PortCounter::rx_dropped_link_down), 1u);
    EXPECT_EQ(p->counter(PortCounter::rx_packets), rx_before);

    ASSERT_TRUE(sh("ip link set lwb up"));
    ASSERT_GE(until([&] { return p->link_up(); }, true), 0);
    poke();
    EXPECT_EQ(drain(*p, 100), 1u) << "link back: delivered";
}

} // namespace
