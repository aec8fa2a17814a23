/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * drivers/uring, share = yes: UringPorts of one process sharing one (address, UDP port) in one
 * SO_REUSEPORT group, steered by the classic BPF program on the BTH destination QP's top byte.
 * A plain UDP socket plays the peer: it sends datagrams whose BTH names slot 0, 1 or 2 and the
 * test checks which port each one reached. Also: the slots the self-probe found (the join order),
 * the probes the other members dropped and counted, the error without share, a slot past the last
 * member (hash fallback, counted as foreign), and the documented limit when a member leaves (the
 * last member takes its index: counted as foreign). Each run takes its own loopback address and
 * port (from the process id).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "uring/uring_port.h"

namespace {

using namespace droce;
using droce::uring::PortCounter;
using droce::uring::UringPort;
using droce::uring::UringPortConfig;

wire::Ipv6Addr loop4() {
    const unsigned pid = static_cast<unsigned>(getpid());
    return wire::ipv4_mapped({127, static_cast<std::uint8_t>(100 + pid % 150),
                              static_cast<std::uint8_t>((pid / 150) % 250 + 1), 77});
}
std::uint16_t test_port() { return static_cast<std::uint16_t>(20000 + (getpid() * 11) % 20000); }

UringPortConfig shared_config() {
    UringPortConfig c;
    c.addr = loop4();
    c.udp_port = test_port();
    c.n_buffers = 64;
    c.share = true;
    return c;
}

/** A datagram that looks like a BTH for QPN @p qpn, with @p tag in byte 12 (after the BTH). */
void send_bth(int fd, std::uint32_t qpn, std::uint8_t tag) {
    std::uint8_t d[40] = {};
    d[0] = 0x04; // RC SEND_ONLY
    d[1] = 0x40; // M, TVer 0
    d[2] = d[3] = 0xff;
    d[5] = static_cast<std::uint8_t>(qpn >> 16);
    d[6] = static_cast<std::uint8_t>(qpn >> 8);
    d[7] = static_cast<std::uint8_t>(qpn);
    d[12] = tag;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(test_port());
    const wire::Ipv6Addr a = loop4();
    std::memcpy(&to.sin_addr, a.data() + 12, 4);
    ASSERT_EQ(sendto(fd, d, sizeof d, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(sizeof d));
}

/** Polls every port for 300 ms; returns, per port, the tags (BTH byte 12) of what it received. */
std::vector<std::vector<int>> collect(const std::vector<UringPort*>& ports) {
    std::vector<std::vector<int>> tags(ports.size());
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < until) {
        for (std::size_t i = 0; i < ports.size(); ++i) {
            PktBuf* bufs[16];
            const std::uint16_t n = ports[i]->rx_burst(bufs, 16);
            for (std::uint16_t k = 0; k < n; ++k) {
                // Rebuilt frame: Ethernet 14 + IPv4 20 + UDP 8, then the datagram.
                tags[i].push_back(bufs[k]->data[14 + 20 + 8 + 12]);
            }
            ports[i]->free_bulk(bufs, n);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return tags;
}

TEST(UringShare, MembersGetSlotsInJoinOrderAndDatagramsGoToTheSlotOwner) {
    std::string err;
    std::unique_ptr<UringPort> m[3];
    for (int i = 0; i < 3; ++i) {
        m[i] = UringPort::create(shared_config(), &err);
        ASSERT_TRUE(m[i]) << err;
        EXPECT_TRUE(m[i]->shared());
        EXPECT_EQ(m[i]->steering_slot(), i) << "member " << i;
    }
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    // Each slot's QPs, several datagrams each (different QPNs of one slot go to one member).
    for (std::uint8_t round = 0; round < 4; ++round)
        for (std::uint32_t s = 0; s < 3; ++s)
            send_bth(fd, s << 16 | (0x11 + round), static_cast<std::uint8_t>(s * 10 + round));
    const auto tags = collect({m[0].get(), m[1].get(), m[2].get()});
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(tags[i].size(), 4u) << "member " << i;
        for (int r = 0; r < 4; ++r)
            EXPECT_EQ(tags[i][r], i * 10 + r) << "member " << i;
        EXPECT_EQ(m[i]->counter(PortCounter::rx_foreign_slot), 0u);
    }
    // Members 1 and 2 each sent member 0 the probe for slot 0; member 2 sent member 1 slot 1's.
    // (Probes for slots past the last member fall back to the hash: maybe more.) None reached
    // the engine: every datagram collected above was one of the test's.
    EXPECT_GE(m[0]->counter(PortCounter::rx_share_probes), 2u);
    EXPECT_GE(m[1]->counter(PortCounter::rx_share_probes), 1u);

    // A slot past the last member: the kernel falls back to its hash; whoever gets it counts it.
    send_bth(fd, 7u << 16 | 0x11, 99);
    const auto stray = collect({m[0].get(), m[1].get(), m[2].get()});
    std::uint64_t foreign = 0;
    std::size_t got = 0;
    for (int i = 0; i < 3; ++i) {
        foreign += m[i]->counter(PortCounter::rx_foreign_slot);
        got += stray[i].size();
    }
    EXPECT_EQ(got, 1u);
    EXPECT_EQ(foreign, 1u);

    // The documented limit: member 1 leaves, the kernel moves the last member (slot 2) into index
    // 1. Slot 1's datagrams now reach member 2, which counts them as foreign; slot 2's fall back
    // to the hash.
    const std::uint64_t foreign_before = m[2]->counter(PortCounter::rx_foreign_slot);
    m[1].reset();
    send_bth(fd, 1u << 16 | 0x11, 42);
    const auto after = collect({m[0].get(), m[2].get()});
    ASSERT_EQ(after[1].size(), 1u);
    EXPECT_EQ(after[1][0], 42);
    EXPECT_EQ(m[2]->counter(PortCounter::rx_foreign_slot), foreign_before + 1);
    close(fd);
}

TEST(UringShare, ShareOffKeepsEaddrinuseWithAClearMessage) {
    std::string err;
    auto first = UringPort::create(shared_config(), &err);
    ASSERT_TRUE(first) << err;
    UringPortConfig c = shared_config();
    c.share = false;
    EXPECT_FALSE(UringPort::create(c, &err));
    EXPECT_NE(err.find("is in use by another process; set share = yes to share it"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("UDP port " + std::to_string(test_port())), std::string::npos) << err;
    first.reset();

    // The other way round: a member that does not share holds the port.
    auto lone = UringPort::create(c, &err);
    ASSERT_TRUE(lone) << err;
    EXPECT_FALSE(lone->shared());
    EXPECT_EQ(lone->steering_slot(), 0);
    EXPECT_FALSE(UringPort::create(shared_config(), &err));
    EXPECT_NE(err.find("does not share it"), std::string::npos) << err;
}

TEST(UringShare, JoinLockIsExclusiveAndReleased) {
    std::string err;
    {
        uring::ShareJoinLock a(100, &err);
        ASSERT_TRUE(a.held()) << err;
        uring::ShareJoinLock b(20, &err);
        EXPECT_FALSE(b.held());
        EXPECT_NE(err.find("held it for 20 ms"), std::string::npos) << err;
    }
    uring::ShareJoinLock c(100, &err);
    EXPECT_TRUE(c.held()) << err;
}

} // namespace
