/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Connectionless EV probes (Device::send_ep_probe / take_ep_replies; OCP MRC mrc_ctl.h endpoint
 * operation MRC_CTL_EP_OP_EV_PROBE): two devices with four ports each on the sim fabric's four
 * planes, no QP anywhere. A probe leaves A on one port for B's GID on that plane and comes back
 * with its req_id, nonce, port and a round trip time; the negative tests cover every errno of
 * send_ep_probe, a flood of unsolicited replies into the reply ring, and headers the receiver
 * must drop.
 */
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/connect.h"
#include "engine/device.h"
#include "sim/fabric.h"
#include "two_engines.h"
#include "wire/icrc.h"
#include "wire/mrc.h"
#include "wire/packet.h"

namespace droce::test {
namespace {

using wire::Opcode;

constexpr std::uint32_t kPlanes = 4;
constexpr std::uint64_t kLinkDelayNs = 2'000;

/** Two devices (A = 0, B = 1), kPlanes ports each, every transmitted frame shown to a tap. */
class EpPair {
  public:
    static sim::FabricConfig fabric_config() {
        sim::FabricConfig c;
        c.seed = 7;
        c.endpoints = 2;
        c.planes = kPlanes;
        c.pool_buffers = 8192;
        c.buffer_capacity = 4608;
        c.link_slots = 4096;
        c.link.bandwidth_gbps = 10.0;
        c.link.delay_ns = kLinkDelayNs;
        return c;
    }

    /** @p a_l3: A's ports are l3 (PortSpec::l3, as uring ports): A resolves no neighbour, and
     *  its tap plays the kernel that routes, writing B's MAC over kL3PortNextHopMac. */
    explicit EpPair(bool ipv6 = false, bool a_l3 = false)
        : ipv6_(ipv6), fabric(&clock, fabric_config()) {
        for (std::uint32_t e = 0; e < 2; ++e) {
            std::vector<PortSpec> ports;
            for (std::uint32_t p = 0; p < kPlanes; ++p) {
                taps[e].push_back(std::make_unique<FilterPort>(fabric.port(e, p)));
                taps[e].back()->on_tx = [this, e, p, a_l3](PktBuf& b) {
                    sent[e].emplace_back(b.data, b.data + b.len);
                    if (e == 0 && a_l3 && b.len >= 6) {
                        const wire::MacAddr next = sim::Fabric::mac(1, p);
                        std::memcpy(b.data, next.data(), next.size());
                    }
                    return true;
                };
                ports.push_back(
                    PortSpec{taps[e][p].get(), sim::Fabric::mac(e, p), gid(e, p), 4096});
                ports.back().l3 = e == 0 && a_l3;
            }
            dev[e] = std::make_unique<Device>("droce" + std::to_string(e), clock, ports);
        }
    }

