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
#include "runtime/shaper.h"
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

/**
 * Endpoints 1..n send to endpoint 0 over one plane; each sender has one RC QP to it (flows 0..n-1:
 * flow f from endpoint f + 1). With a victim: endpoint n + 1 is a second receiver, sender 1 has a
 * second QP to it (flow n), and sender 1's port is shaped to the line rate (its NIC, the first hop
 * both of its flows share; the sim's own links are per sender and receiver pair).
 */
struct Incast {
    Clock clock = Clock::virtual_clock();
    sim::Fabric fabric;
    std::vector<std::unique_ptr<CountingPort>> ports;
    std::unique_ptr<TxShaper> shaper; ///< sender 1's NIC, with a victim
    std::vector<std::unique_ptr<Device>> dev;
    std::vector<mem::Pd*> pd;
    std::vector<rc::Cq*> cq;
    std::vector<rc::Qp*> send_qp;      ///< flow f's QP on its sender
    std::vector<rc::Qp*> recv_qp;      ///< flow f's QP on its receiver
    std::vector<std::uint32_t> from;   ///< flow f's sender endpoint
    std::vector<std::size_t> rx_index; ///< flow f's receiver: 0 (endpoint 0) or 1 (the victim's)
    std::vector<std::vector<std::uint8_t>> src;
    std::vector<mem::Mr*> src_mr;
    std::vector<std::vector<std::uint8_t>> dst; ///< per receiver endpoint (0, and n + 1)
    std::vector<mem::Mr*> dst_mr;
    std::vector<std::uint64_t> posted, done;
    std::vector<bool> running;
    sim::LinkConfig link_cfg;
    /** The receiver port's egress queue over the last run_for (fractions of its time). */
    struct QueueStats {
        double mean_bytes = 0;
        double below_kmin = 0, in_band = 0, above_kmax = 0;
        std::uint64_t max_bytes = 0;
    } queue;

