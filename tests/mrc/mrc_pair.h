/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Two droce devices with four ports each, joined by the sim fabric's four planes on one virtual
 * clock, and an MRC QP pair between them. Links get a rate so that the links, not the CPU, bound
 * what goes through; goodput is measured in virtual time.
 */
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../engine/two_engines.h"
#include "engine/connect.h"
#include "engine/device.h"
#include "mrc/mrc.h"
#include "sim/fabric.h"
#include "wire/packet.h"

namespace droce::test {

/** The filter port of the RC two-engine tests: on_tx sees (and may drop) every frame sent. */
using TapPort = FilterPort;

inline wire::ParsedFrame parse_frame_of(const PktBuf& b) {
    return parse(b);
}

struct MrcOptions {
    std::uint32_t planes = 4;
    double gbps = 10.0;             ///< per plane, each direction
    std::uint64_t delay_ns = 2'000; ///< per link
    mrc::MrcAttr attr = default_attr();
    std::uint32_t sq_depth = 1024;
    std::uint32_t rq_depth = 1024;
    /** Engines and fabric on the TSC clock (time moves by itself; the CPU is the bottleneck). */
    bool real_time = false;

    static mrc::MrcAttr default_attr() {
        mrc::MrcAttr a;
        a.max_inflight = 256; // about a millisecond of queue over four 10 Gb/s planes
        a.timeout = 10;       // 1.024 us << 10 ≈ 1 ms
        return a;
    }
};

class MrcPair {
  public:
    static sim::FabricConfig fabric_config(std::uint64_t seed, const MrcOptions& o) {
        sim::FabricConfig c;
        c.seed = seed;
        c.endpoints = 2;
        c.planes = o.planes;
        c.pool_buffers = 16384;
        c.buffer_capacity = 4608;
        c.link_slots = 8192;
        c.link.bandwidth_gbps = o.gbps;
        c.link.delay_ns = o.delay_ns;
        return c;
    }

    explicit MrcPair(std::uint64_t seed = 1, const MrcOptions& o = {})
        : opts(o), clock(o.real_time ? Clock::tsc() : Clock::virtual_clock()),
          fabric(&clock, fabric_config(seed, o)) {
        for (std::uint32_t e = 0; e < 2; ++e)
            for (std::uint32_t p = 0; p < o.planes; ++p)
                taps[e].push_back(std::make_unique<TapPort>(fabric.port(e, p)));
        for (std::uint32_t e = 0; e < 2; ++e) {
            std::vector<PortSpec> ports;
            for (std::uint32_t p = 0; p < o.planes; ++p)
                ports.push_back(
                    PortSpec{taps[e][p].get(), sim::Fabric::mac(e, p), gid(e, p), 4096});
            dev[e] = std::make_unique<Device>("droce" + std::to_string(e), clock, ports);
            int err = 0;
            pd[e] = dev[e]->alloc_pd(&err);
            send_cq[e] = dev[e]->create_cq(65536, &err);
            recv_cq[e] = dev[e]->create_cq(65536, &err);
        }
    }

    /** Device @p e's GID on plane @p p: 10.<p>.0.<e+1> (one subnet per plane). */
    static wire::Ipv6Addr gid(std::uint32_t e, std::uint32_t p) {
        return gid_from_ipv4(10, static_cast<std::uint8_t>(p), 0, static_cast<std::uint8_t>(e + 1));
    }