    /** Device @p e's GID on plane @p p: 10.<p>.0.<e+1>, or 2001:db8:<p>::<e+1> with ipv6. */
    [[nodiscard]] wire::Ipv6Addr gid(std::uint32_t e, std::uint32_t p) const {
        const auto last = static_cast<std::uint8_t>(e + 1);
        const auto plane = static_cast<std::uint8_t>(p);
        if (!ipv6_) return gid_from_ipv4(10, plane, 0, last);
        return {0x20, 0x01, 0x0d, 0xb8, 0, plane, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
    }

    /** A probe from A's port @p p to B's GID on plane p. */
    [[nodiscard]] EpProbeRequest request(unsigned p, std::uint16_t req_id, std::uint32_t nonce,
                                         std::uint16_t ev = 0xC000) const {
        EpProbeRequest r;
        r.req_id = req_id;
        r.nonce = nonce;
        r.port = p;
        r.sgid = gid(0, p);
        r.dgid = gid(1, p);
        r.udp_sport = ev;
        r.flow_label = 0x12345;
        r.traffic_class = 26 << 2; // DSCP 26, ECN bits not ECT: the engine sets ECT(0)
        return r;
    }

    /** One step: both engines poll; when both are idle, virtual time jumps to the next event. */
    void step() {
        const std::uint32_t work = dev[0]->poll() + dev[1]->poll();
        if (work != 0) return;
        std::uint64_t next = fabric.next_event_ns();
        if (next > clock.now_ns())
            clock.set(next);
        else
            clock.advance(1000);
    }
    void run_for(std::uint64_t ns) {
        const std::uint64_t until = clock.now_ns() + ns;
        while (clock.now_ns() < until)
            step();
    }
    bool run_until(const std::function<bool()>& done, std::uint64_t max_ns = 1'000'000'000ull) {
        const std::uint64_t limit = clock.now_ns() + max_ns;
        while (clock.now_ns() < limit) {
            step();
            if (done()) return true;
        }
        return false;
    }

    /**
     * send_ep_probe until the neighbour is resolved: EAGAIN while ARP / ND runs (engines running
     * meanwhile), then the call's final result.
     */
    int send_resolving(const EpProbeRequest& r, int* eagains = nullptr) {
        int err = EAGAIN;
        for (int i = 0; i < 100 && err == EAGAIN; ++i) {
            err = dev[0]->send_ep_probe(r);
            if (err == EAGAIN) {
                if (eagains) ++*eagains;
                run_for(50'000);
            }
        }
        return err;
    }

    /** Every reply A's ring holds now. */
    std::vector<EpProbeReply> take(std::size_t room = 512) {
        std::vector<EpProbeReply> out(room);
        out.resize(dev[0]->take_ep_replies(out));
        return out;
    }

    /** Puts @p bytes on the wire from endpoint @p from's port on @p plane (the engine not told). */
    void inject(std::uint32_t from, std::uint32_t plane, std::span<const std::uint8_t> bytes) {
        PortDriver& port = fabric.port(from, plane);
        PktBuf* b = nullptr;
        ASSERT_EQ(port.alloc_bulk(&b, 1), 1);
        ASSERT_LE(bytes.size(), b->capacity);
        std::memcpy(b->data, bytes.data(), bytes.size());
        b->len = static_cast<std::uint32_t>(bytes.size());
        b->port = static_cast<std::uint8_t>(plane);
        if (port.tx_burst(&b, 1) != 1) {
            port.free_bulk(&b, 1);
            FAIL() << "the fabric refused an injected frame";
        }
    }

    /** An MRC frame (PETH opcode) from B's plane @p p address to A's QP1 on that plane. */
    std::vector<std::uint8_t> frame_b_to_a(unsigned p, Opcode op, std::uint16_t path,
                                           std::uint32_t seq, std::uint64_t ts) const {
        wire::PathHeaders h;
        h.src_mac = sim::Fabric::mac(1, p);
        h.dst_mac = sim::Fabric::mac(0, p);
        h.ipv6 = ipv6_;
        h.src_ip = gid(1, p);
        h.dst_ip = gid(0, p);
        h.udp_sport = 0xC123;
        wire::MrcCtlFields c;
        c.path = path;
        c.seq = seq;
        c.timestamp_ns = ts;
        c.port_mask = 0xf;
        wire::PacketFields f;
        f.opcode = op;
        f.dest_qp = wire::kMrcEndpointQpn;
        f.mrc_ctl = &c;
        std::vector<std::uint8_t> out(256);
        const std::size_t n = wire::build_frame(h, f, std::span<const std::uint8_t>{}, out);
        EXPECT_NE(n, 0u);
        out.resize(n);
        return out;
    }

    /** Frames endpoint @p e sent with opcode @p op, parsed (the byte copies stay in sent[e]). */
    std::vector<wire::ParsedFrame> sent_with(std::uint32_t e, Opcode op) const {
        std::vector<wire::ParsedFrame> out;
        for (const auto& fr : sent[e]) {
            wire::ParsedFrame pf;
            if (wire::parse_frame(fr, pf) == wire::RejectReason::ok && pf.bth->opcode() == op)
                out.push_back(pf);
        }
        return out;
    }

    [[nodiscard]] std::uint64_t count(std::uint32_t e, Counter c) const {
        return dev[e]->counters()[c];
    }

    const bool ipv6_;
    Clock clock = Clock::virtual_clock();
    sim::Fabric fabric;
    std::vector<std::unique_ptr<FilterPort>> taps[2];
    std::vector<std::vector<std::uint8_t>> sent[2];
    std::unique_ptr<Device> dev[2];
};

/** Sends one probe per port, each with its own req_id, nonce and EV, and checks every answer. */
void probe_every_port(EpPair& t) {
    for (unsigned p = 0; p < kPlanes; ++p) {
        const EpProbeRequest r = t.request(p, static_cast<std::uint16_t>(100 + p), 0xabc000 + p,
                                           static_cast<std::uint16_t>(0xC000 + 17 * p));
        int eagains = 0;
        ASSERT_EQ(t.send_resolving(r, &eagains), 0) << "port " << p;
        EXPECT_GE(eagains, 1) << "the first probe to a new address waits for ARP / ND";
        std::vector<EpProbeReply> got;
        ASSERT_TRUE(t.run_until([&] {
            auto more = t.take();
            got.insert(got.end(), more.begin(), more.end());
            return !got.empty();
        })) << "no reply on port "
            << p;
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].req_id, r.req_id);
        EXPECT_EQ(got[0].nonce, r.nonce);
        EXPECT_EQ(got[0].port, p);
        // Two link crossings of kLinkDelayNs each at least; far below a second.
        EXPECT_GE(got[0].rtt_ns, 2 * kLinkDelayNs);
        EXPECT_LT(got[0].rtt_ns, 1'000'000'000u);
    }
    EXPECT_EQ(t.count(0, Counter::ep_probes_sent), kPlanes);
    EXPECT_EQ(t.count(1, Counter::ep_probe_replies_sent), kPlanes);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_rcvd), kPlanes);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_dropped), 0u);
    EXPECT_EQ(t.count(0, Counter::rx_dropped_bad_qp) + t.count(1, Counter::rx_dropped_bad_qp), 0u);

    // On the wire: the probe carries the EV, ECT(0) with the caller's DSCP, QP1; the reply the
    // same EV (UDP source port, flow label) and DSCP, back to QP1, echoing the PETH.
    const auto probes = t.sent_with(0, Opcode::MRC_PROBE);
    const auto replies = t.sent_with(1, Opcode::MRC_PROBE_REPLY);
    ASSERT_EQ(probes.size(), kPlanes);
    ASSERT_EQ(replies.size(), kPlanes);
    for (unsigned p = 0; p < kPlanes; ++p) {
        const wire::ParsedFrame& q = probes[p];
        const wire::ParsedFrame& a = replies[p];
        EXPECT_EQ(q.bth->dest_qp(), wire::kMrcEndpointQpn);
        EXPECT_EQ(a.bth->dest_qp(), wire::kMrcEndpointQpn);
        EXPECT_EQ(q.udp->src_port.get(), 0xC000 + 17 * p);
        EXPECT_EQ(a.udp->src_port.get(), q.udp->src_port.get());
        EXPECT_EQ(q.eth->src, sim::Fabric::mac(0, p));
        EXPECT_EQ(a.eth->dst, sim::Fabric::mac(0, p));
        EXPECT_EQ(a.eth->src, sim::Fabric::mac(1, p));
        const unsigned q_tos = q.ipv4 ? q.ipv4->tos : q.ipv6->traffic_class();
        const unsigned a_tos = a.ipv4 ? a.ipv4->tos : a.ipv6->traffic_class();
        EXPECT_EQ(q_tos, (26u << 2) | 2u);
        EXPECT_EQ(a_tos, q_tos);
        if (q.ipv6) {
            EXPECT_EQ(q.ipv6->flow_label(), 0x12345u);
            EXPECT_EQ(a.ipv6->flow_label(), 0x12345u);
            EXPECT_EQ(a.ipv6->dst, t.gid(0, p));
        } else {
            EXPECT_EQ(wire::ipv4_mapped(a.ipv4->dst), t.gid(0, p));
        }
        EXPECT_EQ(a.peth()->path.get(), q.peth()->path.get());
        EXPECT_EQ(a.peth()->seq.get(), q.peth()->seq.get());
        EXPECT_EQ(a.peth()->timestamp_ns.get(), q.peth()->timestamp_ns.get());
    }
}