    static sim::FabricConfig config(std::uint32_t endpoints, const sim::LinkConfig& link) {
        sim::FabricConfig c;
        c.endpoints = endpoints;
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

    Incast(std::uint32_t senders, const sim::LinkConfig& link, const cc::DcqcnProfile* profile,
           bool victim = false)
        : fabric(&clock, config(senders + 1 + (victim ? 1 : 0), link)), link_cfg(link) {
        const std::uint32_t n = senders + 1 + (victim ? 1 : 0);
        const std::uint32_t victim_rx = senders + 1;
        for (std::uint32_t e = 0; e < n; ++e) {
            ports.push_back(std::make_unique<CountingPort>(fabric.port(e, 0)));
            PortDriver* drv = ports.back().get();
            if (victim && e == 1) {
                shaper = std::make_unique<TxShaper>(*drv, clock, kLinkGbps);
                drv = shaper.get();
            }
            PortSpec ps{drv, sim::Fabric::mac(e, 0), gid(e), 4096};
            ps.line_rate_mbps = kLinkGbps * 1000;
            dev.push_back(std::make_unique<Device>("d" + std::to_string(e), clock,
                                                   std::vector<PortSpec>{ps}));
            dev.back()->set_dcqcn(profile);
            int err = 0;
            pd.push_back(dev.back()->alloc_pd(&err));
            cq.push_back(dev.back()->create_cq(65536, &err));
        }
        int err = 0;
        for (std::uint32_t r : {0u, victim_rx}) {
            if (r == victim_rx && !victim) break;
            dst.emplace_back(kMsg * (senders + 1), 0);
            dst_mr.push_back(dev[r]->reg_mr(pd[r], dst.back().data(), dst.back().size(),
                                            rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err));
        }
        const std::uint32_t flows = senders + (victim ? 1 : 0);
        for (std::uint32_t f = 0; f < flows; ++f) {
            const std::uint32_t s = f < senders ? f + 1 : 1;
            const std::uint32_t r = f < senders ? 0 : victim_rx;
            from.push_back(s);
            rx_index.push_back(f < senders ? 0 : 1);
            src.emplace_back(kMsg, static_cast<std::uint8_t>(f + 1));
            src_mr.push_back(
                dev[s]->reg_mr(pd[s], src.back().data(), kMsg, rc::kAccessLocalWrite, &err));
            rc::Qp* a =
                dev[s]->create_qp(pd[s], cq[s], cq[s], rc::QpCap{256, 16, 1, 1, 0}, false, &err);
            rc::Qp* b =
                dev[r]->create_qp(pd[r], cq[r], cq[r], rc::QpCap{16, 16, 1, 1, 0}, false, &err);
            for (int side = 0; side < 2; ++side) {
                RcConnectParams c;
                c.qp_access_flags = rc::kAccessRemoteWrite;
                c.path_mtu = rc::Mtu::mtu4096;
                c.timeout = 14;
                const std::uint32_t peer_e = side == 0 ? r : s;
                c.dest_qp_num = side == 0 ? b->qpn : a->qpn;
                c.ah_attr.dgid = gid(peer_e);
                c.ah_attr.dmac = sim::Fabric::mac(peer_e, 0);
                EXPECT_EQ(connect_rc(side == 0 ? *dev[s] : *dev[r], side == 0 ? a : b, c), 0);
            }
            send_qp.push_back(a);
            recv_qp.push_back(b);
        }
        posted.assign(flows, 0);
        done.assign(flows, 0);
        running.assign(flows, true);
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
                const std::size_t r = rx_index[f];
                w.remote_addr = reinterpret_cast<std::uintptr_t>(dst[r].data()) + f * kMsg;
                w.rkey = dst_mr[r]->rkey;
                std::uint32_t bad = 0;
                if (dev[from[f]]->post_send(send_qp[f], &w, 1, &bad) != 0) break;
                ++posted[f];
            }
        }
        std::uint32_t work = 0;
        for (auto& d : dev)
            work += d->poll();
        rc::Cqe c[64];
        for (std::size_t e = 1; e < dev.size(); ++e) // receivers' CQs stay empty (unsignaled)
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
        const std::uint64_t start = clock.now_ns();
        const std::uint64_t end = start + ns;
        queue = QueueStats{};
        while (clock.now_ns() < end) {
            // The receiver port's egress queue, weighted by how long it held each depth.
            const std::uint64_t t0 = clock.now_ns();
            const std::uint64_t q = fabric.egress_backlog_bytes(1, 0, 0);
            step();
            const double dt = static_cast<double>(clock.now_ns() - t0);
            queue.mean_bytes += q * dt;
            if (q < link_cfg.kmin_bytes)
                queue.below_kmin += dt;
            else if (q <= link_cfg.kmax_bytes)
                queue.in_band += dt;
            else
                queue.above_kmax += dt;
            queue.max_bytes = std::max(queue.max_bytes, q);
        }
        const double span = static_cast<double>(clock.now_ns() - start);
        queue.mean_bytes /= span;
        queue.below_kmin /= span;
        queue.in_band /= span;
        queue.above_kmax /= span;
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
                    "%llu; queue mean %.0f KB, max %.0f KB, below Kmin %.2f, Kmin..Kmax %.2f, "
                    "above Kmax %.2f\n",
                    n, jain(g), util, static_cast<unsigned long long>(t.marks()),
                    static_cast<unsigned long long>(cnps),
                    static_cast<unsigned long long>(t.drops()), t.queue.mean_bytes / 1e3,
                    t.queue.max_bytes / 1e3, t.queue.below_kmin, t.queue.in_band,
                    t.queue.above_kmax);
        EXPECT_GE(jain(g), 0.98) << n << " flows";
        EXPECT_GE(util, 0.90) << n << " flows";
        EXPECT_EQ(t.drops(), 0u) << n << " flows";
        // The queue oscillates around the marking band: its mean lies inside it (the share of time
        // spent inside is printed above; README, DCQCN).
        EXPECT_GE(t.queue.mean_bytes, 40'000.0) << n << " flows";
        EXPECT_LE(t.queue.mean_bytes, 160'000.0) << n << " flows";
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

TEST(DcqcnFabric, IncastVictim) {
    // 7:1 incast into endpoint 0 through its 10 Gb/s RED port, and an eighth flow, the victim, from
    // the first incast sender to another receiver: it shares that sender's NIC (10 Gb/s, shaped)
    // with the sender's incast flow. The sim fabric is lossy (no PFC): nothing pauses the victim's
    // path, so what DCQCN changes is the incast port's queue (the incast flows' latency), not the
    // victim's rate; the figures are reported both ways.
    double victim[2] = {0, 0}, first[2] = {0, 0}, queue[2] = {0, 0};
    std::uint64_t drops[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
        Incast t(7, bottleneck(), on ? cc::profile_by_name("paper") : nullptr, true);
        (void)t.run_for(20'000'000);
        const std::vector<double> g = t.run_for(40'000'000);
        victim[on] = g[7];
        first[on] = g[0];
        queue[on] = t.queue.mean_bytes;
        drops[on] = t.drops();
        const double incast = std::accumulate(g.begin(), g.begin() + 7, 0.0);
        std::printf("DCQCN %-3s: victim %.2f Gb/s, incast total %.2f Gb/s (Jain %.4f), first "
                    "sender's incast flow %.2f Gb/s, incast port queue mean %.0f KB (%.0f us), "
                    "drops %llu\n",
                    on ? "on" : "off", victim[on], incast,
                    jain(std::vector<double>(g.begin(), g.begin() + 7)), g[0], queue[on] / 1e3,
                    queue[on] * 8 / (kLinkGbps * 1e3), static_cast<unsigned long long>(drops[on]));
    }
    const double line = kLinkGbps * 4096.0 / 4154.0;
    for (int on = 0; on < 2; ++on) {
        // The NIC serves both QPs of the first sender (its arbiter turns): the victim gets what the
        // incast flow's 1/7 of the congested port leaves of the NIC, and the incast flow its share.
        EXPECT_GE(victim[on], 0.7 * line) << (on ? "with" : "without") << " DCQCN";
        EXPECT_GE(first[on], 0.5 * line / 7) << (on ? "with" : "without") << " DCQCN";
        EXPECT_EQ(drops[on], 0u);
    }
    EXPECT_LT(queue[1], queue[0] / 4) << "DCQCN should keep the incast port's queue short";
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
