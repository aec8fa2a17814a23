/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Two droce devices joined by the in-process sim fabric, sharing one virtual clock. Tests connect
 * RC QP pairs, post work through the native API and run both engines until a condition holds,
 * jumping virtual time to the next timer or delivery whenever both engines are idle.
 */
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "engine/connect.h"
#include "engine/device.h"
#include "sim/fabric.h"

namespace droce::test {

/**
 * A port that passes every call to the fabric's port, except that each transmitted frame is first
 * shown to @p on_tx, which may change it or return false to drop it (the buffer is then freed).
 * Lets a test drop exactly "the first ATOMIC ACKNOWLEDGE" or flip one payload byte.
 */
class FilterPort final : public PortDriver {
  public:
    /** @p read_by_peer: tx_read_by_peer() says so, as memif's zero-copy client (the engine then
     *  streams its short frames into the buffers). */
    explicit FilterPort(PortDriver& inner, bool read_by_peer = false)
        : inner_(inner), read_by_peer_(read_by_peer) {}
    std::function<bool(PktBuf&)> on_tx;
    /**
     * Set when more than one thread drives the devices (engine threads over a real-time fabric):
     * every call into the fabric takes it, since the sim fabric is not thread safe (sim/fabric.h:
     * one thread makes every call on it and all of its ports). Test harness only.
     */
    std::mutex* fabric_lock = nullptr;

    std::uint16_t alloc_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        const Guard g(fabric_lock);
        return inner_.alloc_bulk(bufs, n);
    }
    void free_bulk(PktBuf** bufs, std::uint16_t n) noexcept override {
        const Guard g(fabric_lock);
        inner_.free_bulk(bufs, n);
    }
    std::uint16_t tx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        const Guard g(fabric_lock);
        if (!on_tx) return inner_.tx_burst(bufs, n);
        std::uint16_t kept = 0;
        for (std::uint16_t i = 0; i < n; ++i) {
            if (on_tx(*bufs[i]))
                bufs[kept++] = bufs[i];
            else
                inner_.free_bulk(&bufs[i], 1);
        }
        const std::uint16_t sent = inner_.tx_burst(bufs, kept);
        // Frames the fabric refused are freed here: the engine was told all n were taken.
        if (sent < kept) inner_.free_bulk(bufs + sent, static_cast<std::uint16_t>(kept - sent));
        return n;
    }
    std::uint16_t rx_burst(PktBuf** bufs, std::uint16_t n) noexcept override {
        const Guard g(fabric_lock);
        return inner_.rx_burst(bufs, n);
    }
    std::uint32_t max_frame() const noexcept override { return inner_.max_frame(); }
    bool link_up() const noexcept override {
        const Guard g(fabric_lock);
        return inner_.link_up();
    }
    bool tx_read_by_peer() const noexcept override { return read_by_peer_; }

  private:
    /** Holds @p m (when not null) for its scope. */
    struct Guard {
        explicit Guard(std::mutex* m) noexcept : m_(m) {
            if (m_) m_->lock();
        }
        ~Guard() {
            if (m_) m_->unlock();
        }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
        std::mutex* m_;
    };
    PortDriver& inner_;
    bool read_by_peer_;
};

/** The parsed view of a frame in a buffer (only for frames droce built: they parse). */
inline wire::ParsedFrame parse(const PktBuf& b) {
    wire::ParsedFrame pf;
    (void)wire::parse_frame(b.frame(), pf);
    return pf;
}

struct QpPair {
    rc::Qp* qp[2] = {nullptr, nullptr};
};

/** A registered buffer on one device. */
struct Buffer {
    std::vector<std::uint8_t> bytes;
    mem::Mr* mr = nullptr;
    [[nodiscard]] std::uint64_t addr(std::size_t off = 0) const {
        return reinterpret_cast<std::uintptr_t>(bytes.data()) + off;
    }
};

struct QpOptions {
    rc::Mtu mtu = rc::Mtu::mtu1024;
    std::uint8_t timeout = 10; ///< 4.096 us << 10 ≈ 4.2 ms
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;
    std::uint8_t min_rnr_timer = 1; ///< 0.01 ms
    std::uint8_t max_rd_atomic = 16;
    std::uint32_t sq_depth = 1024;
    std::uint32_t rq_depth = 1024;
    std::uint32_t psn[2] = {0, 0}; ///< initial SQ PSN of each side (the peer's RQ PSN)
    bool resolve_mac = false;      ///< leave the AV's MAC empty so the engine resolves it with ARP
};