TEST(EpProbe, EachPortComesBackIpv4) {
    EpPair t;
    probe_every_port(t);
}

TEST(EpProbe, EachPortComesBackIpv6) {
    EpPair t(true);
    probe_every_port(t);
}

TEST(EpProbe, BurstOfProbesAllAnswered) {
    // More probes at once than the raw-frame slots of one pass (kTxQueueDepth - kTxBatch): the
    // responder answers a burst of 32 in one pass and must neither overflow nor lose one.
    EpPair t;
    ASSERT_EQ(t.send_resolving(t.request(0, 0, 0)), 0);
    ASSERT_TRUE(t.run_until([&] { return t.take().size() == 1; }));
    constexpr unsigned kN = 60;
    for (unsigned i = 0; i < kN; ++i)
        ASSERT_EQ(t.dev[0]->send_ep_probe(t.request(0, static_cast<std::uint16_t>(i), 1000 + i,
                                                    static_cast<std::uint16_t>(0xC000 + i))),
                  0);
    std::vector<EpProbeReply> got;
    ASSERT_TRUE(t.run_until([&] {
        auto more = t.take();
        got.insert(got.end(), more.begin(), more.end());
        return got.size() >= kN;
    }));
    ASSERT_EQ(got.size(), kN);
    std::vector<bool> seen(kN);
    for (const EpProbeReply& r : got) {
        ASSERT_LT(r.req_id, kN);
        EXPECT_EQ(r.nonce, 1000u + r.req_id);
        EXPECT_FALSE(seen[r.req_id]) << "req_id " << r.req_id << " twice";
        seen[r.req_id] = true;
    }
    EXPECT_EQ(t.count(1, Counter::ep_probe_replies_sent), kN + 1);
    EXPECT_EQ(t.count(1, Counter::tx_no_buffer), 0u);
}

