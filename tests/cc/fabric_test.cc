/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * DCQCN end to end on the sim fabric (virtual clock): the pacer holds a QP to its rate limit, and N
 * RC flows from N senders into one receiver share the receiver's port (a switch egress queue with
 * RED/ECN marking, sized as a lossless buffer): fair, fully used, the queue between Kmin and Kmax,
 * nothing dropped; a late flow converges to its share.
 */
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

#include "cc/dcqcn.h"
#include "engine/connect.h"
#include "engine/device.h"
#include "rc/pacer.h"
#include "sim/fabric.h"

namespace droce::test {
namespace {

constexpr double kLinkGbps = 10.0;
constexpr std::size_t kMsg = 64 * 1024;

/** A port that counts the wire bytes it transmits. */
class CountingPort final : public PortDriver {
  public:
    explicit CountingPort(PortDriver& inner) : inner_(inner) {}
    std::uint64_t bytes = 0;
    std::uint16_t alloc_bulk(PktBuf** b, std::uint16_t n) noexcept override {
        return inner_.alloc_bulk(b, n);
    }
    void free_bulk(PktBuf** b, std::uint16_t n) noexcept override { inner_.free_bulk(b, n); }
    std::uint16_t tx_burst(PktBuf** b, std::uint16_t n) noexcept override {
        for (std::uint16_t i = 0; i < n; ++i)
            bytes += b[i]->len + b[i]->ext_len;
        return inner_.tx_burst(b, n);
    }
    std::uint16_t rx_burst(PktBuf** b, std::uint16_t n) noexcept override {
        return inner_.rx_burst(b, n);
    }
    std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    bool link_up() const noexcept override { return inner_.link_up(); }

  private:
    PortDriver& inner_;
};

/** Endpoints 1..n send to endpoint 0 over one plane; each sender has one RC QP to it. */
struct Incast {
    Clock clock = Clock::virtual_clock();
    sim::Fabric fabric;
    std::vector<std::unique_ptr<CountingPort>> ports;
    std::vector<std::unique_ptr<Device>> dev;
    std::vector<mem::Pd*> pd;
    std::vector<rc::Cq*> cq;
    std::vector<rc::Qp*> send_qp; ///< on sender i (index i - 1)
    std::vector<rc::Qp*> recv_qp; ///< on the receiver, one per sender
    std::vector<std::vector<std::uint8_t>> src;
    std::vector<mem::Mr*> src_mr;
    std::vector<std::uint8_t> dst;
    mem::Mr* dst_mr = nullptr;
    std::vector<std::uint64_t> posted, done;
    std::vector<bool> running;

    static sim::FabricConfig config(std::uint32_t senders, const sim::LinkConfig& link) {
        sim::FabricConfig c;
        c.endpoints = senders + 1;
        c.planes = 1;
        c.pool_buffers = 32768;
        c.buffer_capacity = 4608;
        c.link_slots = 8192;
        c.shared_egress = true; // the links into the receiver share its egress queue
        c.link = link;
        return c;
    }
    static wire::Ipv6Addr gid(std::uint32_t e) {
        return gid_from_ipv4(10, 0, static_cast<std::uint8_t>(e >> 8),
                             static_cast<std::uint8_t>(e));
    }