class TwoEngines {
  public:
    static sim::FabricConfig fabric_config(std::uint64_t seed) {
        sim::FabricConfig c;
        c.seed = seed;
        c.endpoints = 2;
        c.planes = 1;
        c.pool_buffers = 4096;
        c.buffer_capacity = 4608;
        c.link_slots = 4096;
        return c;
    }

    /** @p ipv6: the devices' GIDs are IPv6 addresses (gid()), so neighbours resolve by ND, not ARP.
     *  @p real_time: the engines and the fabric run on the TSC clock instead of the virtual one
     *  (run_until() then only polls: time moves by itself). @p stream_tx: both ports say another
     *  core reads their transmit buffers (FilterPort), so short frames are streamed into them. */
    explicit TwoEngines(std::uint64_t seed = 1, bool ipv6 = false, bool real_time = false,
                        bool stream_tx = false)
        : ipv6_gids(ipv6), clock(real_time ? Clock::tsc() : Clock::virtual_clock()),
          fabric(&clock, fabric_config(seed)), filter{FilterPort(fabric.port(0, 0), stream_tx),
                                                      FilterPort(fabric.port(1, 0), stream_tx)},
          dev{std::make_unique<Device>("droce0", clock, ports(0)),
              std::make_unique<Device>("droce1", clock, ports(1))} {
        // Real time means threads of their own (engine threads, an application thread) may drive
        // the two devices at once: their calls into the one fabric are serialised.
        if (real_time)
            for (FilterPort& f : filter)
                f.fabric_lock = &fabric_mu;
        for (int i = 0; i < 2; ++i) {
            int err = 0;
            pd[i] = dev[i]->alloc_pd(&err);
            send_cq[i] = dev[i]->create_cq(65536, &err);
            recv_cq[i] = dev[i]->create_cq(65536, &err);
        }
    }