TEST(EpProbe, ProbesAnsweredInThePassOfAFullStage) {
    // B's replies share port 0's transmit queue with RDMA WRITE packets. In one pass B receives a
    // burst of 32 probes (32 replies queued raw) and stages a full batch of 64 WRITE packets
    // (three QPs, at most 32 each per pass): the queue must hold both, or refuse replies, but
    // never overrun.
    EpPair t;
    constexpr int kQps = 3;
    mem::Pd* pd[2];
    rc::Cq* cq[2];
    rc::Qp* qp[kQps][2];
    for (int i = 0; i < 2; ++i) {
        int err = 0;
        pd[i] = t.dev[i]->alloc_pd(&err);
        cq[i] = t.dev[i]->create_cq(4096, &err);
        for (int k = 0; k < kQps; ++k) {
            qp[k][i] =
                t.dev[i]->create_qp(pd[i], cq[i], cq[i], rc::QpCap{64, 16, 1, 1, 0}, false, &err);
            ASSERT_NE(qp[k][i], nullptr) << err;
        }
    }
    for (int k = 0; k < kQps; ++k)
        for (int i = 0; i < 2; ++i) {
            const auto peer = static_cast<std::uint32_t>(1 - i);
            RcConnectParams c;
            c.qp_access_flags = rc::kAccessRemoteWrite;
            c.dest_qp_num = qp[k][peer]->qpn;
            c.ah_attr.dgid = t.gid(peer, 0);
            c.ah_attr.dmac = sim::Fabric::mac(peer, 0);
            ASSERT_EQ(connect_rc(*t.dev[i], qp[k][i], c), 0);
        }
    std::vector<std::uint8_t> src(64 * 1024, 0x5a), dst(64 * 1024);
    int err = 0;
    mem::Mr* smr = t.dev[1]->reg_mr(pd[1], src.data(), src.size(), rc::kAccessLocalWrite, &err);
    mem::Mr* dmr = t.dev[0]->reg_mr(pd[0], dst.data(), dst.size(),
                                    rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
    ASSERT_NE(smr, nullptr);
    ASSERT_NE(dmr, nullptr);

    ASSERT_EQ(t.send_resolving(t.request(0, 0, 0)), 0);
    ASSERT_TRUE(t.run_until([&] { return t.take().size() == 1; }));
    // 40 probes on the wire to B, delivered but not yet received (B does not poll) ...
    constexpr std::uint32_t kProbes = 40;
    for (std::uint32_t i = 1; i <= kProbes; ++i)
        ASSERT_EQ(t.dev[0]->send_ep_probe(t.request(0, static_cast<std::uint16_t>(i), i)), 0);
    t.clock.advance(1'000'000);
    // ... then 64 KiB WRITEs (64 packets each at path MTU 1024) posted on each of B's QPs: B's
    // next pass receives 32 probes and stages 64 packets.
    constexpr int kWrites = 2 * kQps;
    for (int w = 0; w < kWrites; ++w) {
        rc::SendWqe wqe;
        wqe.wr_id = static_cast<std::uint64_t>(w);
        wqe.opcode = rc::WrOpcode::rdma_write;
        wqe.send_flags = rc::kSendSignaled;
        wqe.num_sge = 1;
        wqe.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src.data()),
                                 static_cast<std::uint32_t>(src.size()), smr->lkey};
        wqe.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data());
        wqe.rkey = dmr->rkey;
        std::uint32_t bad = 0;
        ASSERT_EQ(t.dev[1]->post_send(qp[w % kQps][1], &wqe, 1, &bad), 0);
    }
    const std::uint64_t sent_before = t.count(1, Counter::sent_pkts) + [&] {
        std::uint64_t n = 0;
        for (int k = 0; k < kQps; ++k)
            n += qp[k][1]->counters[Counter::sent_pkts];
        return n;
    }();
    t.dev[1]->poll();
    std::uint64_t staged = 0;
    for (int k = 0; k < kQps; ++k)
        staged += qp[k][1]->counters[Counter::sent_pkts];
    ASSERT_EQ(staged - sent_before, 64u) << "the pass did not stage a full batch";
    EXPECT_GE(t.count(1, Counter::ep_probe_replies_sent), 32u);

    std::vector<EpProbeReply> got;
    std::vector<rc::Cqe> cqes;
    ASSERT_TRUE(t.run_until([&] {
        auto more = t.take();
        got.insert(got.end(), more.begin(), more.end());
        rc::Cqe c[16];
        std::uint32_t n;
        while ((n = t.dev[1]->poll_cq(cq[1], c, 16)) > 0)
            cqes.insert(cqes.end(), c, c + n);
        return cqes.size() == kWrites && got.size() == kProbes;
    }));
    for (const rc::Cqe& c : cqes)
        EXPECT_EQ(c.status, rc::WcStatus::success);
    EXPECT_EQ(dst, src);
    EXPECT_EQ(t.count(1, Counter::ep_probe_replies_sent), kProbes + 1);
    std::vector<bool> seen(kProbes + 1);
    for (const EpProbeReply& r : got) {
        ASSERT_GE(r.req_id, 1u);
        ASSERT_LE(r.req_id, kProbes);
        EXPECT_EQ(r.nonce, r.req_id);
        EXPECT_FALSE(seen[r.req_id]);
        seen[r.req_id] = true;
    }
}