    Incast(std::uint32_t senders, const sim::LinkConfig& link, const cc::DcqcnProfile* profile)
        : fabric(&clock, config(senders, link)) {
        const std::uint32_t n = senders + 1;
        for (std::uint32_t e = 0; e < n; ++e) {
            ports.push_back(std::make_unique<CountingPort>(fabric.port(e, 0)));
            PortSpec ps{ports.back().get(), sim::Fabric::mac(e, 0), gid(e), 4096};
            ps.line_rate_mbps = kLinkGbps * 1000;
            dev.push_back(std::make_unique<Device>("d" + std::to_string(e), clock,
                                                   std::vector<PortSpec>{ps}));
            dev.back()->set_dcqcn(profile);
            int err = 0;
            pd.push_back(dev.back()->alloc_pd(&err));
            cq.push_back(dev.back()->create_cq(65536, &err));
        }
        dst.resize(kMsg * senders);
        int err = 0;
        dst_mr = dev[0]->reg_mr(pd[0], dst.data(), dst.size(),
                                rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
        for (std::uint32_t s = 1; s < n; ++s) {
            src.emplace_back(kMsg, static_cast<std::uint8_t>(s));
            src_mr.push_back(
                dev[s]->reg_mr(pd[s], src.back().data(), kMsg, rc::kAccessLocalWrite, &err));
            rc::Qp* a =
                dev[s]->create_qp(pd[s], cq[s], cq[s], rc::QpCap{256, 16, 1, 1, 0}, false, &err);
            rc::Qp* b =
                dev[0]->create_qp(pd[0], cq[0], cq[0], rc::QpCap{16, 16, 1, 1, 0}, false, &err);
            for (int side = 0; side < 2; ++side) {
                RcConnectParams c;
                c.qp_access_flags = rc::kAccessRemoteWrite;
                c.path_mtu = rc::Mtu::mtu4096;
                c.timeout = 14;
                const std::uint32_t peer_e = side == 0 ? 0 : s;
                c.dest_qp_num = side == 0 ? b->qpn : a->qpn;
                c.ah_attr.dgid = gid(peer_e);
                c.ah_attr.dmac = sim::Fabric::mac(peer_e, 0);
                EXPECT_EQ(connect_rc(side == 0 ? *dev[s] : *dev[0], side == 0 ? a : b, c), 0);
            }
            send_qp.push_back(a);
            recv_qp.push_back(b);
        }
        posted.assign(senders, 0);
        done.assign(senders, 0);
        running.assign(senders, true);
    }

    /** Keeps 8 WRITEs outstanding on every running flow, polls every engine, moves time. */
    void step() {
        const std::size_t n = send_qp.size();
        for (std::size_t f = 0; f < n; ++f) {
            while (running[f] && posted[f] - done[f] < 8) {
                rc::SendWqe w;
                w.wr_id = f;
                w.opcode = rc::WrOpcode::rdma_write;
                w.send_flags = rc::kSendSignaled;
                w.num_sge = 1;
                w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src[f].data()),
                                       static_cast<std::uint32_t>(kMsg), src_mr[f]->lkey};
                w.length = kMsg;
                w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data()) + f * kMsg;
                w.rkey = dst_mr->rkey;
                std::uint32_t bad = 0;
                if (dev[f + 1]->post_send(send_qp[f], &w, 1, &bad) != 0) break;
                ++posted[f];
            }
        }
        std::uint32_t work = 0;
        for (auto& d : dev)
            work += d->poll();
        rc::Cqe c[64];
        for (std::size_t e = 1; e < dev.size(); ++e)
            for (std::uint32_t k; (k = dev[e]->poll_cq(cq[e], c, 64)) > 0;)
                for (std::uint32_t i = 0; i < k; ++i) {
                    EXPECT_EQ(c[i].status, rc::WcStatus::success);
                    ++done[c[i].wr_id];
                }
        if (work != 0) return;
        std::uint64_t next = fabric.next_event_ns();
        for (auto& d : dev) {
            const std::uint64_t t = d->next_deadline_ns();
            if (t && (next == 0 || t < next)) next = t;
        }
        if (next > clock.now_ns())
            clock.set(next);
        else
            clock.advance(100);
    }
    /** Runs @p ns; returns the Gb/s of payload each flow completed in that time. */
    std::vector<double> run_for(std::uint64_t ns) {
        const std::vector<std::uint64_t> before = done;
        const std::uint64_t end = clock.now_ns() + ns;
        std::uint64_t qsum = 0, qn = 0;
        while (clock.now_ns() < end) {
            step();
            (void)qsum;
            (void)qn;
        }
        std::vector<double> g;
        for (std::size_t f = 0; f < done.size(); ++f)
            g.push_back((done[f] - before[f]) * kMsg * 8.0 / ns);
        return g;
    }
    [[nodiscard]] std::uint64_t drops() const {
        std::uint64_t d = 0;
        for (std::uint32_t s = 1; s < dev.size(); ++s) {
            const sim::LinkStats& st = fabric.link_stats(s, 0, 0);
            d += st[sim::LinkCounter::dropped_queue_full] + st[sim::LinkCounter::dropped_loss];
        }
        return d;
    }
    [[nodiscard]] std::uint64_t marks() const {
        std::uint64_t m = 0;
        for (std::uint32_t s = 1; s < dev.size(); ++s)
            m += fabric.link_stats(s, 0, 0)[sim::LinkCounter::ecn_marked];
        return m;
    }
};