    /** Device @p e's GID: 10.0.0.(e+1), IPv4-mapped, or 2001:db8::(e+1) when ipv6_gids. */
    [[nodiscard]] wire::Ipv6Addr gid(std::uint32_t e) const {
        const auto last = static_cast<std::uint8_t>(e + 1);
        if (!ipv6_gids) return gid_from_ipv4(10, 0, 0, last);
        return {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
    }

    std::vector<PortSpec> ports(std::uint32_t e) {
        return {PortSpec{&filter[e], sim::Fabric::mac(e, 0), gid(e), 4096}};
    }

    /** Creates and connects one RC QP on each device; both end in RTS. */
    QpPair connect(const QpOptions& o = {}) {
        QpPair p;
        for (int i = 0; i < 2; ++i) {
            int err = 0;
            p.qp[i] = dev[i]->create_qp(
                pd[i], send_cq[i], recv_cq[i],
                rc::QpCap{o.sq_depth, o.rq_depth, rc::kMaxSge, rc::kMaxSge, rc::kMaxInlineData},
                false, &err);
            EXPECT_NE(p.qp[i], nullptr) << "create_qp errno " << err;
        }
        for (int i = 0; i < 2; ++i) {
            const int peer = 1 - i;
            RcConnectParams c;
            c.qp_access_flags =
                rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
            c.path_mtu = o.mtu;
            c.dest_qp_num = p.qp[peer]->qpn;
            c.rq_psn = o.psn[peer];
            c.max_dest_rd_atomic = o.max_rd_atomic;
            c.min_rnr_timer = o.min_rnr_timer;
            c.ah_attr.dgid = gid(static_cast<std::uint32_t>(peer));
            if (!o.resolve_mac)
                c.ah_attr.dmac = sim::Fabric::mac(static_cast<std::uint32_t>(peer), 0);
            c.sq_psn = o.psn[i];
            c.timeout = o.timeout;
            c.retry_cnt = o.retry_cnt;
            c.rnr_retry = o.rnr_retry;
            c.max_rd_atomic = o.max_rd_atomic;
            rc::QpState refused = rc::QpState::rts;
            EXPECT_EQ(connect_rc(*dev[i], p.qp[i], c, &refused), 0)
                << "modify_qp to " << rc::to_string(refused);
        }
        return p;
    }

    /** A buffer of @p size bytes on device @p side, filled with a pattern from @p seed, registered
     * with all access. */
    std::unique_ptr<Buffer> buffer(int side, std::size_t size, std::uint32_t seed = 0) {
        auto b = std::make_unique<Buffer>();
        b->bytes.resize(size ? size : 1);
        std::mt19937 rng(seed);
        for (auto& x : b->bytes)
            x = static_cast<std::uint8_t>(seed ? rng() : 0);
        int err = 0;
        b->mr = dev[side]->reg_mr(pd[side], b->bytes.data(), b->bytes.size(),
                                  rc::kAccessLocalWrite | rc::kAccessRemoteWrite |
                                      rc::kAccessRemoteRead | rc::kAccessRemoteAtomic,
                                  &err);
        EXPECT_NE(b->mr, nullptr) << "reg_mr errno " << err;
        return b;
    }

    /**
     * Polls both engines until @p done returns true. When both are idle, virtual time jumps to the
     * next timer deadline or fabric delivery (or 1 us). Gives up after @p max_ns of virtual time.
     * @return whether @p done became true.
     */
    bool run_until(const std::function<bool()>& done, std::uint64_t max_ns = 60'000'000'000ull) {
        const std::uint64_t limit = clock.now_ns() + max_ns;
        while (clock.now_ns() < limit) {
            const std::uint32_t work = dev[0]->poll() + dev[1]->poll();
            collect();
            if (done()) return true;
            if (work == 0) {
                std::uint64_t next = 0;
                for (std::uint64_t d : {dev[0]->next_deadline_ns(), dev[1]->next_deadline_ns(),
                                        fabric.next_event_ns()})
                    if (d && (next == 0 || d < next)) next = d;
                if (next > clock.now_ns())
                    clock.set(next);
                else
                    clock.advance(1000);
            }
        }
        return false;
    }

    /** Moves every CQE of both devices into send_cqes / recv_cqes. */
    void collect() {
        rc::Cqe c[64];
        for (int i = 0; i < 2; ++i) {
            std::uint32_t n;
            while ((n = dev[i]->poll_cq(send_cq[i], c, 64)) > 0)
                send_cqes[i].insert(send_cqes[i].end(), c, c + n);
            while ((n = dev[i]->poll_cq(recv_cq[i], c, 64)) > 0)
                recv_cqes[i].insert(recv_cqes[i].end(), c, c + n);
        }
    }

    int post_send(int side, rc::Qp* qp, const rc::SendWqe& w) {
        std::uint32_t bad = 0;
        return dev[side]->post_send(qp, &w, 1, &bad);
    }
    int post_recv(int side, rc::Qp* qp, const Buffer& b, std::uint64_t wr_id, std::size_t len,
                  std::size_t off = 0) {
        rc::RecvWqe r;
        r.wr_id = wr_id;
        r.num_sge = 1;
        r.sg_list[0] = rc::Sge{b.addr(off), static_cast<std::uint32_t>(len), b.mr->lkey};
        std::uint32_t bad = 0;
        return dev[side]->post_recv(qp, &r, 1, &bad);
    }

    static rc::SendWqe wqe(rc::WrOpcode op, std::uint64_t wr_id, const Buffer& local,
                           std::size_t len, std::size_t local_off = 0) {
        rc::SendWqe w;
        w.wr_id = wr_id;
        w.opcode = op;
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] =
            rc::Sge{local.addr(local_off), static_cast<std::uint32_t>(len), local.mr->lkey};
        return w;
    }

    const bool ipv6_gids;
    Clock clock;
    std::mutex fabric_mu; ///< FilterPort::fabric_lock in real-time mode
    sim::Fabric fabric;
    FilterPort filter[2];
    std::unique_ptr<Device> dev[2];
    mem::Pd* pd[2] = {};
    rc::Cq* send_cq[2] = {};
    rc::Cq* recv_cq[2] = {};
    std::vector<rc::Cqe> send_cqes[2];
    std::vector<rc::Cqe> recv_cqes[2];
};

} // namespace droce::test