TEST(EpProbe, NobodyAnswersEndsUnreachable) {
    EpPair t;
    EpProbeRequest r = t.request(0, 1, 1);
    r.dgid = gid_from_ipv4(10, 0, 0, 99); // on plane 0's subnet, no such host
    const std::uint64_t arp_before = t.count(0, Counter::neigh_tx);
    std::vector<int> results;
    // ARP gives up after max_probes requests retrans_ns apart (3 x 1 s by default).
    for (int i = 0; i < 100; ++i) {
        const int err = t.dev[0]->send_ep_probe(r);
        results.push_back(err);
        if (err == EHOSTUNREACH) break;
        ASSERT_EQ(err, EAGAIN) << "call " << i;
        t.run_for(100'000'000);
    }
    ASSERT_GE(results.size(), 2u);
    EXPECT_EQ(results.front(), EAGAIN);
    EXPECT_EQ(results.back(), EHOSTUNREACH);
    EXPECT_EQ(t.count(0, Counter::neigh_tx) - arp_before, 3u) << "max_probes ARP requests";
    EXPECT_EQ(t.count(0, Counter::ep_probes_sent), 0u);
    EXPECT_TRUE(t.take().empty());
    // Still unreachable during the FAILED hold; the device still works for others.
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EHOSTUNREACH);
    ASSERT_EQ(t.send_resolving(t.request(0, 2, 2)), 0);
    ASSERT_TRUE(t.run_until([&] { return t.take().size() == 1; }));
}

// On an l3 port (uring: the kernel routes) nobody would answer an ARP request: the probe goes on
// the first call, with kL3PortNextHopMac, and comes back.
TEST(EpProbe, L3PortSendsAtOnceWithoutArp) {
    EpPair t(false, true);
    for (unsigned p = 0; p < kPlanes; ++p)
        ASSERT_EQ(t.dev[0]->send_ep_probe(t.request(p, static_cast<std::uint16_t>(p), p)), 0)
            << "port " << p;
    EXPECT_EQ(t.count(0, Counter::neigh_tx), 0u) << "an l3 port asked ARP";
    EXPECT_EQ(t.count(0, Counter::ep_probes_sent), kPlanes);
    const auto probes = t.sent_with(0, Opcode::MRC_PROBE);
    ASSERT_EQ(probes.size(), kPlanes);
    for (const auto& pf : probes)
        EXPECT_EQ(pf.eth->dst, kL3PortNextHopMac);
    std::vector<EpProbeReply> got;
    ASSERT_TRUE(t.run_until([&] {
        for (const EpProbeReply& r : t.take())
            got.push_back(r);
        return got.size() == kPlanes;
    }));
    for (const EpProbeReply& r : got)
        EXPECT_EQ(r.port, r.req_id);
}

TEST(EpProbe, InvalidArgumentsAreEinval) {
    EpPair t;
    EpProbeRequest r = t.request(1, 1, 1);
    r.sgid = t.gid(0, 2); // another port's GID
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    r = t.request(1, 1, 1);
    r.sgid = t.gid(1, 1); // the peer's GID
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    r = t.request(1, 1, 1);
    r.port = kPlanes; // no such port
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    r = t.request(1, 1, 1);
    r.dgid = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}; // IPv6 from an IPv4 GID
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    r = t.request(1, 1, 1);
    r.dgid = t.gid(0, 3); // this device itself
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    r = t.request(1, 1, 1);
    r.dgid = gid_from_ipv4(224, 0, 0, 1); // multicast
    EXPECT_EQ(t.dev[0]->send_ep_probe(r), EINVAL);
    EXPECT_EQ(t.count(0, Counter::ep_probes_sent), 0u);
    EXPECT_EQ(t.count(0, Counter::neigh_tx), 0u) << "an invalid probe asked ARP";
    // The same request with the right sgid goes.
    EXPECT_EQ(t.send_resolving(t.request(1, 1, 1)), 0);
}

TEST(EpProbe, PortDownIsEnetdown) {
    EpPair t;
    ASSERT_EQ(t.send_resolving(t.request(2, 1, 1)), 0);
    ASSERT_TRUE(t.run_until([&] { return t.take().size() == 1; }));
    ASSERT_EQ(t.dev[0]->set_port_admin(2, false), 0);
    EXPECT_EQ(t.dev[0]->send_ep_probe(t.request(2, 2, 2)), ENETDOWN);
    EXPECT_EQ(t.dev[0]->send_ep_probe(t.request(1, 2, 2)), EAGAIN) << "another port is not down";
    ASSERT_EQ(t.dev[0]->set_port_admin(2, true), 0);
    EXPECT_EQ(t.dev[0]->send_ep_probe(t.request(2, 3, 3)), 0);
    // The link itself down (cable pulled) is ENETDOWN too.
    t.fabric.set_port_up(0, 2, false);
    EXPECT_EQ(t.dev[0]->send_ep_probe(t.request(2, 4, 4)), ENETDOWN);
    t.fabric.set_port_up(0, 2, true);
    EXPECT_EQ(t.dev[0]->send_ep_probe(t.request(2, 5, 5)), 0);
    EXPECT_EQ(t.count(0, Counter::ep_probes_sent), 3u);
}

