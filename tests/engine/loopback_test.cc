/* SPDX-License-Identifier: BSD-3-Clause */
// One device, two QPs connected to each other through the device's own GID (what the pyverbs tests
// do): every operation arrives intact and no frame reaches the port. And completion events: an
// armed CQ notifies once per arming, for the next CQE, or only for a solicited or error one.
#include <gtest/gtest.h>

#include <cstring>

#include "two_engines.h"

namespace droce::test {
namespace {

using rc::WcOpcode;
using rc::WcStatus;
using rc::WrOpcode;

/** Connects qp[0] and qp[1] of device 0 to each other by device 0's own GID (no MAC in the AV). */
QpPair connect_loopback(TwoEngines& t, rc::Mtu mtu = rc::Mtu::mtu1024) {
    QpPair p;
    for (auto& q : p.qp) {
        int err = 0;
        q = t.dev[0]->create_qp(t.pd[0], t.send_cq[0], t.recv_cq[0],
                                rc::QpCap{256, 256, rc::kMaxSge, rc::kMaxSge, rc::kMaxInlineData},
                                false, &err);
        EXPECT_NE(q, nullptr) << "create_qp errno " << err;
    }
    for (int i = 0; i < 2; ++i) {
        RcConnectParams c;
        c.qp_access_flags =
            rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
        c.path_mtu = mtu;
        c.dest_qp_num = p.qp[1 - i]->qpn;
        c.rq_psn = 100;
        c.max_dest_rd_atomic = 16;
        c.min_rnr_timer = 1;
        c.ah_attr.dgid = t.dev[0]->port(0).gid;
        c.sq_psn = 100;
        c.timeout = 10;
        c.max_rd_atomic = 16;
        rc::QpState refused = rc::QpState::rts;
        EXPECT_EQ(connect_rc(*t.dev[0], p.qp[i], c, &refused), 0)
            << "modify_qp to " << rc::to_string(refused);
    }
    return p;
}

class Loopback : public ::testing::TestWithParam<WrOpcode> {};

TEST_P(Loopback, EveryOpcodeArrivesIntactWithoutTouchingThePort) {
    const WrOpcode op = GetParam();
    TwoEngines t(3);
    QpPair p = connect_loopback(t);
    std::uint64_t wr_id = 1;
    const bool atomic = op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add;
    for (std::size_t size :
         atomic ? std::vector<std::size_t>{8} : std::vector<std::size_t>{0, 1, 1024, 1025, 70000}) {
        SCOPED_TRACE("size " + std::to_string(size));
        auto a = t.buffer(0, size, static_cast<std::uint32_t>(size + 5));
        auto b = t.buffer(0, size, static_cast<std::uint32_t>(size + 9));
        const std::vector<std::uint8_t> a0 = a->bytes, b0 = b->bytes;
        const bool consumes = op == WrOpcode::send || op == WrOpcode::send_with_imm ||
                              op == WrOpcode::rdma_write_with_imm;
        if (consumes) {
            ASSERT_EQ(t.post_recv(0, p.qp[1], *b, wr_id + 500, b->bytes.size()), 0);
        }
        rc::SendWqe w = TwoEngines::wqe(op, wr_id, *a, size);
        w.remote_addr = b->addr();
        w.rkey = b->mr->rkey;
        w.imm_data = 0x1234;
        w.compare_add = 7;
        w.swap = 9;
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
        const std::size_t recv_before = t.recv_cqes[0].size();
        ASSERT_TRUE(t.run_until([&] {
            return t.send_cqes[0].size() == wr_id &&
                   (!consumes || t.recv_cqes[0].size() == recv_before + 1);
        }));
        EXPECT_EQ(t.send_cqes[0].back().status, WcStatus::success);
        EXPECT_EQ(t.send_cqes[0].back().wr_id, wr_id);
        if (consumes) {
            EXPECT_EQ(t.recv_cqes[0].back().status, WcStatus::success);
            EXPECT_EQ(t.recv_cqes[0].back().qp_num, p.qp[1]->qpn);
        }
        // Buffers of size 0 still hold one byte (never touched): compare the first `size` bytes.
        const auto first = [size](const std::vector<std::uint8_t>& v) {
            return std::vector<std::uint8_t>(v.begin(),
                                             v.begin() + static_cast<std::ptrdiff_t>(size));
        };
        if (op == WrOpcode::rdma_read) {
            EXPECT_EQ(first(a->bytes), first(b0)); // pulled b into a
        } else if (op == WrOpcode::atomic_fetch_and_add) {
            std::uint64_t before, after, fetched;
            std::memcpy(&before, b0.data(), 8);
            std::memcpy(&after, b->bytes.data(), 8);
            std::memcpy(&fetched, a->bytes.data(), 8);
            EXPECT_EQ(fetched, before);
            EXPECT_EQ(after, before + 7);
        } else if (op == WrOpcode::atomic_cmp_and_swp) {
            std::uint64_t fetched;
            std::memcpy(&fetched, a->bytes.data(), 8);
            EXPECT_EQ(std::memcmp(&fetched, b0.data(), 8), 0);
            EXPECT_EQ(b->bytes, b0); // compare value 7 did not match the random contents
        } else {
            EXPECT_EQ(first(b->bytes), first(a0));
        }
        ++wr_id;
    }
    EXPECT_EQ(t.fabric.port_stats(0, 0)[sim::PortCounter::tx_frames], 0u)
        << "loopback frames left the device";
    EXPECT_GT(t.dev[0]->total_counters()[Counter::loopback_pkts], 0u);
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Loopback,
                         ::testing::Values(WrOpcode::send, WrOpcode::send_with_imm,
                                           WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm,
                                           WrOpcode::rdma_read, WrOpcode::atomic_cmp_and_swp,
                                           WrOpcode::atomic_fetch_and_add),
                         [](const auto& param_info) {
                             return std::string(rc::to_string(param_info.param));
                         });

TEST(Loopback, AQpConnectedToAnotherDevicesGidStillUsesThePort) {
    TwoEngines t(4);
    QpPair p = t.connect();
    EXPECT_FALSE(p.qp[0]->loopback_peer);
    auto a = t.buffer(0, 64, 1);
    auto b = t.buffer(1, 64, 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *a, 64);
    w.remote_addr = b->addr();
    w.rkey = b->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; }));
    EXPECT_GT(t.fabric.port_stats(0, 0)[sim::PortCounter::tx_frames], 0u);
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::loopback_pkts], 0u);
}

