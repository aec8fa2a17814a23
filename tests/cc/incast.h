/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The DCQCN incast rig on the sim fabric (virtual clock), shared by tests/cc/fabric_test.cc and
 * bench/cc/dcqcn_bench.cc: N RC senders into one receiver whose port is a switch egress queue with
 * RED/ECN marking (shared_egress), optionally a victim flow; per-flow goodput, queue depth
 * statistics, drops and marks. Test and benchmark code, not installed.
 */
#pragma once

#include <gtest/gtest.h>

#include <array>
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

inline constexpr double kLinkGbps = 10.0;
inline constexpr std::size_t kMsg = 64 * 1024;

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
        // Lengths first: a frame the fabric took may be dropped and back in its pool at once.
        // Only the frames taken count (a port paused by PFC takes fewer).
        std::array<std::uint32_t, 512> len{};
        for (std::uint16_t i = 0; i < n && i < len.size(); ++i)
            len[i] = b[i]->len + b[i]->ext_len;
        const std::uint16_t sent = inner_.tx_burst(b, n);
        for (std::uint16_t i = 0; i < sent && i < len.size(); ++i)
            bytes += len[i];
        return sent;
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

    /** Every NIC's line rate, Gb/s. */
    double nic_gbps;

    /**
     * @param nic_gbps every port's line rate (DCQCN's line, and the victim sender's shaper);
     * @param mtu every QP's path MTU.
     */
    Incast(std::uint32_t senders, const sim::LinkConfig& link, const cc::DcqcnProfile* profile,
           bool victim = false, double nic_gbps_ = kLinkGbps, rc::Mtu mtu = rc::Mtu::mtu4096)
        : fabric(&clock, config(senders + 1 + (victim ? 1 : 0), link)), link_cfg(link),
          nic_gbps(nic_gbps_) {
        const std::uint32_t n = senders + 1 + (victim ? 1 : 0);
        const std::uint32_t victim_rx = senders + 1;
        for (std::uint32_t e = 0; e < n; ++e) {
            ports.push_back(std::make_unique<CountingPort>(fabric.port(e, 0)));
            PortDriver* drv = ports.back().get();
            if (victim && e == 1) {
                shaper = std::make_unique<TxShaper>(*drv, clock, nic_gbps);
                drv = shaper.get();
            }
            PortSpec ps{drv, sim::Fabric::mac(e, 0), gid(e), 4096};
            ps.line_rate_mbps = nic_gbps * 1000;
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
                c.path_mtu = mtu;
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
    /** Times the receiver's queue paused a sender (PFC). */
    [[nodiscard]] std::uint64_t pauses() const {
        std::uint64_t m = 0;
        for (std::uint32_t s = 1; s < dev.size(); ++s)
            m += fabric.link_stats(s, 0, 0)[sim::LinkCounter::pfc_pauses];
        return m;
    }
    /** ns the senders spent paused by PFC, summed over them. */
    [[nodiscard]] std::uint64_t paused_ns() const {
        std::uint64_t m = 0;
        for (std::uint32_t s = 1; s < dev.size(); ++s)
            m += fabric.port_stats(s, 0)[sim::PortCounter::pfc_paused_ns];
        return m;
    }
    [[nodiscard]] std::uint64_t marks() const {
        std::uint64_t m = 0;
        for (std::uint32_t s = 1; s < dev.size(); ++s)
            m += fabric.link_stats(s, 0, 0)[sim::LinkCounter::ecn_marked];
        return m;
    }
};

inline double jain(const std::vector<double>& x) {
    const double s = std::accumulate(x.begin(), x.end(), 0.0);
    double sq = 0;
    for (double v : x)
        sq += v * v;
    return s * s / (x.size() * sq);
}

/** A port of @p gbps into the receiver with RED marking from @p kmin to @p kmax bytes (@p pmax
 *  at Kmax), a 4 MiB queue and 1 us links; PFC at @p xoff / @p xon bytes when @p xoff is not 0. */
inline sim::LinkConfig red_port(double gbps, std::uint64_t kmin, std::uint64_t kmax, double pmax,
                                std::uint64_t xoff = 0, std::uint64_t xon = 0) {
    sim::LinkConfig l;
    l.bandwidth_gbps = gbps;
    l.delay_ns = 1000;
    l.queue_bytes = 4 << 20;
    l.ecn = true;
    l.kmin_bytes = kmin;
    l.kmax_bytes = kmax;
    l.pmax = pmax;
    l.pfc_xoff_bytes = xoff;
    l.pfc_xon_bytes = xon;
    return l;
}

/** The bottleneck: 10 Gb/s, RED from 40 KB to 160 KB (the HPCC artifact's 100/400 KB per 25 Gb/s,
 *  scaled), a 4 MB queue: far more than DCQCN lets build, so a drop means DCQCN failed. */
inline sim::LinkConfig bottleneck() {
    return red_port(kLinkGbps, 40'000, 160'000, 0.2);
}

/**
 * The paper profile's own operating point (DCQCN, SIGCOMM 2015, Sec. 5): a 40 Gb/s port, RED from
 * Kmin 5 KB to Kmax 200 KB with Pmax 1 %, a 4 MiB queue, and PFC for the synchronised start only
 * (the paper deploys DCQCN with PFC; XOFF 400 KB, twice Kmax, and XON 380 KB are droce's values):
 * 16 flows at line rate fill 4 MiB in 56 us, before a 50 us CNP interval has cut anyone twice.
 */
inline sim::LinkConfig bottleneck_paper_40g() {
    return red_port(40, 5'000, 200'000, 0.01, 400'000, 380'000);
}

/**
 * ConnectX's defaults at the rate they were set for: a 100 Gb/s port with the HPCC artifact's RED
 * (100 / 400 KB and Pmax 0.2 per 25 Gb/s, scaled: 400 KB to 1.6 MB), a 4 MB queue and PFC (XOFF
 * 3.2 MB, twice Kmax; XON 3 MB), ConnectX's deployment.
 */
inline sim::LinkConfig bottleneck_nvidia_100g() {
    return red_port(100, 400'000, 1'600'000, 0.2, 3'200'000, 3'000'000);
}

/** bottleneck() in a lossless fabric: PFC pauses a sender whose frame leaves the queue above
 *  @p xoff_bytes, until it drains to @p xon_bytes (far above Kmax: DCQCN should act first). */
inline sim::LinkConfig bottleneck_pfc(std::uint64_t xoff_bytes = 320'000,
                                      std::uint64_t xon_bytes = 300'000) {
    sim::LinkConfig l = bottleneck();
    l.pfc_xoff_bytes = xoff_bytes;
    l.pfc_xon_bytes = xon_bytes;
    return l;
}

} // namespace droce::test