TEST(EpProbe, ReplyFloodFillsTheRingAndCountsDrops) {
    EpPair t;
    constexpr std::uint32_t kFlood = 1000;
    for (std::uint32_t i = 0; i < kFlood; ++i) {
        t.inject(1, 0, t.frame_b_to_a(0, Opcode::MRC_PROBE_REPLY, 7, i, 0));
        if (i % 32 == 31) t.step(); // let A drain its port so the link never overflows
    }
    ASSERT_TRUE(t.run_until([&] {
        return t.count(0, Counter::ep_probe_replies_rcvd) +
                   t.count(0, Counter::ep_probe_replies_dropped) ==
               kFlood;
    })) << "rcvd "
        << t.count(0, Counter::ep_probe_replies_rcvd) << " dropped "
        << t.count(0, Counter::ep_probe_replies_dropped);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_rcvd), Device::kEpReplyDepth);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_dropped), kFlood - Device::kEpReplyDepth);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_sent), 0u) << "a reply was answered";

    // The ring holds the oldest kEpReplyDepth, in order; a short span takes only what fits.
    std::array<EpProbeReply, 10> few{};
    ASSERT_EQ(t.dev[0]->take_ep_replies(few), few.size());
    for (std::uint32_t i = 0; i < few.size(); ++i) {
        EXPECT_EQ(few[i].nonce, i);
        EXPECT_EQ(few[i].req_id, 7u);
        EXPECT_EQ(few[i].port, 0u);
    }
    const auto rest = t.take(1024);
    ASSERT_EQ(rest.size(), Device::kEpReplyDepth - few.size());
    EXPECT_EQ(rest.back().nonce, Device::kEpReplyDepth - 1);
    EXPECT_TRUE(t.take().empty());
    EXPECT_EQ(t.dev[0]->take_ep_replies(std::span<EpProbeReply>{}), 0u);

    // The ring works again: a real probe comes back.
    ASSERT_EQ(t.send_resolving(t.request(0, 42, 4242)), 0);
    std::vector<EpProbeReply> got;
    ASSERT_TRUE(t.run_until([&] {
        got = t.take();
        return !got.empty();
    }));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].req_id, 42u);
    EXPECT_EQ(got[0].nonce, 4242u);
}

TEST(EpProbe, ReplyFromTheFutureHasZeroRtt) {
    EpPair t;
    t.inject(1, 3, t.frame_b_to_a(3, Opcode::MRC_PROBE_REPLY, 9, 9, t.clock.now_ns() + 1'000'000));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_rcvd) == 1; }));
    const auto got = t.take();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].rtt_ns, 0u);
    EXPECT_EQ(got[0].port, 3u);
}

/** Sets the PETH version byte of an MRC frame and recomputes its ICRC. */
void set_peth_version(std::vector<std::uint8_t>& fr, std::uint8_t version) {
    wire::ParsedFrame pf;
    ASSERT_EQ(wire::parse_frame(fr, pf), wire::RejectReason::ok);
    const auto at = static_cast<std::size_t>(pf.mrc_ext - fr.data());
    const bool ipv6 = pf.ipv6 != nullptr;
    const std::size_t l3 = pf.l3_offset;
    fr[at] = version;
    const std::size_t end = fr.size() - 4;
    wire::store_icrc(fr.data() + end,
                     wire::icrc_compute(std::span(fr.data() + l3, end - l3), ipv6));
    ASSERT_EQ(wire::parse_frame(fr, pf), wire::RejectReason::ok) << "ICRC not repaired";
}

TEST(EpProbe, UnknownPethVersionIsDroppedAndCounted) {
    EpPair t;
    // A well-formed probe from B's address gets its answer (the injection path works) ...
    t.inject(1, 1, t.frame_b_to_a(1, Opcode::MRC_PROBE, 5, 5, 123));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == 1; }));
    ASSERT_EQ(t.sent_with(0, Opcode::MRC_PROBE_REPLY).size(), 1u);
    // ... the same with PETH version 2 does not, nor does a version-2 reply reach the ring.
    auto probe = t.frame_b_to_a(1, Opcode::MRC_PROBE, 6, 6, 456);
    set_peth_version(probe, 2);
    auto reply = t.frame_b_to_a(1, Opcode::MRC_PROBE_REPLY, 6, 6, 0);
    set_peth_version(reply, 0);
    t.inject(1, 1, probe);
    t.inject(1, 1, reply);
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_dropped_bad_version) == 2; }));
    t.run_for(100'000);
    EXPECT_EQ(t.count(0, Counter::ep_dropped_bad_version), 2u);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_sent), 1u);
    EXPECT_EQ(t.sent_with(0, Opcode::MRC_PROBE_REPLY).size(), 1u);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_rcvd), 0u);
    EXPECT_TRUE(t.take().empty());
}

TEST(EpProbe, OtherMrcOpcodesToQp1AreBadQp) {
    EpPair t;
    t.inject(1, 0, t.frame_b_to_a(0, Opcode::MRC_PORT_STATUS, 0, 1, 0));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::rx_dropped_bad_qp) == 1; }));
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_sent), 0u);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_rcvd), 0u);
}