TEST(Loopback, BetweenTwoPortsOfTheDevicePassesTheReceiveFilter) {
    // A QP on port 1 connected to port 2's GID: its frames leave by port 1's queue into the
    // loopback queue and carry port 2's MAC; the answers go the other way. The filter must take
    // each as received by the port that owns its destination.
    Clock clock = Clock::virtual_clock();
    sim::FabricConfig fc = TwoEngines::fabric_config(7);
    fc.planes = 2;
    sim::Fabric fabric(&clock, fc);
    const wire::Ipv6Addr gid[2] = {gid_from_ipv4(10, 0, 0, 1), gid_from_ipv4(10, 0, 1, 1)};
    Device dev("droce0", clock,
               {PortSpec{&fabric.port(0, 0), sim::Fabric::mac(0, 0), gid[0], 4096},
                PortSpec{&fabric.port(0, 1), sim::Fabric::mac(0, 1), gid[1], 4096}});
    int err = 0;
    mem::Pd* pd = dev.alloc_pd(&err);
    rc::Cq* cq = dev.create_cq(1024, &err);
    rc::Qp* qp[2];
    for (int i = 0; i < 2; ++i) {
        qp[i] = dev.create_qp(pd, cq, cq, rc::QpCap{64, 64, 1, 1, 0}, false, &err);
        ASSERT_NE(qp[i], nullptr) << err;
    }
    for (int i = 0; i < 2; ++i) {
        rc::QpAttr a;
        a.qp_state = rc::QpState::init;
        a.port_num = static_cast<std::uint8_t>(i + 1);
        a.qp_access_flags = rc::kAccessRemoteWrite;
        ASSERT_EQ(dev.modify_qp(qp[i], a,
                                rc::kQpState | rc::kQpPkeyIndex | rc::kQpPort | rc::kQpAccessFlags),
                  0);
        a.qp_state = rc::QpState::rtr;
        a.path_mtu = rc::Mtu::mtu1024;
        a.dest_qp_num = qp[1 - i]->qpn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        a.ah_attr.dgid = gid[1 - i];
        a.ah_attr.port_num = static_cast<std::uint8_t>(i + 1);
        ASSERT_EQ(dev.modify_qp(qp[i], a,
                                rc::kQpState | rc::kQpAv | rc::kQpPathMtu | rc::kQpDestQpn |
                                    rc::kQpRqPsn | rc::kQpMaxDestRdAtomic | rc::kQpMinRnrTimer),
                  0);
        a.qp_state = rc::QpState::rts;
        a.timeout = 10;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        ASSERT_EQ(dev.modify_qp(qp[i], a,
                                rc::kQpState | rc::kQpSqPsn | rc::kQpTimeout | rc::kQpRetryCnt |
                                    rc::kQpRnrRetry | rc::kQpMaxQpRdAtomic),
                  0);
        ASSERT_TRUE(qp[i]->loopback_peer);
    }
    std::vector<std::uint8_t> src(5000), dst(5000, 0);
    for (std::size_t i = 0; i < src.size(); ++i)
        src[i] = static_cast<std::uint8_t>(i * 13 + 1);
    mem::Mr* smr = dev.reg_mr(pd, src.data(), src.size(), 0, &err);
    mem::Mr* dmr = dev.reg_mr(pd, dst.data(), dst.size(),
                              rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
    ASSERT_NE(smr, nullptr);
    ASSERT_NE(dmr, nullptr);
    rc::SendWqe w;
    w.wr_id = 1;
    w.opcode = WrOpcode::rdma_write;
    w.send_flags = rc::kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(src.data()), 5000, smr->lkey};
    w.remote_addr = reinterpret_cast<std::uintptr_t>(dst.data());
    w.rkey = dmr->rkey;
    std::uint32_t bad = 0;
    ASSERT_EQ(dev.post_send(qp[0], &w, 1, &bad), 0);
    rc::Cqe c{};
    std::uint32_t got = 0;
    for (int i = 0; i < 10000 && got == 0; ++i) {
        dev.poll();
        clock.advance(1000);
        got = dev.poll_cq(cq, &c, 1);
    }
    ASSERT_EQ(got, 1u);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(dst, src);
    EXPECT_EQ(dev.counters()[Counter::rx_dropped_dst_mac], 0u);
    EXPECT_EQ(dev.counters()[Counter::rx_dropped_dst_ip], 0u);
    EXPECT_EQ(dev.total_counters()[Counter::retransmitted_pkts], 0u);
    EXPECT_GT(dev.total_counters()[Counter::loopback_pkts], 0u);
    EXPECT_EQ(dev.destroy_qp(qp[0]), 0);
    EXPECT_EQ(dev.destroy_qp(qp[1]), 0);
    EXPECT_EQ(dev.dereg_mr(smr), 0);
    EXPECT_EQ(dev.dereg_mr(dmr), 0);
}

