/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * drivers/uring: two UringPorts in one process over loopback. Frames built by lib/wire go out as
 * UDP payloads and come back rebuilt: byte for byte the frame sent from the EtherType on (IPv4:
 * ID 0, DF, TTL 64, the sender's source port, destination 4791), with a valid ICRC; TOS / ECN
 * carried by the kernel; every source port bound once; non-UDP frames and oversize datagrams
 * dropped and counted; both receive modes (multishot over a provided buffer ring, batched
 * recvmsg). As root, the frames the kernel put on lo are read back with a packet socket: IPv4 ID 0
 * and DF, the frame the engine built, an ICRC that verifies; and recv_mode = packet verifies a
 * frame whose IPv4 ID is not 0 (sent with a raw socket), which the UDP-socket modes reject. Each
 * test takes its own loopback addresses and UDP port (from the process id), so parallel runs do not
 * meet.
 */
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "uring/uring_port.h"
#include "wire/icrc.h"
#include "wire/ipv4.h"
#include "wire/packet.h"

namespace {

using namespace droce;
using droce::uring::Gso;
using droce::uring::PortCounter;
using droce::uring::RecvMode;
using droce::uring::TaskRun;
using droce::uring::UringPort;
using droce::uring::UringPortConfig;

/** 127.<pid-derived>.<host>: an address of lo no other test run uses. */
wire::Ipv6Addr loop4(std::uint8_t host) {
    const unsigned pid = static_cast<unsigned>(getpid());
    return wire::ipv4_mapped({127, static_cast<std::uint8_t>(100 + pid % 150),
                              static_cast<std::uint8_t>((pid / 150) % 250 + 1), host});
}
std::uint16_t test_port(unsigned k) {
    return static_cast<std::uint16_t>(20000 + (getpid() * 7 + k) % 20000);
}

struct Pair {
    std::unique_ptr<UringPort> a, b;
};

/** Two ports on lo, a sending to b with UringPortConfig::gso @p gso (b: the default). */
Pair make_pair(RecvMode mode, bool ipv6, TaskRun taskrun = TaskRun::signal, Gso gso = Gso::off) {
    UringPortConfig ca, cb;
    ca.taskrun = cb.taskrun = taskrun;
    ca.gso = gso;
    if (ipv6) {
        // One IPv6 loopback address: the two ports differ by UDP port instead.
        wire::Ipv6Addr lo6{};
        lo6[15] = 1;
        ca.addr = cb.addr = lo6;
        ca.ipv4 = cb.ipv4 = false;
        ca.udp_port = cb.peer_udp_port = test_port(10);
        cb.udp_port = ca.peer_udp_port = test_port(11);
    } else {
        ca.addr = loop4(1);
        cb.addr = loop4(2);
        ca.udp_port = cb.udp_port = test_port(0);
    }
    ca.recv_mode = cb.recv_mode = mode;
    cb.port_index = 1;
    std::string err;
    Pair p;
    p.a = UringPort::create(ca, &err);
    EXPECT_TRUE(p.a) << err;
    p.b = UringPort::create(cb, &err);
    EXPECT_TRUE(p.b) << err;
    return p;
}

/** A socket-mode port at @p addr_a (a, the default config) and a packet-mode one at @p addr_b
 *  (b, port_index 1; null with *err when packet mode is refused), both on UDP @p port. */
Pair packet_pair(const wire::Ipv6Addr& addr_a, const wire::Ipv6Addr& addr_b, std::uint16_t port,
                 std::string* err) {
    UringPortConfig ca, cb;
    ca.addr = addr_a;
    cb.addr = addr_b;
    ca.udp_port = cb.udp_port = port;
    cb.recv_mode = RecvMode::packet;
    cb.port_index = 1;
    Pair p;
    p.a = UringPort::create(ca, err);
    if (p.a) p.b = UringPort::create(cb, err);
    return p;
}

wire::PathHeaders path_a_to_b(const UringPort& a, const UringPort& b, const wire::Ipv6Addr& sa,
                              const wire::Ipv6Addr& da, bool ipv6) {
    wire::PathHeaders h;
    h.src_mac = a.mac();
    h.dst_mac = {0x02, 0, 0, 0, 0, 0x99}; // ignored by the driver: the kernel routes
    h.ipv6 = ipv6;
    h.src_ip = sa;
    h.dst_ip = da;
    h.udp_sport = 0xc123;
    (void)b;
    return h;
}

/** Polls @p port until @p want frames arrived or 3 s passed; returns them (caller frees). */
std::vector<PktBuf*> receive(UringPort& port, std::size_t want) {
    std::vector<PktBuf*> got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (got.size() < want && std::chrono::steady_clock::now() < until) {
        PktBuf* bufs[64];
        const std::uint16_t n = port.rx_burst(bufs, 64);
        got.insert(got.end(), bufs, bufs + n);
        if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return got;
}

/** Everything @p port receives within @p d (caller frees). */
std::vector<PktBuf*> receive_for(UringPort& port, std::chrono::milliseconds d) {
    std::vector<PktBuf*> got;
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
        PktBuf* bufs[64];
        const std::uint16_t n = port.rx_burst(bufs, 64);
        got.insert(got.end(), bufs, bufs + n);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return got;
}

/** Sends one frame built from @p h with @p payload_len bytes from @p a; returns the bytes sent. */
std::vector<std::uint8_t> send_one(UringPort& a, const wire::PathHeaders& h,
                                   std::size_t payload_len, std::uint32_t psn = 1) {
    std::vector<std::uint8_t> payload(payload_len);
    for (std::size_t i = 0; i < payload_len; ++i)
        payload[i] = static_cast<std::uint8_t>(i * 7 + psn);
    wire::PacketFields f;
    f.opcode = wire::Opcode::RC_SEND_ONLY;
    f.dest_qp = 0x123;
    f.psn = wire::Psn(psn);
    PktBuf* buf = nullptr;
    EXPECT_EQ(a.alloc_bulk(&buf, 1), 1);
    const std::size_t len = wire::build_frame(h, f, payload, buf->room());
    EXPECT_GT(len, 0u);
    buf->len = static_cast<std::uint32_t>(len);
    std::vector<std::uint8_t> sent(buf->data, buf->data + len);
    EXPECT_EQ(a.tx_burst(&buf, 1), 1);
    return sent;
}

class UringPortTest : public ::testing::TestWithParam<RecvMode> {};

TEST_P(UringPortTest, Ipv4FramesRoundTripRebuiltExactly) {
    Pair p = make_pair(GetParam(), false);
    ASSERT_TRUE(p.a && p.b);
    EXPECT_EQ(p.b->recv_mode(), GetParam());
    EXPECT_EQ(p.a->interface(), "lo");
    EXPECT_EQ(p.a->mtu(), 9000u); // lo's 65536, capped
    const wire::PathHeaders h = path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
    for (const std::size_t size : {0ul, 1ul, 1024ul, 4095ul, 4096ul}) {
        SCOPED_TRACE(size);
        (void)p.b->rx_burst(nullptr, 0); // arm the receive before anything is sent
        const std::vector<std::uint8_t> sent = send_one(*p.a, h, size);
        std::vector<PktBuf*> got = receive(*p.b, 1);
        ASSERT_EQ(got.size(), 1u);
        PktBuf& r = *got[0];
        EXPECT_EQ(r.port, 1);
        ASSERT_EQ(r.len, sent.size());
        // Ethernet: our MAC as destination, the fixed placeholder as source.
        EXPECT_EQ(0, std::memcmp(r.data, p.b->mac().data(), 6));
        EXPECT_EQ(0, std::memcmp(r.data + 6, uring::kRxSourceMac.data(), 6));
        // From the EtherType on, the very frame sent: IPv4 ID 0 and DF, TTL 64, checksum, source
        // port 0xc123, destination 4791, UDP checksum 0, BTH .. ICRC.
        EXPECT_EQ(0, std::memcmp(r.data + 12, sent.data() + 12, sent.size() - 12));
        wire::ParsedFrame pf;
        EXPECT_EQ(wire::parse_frame(r.frame(), pf), wire::RejectReason::ok);
        EXPECT_TRUE(pf.icrc_checked);
        ASSERT_NE(pf.udp, nullptr);
        EXPECT_EQ(pf.udp->src_port.get(), 0xc123);
        EXPECT_EQ(pf.ipv4->id.get(), 0);
        EXPECT_EQ(pf.ipv4->flags_frag.get(), wire::kIpv4DontFragment);
        EXPECT_EQ(pf.payload.size(), size);
        p.b->free_bulk(got.data(), 1);
    }
    EXPECT_EQ(p.a->counter(PortCounter::source_ports_bound), 1u); // one source port, one socket
    EXPECT_EQ(p.b->counter(PortCounter::rx_packets), 5u);
    // Send completions come back: the pool is whole again.
    p.a->tx_reclaim();
    EXPECT_EQ(p.a->counter(PortCounter::tx_packets), 5u);
}

TEST_P(UringPortTest, TosAndEcnCarriedBySourcePortSockets) {
    Pair p = make_pair(GetParam(), false);
    ASSERT_TRUE(p.a && p.b);
    (void)p.b->rx_burst(nullptr, 0);
    wire::PathHeaders h = path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
    // Three source ports: three sockets; the ECN codepoints travel in the kernel's header.
    const std::uint8_t tos[] = {0x02, 0x03, 0xb8};
    for (int i = 0; i < 3; ++i) {
        h.udp_sport = static_cast<std::uint16_t>(0xc200 + i);
        h.tos = tos[i];
        (void)send_one(*p.a, h, 64, static_cast<std::uint32_t>(i));
    }
    std::vector<PktBuf*> got = receive(*p.b, 3);
    ASSERT_EQ(got.size(), 3u);
    for (PktBuf* r : got) {
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(r->frame(), pf), wire::RejectReason::ok);
        const unsigned i = pf.udp->src_port.get() - 0xc200u;
        ASSERT_LT(i, 3u);
        EXPECT_EQ(pf.ipv4->tos, tos[i]);
        EXPECT_EQ(r->ecn_ce, tos[i] == 0x03);
    }
    p.b->free_bulk(got.data(), static_cast<std::uint16_t>(got.size()));
    EXPECT_EQ(p.a->counter(PortCounter::source_ports_bound), 3u);
}

TEST_P(UringPortTest, BurstArrivesWholeAndPoolComesBack) {
    Pair p = make_pair(GetParam(), false);
    ASSERT_TRUE(p.a && p.b);
    (void)p.b->rx_burst(nullptr, 0);
    const std::uint32_t free_a = p.a->free_buffers();
    const wire::PathHeaders h = path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
    constexpr unsigned kFrames = 300;
    for (unsigned i = 0; i < kFrames; ++i)
        (void)send_one(*p.a, h, 1000, i);
    std::vector<PktBuf*> got = receive(*p.b, kFrames);
    ASSERT_EQ(got.size(), kFrames);
    // Every frame exactly once. UDP promises no order: a send that finds the socket buffer full
    // is retried by io_uring when it drains, and a later one may overtake it (RC copes).
    std::vector<int> seen(kFrames, 0);
    unsigned in_order = 0;
    for (unsigned i = 0; i < kFrames; ++i) {
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(got[i]->frame(), pf), wire::RejectReason::ok);
        const std::uint32_t psn = pf.bth->psn().value();
        ASSERT_LT(psn, kFrames);
        ++seen[psn];
        in_order += psn == i;
    }
    for (unsigned i = 0; i < kFrames; ++i)
        EXPECT_EQ(seen[i], 1) << "PSN " << i;
    std::printf("%u of %u frames in order\n", in_order, kFrames);
    for (PktBuf* r : got)
        p.b->free_bulk(&r, 1);
    for (int i = 0; i < 100 && p.a->free_buffers() != free_a; ++i) {
        p.a->tx_reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(p.a->free_buffers(), free_a);
    EXPECT_EQ(p.a->counter(PortCounter::tx_errors), 0u);
}

// SENDMSG_ZC: the send's CQE and then the notification; the buffer comes back only with the
// latter, and a frame sent zero-copy arrives as sent.
TEST_P(UringPortTest, SendZcFramesArriveAndBuffersComeBackAfterTheNotification) {
    UringPortConfig ca, cb;
    ca.addr = loop4(1);
    cb.addr = loop4(2);
    ca.udp_port = cb.udp_port = test_port(3);
    ca.recv_mode = cb.recv_mode = GetParam();
    ca.send_zc = uring::SendZc::on;
    ca.send_zc_min = 0;
    std::string err;
    auto a = UringPort::create(ca, &err);
    ASSERT_TRUE(a) << err;
    auto b = UringPort::create(cb, &err);
    ASSERT_TRUE(b) << err;
    ASSERT_TRUE(a->send_zc());
    (void)b->rx_burst(nullptr, 0);
    const std::uint32_t free_a = a->free_buffers();
    const wire::PathHeaders h = path_a_to_b(*a, *b, loop4(1), loop4(2), false);
    constexpr unsigned kFrames = 100;
    std::vector<std::vector<std::uint8_t>> sent;
    for (unsigned i = 0; i < kFrames; ++i)
        sent.push_back(send_one(*a, h, 4000, i));
    std::vector<PktBuf*> got = receive(*b, kFrames);
    ASSERT_EQ(got.size(), kFrames);
    for (PktBuf* r : got) {
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(r->frame(), pf), wire::RejectReason::ok); // ICRC verified
        const std::uint32_t psn = pf.bth->psn().value();
        ASSERT_LT(psn, kFrames);
        // From the EtherType on: the source MAC is the port's stand-in on receive.
        ASSERT_EQ(r->len, sent[psn].size());
        EXPECT_EQ(0, std::memcmp(r->data + 12, sent[psn].data() + 12, r->len - 12));
        b->free_bulk(&r, 1);
    }
    for (int i = 0; i < 1000 && a->free_buffers() != free_a; ++i) {
        a->tx_reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(a->free_buffers(), free_a); // every notification reaped, no buffer lost or doubled
    EXPECT_EQ(a->counter(PortCounter::tx_zc), kFrames);
    EXPECT_EQ(a->counter(PortCounter::tx_packets), kFrames);
    EXPECT_EQ(a->counter(PortCounter::tx_errors), 0u);
    EXPECT_EQ(a->counter(PortCounter::free_invalid), 0u);
    // Loopback delivers locally: the kernel copies the pinned pages after all (reported).
    std::printf("zero-copy sends the kernel copied: %llu of %u\n",
                static_cast<unsigned long long>(a->counter(PortCounter::tx_zc_copied)), kFrames);
}

/**
 * UDP GSO (UringPortConfig::gso): one tx_burst whose frames the port groups into sendmsg calls
 * with UDP_SEGMENT by the rules (same source socket, peer and TOS; equal payload lengths, the
 * last may be shorter; at most kGsoMaxSegments frames and kGsoMaxBytes), and the receiver gets
 * every frame as sent, its ICRC verified (IPv4: the kernel numbers the segments' IP IDs, the
 * receiving port rebuilds ID 0 as the sender's ICRC assumed).
 */
void gso_burst(bool ipv6) {
    Pair pair = make_pair(RecvMode::automatic, ipv6, TaskRun::signal, Gso::on);
    ASSERT_TRUE(pair.a && pair.b);
    UringPort* a = pair.a.get();
    UringPort* b = pair.b.get();
    wire::Ipv6Addr lo6{};
    lo6[15] = 1;
    const wire::Ipv6Addr addr_a = ipv6 ? lo6 : loop4(1), addr_b = ipv6 ? lo6 : loop4(2);
    ASSERT_TRUE(a->gso());
    (void)b->rx_burst(nullptr, 0);
    const std::uint32_t free_a = a->free_buffers();
    wire::PathHeaders h = path_a_to_b(*a, *b, addr_a, addr_b, ipv6);
    struct Part {
        unsigned frames;
        std::size_t payload;
        std::uint16_t sport;
        std::uint8_t tos;
    };
    // Expected GSO sends: 64 + 6 (segment limit); 16 + 4 (byte limit: 16 x 4016 B); 5 x 1016 B
    // closed by one of 516 B, then one 1016 B frame alone (a single send); 3 + 3 split by the TOS.
    const Part parts[] = {{70, 100, 0xc123, 0},   {20, 4000, 0xc123, 0}, {5, 1000, 0xc124, 0},
                          {1, 500, 0xc124, 0},    {1, 1000, 0xc124, 0},  {3, 1000, 0xc125, 0},
                          {3, 1000, 0xc125, 0x02}};
    constexpr std::uint64_t kGsoSends = 2 + 2 + 1 + 2;
    std::vector<PktBuf*> burst;
    std::vector<std::vector<std::uint8_t>> sent;
    std::vector<std::uint8_t> tos_of;
    for (const Part& part : parts) {
        h.udp_sport = part.sport;
        h.tos = part.tos;
        for (unsigned k = 0; k < part.frames; ++k) {
            const auto psn = static_cast<std::uint32_t>(sent.size());
            std::vector<std::uint8_t> payload(part.payload);
            for (std::size_t i = 0; i < payload.size(); ++i)
                payload[i] = static_cast<std::uint8_t>(i * 13 + psn);
            wire::PacketFields f;
            f.opcode = wire::Opcode::RC_SEND_ONLY;
            f.dest_qp = 0x123;
            f.psn = wire::Psn(psn);
            PktBuf* buf = nullptr;
            ASSERT_EQ(a->alloc_bulk(&buf, 1), 1);
            buf->len = static_cast<std::uint32_t>(wire::build_frame(h, f, payload, buf->room()));
            ASSERT_GT(buf->len, 0u);
            sent.emplace_back(buf->data, buf->data + buf->len);
            tos_of.push_back(part.tos);
            burst.push_back(buf);
        }
    }
    ASSERT_EQ(a->tx_burst(burst.data(), static_cast<std::uint16_t>(burst.size())), burst.size());
    std::vector<PktBuf*> got = receive(*b, sent.size());
    ASSERT_EQ(got.size(), sent.size());
    std::vector<int> seen(sent.size(), 0);
    for (PktBuf* r : got) {
        wire::ParsedFrame pf;
        ASSERT_EQ(wire::parse_frame(r->frame(), pf), wire::RejectReason::ok); // ICRC verified
        const std::uint32_t psn = pf.bth->psn().value();
        ASSERT_LT(psn, sent.size());
        ++seen[psn];
        ASSERT_EQ(r->len, sent[psn].size()) << "PSN " << psn;
        if (ipv6) {
            // As Ipv6FramesRoundTrip: all but the UDP checksum and the test's destination port.
            EXPECT_EQ(0, std::memcmp(r->data + 18, sent[psn].data() + 18, 36));
            EXPECT_EQ(0, std::memcmp(r->data + 54, sent[psn].data() + 54, 6));
            EXPECT_EQ(0, std::memcmp(r->data + 62, sent[psn].data() + 62, r->len - 62));
        } else {
            // From the EtherType on: ID 0 rebuilt; the UDP checksum the kernel sent is not kept.
            EXPECT_EQ(0, std::memcmp(r->data + 12, sent[psn].data() + 12, r->len - 12));
        }
        EXPECT_EQ(r->ecn_ce, false);
        EXPECT_EQ(ipv6 ? pf.ipv6->traffic_class() : pf.ipv4->tos, tos_of[psn]) << "PSN " << psn;
        b->free_bulk(&r, 1);
    }
    for (std::size_t i = 0; i < seen.size(); ++i)
        EXPECT_EQ(seen[i], 1) << "PSN " << i;
    for (int i = 0; i < 100 && a->free_buffers() != free_a; ++i) {
        a->tx_reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(a->free_buffers(), free_a); // every slot of every group came back once
    EXPECT_EQ(a->counter(PortCounter::tx_gso_sends), kGsoSends);
    EXPECT_EQ(a->counter(PortCounter::tx_packets), sent.size());
    EXPECT_EQ(a->counter(PortCounter::tx_errors), 0u);
    EXPECT_EQ(a->counter(PortCounter::tx_gso_refused), 0u);
    EXPECT_TRUE(a->gso());
}

/**
 * One tx_burst of @p frames equal frames (4000-byte payloads, PSNs from @p first_psn, one source
 * port) from @p a to @p b on lo; @p b must get each as sent, ICRC verified. @return the GSO sends
 * the burst made (tx_gso_sends before and after).
 */
std::uint64_t burst_of_equal_frames(UringPort& a, UringPort& b, unsigned frames,
                                    std::uint32_t first_psn, std::uint16_t sport = 0xc123) {
    const std::uint64_t gso_before = a.counter(PortCounter::tx_gso_sends);
    wire::PathHeaders h = path_a_to_b(a, b, loop4(1), loop4(2), false);
    h.udp_sport = sport;
    std::vector<PktBuf*> burst;
    std::vector<std::vector<std::uint8_t>> sent;
    for (unsigned k = 0; k < frames; ++k) {
        std::vector<std::uint8_t> payload(4000);
        for (std::size_t i = 0; i < payload.size(); ++i)
            payload[i] = static_cast<std::uint8_t>(i * 13 + k);
        wire::PacketFields f;
        f.opcode = wire::Opcode::RC_SEND_ONLY;
        f.dest_qp = 0x123;
        f.psn = wire::Psn(first_psn + k);
        PktBuf* buf = nullptr;
        EXPECT_EQ(a.alloc_bulk(&buf, 1), 1);
        if (!buf) return 0;
        buf->len = static_cast<std::uint32_t>(wire::build_frame(h, f, payload, buf->room()));
        sent.emplace_back(buf->data, buf->data + buf->len);
        burst.push_back(buf);
    }
    EXPECT_EQ(a.tx_burst(burst.data(), static_cast<std::uint16_t>(burst.size())), burst.size());
    std::vector<PktBuf*> got = receive(b, sent.size());
    EXPECT_EQ(got.size(), sent.size());
    for (PktBuf* r : got) {
        wire::ParsedFrame pf;
        EXPECT_EQ(wire::parse_frame(r->frame(), pf), wire::RejectReason::ok); // ICRC verified
        const std::uint32_t k = pf.bth ? pf.bth->psn().value() - first_psn : frames;
        EXPECT_LT(k, frames);
        if (k < frames && r->len == sent[k].size())
            EXPECT_EQ(0, std::memcmp(r->data + 12, sent[k].data() + 12, r->len - 12)) << k;
        else
            ADD_FAILURE() << "frame " << k << " of " << r->len << " bytes";
        b.free_bulk(&r, 1);
    }
    a.tx_reclaim(); // the sends' completions: tx_gso_sends counts there
    return a.counter(PortCounter::tx_gso_sends) - gso_before;
}

/** Two equal 100-byte frames from @p a to @p dst in one tx_burst, from UDP source port @p sport
 *  (a pair Gso::automatic would group: it asks @p dst, once). Nothing waits for them. */
void send_pair(UringPort& a, const wire::Ipv6Addr& dst, std::uint16_t sport = 0xc123) {
    PktBuf* two[2];
    ASSERT_EQ(a.alloc_bulk(two, 2), 2);
    wire::PathHeaders h = path_a_to_b(a, a, loop4(1), dst, false);
    h.udp_sport = sport;
    for (PktBuf* b : two) {
        wire::PacketFields f;
        f.opcode = wire::Opcode::RC_SEND_ONLY;
        f.dest_qp = 0x123;
        const std::vector<std::uint8_t> payload(100, 0x5a);
        b->len = static_cast<std::uint32_t>(wire::build_frame(h, f, payload, b->room()));
    }
    ASSERT_EQ(a.tx_burst(two, 2), 2);
}

/** Polls @p a and @p b until @p a took a GSO answer, 5 s at most (probes and answers are read
 *  by rx_burst). */
void poll_until_answered(UringPort& a, UringPort& b) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (a.counter(PortCounter::gso_answers_accepted) == 0 &&
           std::chrono::steady_clock::now() < until) {
        PktBuf* tmp[8];
        a.free_bulk(tmp, a.rx_burst(tmp, 8));
        b.free_bulk(tmp, b.rx_burst(tmp, 8));
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

/** Polls @p a and @p b for @p ms (probes and answers are read by rx_burst). */
void poll_both(UringPort& a, UringPort& b, int ms) {
    for (int i = 0; i < ms * 5; ++i) {
        PktBuf* tmp[8];
        a.free_bulk(tmp, a.rx_burst(tmp, 8));
        b.free_bulk(tmp, b.rx_burst(tmp, 8));
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

/**
 * Gso::automatic (the default): the first burst to a peer goes frame by frame and asks the peer
 * (a GSO probe); a droce port in socket receive mode answers, and from then on frames to it are
 * grouped. Every frame arrives as sent either way (IPv4: the frames sent singly still carry UDP
 * checksum 0, from their SO_NO_CHECK socket; the GSO sends leave from a second socket).
 */
TEST(UringPortGso, AutoGroupsOnlyAfterTheReceiverAnswered) {
    Pair pair = make_pair(RecvMode::automatic, false, TaskRun::signal, Gso::automatic);
    ASSERT_TRUE(pair.a && pair.b);
    UringPort& a = *pair.a;
    UringPort& b = *pair.b;
    ASSERT_TRUE(a.gso());
    ASSERT_TRUE(a.gso_auto());
    (void)a.rx_burst(nullptr, 0);
    (void)b.rx_burst(nullptr, 0);
    EXPECT_FALSE(a.gso_towards(loop4(2), 0));
    // A frame alone (an ACK, an EV probe's reply) is no group: the peer is not asked.
    (void)send_one(a, path_a_to_b(a, b, loop4(1), loop4(2), false), 100);
    b.free_bulk(receive(b, 1).data(), 1);
    EXPECT_EQ(a.counter(PortCounter::gso_probes_sent), 0u);
    EXPECT_EQ(burst_of_equal_frames(a, b, 16, 0), 0u); // not asked yet: frame by frame
    EXPECT_EQ(a.counter(PortCounter::gso_probes_sent), 1u);
    EXPECT_EQ(a.counter(PortCounter::source_ports_bound), 1u);
    poll_until_answered(a, b);
    EXPECT_EQ(b.counter(PortCounter::gso_probes_answered), 1u);
    EXPECT_EQ(a.counter(PortCounter::gso_answers_accepted), 1u);
    EXPECT_TRUE(a.gso_towards(loop4(2), 0));
    EXPECT_FALSE(a.gso_towards(loop4(2), 1)); // another steering slot is asked on its own
    EXPECT_EQ(burst_of_equal_frames(a, b, 16, 100), 1u);       // 16 x 4016 B: one send
    EXPECT_EQ(a.counter(PortCounter::source_ports_bound), 2u); // the checksummed socket
    EXPECT_EQ(a.counter(PortCounter::gso_probes_sent), 1u);    // not asked again so soon
    EXPECT_EQ(a.counter(PortCounter::tx_errors), 0u);
    EXPECT_EQ(b.counter(PortCounter::rx_share_probes), 0u);
    EXPECT_EQ(a.counter(PortCounter::gso_answers_ignored), 0u);
}

/**
 * The table of peers holds kGsoPeers (256): a flood of others (frames to 600 addresses, as replies
 * to forged EV probes would be) evicts only the entries used longest ago, so a peer that frames
 * keep going to stays answered and grouped.
 */
TEST(UringPortGso, AutoKeepsPeersInUseWhenOthersFloodTheTable) {
    Pair pair = make_pair(RecvMode::automatic, false, TaskRun::signal, Gso::automatic);
    ASSERT_TRUE(pair.a && pair.b);
    UringPort& a = *pair.a;
    UringPort& b = *pair.b;
    (void)a.rx_burst(nullptr, 0);
    (void)b.rx_burst(nullptr, 0);
    EXPECT_EQ(burst_of_equal_frames(a, b, 4, 0), 0u);
    poll_until_answered(a, b);
    ASSERT_TRUE(a.gso_towards(loop4(2), 0));
    for (unsigned k = 0; k < 600; ++k) {
        // 127.1.x.y: loopback addresses nobody listens on (the probes are lost).
        wire::Ipv6Addr other = loop4(0);
        other[13] = 1;
        other[14] = static_cast<std::uint8_t>(k >> 8);
        other[15] = static_cast<std::uint8_t>(k);
        send_pair(a, other);
        // The peer in use is the one used last: it must not be the one forgotten.
        ASSERT_EQ(burst_of_equal_frames(a, b, 2, 10 + 2 * k), 1u) << k;
        PktBuf* tmp[64];
        a.free_bulk(tmp, a.rx_burst(tmp, 64)); // reap the sends
    }
    EXPECT_GT(a.counter(PortCounter::gso_peers_evicted), 600u - uring::kGsoPeers);
    // Asked at most 64 per 100 ms: not one probe (a system call or two) per new peer's group.
    EXPECT_GT(a.counter(PortCounter::gso_probes_limited), 0u);
    EXPECT_LT(a.counter(PortCounter::gso_probes_sent), 600u);
    EXPECT_TRUE(a.gso_towards(loop4(2), 0));
    EXPECT_EQ(burst_of_equal_frames(a, b, 16, 5000), 1u);
}

/** max_source_ports bounds the source ports; with Gso::automatic on IPv4 each may have a second
 *  socket for GSO sends, bounded alike (not shared with the first kind). */
TEST(UringPortGso, AutoKeepsTheSourcePortLimit) {
    UringPortConfig ca, cb;
    ca.addr = loop4(1);
    cb.addr = loop4(2);
    ca.udp_port = cb.udp_port = test_port(43);
    ca.max_source_ports = 2;
    cb.port_index = 1;
    std::string err;
    auto a = UringPort::create(ca, &err);
    ASSERT_TRUE(a) << err;
    auto b = UringPort::create(cb, &err);
    ASSERT_TRUE(b) << err;
    (void)a->rx_burst(nullptr, 0);
    (void)b->rx_burst(nullptr, 0);
    // Before the answer, frame by frame: one socket per source port, two ports at most.
    EXPECT_EQ(burst_of_equal_frames(*a, *b, 4, 0, 0xc201), 0u);
    EXPECT_EQ(burst_of_equal_frames(*a, *b, 4, 10, 0xc202), 0u);
    send_pair(*a, loop4(2), 0xc203); // a third port: over the limit
    a->tx_reclaim();
    EXPECT_EQ(a->counter(PortCounter::tx_dropped_no_socket), 2u);
    EXPECT_EQ(a->counter(PortCounter::source_ports_bound), 2u);
    poll_until_answered(*a, *b);
    ASSERT_TRUE(a->gso_towards(loop4(2), 0));
    EXPECT_EQ(burst_of_equal_frames(*a, *b, 4, 20, 0xc201), 1u);
    EXPECT_EQ(burst_of_equal_frames(*a, *b, 4, 30, 0xc202), 1u);
    EXPECT_EQ(a->counter(PortCounter::source_ports_bound), 4u); // two ports, two sockets each
}

/**
 * Gso::automatic towards a peer that does not answer (a packet-mode droce port: it sees the IP
 * header, so it must get every datagram cut and numbered as it would from a NIC): frames go one
 * by one, byte for byte as with Gso::off, probes stay few, and none reaches its engine.
 */
TEST(UringPortGso, AutoSendsSinglyToAPacketModePeer) {
    std::string err;
    Pair pair = packet_pair(loop4(1), loop4(2), test_port(40), &err);
    ASSERT_TRUE(pair.a) << err;
    if (!pair.b) GTEST_SKIP() << "packet mode needs CAP_NET_RAW: " << err;
    UringPort* a = pair.a.get();
    UringPort* b = pair.b.get();
    (void)a->rx_burst(nullptr, 0);
    (void)b->rx_burst(nullptr, 0);
    for (std::uint32_t round = 0; round < 3; ++round) {
        EXPECT_EQ(burst_of_equal_frames(*a, *b, 16, round * 100), 0u);
        poll_both(*a, *b, 120); // past the resend interval (100 ms)
    }
    EXPECT_EQ(a->counter(PortCounter::gso_probes_sent), 3u);
    EXPECT_EQ(a->counter(PortCounter::gso_answers_accepted), 0u);
    EXPECT_FALSE(a->gso_towards(loop4(2), 0));
    EXPECT_EQ(b->counter(PortCounter::rx_packets), 3u * 16u); // no probe among them
    EXPECT_EQ(a->counter(PortCounter::source_ports_bound), 1u);
}

/**
 * The peer here is a plain UDP socket that reads the port's GSO probe: an answer with another
 * nonce, or with the probe's nonce from another source port, allows nothing; the right one from
 * the peer's port does.
 */
TEST(UringPortGso, AutoTakesOnlyTheAnswerToItsProbe) {
    UringPortConfig ca;
    ca.addr = loop4(1);
    ca.udp_port = test_port(41);
    std::string err;
    auto a = UringPort::create(ca, &err);
    ASSERT_TRUE(a) << err;
    (void)a->rx_burst(nullptr, 0);
    const auto bound_socket = [](std::uint16_t port) {
        const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(port);
        std::memcpy(&sa.sin_addr, loop4(2).data() + 12, 4);
        EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << errno;
        return fd;
    };
    const int peer = bound_socket(test_port(41)); // where a sends (peer_udp_port = udp_port)
    const int other = bound_socket(test_port(42));
    ASSERT_GE(peer, 0);
    ASSERT_GE(other, 0);
    // Two equal frames in one burst: a pair the port would group, so it asks (one frame alone
    // never does).
    send_pair(*a, loop4(2));
    // Read what a sent: the frame and the probe (32 bytes, TVer 15, kind 2 in byte 4).
    std::uint8_t probe[uring::kShareProbeLen] = {};
    bool have_probe = false;
    for (int i = 0; i < 1000 && !have_probe; ++i) {
        std::uint8_t in[256];
        const ssize_t n = recv(peer, in, sizeof in, 0);
        if (n == static_cast<ssize_t>(sizeof probe) && in[1] == 0x0f && in[4] == 2) {
            std::memcpy(probe, in, sizeof probe);
            have_probe = true;
        }
        if (n < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(have_probe);
    EXPECT_EQ(0, std::memcmp(probe + 8, "DROCESHR", 8));
    std::uint8_t ans[uring::kShareProbeLen];
    std::memcpy(ans, probe, sizeof ans);
    ans[4] = 3; // a GSO answer, the asker's slot in byte 5, ours (0) in byte 6
    ans[5] = probe[6];
    ans[6] = probe[5];
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(a->udp_port());
    std::memcpy(&to.sin_addr, loop4(1).data() + 12, 4);
    const auto answer = [&](int fd, const std::uint8_t* p, std::uint64_t ignored,
                            std::uint64_t accepted) {
        ASSERT_EQ(sendto(fd, p, sizeof ans, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
                  static_cast<ssize_t>(sizeof ans));
        for (int i = 0; i < 500 && a->counter(PortCounter::gso_answers_ignored) +
                                           a->counter(PortCounter::gso_answers_accepted) <
                                       ignored + accepted;
             ++i) {
            PktBuf* tmp[8];
            a->free_bulk(tmp, a->rx_burst(tmp, 8));
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_EQ(a->counter(PortCounter::gso_answers_ignored), ignored);
        EXPECT_EQ(a->counter(PortCounter::gso_answers_accepted), accepted);
    };
    std::uint8_t wrong_nonce[sizeof ans];
    std::memcpy(wrong_nonce, ans, sizeof ans);
    wrong_nonce[16] ^= 0x01;
    answer(peer, wrong_nonce, 1, 0);
    answer(other, ans, 2, 0); // the probe's nonce, from a port the frames do not go to
    EXPECT_FALSE(a->gso_towards(loop4(2), 0));
    answer(peer, ans, 2, 1);
    EXPECT_TRUE(a->gso_towards(loop4(2), 0));
    answer(peer, ans, 3, 1);                            // the same answer again: one per probe
    EXPECT_EQ(a->counter(PortCounter::rx_packets), 0u); // none of them reached the engine
    close(peer);
    close(other);
}

TEST(UringPortGso, Ipv4BurstGroupedAndEveryFrameVerifies) {
    gso_burst(false);
}
TEST(UringPortGso, Ipv6BurstGroupedAndEveryFrameVerifies) {
    gso_burst(true);
}

// The receive interrupt: armed, a datagram makes the eventfd readable; a completion already
// waiting makes arm() say so; disarmed, the eventfd is drained.
TEST_P(UringPortTest, RxInterruptWakesOnArrival) {
    Pair p = make_pair(GetParam(), false);
    ASSERT_TRUE(p.a && p.b);
    const int fd = p.b->rx_interrupt_fd();
    ASSERT_GE(fd, 0);
    (void)p.b->rx_burst(nullptr, 0); // arms the receive
    ASSERT_TRUE(p.b->rx_interrupt_arm());
    pollfd pfd{fd, POLLIN, 0};
    EXPECT_EQ(poll(&pfd, 1, 0), 0) << "readable with nothing sent";
    const wire::PathHeaders h = path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
    (void)send_one(*p.a, h, 64);
    pfd.revents = 0;
    EXPECT_EQ(poll(&pfd, 1, 3000), 1) << "no wake-up within 3 s of a datagram";
    p.b->rx_interrupt_disarm();
    pfd.revents = 0;
    EXPECT_EQ(poll(&pfd, 1, 0), 0) << "not drained by disarm";
    // The completion is still in the ring: arm() reports it instead of letting the caller nap.
    EXPECT_FALSE(p.b->rx_interrupt_arm());
    p.b->rx_interrupt_disarm();
    std::vector<PktBuf*> got = receive(*p.b, 1);
    ASSERT_EQ(got.size(), 1u);
    p.b->free_bulk(got.data(), 1);
    // Disarmed, a datagram does not signal.
    (void)send_one(*p.a, h, 64);
    got = receive(*p.b, 1);
    ASSERT_EQ(got.size(), 1u);
    p.b->free_bulk(got.data(), 1);
    pfd.revents = 0;
    EXPECT_EQ(poll(&pfd, 1, 0), 0) << "signalled while disarmed";
}

TEST_P(UringPortTest, CooperativeTaskRunDeliversAndRefusesANapWhileWorkWaits) {
    // TaskRun::coop: the kernel does not interrupt the thread; a datagram that arrives while it
    // runs in user space waits as task work (IORING_SQ_TASKRUN), not as a completion. arm() must
    // see that and refuse the nap (no interrupt would announce it), and the next rx_burst() must
    // collect it.
    Pair p = make_pair(GetParam(), false, TaskRun::coop);
    ASSERT_TRUE(p.a && p.b);
    (void)p.b->rx_burst(nullptr, 0); // arms the receive
    ASSERT_TRUE(p.b->rx_interrupt_arm()) << "nothing sent yet";
    p.b->rx_interrupt_disarm();
    const wire::PathHeaders h = path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
    for (std::uint32_t round = 1; round <= 3; ++round) {
        // Another thread sends, while this one, which armed the receive (the task work is
        // its), spins in user space: any system call here, or the next timer tick, would run
        // the work on its way back to user space. The flagged state is what a polling engine,
        // which makes no system call, finds. Loopback delivers within the sender's sendmsg, so
        // the work is queued when `done` is.
        std::vector<std::uint8_t> sent;
        std::atomic<bool> done{false};
        std::thread sender([&] {
            sent = send_one(*p.a, h, 100, round);
            done.store(true, std::memory_order_release);
        });
        while (!done.load(std::memory_order_acquire)) {
        }
        EXPECT_FALSE(p.b->rx_interrupt_arm()) << "round " << round << ": a nap was allowed "
                                              << "while a datagram waited as task work";
        p.b->rx_interrupt_disarm();
        sender.join();
        std::vector<PktBuf*> got = receive(*p.b, 1);
        ASSERT_EQ(got.size(), 1u) << "round " << round;
        // From the IP header on (the receiver rebuilds the Ethernet header with its own MACs).
        ASSERT_EQ(got[0]->len, sent.size());
        EXPECT_TRUE(std::equal(sent.begin() + 14, sent.end(), got[0]->data + 14))
            << "round " << round;
        p.b->free_bulk(got.data(), 1);
    }
    // Back to quiet: a nap is allowed again.
    EXPECT_TRUE(p.b->rx_interrupt_arm());
    p.b->rx_interrupt_disarm();
}

TEST_P(UringPortTest, Ipv6FramesRoundTrip) {
    Pair p = make_pair(GetParam(), true);
    ASSERT_TRUE(p.a && p.b);
    (void)p.b->rx_burst(nullptr, 0);
    wire::Ipv6Addr lo6{};
    lo6[15] = 1;
    wire::PathHeaders h = path_a_to_b(*p.a, *p.b, lo6, lo6, true);
    h.flow_label = 0x12345; // masked by the ICRC; the rebuilt header carries 0
    h.tos = 0x02;
    const std::vector<std::uint8_t> sent = send_one(*p.a, h, 4095);
    std::vector<PktBuf*> got = receive(*p.b, 1);
    ASSERT_EQ(got.size(), 1u);
    const PktBuf& r = *got[0];
    ASSERT_EQ(r.len, sent.size());
    wire::ParsedFrame pf;
    EXPECT_EQ(wire::parse_frame(r.frame(), pf), wire::RejectReason::ok);
    ASSERT_NE(pf.ipv6, nullptr);
    EXPECT_EQ(pf.ipv6->traffic_class(), 0x02u);
    EXPECT_EQ(pf.ipv6->hop_limit, 64);
    EXPECT_EQ(pf.udp->dst_port.get(), wire::kRoceV2Port); // sent to test_port(11), rebuilt as 4791
    // Payload length .. addresses, and from the UDP length on, as sent (the UDP checksum differs:
    // the engine computed one, the rebuilt frame carries 0).
    EXPECT_EQ(0, std::memcmp(r.data + 18, sent.data() + 18, 36));
    EXPECT_EQ(0, std::memcmp(r.data + 54, sent.data() + 54, 6));
    EXPECT_EQ(0, std::memcmp(r.data + 62, sent.data() + 62, sent.size() - 62));
    p.b->free_bulk(&got[0], 1);
}

TEST_P(UringPortTest, NonUdpAndOversizeAreDroppedAndCounted) {
    Pair p = make_pair(GetParam(), false);
    ASSERT_TRUE(p.a && p.b);
    (void)p.b->rx_burst(nullptr, 0);
    const std::uint32_t free_a = p.a->free_buffers();
    // An ARP request the engine might queue: the port takes it and drops it.
    PktBuf* buf = nullptr;
    ASSERT_EQ(p.a->alloc_bulk(&buf, 1), 1);
    std::memset(buf->data, 0, 60);
    buf->data[12] = 0x08;
    buf->data[13] = 0x06;
    buf->len = 60;
    EXPECT_EQ(p.a->tx_burst(&buf, 1), 1);
    EXPECT_EQ(p.a->counter(PortCounter::tx_dropped_not_udp), 1u);
    EXPECT_EQ(p.a->free_buffers(), free_a);
    // A datagram longer than a buffer, from a plain socket.
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(p.b->udp_port());
    const wire::Ipv6Addr b4 = loop4(2);
    std::memcpy(&to.sin_addr, b4.data() + 12, 4);
    std::vector<std::uint8_t> big(p.b->mtu() + 200, 0xab);
    ASSERT_EQ(sendto(fd, big.data(), big.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(big.size()));
    close(fd);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (p.b->counter(PortCounter::rx_dropped_truncated) == 0 &&
           std::chrono::steady_clock::now() < until) {
        PktBuf* bufs[8];
        const std::uint16_t n = p.b->rx_burst(bufs, 8);
        p.b->free_bulk(bufs, n);
    }
    EXPECT_EQ(p.b->counter(PortCounter::rx_dropped_truncated), 1u);
    EXPECT_EQ(p.b->counter(PortCounter::rx_packets), 0u);
    // Double free and a foreign buffer: counted, ignored.
    PktBuf foreign;
    PktBuf* fp = &foreign;
    p.b->free_bulk(&fp, 1);
    EXPECT_EQ(p.b->counter(PortCounter::free_invalid), 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, UringPortTest,
                         ::testing::Values(RecvMode::multishot, RecvMode::batched),
                         [](const auto& param_info) {
                             return std::string(uring::to_string(param_info.param));
                         });

/**
 * The frame the kernel really put on lo, read with a packet socket (root or CAP_NET_RAW; skipped
 * otherwise), with a UDP source port of its own. Returns it from the Ethernet header, or empty.
 */
std::vector<std::uint8_t> capture_one(int ps, std::uint16_t sport, std::uint16_t dport) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    std::vector<std::uint8_t> f(70000);
    while (std::chrono::steady_clock::now() < until) {
        const ssize_t n = recv(ps, f.data(), f.size(), 0);
        if (n < 14 + 40 + 8) continue;
        const unsigned et = f[12] << 8 | f[13];
        std::size_t udp = 0;
        if (et == 0x0800 && f[14 + 9] == 17)
            udp = 14 + (f[14] & 0xfu) * 4u;
        else if (et == 0x86dd && f[14 + 6] == 17)
            udp = 14 + 40;
        if (!udp) continue;
        if ((f[udp] << 8 | f[udp + 1]) != sport || (f[udp + 2] << 8 | f[udp + 3]) != dport)
            continue;
        f.resize(static_cast<std::size_t>(n));
        return f;
    }
    return {};
}

int open_capture() {
    const int ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (ps < 0) return -1;
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ALL);
    ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    timeval tv{0, 100'000};
    if (bind(ps, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0 ||
        setsockopt(ps, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        close(ps);
        return -1;
    }
    return ps;
}

TEST(UringPortWire, KernelSendsWhatTheEngineBuiltAndTheIcrcVerifies) {
    const int ps = open_capture();
    if (ps < 0) GTEST_SKIP() << "no packet socket (needs CAP_NET_RAW)";
    for (const bool ipv6 : {false, true}) {
        SCOPED_TRACE(ipv6 ? "IPv6" : "IPv4");
        Pair p = make_pair(RecvMode::multishot, ipv6);
        ASSERT_TRUE(p.a && p.b);
        wire::Ipv6Addr lo6{};
        lo6[15] = 1;
        wire::PathHeaders h = ipv6 ? path_a_to_b(*p.a, *p.b, lo6, lo6, true)
                                   : path_a_to_b(*p.a, *p.b, loop4(1), loop4(2), false);
        h.udp_sport = 0xc321;
        const std::vector<std::uint8_t> sent = send_one(*p.a, h, 1000);
        std::vector<std::uint8_t> wire_frame = capture_one(ps, 0xc321, p.b->udp_port());
        ASSERT_EQ(wire_frame.size(), sent.size());
        const std::size_t udp = ipv6 ? 14 + 40 : 14 + 20;
        if (!ipv6) {
            // What an unconnected UDP socket with IP_PMTUDISC_DO sends: ID 0, DF, as droce built.
            EXPECT_EQ(wire_frame[14 + 4] << 8 | wire_frame[14 + 5], 0);
            EXPECT_EQ(wire_frame[14 + 6] << 8 | wire_frame[14 + 7], wire::kIpv4DontFragment);
        }
        // The test's UDP port is the one field the ICRC does not cover as sent (4791 there).
        wire_frame[udp + 2] = wire::kRoceV2Port >> 8;
        wire_frame[udp + 3] = wire::kRoceV2Port & 0xff;
        wire::ParsedFrame pf;
        EXPECT_EQ(wire::parse_frame(wire_frame, pf), wire::RejectReason::ok);
        if (!ipv6) { // IPv4: byte for byte from the EtherType on (IPv6: flow label, UDP checksum)
            EXPECT_EQ(0, std::memcmp(wire_frame.data() + 12, sent.data() + 12, sent.size() - 12));
        }
        std::vector<PktBuf*> got = receive(*p.b, 1);
        ASSERT_EQ(got.size(), 1u);
        p.b->free_bulk(got.data(), 1);
    }
    close(ps);
}

/**
 * Sends @p frame's IP packet (from byte 14) with a raw IPv4 socket (IP_HDRINCL: the header as
 * given, ID included; the kernel fills only the checksum and the total length).
 * @return true when sent.
 */
bool send_raw_ipv4(const std::vector<std::uint8_t>& frame, const wire::Ipv6Addr& dst) {
    const int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
    if (fd < 0) return false;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    std::memcpy(&sa.sin_addr, dst.data() + 12, 4);
    const ssize_t n = sendto(fd, frame.data() + 14, frame.size() - 14, 0,
                             reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
    close(fd);
    return n == static_cast<ssize_t>(frame.size() - 14);
}

/** @p frame (IPv4) with IPv4 ID @p id, the IP checksum and the ICRC made right again: what a
 *  peer with a per-packet ID counter sends; then UDP destination @p dport (the test's port, which
 *  the ICRC does not cover: it holds 4791 there). */
std::vector<std::uint8_t> with_ipv4_id(std::vector<std::uint8_t> frame, std::uint16_t id,
                                       std::uint16_t dport) {
    auto* ip = reinterpret_cast<wire::Ipv4Hdr*>(frame.data() + 14);
    ip->id.set(id);
    ip->checksum.set(0);
    ip->checksum.set(wire::ipv4_header_checksum(ip, 20));
    const std::span<const std::uint8_t> l3(frame.data() + 14, frame.size() - 14 - 4);
    wire::store_icrc(frame.data() + frame.size() - 4, wire::icrc_compute(l3, false));
    frame[14 + 20 + 2] = static_cast<std::uint8_t>(dport >> 8);
    frame[14 + 20 + 3] = static_cast<std::uint8_t>(dport);
    return frame;
}

// recv_mode = packet: the packet socket sees the IP header as sent, so a frame whose IPv4 ID is
// not 0 verifies there, where the UDP socket port (which rebuilds ID 0) rejects its ICRC. Frames
// from a UDP-socket sender come through byte for byte as in the other modes, once each (the UDP
// socket's copy is filtered out, and so is lo's outgoing copy). Unprivileged, create() refuses
// packet mode and says why.
TEST(UringPortPacket, NonzeroIpv4IdVerifiesOnlyInPacketMode) {
    std::string err;
    Pair pair = packet_pair(loop4(5), loop4(6), test_port(30), &err);
    ASSERT_TRUE(pair.a) << err;
    UringPort* a = pair.a.get();
    UringPort* b = pair.b.get();
    if (!b) {
        EXPECT_NE(err.find("CAP_NET_RAW"), std::string::npos) << err;
        EXPECT_NE(geteuid(), 0u) << err;
        GTEST_SKIP() << "packet mode needs CAP_NET_RAW: " << err;
    }
    EXPECT_TRUE(b->packet_socket());
    EXPECT_FALSE(a->packet_socket());
    EXPECT_EQ(b->recv_mode(), a->recv_mode()); // read like auto
    (void)a->rx_burst(nullptr, 0);
    (void)b->rx_burst(nullptr, 0);
    const wire::PathHeaders h = path_a_to_b(*a, *b, loop4(5), loop4(6), false);
    for (const std::size_t size : {0ul, 1ul, 4095ul}) {
        SCOPED_TRACE(size);
        const std::vector<std::uint8_t> sent = send_one(*a, h, size);
        std::vector<PktBuf*> got = receive(*b, 1);
        ASSERT_EQ(got.size(), 1u);
        ASSERT_EQ(got[0]->len, sent.size());
        EXPECT_EQ(0, std::memcmp(got[0]->data, b->mac().data(), 6));
        EXPECT_EQ(0, std::memcmp(got[0]->data + 12, sent.data() + 12, sent.size() - 12));
        EXPECT_EQ(got[0]->port, 1);
        b->free_bulk(got.data(), 1);
    }
    // A peer with another IPv4 ID, to the packet-mode port and to the UDP-socket port.
    const std::vector<std::uint8_t> built = send_one(*a, h, 100, 7);
    std::vector<PktBuf*> first = receive(*b, 1); // the ID 0 copy, sent through the kernel
    ASSERT_EQ(first.size(), 1u);
    b->free_bulk(first.data(), 1);
    const std::vector<std::uint8_t> to_b = with_ipv4_id(built, 0x1234, b->udp_port());
    ASSERT_TRUE(send_raw_ipv4(to_b, loop4(6)));
    std::vector<PktBuf*> got = receive(*b, 1);
    ASSERT_EQ(got.size(), 1u);
    wire::ParsedFrame pf;
    EXPECT_EQ(wire::parse_frame(got[0]->frame(), pf), wire::RejectReason::ok);
    EXPECT_TRUE(pf.icrc_checked);
    ASSERT_NE(pf.ipv4, nullptr);
    EXPECT_EQ(pf.ipv4->id.get(), 0x1234);
    EXPECT_EQ(pf.payload.size(), 100u);
    b->free_bulk(got.data(), 1);
    wire::PathHeaders back = path_a_to_b(*b, *a, loop4(6), loop4(5), false);
    std::vector<std::uint8_t> to_a = send_one(*b, back, 100, 9); // the same shape, ID 0
    got = receive(*a, 1);
    ASSERT_EQ(got.size(), 1u);
    a->free_bulk(got.data(), 1);
    ASSERT_TRUE(send_raw_ipv4(with_ipv4_id(to_a, 0x4321, a->udp_port()), loop4(5)));
    got = receive(*a, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(wire::parse_frame(got[0]->frame(), pf), wire::RejectReason::bad_icrc);
    a->free_bulk(got.data(), 1);
    // Nothing else came: no second copy from the UDP socket or from lo's outgoing side.
    EXPECT_TRUE(receive_for(*b, std::chrono::milliseconds(100)).empty());
    EXPECT_EQ(b->counter(PortCounter::rx_packets), 5u);
    a->tx_reclaim();
    b->tx_reclaim();
}

// Packet mode over IPv6 (its own filter: next header UDP, the 16-byte address, the port).
TEST(UringPortPacket, Ipv6FramesVerify) {
    wire::Ipv6Addr lo6{};
    lo6[15] = 1;
    UringPortConfig ca, cb;
    ca.addr = cb.addr = lo6;
    ca.ipv4 = cb.ipv4 = false;
    ca.udp_port = cb.peer_udp_port = test_port(40);
    cb.udp_port = ca.peer_udp_port = test_port(41);
    cb.recv_mode = RecvMode::packet;
    std::string err;
    auto a = UringPort::create(ca, &err);
    ASSERT_TRUE(a) << err;
    auto b = UringPort::create(cb, &err);
    if (!b) GTEST_SKIP() << "packet mode needs CAP_NET_RAW: " << err;
    (void)b->rx_burst(nullptr, 0);
    wire::PathHeaders h = path_a_to_b(*a, *b, lo6, lo6, true);
    h.tos = 0x02;
    const std::vector<std::uint8_t> sent = send_one(*a, h, 4095);
    std::vector<PktBuf*> got = receive(*b, 1);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got[0]->len, sent.size());
    wire::ParsedFrame pf;
    EXPECT_EQ(wire::parse_frame(got[0]->frame(), pf), wire::RejectReason::ok);
    EXPECT_TRUE(pf.icrc_checked);
    ASSERT_NE(pf.ipv6, nullptr);
    EXPECT_EQ(pf.ipv6->traffic_class(), 0x02u);
    EXPECT_EQ(pf.udp->dst_port.get(), wire::kRoceV2Port); // test_port(41) on the wire
    // Payload length .. addresses and from the UDP length on as sent (the flow label and the UDP
    // checksum are the kernel's).
    EXPECT_EQ(0, std::memcmp(got[0]->data + 18, sent.data() + 18, 36));
    EXPECT_EQ(0, std::memcmp(got[0]->data + 54, sent.data() + 54, 6));
    EXPECT_EQ(0, std::memcmp(got[0]->data + 62, sent.data() + 62, sent.size() - 62));
    b->free_bulk(got.data(), 1);
    EXPECT_TRUE(receive_for(*b, std::chrono::milliseconds(50)).empty()); // once
    a->tx_reclaim();
}

TEST(UringPortCreate, BadConfigsGetClearErrors) {
    std::string err;
    UringPortConfig c;
    c.addr = loop4(3);
    c.udp_port = test_port(20);
    c.interface = "nosuchif0";
    EXPECT_FALSE(UringPort::create(c, &err));
    EXPECT_NE(err.find("nosuchif0"), std::string::npos) << err;
    c.interface.clear();
    // TEST-NET-1: not this host's. Refused for want of an interface, or by bind (a host whose
    // interface subnet happens to hold it): either way a reason.
    c.addr = wire::ipv4_mapped({192, 0, 2, 77});
    EXPECT_FALSE(UringPort::create(c, &err));
    EXPECT_TRUE(err.find("interface") != std::string::npos ||
                err.find("Cannot assign") != std::string::npos)
        << err;
    // The same address and port twice: the second bind fails with EADDRINUSE.
    c.addr = loop4(4);
    auto first = UringPort::create(c, &err);
    ASSERT_TRUE(first) << err;
    EXPECT_FALSE(UringPort::create(c, &err));
    EXPECT_NE(err.find("in use"), std::string::npos) << err;
}

} // namespace