// ---------------------------------------------------------------- hostile probes (attack review)

/** @p fr (built by frame_b_to_a) with another source MAC and / or source IP, ICRC repaired. */
std::vector<std::uint8_t> with_source(std::vector<std::uint8_t> fr, const wire::MacAddr* mac,
                                      const wire::Ipv6Addr* ip) {
    wire::ParsedFrame pf;
    EXPECT_EQ(wire::parse_frame(fr, pf), wire::RejectReason::ok);
    const std::size_t l3 = pf.l3_offset;
    const bool ipv6 = pf.ipv6 != nullptr;
    if (mac) std::memcpy(fr.data() + 6, mac->data(), 6); // Ethernet source
    if (ip) {
        if (ipv6) {
            std::memcpy(fr.data() + l3 + 8, ip->data(), 16);
        } else {
            std::memcpy(fr.data() + l3 + 12, ip->data() + 12, 4);
            // IPv4 header checksum again.
            fr[l3 + 10] = fr[l3 + 11] = 0;
            std::uint32_t sum = 0;
            for (std::size_t i = 0; i < 20; i += 2)
                sum += static_cast<std::uint32_t>(fr[l3 + i] << 8 | fr[l3 + i + 1]);
            while (sum >> 16)
                sum = (sum & 0xffff) + (sum >> 16);
            fr[l3 + 10] = static_cast<std::uint8_t>(~sum >> 8);
            fr[l3 + 11] = static_cast<std::uint8_t>(~sum);
        }
    }
    const std::size_t end = fr.size() - 4;
    wire::store_icrc(fr.data() + end,
                     wire::icrc_compute(std::span(fr.data() + l3, end - l3), ipv6));
    EXPECT_EQ(wire::parse_frame(fr, pf), wire::RejectReason::ok) << "frame not repaired";
    return fr;
}

TEST(EpProbe, ProbesFromNoSingleHostAreNotAnswered) {
    for (const bool ipv6 : {false, true}) {
        EpPair t(ipv6);
        // A well-formed probe is answered (the injection path works).
        t.inject(1, 0, t.frame_b_to_a(0, Opcode::MRC_PROBE, 1, 1, 1));
        ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == 1; }));
        // Sources a reply must not go to: the whole link (group MAC, broadcast / multicast IP),
        // nobody (unspecified), loopback, or A itself (A's own GID: the reply would be A's).
        const wire::MacAddr bcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        const wire::MacAddr mcast{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
        std::vector<wire::Ipv6Addr> ips;
        if (ipv6) {
            ips.push_back(wire::Ipv6Addr{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
            ips.push_back(wire::Ipv6Addr{});
            ips.push_back(wire::Ipv6Addr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
        } else {
            ips.push_back(gid_from_ipv4(255, 255, 255, 255));
            ips.push_back(gid_from_ipv4(224, 0, 0, 1));
            ips.push_back(gid_from_ipv4(0, 0, 0, 0));
            ips.push_back(gid_from_ipv4(127, 0, 0, 1));
        }
        ips.push_back(t.gid(0, 0)); // A's own address on this plane
        ips.push_back(t.gid(0, 2)); // and on another
        std::uint64_t bad = 0;
        for (const wire::MacAddr* m : {&bcast, &mcast}) {
            t.inject(1, 0, with_source(t.frame_b_to_a(0, Opcode::MRC_PROBE, 2, 2, 2), m, nullptr));
            ++bad;
        }
        for (const wire::Ipv6Addr& ip : ips) {
            t.inject(1, 0,
                     with_source(t.frame_b_to_a(0, Opcode::MRC_PROBE, 3, 3, 3), nullptr, &ip));
            ++bad;
        }
        ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_dropped_bad_source) == bad; }))
            << "ipv6 " << ipv6 << ": dropped " << t.count(0, Counter::ep_dropped_bad_source);
        t.run_for(100'000);
        EXPECT_EQ(t.count(0, Counter::ep_probe_replies_sent), 1u) << "ipv6 " << ipv6;
        EXPECT_EQ(t.sent_with(0, Opcode::MRC_PROBE_REPLY).size(), 1u);
        // A spoofed but unicast source elsewhere is answered (as an ICMP echo would be), to the
        // MAC the probe came from: no amplification, one reply of the probe's size.
        const wire::Ipv6Addr other =
            ipv6 ? wire::Ipv6Addr{0x20, 0x01, 0x0d, 0xb8, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}
                 : gid_from_ipv4(192, 0, 2, 9);
        const auto spoofed =
            with_source(t.frame_b_to_a(0, Opcode::MRC_PROBE, 4, 4, 4), nullptr, &other);
        t.inject(1, 0, spoofed);
        ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == 2; }));
        const auto replies = t.sent_with(0, Opcode::MRC_PROBE_REPLY);
        ASSERT_EQ(replies.size(), 2u);
        EXPECT_LE(t.sent[0].back().size(), spoofed.size());
        EXPECT_EQ(replies[1].eth->dst, sim::Fabric::mac(1, 0));
    }
}