struct EventLog {
    int count = 0;
    rc::Cq* last = nullptr;
    static void notify(void* self, rc::Cq& cq) noexcept {
        auto* log = static_cast<EventLog*>(self);
        ++log->count;
        log->last = &cq;
    }
};

TEST(CompletionEvents, ArmedCqNotifiesOncePerArming) {
    TwoEngines t(5);
    QpPair p = t.connect();
    EventLog log;
    t.send_cq[0]->notify = &EventLog::notify;
    t.send_cq[0]->notify_ctx = &log;
    auto a = t.buffer(0, 64, 1);
    auto b = t.buffer(1, 64, 0);
    auto write = [&](std::uint64_t id) {
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, id, *a, 64);
        w.remote_addr = b->addr();
        w.rkey = b->mr->rkey;
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == id; }));
    };
    write(1); // not armed: no event
    EXPECT_EQ(log.count, 0);
    t.send_cq[0]->armed.store(rc::Cq::kArmNext);
    write(2);
    EXPECT_EQ(log.count, 1);
    EXPECT_EQ(log.last, t.send_cq[0]);
    EXPECT_EQ(t.send_cq[0]->armed.load(), rc::Cq::kDisarmed);
    write(3); // one shot: disarmed by the event
    EXPECT_EQ(log.count, 1);
}

TEST(CompletionEvents, SolicitedArmingWaitsForASolicitedSendOrAnError) {
    TwoEngines t(6);
    QpPair p = t.connect();
    EventLog log;
    t.recv_cq[1]->notify = &EventLog::notify;
    t.recv_cq[1]->notify_ctx = &log;
    auto a = t.buffer(0, 64, 1);
    auto b = t.buffer(1, 4096, 0);
    t.recv_cq[1]->armed.store(rc::Cq::kArmSolicited);
    auto send = [&](std::uint64_t id, bool solicited) {
        ASSERT_EQ(t.post_recv(1, p.qp[1], *b, 100 + id, 64), 0);
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::send, id, *a, 64);
        if (solicited) w.send_flags |= rc::kSendSolicited;
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
        ASSERT_TRUE(t.run_until([&] { return t.recv_cqes[1].size() == id; }));
    };
    send(1, false);
    EXPECT_EQ(log.count, 0) << "an unsolicited SEND must not raise a solicited-only event";
    send(2, true);
    EXPECT_EQ(log.count, 1);
    // Armed for solicited again; an error completion (too small a receive buffer: local length
    // error on the responder) raises it too.
    t.recv_cq[1]->armed.store(rc::Cq::kArmSolicited);
    ASSERT_EQ(t.post_recv(1, p.qp[1], *b, 200, 8), 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::send, 3, *a, 64);
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return t.recv_cqes[1].size() == 3; }));
    EXPECT_NE(t.recv_cqes[1].back().status, WcStatus::success);
    EXPECT_EQ(log.count, 2);
}

} // namespace
} // namespace droce::test