double jain(const std::vector<double>& x) {
    const double s = std::accumulate(x.begin(), x.end(), 0.0);
    double sq = 0;
    for (double v : x)
        sq += v * v;
    return s * s / (x.size() * sq);
}

/** The bottleneck: 10 Gb/s, RED from 40 KB to 160 KB (the HPCC artifact's 100/400 KB per 25 Gb/s,
 *  scaled), a 4 MB queue: far more than DCQCN lets build, so a drop means DCQCN failed. */
sim::LinkConfig bottleneck() {
    sim::LinkConfig l;
    l.bandwidth_gbps = kLinkGbps;
    l.delay_ns = 1000;
    l.queue_bytes = 4 << 20;
    l.ecn = true;
    l.kmin_bytes = 40'000;
    l.kmax_bytes = 160'000;
    l.pmax = 0.2;
    return l;
}

TEST(DcqcnFabric, PacerHoldsARateLimitedQpToItsRate) {
    for (const double gbps : {1.0, 5.0, 20.0}) {
        sim::LinkConfig l;
        l.bandwidth_gbps = 100;
        Incast t(1, l, nullptr);
        ASSERT_EQ(t.dev[1]->set_qp_rate_limit(t.send_qp[0], gbps * 1000), 0);
        (void)t.run_for(1'000'000);
        const std::uint64_t b0 = t.ports[1]->bytes;
        const std::uint64_t t0 = t.clock.now_ns();
        (void)t.run_for(10'000'000);
        const double wire = (t.ports[1]->bytes - b0) * 8.0 / (t.clock.now_ns() - t0);
        std::printf("rate limit %.0f Gb/s: %.3f Gb/s on the wire\n", gbps, wire);
        EXPECT_NEAR(wire, gbps, gbps * 0.05);
    }
}

TEST(DcqcnFabric, FlowsShareABottleneckFairlyWithoutLoss) {
    // The paper's profile. (ConnectX's profile reacts and recovers faster and is not fair at this
    // bottleneck: DcqcnFabric.NvidiaProfileAtTheSameBottleneck prints its figures.) With 16 flows
    // the marks of the queue the first line-rate burst builds drive every flow down to
    // rpg_min_rate; this passes only because the pacer re-times its gap when the rate rises.
    for (const std::uint32_t n : {2u, 4u, 8u, 16u}) {
        Incast t(n, bottleneck(), cc::profile_by_name("paper"));
        (void)t.run_for(20'000'000); // converge
        const std::vector<double> g = t.run_for(40'000'000);
        const double total = std::accumulate(g.begin(), g.end(), 0.0);
        const double util = total / (kLinkGbps * 4096.0 / 4154.0); // payload share of the wire
        std::uint64_t cnps = 0;
        for (rc::Qp* q : t.send_qp)
            cnps += q->counters[Counter::rp_cnp_handled];
        std::printf("%2u flows: Jain %.4f, utilisation %.3f, %llu marks, %llu CNPs handled, drops "
                    "%llu\n",
                    n, jain(g), util, static_cast<unsigned long long>(t.marks()),
                    static_cast<unsigned long long>(cnps),
                    static_cast<unsigned long long>(t.drops()));
        EXPECT_GE(jain(g), 0.98) << n << " flows";
        EXPECT_GE(util, 0.90) << n << " flows";
        EXPECT_EQ(t.drops(), 0u) << n << " flows";
        EXPECT_GT(cnps, 0u);
    }
}