    /** Creates an MRC QP on each device with @p attr and connects them (RTS both). */
    /** Creates and connects the MRC QP pair. Bit p of @p unresolved: side 0 has the peer's plane p
     *  at an address nobody on the fabric owns (10.p.0.99) with no MAC, so ARP asks in vain. */
    void connect(std::uint8_t unresolved = 0) {
        for (int i = 0; i < 2; ++i) {
            int err = 0;
            qp[i] = dev[i]->create_qp(pd[i], send_cq[i], recv_cq[i],
                                      rc::QpCap{opts.sq_depth, opts.rq_depth, rc::kMaxSge,
                                                rc::kMaxSge, rc::kMaxInlineData},
                                      false, &err, mrc::kMrcTransport);
            ASSERT_NE(qp[i], nullptr) << "create_qp errno " << err;
            Device::ControlSection cs(*dev[i]);
            ASSERT_EQ(mrc::set_attr(*qp[i], opts.attr), 0);
        }
        for (int i = 0; i < 2; ++i) {
            const auto peer = static_cast<std::uint32_t>(1 - i);
            std::vector<rc::RemotePlane> planes;
            for (std::uint32_t p = 0; p < opts.planes; ++p)
                planes.push_back(
                    i == 0 && (unresolved & (1u << p))
                        ? rc::RemotePlane{gid_from_ipv4(10, static_cast<std::uint8_t>(p), 0, 99),
                                          wire::MacAddr{}}
                        : rc::RemotePlane{gid(peer, p), sim::Fabric::mac(peer, p)});
            ASSERT_EQ(dev[i]->set_remote_planes(qp[i], planes), 0);
            RcConnectParams c;
            c.qp_access_flags = rc::kAccessRemoteWrite;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = qp[peer]->qpn;
            c.rq_psn = 100;
            c.sq_psn = 100;
            c.ah_attr.dgid = gid(peer, 0);
            c.ah_attr.dmac = sim::Fabric::mac(peer, 0);
            rc::QpState refused = rc::QpState::rts;
            ASSERT_EQ(connect_rc(*dev[i], qp[i], c, &refused), 0)
                << "modify_qp to " << rc::to_string(refused);
        }
    }

    /** Creates and connects an RC QP pair on plane 0 (local ACK timeout code @p timeout). */
    std::array<rc::Qp*, 2> connect_rc_pair(std::uint8_t timeout = 14) {
        std::array<rc::Qp*, 2> q{};
        for (int i = 0; i < 2; ++i) {
            int err = 0;
            q[i] = dev[i]->create_qp(pd[i], send_cq[i], recv_cq[i], rc::QpCap{1024, 1024, 4, 4, 64},
                                     false, &err);
            EXPECT_NE(q[i], nullptr) << "create_qp errno " << err;
        }
        for (int i = 0; i < 2; ++i) {
            const auto peer = static_cast<std::uint32_t>(1 - i);
            RcConnectParams c;
            c.qp_access_flags = rc::kAccessRemoteWrite;
            c.path_mtu = rc::Mtu::mtu4096;
            c.dest_qp_num = q[peer]->qpn;
            c.ah_attr.dgid = gid(peer, 0);
            c.ah_attr.dmac = sim::Fabric::mac(peer, 0);
            c.timeout = timeout;
            EXPECT_EQ(connect_rc(*dev[i], q[i], c), 0);
        }
        return q;
    }