TEST(EpProbe, PortAdministrativelyDownNeitherAnswersNorTakesReplies) {
    EpPair t;
    ASSERT_EQ(t.dev[0]->set_port_admin(2, false), 0);
    t.inject(1, 2, t.frame_b_to_a(2, Opcode::MRC_PROBE, 1, 1, 1));
    t.inject(1, 2, t.frame_b_to_a(2, Opcode::MRC_PROBE_REPLY, 1, 1, 0));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_dropped_port_down) == 2; }));
    t.run_for(100'000);
    EXPECT_EQ(t.count(0, Counter::ep_probe_replies_sent), 0u);
    EXPECT_TRUE(t.sent_with(0, Opcode::MRC_PROBE_REPLY).empty()) << "a reply left a disabled port";
    EXPECT_TRUE(t.take().empty());
    // Port 3 is up: answered there; port 2 back up: answered again.
    t.inject(1, 3, t.frame_b_to_a(3, Opcode::MRC_PROBE, 2, 2, 2));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == 1; }));
    ASSERT_EQ(t.dev[0]->set_port_admin(2, true), 0);
    t.inject(1, 2, t.frame_b_to_a(2, Opcode::MRC_PROBE, 3, 3, 3));
    ASSERT_TRUE(t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == 2; }));
}

TEST(EpProbe, AProbeFloodIsAnsweredAtABoundedRate) {
    EpPair t;
    // 2,000 probes from B's address as fast as the link takes them (~8 us of 10 Gb/s each 40
    // frames): a burst's worth is answered at once, the rest at kEpReplyRate, the others dropped.
    constexpr std::uint64_t kFlood = 2000;
    const auto probe = t.frame_b_to_a(1, Opcode::MRC_PROBE, 7, 7, 7);
    const std::uint64_t t0 = t.clock.now_ns();
    for (std::uint64_t i = 0; i < kFlood; ++i) {
        t.inject(1, 1, probe);
        if (i % 256 == 255) t.run_for(10'000); // let A drain its receive ring
    }
    ASSERT_TRUE(t.run_until([&] {
        return t.count(0, Counter::ep_probe_replies_sent) +
                   t.count(0, Counter::ep_probes_rate_limited) +
                   t.count(0, Counter::tx_no_buffer) >=
               kFlood;
    })) << "sent "
        << t.count(0, Counter::ep_probe_replies_sent) << " limited "
        << t.count(0, Counter::ep_probes_rate_limited);
    const std::uint64_t elapsed = t.clock.now_ns() - t0;
    const std::uint64_t allowed =
        Device::kEpReplyBurst + elapsed * Device::kEpReplyRate / 1'000'000'000ull + 1;
    EXPECT_LE(t.count(0, Counter::ep_probe_replies_sent), allowed) << "elapsed " << elapsed;
    EXPECT_GT(t.count(0, Counter::ep_probes_rate_limited), 0u);
    EXPECT_GE(t.count(0, Counter::ep_probe_replies_sent), Device::kEpReplyBurst);
    // Later, the bucket full again: answered.
    const std::uint64_t before = t.count(0, Counter::ep_probe_replies_sent);
    t.run_for(10'000'000);
    t.inject(1, 1, probe);
    ASSERT_TRUE(
        t.run_until([&] { return t.count(0, Counter::ep_probe_replies_sent) == before + 1; }));
}

TEST(EpProbe, ProbeFromASlottedDeviceGoesToItsSlotsQp1AndTheReplyComesBackThere) {
    // Processes sharing one UDP port (drivers/uring share = yes) are told apart by the top byte
    // of the destination QP: the probe names the prober's slot, any member answers it, and the
    // reply echoes the destination QP so the kernel steers it back to the prober.
    EpPair t;
    ASSERT_EQ(t.dev[0]->set_qpn_steering_slot(5), 0);
    ASSERT_EQ(t.dev[1]->set_qpn_steering_slot(9), 0); // the answerer's own slot does not matter
    const EpProbeRequest r = t.request(1, 7, 0x5107);
    ASSERT_EQ(t.send_resolving(r), 0);
    std::vector<EpProbeReply> got;
    ASSERT_TRUE(t.run_until([&] {
        auto more = t.take();
        got.insert(got.end(), more.begin(), more.end());
        return !got.empty();
    }));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].req_id, 7);
    EXPECT_EQ(got[0].nonce, 0x5107u);
    const auto probes = t.sent_with(0, Opcode::MRC_PROBE);
    const auto replies = t.sent_with(1, Opcode::MRC_PROBE_REPLY);
    ASSERT_EQ(probes.size(), 1u);
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(probes[0].bth->dest_qp(), 0x050001u);
    EXPECT_EQ(replies[0].bth->dest_qp(), 0x050001u);
    EXPECT_EQ(t.count(0, Counter::rx_dropped_bad_qp) + t.count(1, Counter::rx_dropped_bad_qp), 0u);
}

} // namespace
} // namespace droce::test