TEST(DcqcnFabric, NvidiaProfileAtTheSameBottleneck) {
    // Figures only (README, DCQCN): ConnectX's defaults (byte counter 32 KB, timer 300 us) were
    // set for 100 Gb/s fabrics; at this 10 Gb/s RED queue they are not fair. What must hold: the
    // QPs react (CNPs handled) and the link is used.
    for (const std::uint32_t n : {2u, 4u, 8u, 16u}) {
        Incast t(n, bottleneck(), cc::profile_by_name("nvidia"));
        (void)t.run_for(20'000'000);
        const std::vector<double> g = t.run_for(40'000'000);
        const double util =
            std::accumulate(g.begin(), g.end(), 0.0) / (kLinkGbps * 4096.0 / 4154.0);
        std::uint64_t cnps = 0;
        for (rc::Qp* q : t.send_qp)
            cnps += q->counters[Counter::rp_cnp_handled];
        std::printf(
            "nvidia %2u flows: Jain %.4f, utilisation %.3f, %llu CNPs handled, drops %llu\n", n,
            jain(g), util, static_cast<unsigned long long>(cnps),
            static_cast<unsigned long long>(t.drops()));
        EXPECT_GT(cnps, 0u);
        EXPECT_GE(util, 0.5) << n << " flows";
    }
}

TEST(DcqcnFabric, PacerRetimesItsGapWhenTheRateRises) {
    // A QP cut to 1 Mb/s after a 4 KB packet would wait 33 ms for its next one; once DCQCN (here:
    // the rate limit, the same path through update_rate) raises the rate, the gap is re-timed.
    sim::LinkConfig l;
    l.bandwidth_gbps = 100;
    Incast t(1, l, nullptr);
    ASSERT_EQ(t.dev[1]->set_qp_rate_limit(t.send_qp[0], 1), 0); // 1 Mb/s
    const rc::Pacer& p = t.send_qp[0]->pacer;
    for (int i = 0; i < 100 && p.gap_bytes == 0; ++i)
        t.step(); // until one packet is out (a step with work does not move the clock)
    ASSERT_GT(p.next_send_ns, t.clock.now_ns() + 10'000'000);
    ASSERT_EQ(t.dev[1]->set_qp_rate_limit(t.send_qp[0], 10'000), 0); // 10 Gb/s
    EXPECT_LT(p.next_send_ns, t.clock.now_ns() + 10'000) << "the old gap still holds the QP back";
    const std::vector<double> g = t.run_for(1'000'000);
    EXPECT_GT(g[0], 5.0) << "the QP did not resume at its new rate";
}

TEST(DcqcnFabric, ALateFlowConvergesToItsShare) {
    Incast t(2, bottleneck(), cc::profile_by_name("paper"));
    t.running[1] = false;
    const std::vector<double> alone = t.run_for(20'000'000);
    EXPECT_GT(alone[0], 0.9 * kLinkGbps * 4096.0 / 4154.0) << "one flow should fill the link";
    t.running[1] = true; // joins at line rate
    std::uint64_t converged_ns = 0;
    for (int k = 0; k < 100 && converged_ns == 0; ++k) {
        const std::vector<double> g = t.run_for(1'000'000);
        if (g[1] > 0.4 * (g[0] + g[1])) converged_ns = (k + 1) * 1'000'000ull;
    }
    ASSERT_GT(converged_ns, 0u) << "the late flow never reached 40 % of the bottleneck";
    const std::vector<double> g = t.run_for(20'000'000);
    std::printf("late flow: within %.0f ms at >= 40 %%, then %.2f + %.2f Gb/s (Jain %.4f), drops "
                "%llu\n",
                converged_ns / 1e6, g[0], g[1], jain(g),
                static_cast<unsigned long long>(t.drops()));
    EXPECT_GE(jain(g), 0.98);
    EXPECT_EQ(t.drops(), 0u);
}

} // namespace
} // namespace droce::test