    using Buffer = test::Buffer;
    std::unique_ptr<Buffer> buffer(int side, std::size_t size, std::uint32_t seed) {
        auto b = std::make_unique<Buffer>();
        b->bytes.resize(size);
        std::mt19937 rng(seed);
        for (auto& x : b->bytes)
            x = static_cast<std::uint8_t>(seed ? rng() : 0);
        int err = 0;
        b->mr = dev[side]->reg_mr(pd[side], b->bytes.data(), b->bytes.size(),
                                  rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
        EXPECT_NE(b->mr, nullptr);
        return b;
    }

    /** Posts a signaled WRITE (with immediate when @p imm) of @p len bytes from src+off to
     *  dst+off. */
    int write(int side, const Buffer& src, const Buffer& dst, std::size_t off, std::size_t len,
              std::uint64_t wr_id, bool imm = false, std::uint32_t imm_data = 0) {
        rc::SendWqe w;
        w.wr_id = wr_id;
        w.opcode = imm ? rc::WrOpcode::rdma_write_with_imm : rc::WrOpcode::rdma_write;
        w.send_flags = rc::kSendSignaled;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{src.addr(off), static_cast<std::uint32_t>(len), src.mr->lkey};
        w.length = static_cast<std::uint32_t>(len);
        w.remote_addr = dst.addr(off);
        w.rkey = dst.mr->rkey;
        w.imm_data = imm_data;
        std::uint32_t bad = 0;
        return dev[side]->post_send(qp[side], &w, 1, &bad);
    }
    int post_recv(int side, std::uint64_t wr_id) {
        rc::RecvWqe r;
        r.wr_id = wr_id;
        std::uint32_t bad = 0;
        return dev[side]->post_recv(qp[side], &r, 1, &bad);
    }

    /** One step: both engines poll; when both are idle, virtual time jumps to the next event. */
    void step() {
        const std::uint32_t work = dev[0]->poll() + dev[1]->poll();
        collect();
        if (work != 0) return;
        std::uint64_t next = 0;
        for (std::uint64_t d :
             {dev[0]->next_deadline_ns(), dev[1]->next_deadline_ns(), fabric.next_event_ns()})
            if (d && (next == 0 || d < next)) next = d;
        if (next > clock.now_ns())
            clock.set(next);
        else
            clock.advance(1000);
    }
    bool run_until(const std::function<bool()>& done, std::uint64_t max_ns = 10'000'000'000ull) {
        const std::uint64_t limit = clock.now_ns() + max_ns;
        while (clock.now_ns() < limit) {
            step();
            if (done()) return true;
        }
        return false;
    }
    void run_for(std::uint64_t ns) {
        const std::uint64_t until = clock.now_ns() + ns;
        while (clock.now_ns() < until)
            step();
    }
    void collect() {
        rc::Cqe c[64];
        for (int i = 0; i < 2; ++i) {
            std::uint32_t n;
            while ((n = dev[i]->poll_cq(send_cq[i], c, 64)) > 0)
                for (std::uint32_t k = 0; k < n; ++k) {
                    send_cqes[i].push_back(c[k]);
                    send_cqe_ns[i].push_back(clock.now_ns());
                }
            while ((n = dev[i]->poll_cq(recv_cq[i], c, 64)) > 0)
                recv_cqes[i].insert(recv_cqes[i].end(), c, c + n);
        }
    }
    /** Send CQEs of @p side that are not success. */
    [[nodiscard]] std::size_t send_errors(int side) const {
        std::size_t n = 0;
        for (const rc::Cqe& c : send_cqes[side])
            n += c.status != rc::WcStatus::success;
        return n;
    }
    /** Every non-zero counter of both devices, for a failure message. */
    [[nodiscard]] std::string dump() const {
        std::string out;
        for (int i = 0; i < 2; ++i)
            dev[i]->counter_registry().for_each(
                [&](std::string_view scope, std::string_view name, std::uint64_t v) {
                    if (v == 0) return;
                    out += "dev" + std::to_string(i) + " " + std::string(scope) + " " +
                           std::string(name) + "=" + std::to_string(v) + "\n";
                });
        return out;
    }
    [[nodiscard]] std::uint64_t mrc_counter(int side, mrc::MrcCounter c) const {
        return (*mrc::counters(*qp[side]))[c];
    }
    [[nodiscard]] std::uint64_t plane_tx_bytes(int side, unsigned plane) const {
        return mrc::plane_stats(*qp[side], plane)->tx_bytes.load(std::memory_order_relaxed);
    }
    /** Sets the links of plane @p plane in direction @p from -> 1 - @p from. */
    void set_plane_links(std::uint32_t plane, const std::function<void(sim::LinkConfig&)>& change,
                         bool both_directions = true) {
        for (std::uint32_t from = 0; from < 2; ++from) {
            if (!both_directions && from != 0) continue;
            sim::LinkConfig c = fabric.link_config(from, 1 - from, plane);
            change(c);
            fabric.set_link_config(from, 1 - from, plane, c);
        }
    }

    MrcOptions opts;
    Clock clock;
    sim::Fabric fabric;
    std::vector<std::unique_ptr<TapPort>> taps[2];
    std::unique_ptr<Device> dev[2];
    mem::Pd* pd[2] = {};
    rc::Cq* send_cq[2] = {};
    rc::Cq* recv_cq[2] = {};
    rc::Qp* qp[2] = {};
    std::vector<rc::Cqe> send_cqes[2];
    std::vector<std::uint64_t> send_cqe_ns[2];
    std::vector<rc::Cqe> recv_cqes[2];
};

} // namespace droce::test
