/* SPDX-License-Identifier: BSD-3-Clause */
// Two engines over the sim fabric: every operation at sizes 0, 1, PMTU-1, PMTU, PMTU+1 and 1 MiB,
// for PMTU 256, 1024 and 4096, data verified byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "two_engines.h"

namespace droce::test {
namespace {

using rc::WcOpcode;
using rc::WcStatus;
using rc::WrOpcode;

struct Case {
    rc::Mtu mtu;
    WrOpcode op;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return "mtu" + std::to_string(rc::mtu_bytes(info.param.mtu)) + "_" +
           std::string(rc::to_string(info.param.op));
}

class Transfer : public ::testing::TestWithParam<Case> {};

TEST_P(Transfer, EverySizeArrivesIntact) {
    const auto [mtu, op] = GetParam();
    const std::uint32_t pmtu = rc::mtu_bytes(mtu);
    TwoEngines t(7);
    QpOptions o;
    o.mtu = mtu;
    QpPair p = t.connect(o);
    const std::size_t kMiB = 1 << 20;
    std::uint64_t wr_id = 1;
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{pmtu - 1},
                             std::size_t{pmtu}, std::size_t{pmtu + 1}, kMiB}) {
        SCOPED_TRACE("size " + std::to_string(size));
        auto src = t.buffer(0, size, static_cast<std::uint32_t>(size + 11));
        auto dst = t.buffer(1, size, 0);
        auto& remote =
            (op == WrOpcode::rdma_read) ? *src : *dst; // READ pulls from side 1 into side 0
        std::unique_ptr<Buffer> read_src;
        if (op == WrOpcode::rdma_read) {
            // Side 0 reads side 1's buffer: fill side 1's, zero side 0's.
            read_src = t.buffer(1, size, static_cast<std::uint32_t>(size + 29));
            std::fill(src->bytes.begin(), src->bytes.end(), 0);
        }
        const bool is_send = op == WrOpcode::send || op == WrOpcode::send_with_imm;
        const bool consumes_rwqe = is_send || op == WrOpcode::rdma_write_with_imm;
        if (consumes_rwqe) {
            ASSERT_EQ(t.post_recv(1, p.qp[1], *dst, wr_id + 1000, dst->bytes.size()), 0);
        }

        rc::SendWqe w = TwoEngines::wqe(op, wr_id, *src, size);
        if (op == WrOpcode::rdma_read) {
            w.remote_addr = read_src->addr();
            w.rkey = read_src->mr->rkey;
        } else {
            w.remote_addr = remote.addr();
            w.rkey = remote.mr->rkey;
        }
        w.imm_data = 0xabcd0000u + static_cast<std::uint32_t>(size);
        const std::size_t sends_before = t.send_cqes[0].size();
        const std::size_t recvs_before = t.recv_cqes[1].size();
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
        ASSERT_TRUE(t.run_until([&] {
            return t.send_cqes[0].size() > sends_before &&
                   (!consumes_rwqe || t.recv_cqes[1].size() > recvs_before);
        }));
        const rc::Cqe& sc = t.send_cqes[0].back();
        EXPECT_EQ(sc.status, WcStatus::success) << rc::to_string(sc.status);
        EXPECT_EQ(sc.wr_id, wr_id);
        if (op == WrOpcode::rdma_read) {
            EXPECT_EQ(sc.opcode, WcOpcode::rdma_read);
            EXPECT_EQ(sc.byte_len, size);
            EXPECT_EQ(0, std::memcmp(src->bytes.data(), read_src->bytes.data(), size));
        } else {
            EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), size));
        }
        if (consumes_rwqe) {
            const rc::Cqe& rcqe = t.recv_cqes[1].back();
            EXPECT_EQ(rcqe.status, WcStatus::success);
            EXPECT_EQ(rcqe.wr_id, wr_id + 1000);
            EXPECT_EQ(rcqe.byte_len, size);
            EXPECT_EQ(rcqe.qp_num, p.qp[1]->qpn);
            EXPECT_EQ(rcqe.opcode, is_send ? WcOpcode::recv : WcOpcode::recv_rdma_with_imm);
            const bool with_imm =
                op == WrOpcode::send_with_imm || op == WrOpcode::rdma_write_with_imm;
            EXPECT_EQ((rcqe.wc_flags & rc::kWcWithImm) != 0, with_imm);
            if (with_imm) {
                EXPECT_EQ(rcqe.imm_data, w.imm_data);
            }
        }
        ++wr_id;
    }
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Transfer, ::testing::ValuesIn([] {
                             std::vector<Case> v;
                             for (rc::Mtu m : {rc::Mtu::mtu256, rc::Mtu::mtu1024, rc::Mtu::mtu4096})
                                 for (WrOpcode op :
                                      {WrOpcode::send, WrOpcode::send_with_imm,
                                       WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm,
                                       WrOpcode::rdma_read})
                                     v.push_back({m, op});
                             return v;
                         }()),
                         case_name);

TEST(TransferAtomics, CompareSwapAndFetchAddReturnOldValues) {
    TwoEngines t(3);
    QpPair p = t.connect();
    auto target = t.buffer(1, 64, 0);
    auto result = t.buffer(0, 64, 0);
    std::uint64_t initial = 0x1122334455667788ull;
    std::memcpy(target->bytes.data() + 8, &initial, 8);

    rc::SendWqe fa = TwoEngines::wqe(WrOpcode::atomic_fetch_and_add, 1, *result, 8, 0);
    fa.remote_addr = target->addr(8);
    fa.rkey = target->mr->rkey;
    fa.compare_add = 5;
    ASSERT_EQ(t.post_send(0, p.qp[0], fa), 0);
    rc::SendWqe cas = TwoEngines::wqe(WrOpcode::atomic_cmp_and_swp, 2, *result, 8, 8);
    cas.remote_addr = target->addr(8);
    cas.rkey = target->mr->rkey;
    cas.compare_add = initial + 5;
    cas.swap = 42;
    ASSERT_EQ(t.post_send(0, p.qp[0], cas), 0);
    rc::SendWqe cas_miss = cas;
    cas_miss.wr_id = 3;
    cas_miss.sg_list[0].addr = result->addr(16);
    cas_miss.compare_add = 7; // does not match 42: no swap
    cas_miss.swap = 99;
    ASSERT_EQ(t.post_send(0, p.qp[0], cas_miss), 0);
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 3; }));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(t.send_cqes[0][i].status, WcStatus::success);
        EXPECT_EQ(t.send_cqes[0][i].wr_id, static_cast<std::uint64_t>(i + 1));
    }
    EXPECT_EQ(t.send_cqes[0][0].opcode, WcOpcode::fetch_add);
    EXPECT_EQ(t.send_cqes[0][1].opcode, WcOpcode::comp_swap);
    std::uint64_t r[3];
    std::memcpy(r, result->bytes.data(), 24);
    EXPECT_EQ(r[0], initial);
    EXPECT_EQ(r[1], initial + 5);
    EXPECT_EQ(r[2], 42u);
    std::uint64_t final_value;
    std::memcpy(&final_value, target->bytes.data() + 8, 8);
    EXPECT_EQ(final_value, 42u);
}

TEST(TransferSgl, SixteenSgesGatherAndScatter) {
    TwoEngines t(5);
    QpPair p = t.connect();
    auto src = t.buffer(0, 16 * 300, 77);
    auto dst = t.buffer(1, 16 * 300, 0);
    rc::RecvWqe r;
    r.wr_id = 9;
    r.num_sge = rc::kMaxSge;
    for (std::uint32_t i = 0; i < rc::kMaxSge; ++i) // scatter in reverse order of the gather
        r.sg_list[i] = rc::Sge{dst->addr((rc::kMaxSge - 1 - i) * 300), 300, dst->mr->lkey};
    std::uint32_t bad = 0;
    ASSERT_EQ(t.dev[1]->post_recv(p.qp[1], &r, 1, &bad), 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::send, 1, *src, 0);
    w.num_sge = rc::kMaxSge;
    for (std::uint32_t i = 0; i < rc::kMaxSge; ++i)
        w.sg_list[i] = rc::Sge{src->addr(i * 300), 300, src->mr->lkey};
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(
        t.run_until([&] { return t.recv_cqes[1].size() == 1 && t.send_cqes[0].size() == 1; }));
    EXPECT_EQ(t.recv_cqes[1][0].byte_len, 16u * 300);
    for (std::uint32_t i = 0; i < rc::kMaxSge; ++i)
        EXPECT_EQ(0, std::memcmp(dst->bytes.data() + (rc::kMaxSge - 1 - i) * 300,
                                 src->bytes.data() + i * 300, 300))
            << "SGE " << i;
}

TEST(TransferSgl, SqSlotsReusedWithEveryShapeKeepTheirOwnSges) {
    // An SQ slot holds one SGE itself and the rest in its SqWqeExt: with 4 slots, 24 WQEs of
    // changing shape (1, 16 and 3 SGEs, inline data, no data, a READ scattered into 5 SGEs) go
    // through every slot, each after a WQE of another shape, and every byte must land as posted.
    TwoEngines t(11);
    QpOptions o;
    o.sq_depth = 4;
    QpPair p = t.connect(o);
    auto src = t.buffer(0, 8192, 0);
    auto dst = t.buffer(1, 8192, 0);
    auto back = t.buffer(0, 8192, 0);
    for (std::uint32_t k = 0; k < 24; ++k) {
        for (std::size_t i = 0; i < src->bytes.size(); ++i)
            src->bytes[i] = static_cast<std::uint8_t>(i * 7 + k * 13 + 1);
        std::fill(dst->bytes.begin(), dst->bytes.end(), 0);
        std::fill(back->bytes.begin(), back->bytes.end(), 0);
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 100 + k, *src, 0);
        w.remote_addr = dst->addr();
        w.rkey = dst->mr->rkey;
        std::uint32_t expect_len = 0;
        const std::uint32_t shape = k % 6;
        if (shape == 0) { // one SGE
            w.sg_list[0] = rc::Sge{src->addr(5), 1000, src->mr->lkey};
            expect_len = 1000;
        } else if (shape == 1 || shape == 3) { // 16 SGEs, 3 SGEs, from scattered offsets
            w.num_sge = shape == 1 ? rc::kMaxSge : 3;
            for (std::uint32_t i = 0; i < w.num_sge; ++i)
                w.sg_list[i] = rc::Sge{src->addr(4000 - i * 200), 150, src->mr->lkey};
            expect_len = w.num_sge * 150;
        } else if (shape == 2) { // inline
            w.send_flags |= rc::kSendInline;
            w.num_sge = 0;
            w.length = rc::kMaxInlineData;
            for (std::uint32_t i = 0; i < w.length; ++i)
                w.inline_data[i] = static_cast<std::uint8_t>(255 - i - k);
            expect_len = w.length;
        } else if (shape == 4) { // no data
            w.num_sge = 0;
        } else { // READ of 5 x 100 bytes of dst into 5 reversed SGEs of back
            w.opcode = WrOpcode::rdma_read;
            for (std::size_t i = 0; i < 500; ++i)
                dst->bytes[i] = static_cast<std::uint8_t>(i + k);
            w.num_sge = 5;
            for (std::uint32_t i = 0; i < 5; ++i)
                w.sg_list[i] = rc::Sge{back->addr((4 - i) * 100), 100, back->mr->lkey};
            expect_len = 500;
        }
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0) << "WQE " << k;
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == k + 1; })) << "WQE " << k;
        ASSERT_EQ(t.send_cqes[0][k].status, WcStatus::success) << "WQE " << k;
        EXPECT_EQ(t.send_cqes[0][k].wr_id, 100u + k);
        if (shape == 5) {
            for (std::uint32_t i = 0; i < 5; ++i)
                EXPECT_EQ(0, std::memcmp(back->bytes.data() + (4 - i) * 100,
                                         dst->bytes.data() + i * 100, 100))
                    << "WQE " << k << " SGE " << i;
            EXPECT_EQ(t.send_cqes[0][k].byte_len, expect_len);
            continue;
        }
        std::vector<std::uint8_t> want;
        if (shape == 0) want.assign(src->bytes.begin() + 5, src->bytes.begin() + 1005);
        if (shape == 1 || shape == 3)
            for (std::uint32_t i = 0; i < w.num_sge; ++i)
                want.insert(want.end(), src->bytes.begin() + 4000 - i * 200,
                            src->bytes.begin() + 4000 - i * 200 + 150);
        if (shape == 2) want.assign(w.inline_data, w.inline_data + w.length);
        ASSERT_EQ(want.size(), expect_len);
        EXPECT_EQ(0, std::memcmp(dst->bytes.data(), want.data(), want.size())) << "WQE " << k;
        EXPECT_EQ(dst->bytes[expect_len], 0) << "WQE " << k << " wrote past its length";
    }
}

TEST(TransferInline, InlineSendNeedsNoMr) {
    TwoEngines t(9);
    QpPair p = t.connect();
    auto dst = t.buffer(1, 256, 0);
    ASSERT_EQ(t.post_recv(1, p.qp[1], *dst, 5, 256), 0);
    rc::SendWqe w;
    w.wr_id = 1;
    w.opcode = WrOpcode::send;
    w.send_flags = rc::kSendSignaled | rc::kSendInline;
    w.length = 100;
    for (std::uint32_t i = 0; i < 100; ++i)
        w.inline_data[i] = static_cast<std::uint8_t>(i * 3);
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return t.recv_cqes[1].size() == 1; }));
    EXPECT_EQ(t.recv_cqes[1][0].byte_len, 100u);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), w.inline_data, 100));
}

} // namespace
} // namespace droce::test

namespace droce::test {
namespace {

TEST(TransferNeighbours, ArpResolvesThePeerMacBeforeTheFirstPacket) {
    TwoEngines t(21);
    QpOptions o;
    o.resolve_mac = true;
    QpPair p = t.connect(o);
    EXPECT_FALSE(p.qp[0]->path_resolved);
    auto src = t.buffer(0, 3000, 4);
    auto dst = t.buffer(1, 3000, 0);
    rc::SendWqe w = TwoEngines::wqe(
        getenv("RO") ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write, 1, *src, 3000);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 3000));
    EXPECT_TRUE(p.qp[0]->path_resolved);
    EXPECT_EQ(p.qp[0]->paths[0].hdr.dst_mac, sim::Fabric::mac(1, 0));
    // Each side asked once (ARP request) and answered once (ARP reply).
    EXPECT_EQ(t.dev[0]->counters()[Counter::neigh_tx], 2u);
    EXPECT_EQ(t.dev[1]->counters()[Counter::neigh_tx], 2u);
    EXPECT_GT(p.qp[0]->counters[Counter::tx_wait_neigh], 0u);
    // The broadcast ARP request passed the receive filter; nothing was dropped by it.
    for (auto& d : t.dev)
        EXPECT_EQ(d->counters()[Counter::rx_dropped_dst_mac], 0u);
}

// Neighbour resolution runs at control rate (every 256th engine pass), but a QP that waits for a
// MAC must not: its ARP request leaves on the next pass and the reply resolves its path on the pass
// after it arrives. (An engine that naps between passes took 100s of ms to get there: against a
// DPDK af_packet peer, the responder's ACKs waited for ARP until the requester's ACK timeout, 2000
// of 2500 packets retransmitted; uring-interop-afp.)
TEST(TransferNeighbours, ArpResolvesOnTheNextPassesNotAtControlRate) {
    TwoEngines t(22);
    QpOptions o;
    o.resolve_mac = true;
    QpPair p = t.connect(o);
    ASSERT_FALSE(p.qp[0]->path_resolved);
    ASSERT_FALSE(p.qp[1]->path_resolved);
    unsigned passes = 0;
    while (passes < 1000 && !(p.qp[0]->path_resolved && p.qp[1]->path_resolved)) {
        t.dev[0]->poll();
        t.dev[1]->poll();
        ++passes;
    }
    EXPECT_TRUE(p.qp[0]->path_resolved);
    EXPECT_TRUE(p.qp[1]->path_resolved);
    EXPECT_LE(passes, 8u) << "passes until both paths resolved";
    EXPECT_EQ(t.dev[0]->counters()[Counter::neigh_tx], 2u);
    EXPECT_EQ(t.dev[1]->counters()[Counter::neigh_tx], 2u);
}

// A peer nobody answers ARP for: the ACK timer runs while nothing can leave, and the QP fails
// after its retries with RETRY_EXC_ERR, as a NIC whose packets go into a dead neighbour does (rxe:
// its packets wait in the kernel's neighbour queue while its retry timer runs). Before 2026-12-06
// the WRITE waited for ever, no completion and no error.
TEST(TransferNeighbours, APeerThatNeverAnswersArpFailsTheQpAfterItsRetries) {
    TwoEngines t(25);
    sim::LinkConfig dead;
    dead.up = false;
    t.fabric.set_link_config(1, 0, 0, dead); // side 1's ARP replies never arrive
    QpOptions o;
    o.resolve_mac = true;
    QpPair p = t.connect(o); // timeout 10 (4.2 ms), retry_cnt 7
    auto src = t.buffer(0, 3000, 4);
    auto dst = t.buffer(1, 3000, 0);
    rc::SendWqe w = TwoEngines::wqe(
        getenv("RO") ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write, 1, *src, 3000);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::retry_exc_err);
    EXPECT_EQ(p.qp[0]->state, rc::QpState::err);
    EXPECT_FALSE(p.qp[0]->path_resolved);
    EXPECT_EQ(p.qp[0]->counters[Counter::local_ack_timeout_err], 8u); // 1 + retry_cnt 7
}

TEST(TransferNeighbours, NeighborDiscoveryResolvesThePeerMacOverIpv6) {
    // The Neighbor Solicitation goes to the peer's solicited-node multicast MAC (33:33:ff:…): the
    // receive filter must let it through to the neighbour responder, and the NA (unicast) back.
    TwoEngines t(24, true);
    QpOptions o;
    o.resolve_mac = true;
    QpPair p = t.connect(o);
    EXPECT_TRUE(p.qp[0]->paths[0].hdr.ipv6);
    auto src = t.buffer(0, 3000, 4);
    auto dst = t.buffer(1, 3000, 0);
    rc::SendWqe w = TwoEngines::wqe(
        getenv("RO") ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write, 1, *src, 3000);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 3000));
    EXPECT_EQ(p.qp[0]->paths[0].hdr.dst_mac, sim::Fabric::mac(1, 0));
    // Each side solicited once and advertised once.
    EXPECT_EQ(t.dev[0]->counters()[Counter::neigh_tx], 2u);
    EXPECT_EQ(t.dev[1]->counters()[Counter::neigh_tx], 2u);
    for (auto& d : t.dev) {
        EXPECT_EQ(d->counters()[Counter::rx_dropped_dst_mac], 0u);
        EXPECT_EQ(d->counters()[Counter::rx_dropped_dst_ip], 0u);
    }
}

TEST(TransferNeighbours, StaticNeighbourNeedsNoArp) {
    TwoEngines t(22);
    ASSERT_TRUE(t.dev[0]->add_static_neighbor(gid_from_ipv4(10, 0, 0, 2), sim::Fabric::mac(1, 0)));
    ASSERT_TRUE(t.dev[1]->add_static_neighbor(gid_from_ipv4(10, 0, 0, 1), sim::Fabric::mac(0, 0)));
    QpOptions o;
    o.resolve_mac = true;
    QpPair p = t.connect(o);
    auto src = t.buffer(0, 100, 4);
    auto dst = t.buffer(1, 100, 0);
    rc::SendWqe w = TwoEngines::wqe(
        getenv("RO") ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write, 1, *src, 100);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(t.dev[0]->counters()[Counter::neigh_tx], 0u);
    EXPECT_EQ(t.dev[1]->counters()[Counter::neigh_tx], 0u);
}

TEST(TransferLinks, LinkDownAndUpAreReported) {
    TwoEngines t(23);
    std::vector<std::pair<unsigned, bool>> events;
    t.dev[0]->on_link_change = [&](unsigned port, bool up) { events.emplace_back(port, up); };
    t.run_until([] { return false; }, 1'000'000);
    t.fabric.set_port_up(0, 0, false);
    t.run_until([&] { return !events.empty(); }, 10'000'000);
    t.fabric.set_port_up(0, 0, true);
    t.run_until([&] { return events.size() >= 2; }, 10'000'000);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0], std::make_pair(0u, false));
    EXPECT_EQ(events[1], std::make_pair(0u, true));
    EXPECT_EQ(t.dev[0]->counters()[Counter::link_downed], 1u);
    EXPECT_EQ(t.dev[0]->counters()[Counter::link_upped], 1u);
}

// A port taken out of service is a pulled cable on receive too: a WRITE arriving on it moves no
// byte and is counted; once the port is back, the requester's retry delivers it.
TEST(TransferLinks, AnAdministrativelyDownPortHearsNothing) {
    TwoEngines t(25);
    QpPair p = t.connect();
    auto src = t.buffer(0, 3000, 7);
    auto dst = t.buffer(1, 3000, 0);
    ASSERT_EQ(t.dev[1]->set_port_admin(0, false), 0);
    rc::SendWqe w = TwoEngines::wqe(
        getenv("RO") ? rc::WrOpcode::rdma_read : rc::WrOpcode::rdma_write, 1, *src, 3000);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return t.dev[1]->counters()[Counter::rx_dropped_port_down] > 0; },
                            10'000'000));
    t.run_until([] { return false; }, 1'000'000);
    EXPECT_TRUE(t.send_cqes[0].empty());
    EXPECT_TRUE(std::all_of(dst->bytes.begin(), dst->bytes.end(), [](auto b) { return b == 0; }))
        << "a frame on a port administratively down was placed";
    EXPECT_EQ(p.qp[1]->counters[Counter::rcvd_pkts], 0u);
    ASSERT_EQ(t.dev[1]->set_port_admin(0, true), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }, 1'000'000'000));
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 3000));
    EXPECT_GT(t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
}

// ---- The ACK hold (rc::ResponderState::ack_hold_until_ns): on a QP that talks both ways the
// responder's ACK waits for the QP's next request and leaves right behind it, so that a ping-pong
// application waiting in ibv_poll_cq for its WRITE's completion finds the peer's WRITE placed.

/** One RC QP pair and, on each side, a 64 B buffer to send from and one the peer writes into. */
struct PingPong {
    explicit PingPong(std::uint64_t seed) : t(seed), p(t.connect()) {
        for (int s = 0; s < 2; ++s) {
            out[s] = t.buffer(s, 64, static_cast<std::uint32_t>(5 + 4 * s));
            in[s] = t.buffer(s, 64, 0);
        }
    }
    /** Posts a signaled 64 B WRITE from side @p s's out buffer into the peer's in buffer. */
    int write(int s, std::uint64_t wr_id) {
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, wr_id, *out[s], 64);
        w.remote_addr = in[1 - s]->addr();
        w.rkey = in[1 - s]->mr->rkey;
        return t.post_send(s, p.qp[s], w);
    }
    /** Runs until side @p s has @p n send completions; false when it never does. */
    bool completed(int s, std::size_t n) {
        return t.run_until([&] { return t.send_cqes[s].size() >= n; });
    }
    /** Virtual ns from side 0's WRITE @p wr_id to its completion, side 1 staying silent. */
    std::uint64_t ping_time(std::uint64_t wr_id) {
        const std::uint64_t t0 = t.clock.now_ns();
        const std::size_t before = t.send_cqes[0].size();
        if (write(0, wr_id) != 0 || !completed(0, before + 1)) return UINT64_MAX;
        return t.clock.now_ns() - t0;
    }
    TwoEngines t;
    QpPair p;
    std::unique_ptr<Buffer> out[2], in[2];
};

TEST(TransferAckHold, APingsAckWaitsForThePongAndLeavesRightAheadOfIt) {
    PingPong pp(3);
    TwoEngines& t = pp.t;
    // Side 1 writes first: its QP has talked, so the ACK it owes for side 0's ping may wait.
    ASSERT_EQ(pp.write(1, 1), 0);
    ASSERT_TRUE(pp.completed(1, 1));
    std::vector<wire::Opcode> ops; // what side 1 puts on the wire from now on
    t.filter[1].on_tx = [&ops](PktBuf& b) {
        const wire::ParsedFrame pf = parse(b);
        if (pf.bth) ops.push_back(pf.bth->opcode());
        return true;
    };
    // The ping: placed on side 1, and no ACK from side 1 yet.
    ASSERT_EQ(pp.write(0, 2), 0);
    ASSERT_TRUE(t.run_until(
        [&] { return std::memcmp(pp.in[1]->bytes.data(), pp.out[0]->bytes.data(), 64) == 0; }));
    for (int i = 0; i < 10; ++i)
        (void)(t.dev[0]->poll() + t.dev[1]->poll()); // real passes, no time jump
    EXPECT_TRUE(ops.empty()) << "side 1 sent " << ops.size() << " frames before its pong";
    EXPECT_TRUE(t.send_cqes[0].empty());
    // The pong: the ACK that completes the ping right ahead of its WRITE (as a NIC's ACK precedes
    // the answer; perftest's event mode needs that order), in the same pass.
    ASSERT_EQ(pp.write(1, 3), 0);
    ASSERT_TRUE(pp.completed(0, 1) && pp.completed(1, 2));
    ASSERT_GE(ops.size(), 2u);
    EXPECT_EQ(ops[0], wire::Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(ops[1], wire::Opcode::RC_RDMA_WRITE_ONLY);
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
    EXPECT_EQ(t.send_cqes[0][0].wr_id, 2u);
}

TEST(TransferAckHold, AnUnansweredPingIsAckedWhenTheHoldEnds) {
    PingPong pp(4);
    ASSERT_EQ(pp.write(1, 1), 0);
    ASSERT_TRUE(pp.completed(1, 1));
    const std::uint64_t took = pp.ping_time(2);
    EXPECT_GE(took, rc::kAckHoldNs);
    EXPECT_LT(took, rc::kAckHoldNs + 10'000) << "the held ACK left late";
    EXPECT_EQ(pp.t.send_cqes[0][0].status, WcStatus::success);
    EXPECT_EQ(pp.t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
}

TEST(TransferAckHold, AOneWayStreamIsAckedAtOnce) {
    PingPong pp(5);
    // Side 1 never sent a request: nothing to wait for.
    EXPECT_LT(pp.ping_time(2), rc::kAckHoldNs / 2);
    EXPECT_LT(pp.ping_time(3), rc::kAckHoldNs / 2);
    // Side 1 answers once: the next ping's ACK is held, then a stream again is acked at once.
    ASSERT_EQ(pp.write(1, 4), 0);
    ASSERT_TRUE(pp.completed(1, 1));
    EXPECT_GE(pp.ping_time(5), rc::kAckHoldNs);
    for (std::uint64_t id = 6; id < 9; ++id)
        EXPECT_LT(pp.ping_time(id), rc::kAckHoldNs / 2) << "ping " << id;
}

TEST(TransferAckHold, ASlowPongStillHoldsTheNextAck) {
    // Rounds milliseconds apart (an engine thread that waited for a core) must not end the hold:
    // when only a request sent within the last 100 us counted, a slow round of ib_write_lat
    // made the next one slow too (README, RC transport).
    PingPong pp(8);
    TwoEngines& t = pp.t;
    std::uint64_t id = 1;
    for (std::size_t round = 1; round <= 3; ++round) {
        ASSERT_EQ(pp.write(1, id++), 0); // side 1 answers (or opens)
        ASSERT_TRUE(pp.completed(1, round));
        t.clock.advance(4'000'000);
        const std::uint64_t rcvd = t.dev[1]->total_counters()[Counter::rcvd_pkts];
        const std::uint64_t acks = t.dev[1]->total_counters()[Counter::acks_sent];
        ASSERT_EQ(pp.write(0, id++), 0); // the next ping, 4 ms later
        ASSERT_TRUE(
            t.run_until([&] { return t.dev[1]->total_counters()[Counter::rcvd_pkts] > rcvd; }));
        for (int i = 0; i < 10; ++i)
            (void)(t.dev[0]->poll() + t.dev[1]->poll()); // real passes, no time jump
        EXPECT_EQ(t.dev[1]->total_counters()[Counter::acks_sent], acks)
            << "round " << round << ": the ACK left without waiting for the pong";
    }
    ASSERT_EQ(pp.write(1, id++), 0);
    EXPECT_TRUE(pp.completed(0, 3));
}

TEST(TransferAckHold, AQpWaitingForItsOwnAckDoesNotHoldOne) {
    PingPong pp(6);
    TwoEngines& t = pp.t;
    // Side 1's WRITE goes unacknowledged (side 0's ACK is lost): side 1 waits for an ACK, which
    // side 0 might be holding for its own next request. Were side 1 to hold the ACK it owes side
    // 0 as well, neither would come before the holds ended (two streams with full send queues).
    bool drop_ack = true;
    t.filter[0].on_tx = [&](PktBuf& b) {
        const wire::ParsedFrame pf = parse(b);
        if (drop_ack && pf.bth && pf.bth->opcode() == wire::Opcode::RC_ACKNOWLEDGE) {
            drop_ack = false;
            return false;
        }
        return true;
    };
    ASSERT_EQ(pp.write(1, 1), 0);
    ASSERT_TRUE(t.run_until([&] { return !drop_ack; }));
    EXPECT_LT(pp.ping_time(2), rc::kAckHoldNs / 2);
    EXPECT_TRUE(t.send_cqes[1].empty()); // its ACK timer has not fired yet
    // The lost ACK is made good by the retry (or side 0's next ACK): side 1 completes too.
    ASSERT_TRUE(pp.completed(1, 1));
    EXPECT_EQ(t.send_cqes[1][0].status, WcStatus::success);
}

TEST(TransferAckHold, AQpTornDownSendsTheAckItHeld) {
    // ibv_rc_pingpong's client destroys its QP right after its last receive completion: the ACK
    // for that SEND, held for a request that never comes, must still reach the server, or the
    // server's last SEND ends in RETRY_EXC_ERR (seen in uring-share-4proc).
    for (const bool destroy : {true, false}) {
        SCOPED_TRACE(destroy ? "destroy_qp" : "modify_qp to ERR");
        PingPong pp(7);
        TwoEngines& t = pp.t;
        ASSERT_EQ(pp.write(1, 1), 0);
        ASSERT_TRUE(pp.completed(1, 1));
        ASSERT_EQ(pp.write(0, 2), 0);
        ASSERT_TRUE(t.run_until(
            [&] { return std::memcmp(pp.in[1]->bytes.data(), pp.out[0]->bytes.data(), 64) == 0; }));
        const std::uint64_t t0 = t.clock.now_ns();
        if (destroy) {
            ASSERT_EQ(t.dev[1]->destroy_qp(pp.p.qp[1]), 0);
        } else {
            rc::QpAttr a;
            a.qp_state = rc::QpState::err;
            ASSERT_EQ(t.dev[1]->modify_qp(pp.p.qp[1], a, rc::kQpState), 0);
        }
        ASSERT_TRUE(pp.completed(0, 1));
        EXPECT_LT(t.clock.now_ns() - t0, rc::kAckHoldNs / 2);
        EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
        EXPECT_EQ(t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
    }
}

TEST(TransferManyQps, EveryQpsDataArrivesIntactWhileTheEnginePrefetchesQpState) {
    // Past Device::kPrefetchMinQps live QPs the engine prefetches the QPs of each received burst
    // and of its active list, and the requester its PSN ring entries. Hints only: with every
    // QP busy at once, frames lost and resent, each QP's data must still arrive intact.
    TwoEngines t(11);
    constexpr std::size_t kQps = Device::kPrefetchMinQps + 36;
    constexpr std::size_t kSize = 3 * 1024 + 5; // four packets at PMTU 1024
    QpOptions o;
    o.sq_depth = 16;
    o.rq_depth = 16;
    o.timeout = 4; // 65 us: the lost frames are resent soon
    std::vector<QpPair> pairs;
    std::vector<std::unique_ptr<Buffer>> src, dst, msg_src, msg_dst;
    for (std::size_t i = 0; i < kQps; ++i) {
        pairs.push_back(t.connect(o));
        src.push_back(t.buffer(0, kSize, static_cast<std::uint32_t>(i + 1)));
        dst.push_back(t.buffer(1, kSize, 0));
        msg_src.push_back(t.buffer(0, 64, static_cast<std::uint32_t>(i + 1000)));
        msg_dst.push_back(t.buffer(1, 64, 0));
    }
    std::uint32_t frames = 0;
    t.filter[0].on_tx = [&](PktBuf&) { return ++frames % 13 != 0; }; // every 13th frame lost
    for (std::size_t i = 0; i < kQps; ++i) {
        ASSERT_EQ(t.post_recv(1, pairs[i].qp[1], *msg_dst[i], 5000 + i, 64), 0);
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, i, *src[i], kSize);
        w.remote_addr = dst[i]->addr();
        w.rkey = dst[i]->mr->rkey;
        ASSERT_EQ(t.post_send(0, pairs[i].qp[0], w), 0);
        ASSERT_EQ(t.post_send(0, pairs[i].qp[0],
                              TwoEngines::wqe(WrOpcode::send, 10000 + i, *msg_src[i], 64)),
                  0);
    }
    ASSERT_TRUE(t.run_until(
        [&] { return t.send_cqes[0].size() == 2 * kQps && t.recv_cqes[1].size() == kQps; }));
    EXPECT_GT(t.dev[0]->total_counters()[Counter::retransmitted_pkts], 0u);
    for (const rc::Cqe& c : t.send_cqes[0])
        EXPECT_EQ(c.status, WcStatus::success) << c.wr_id << ": " << rc::to_string(c.status);
    for (const rc::Cqe& c : t.recv_cqes[1]) {
        EXPECT_EQ(c.status, WcStatus::success) << c.wr_id << ": " << rc::to_string(c.status);
        EXPECT_EQ(c.byte_len, 64u);
    }
    for (std::size_t i = 0; i < kQps; ++i) {
        EXPECT_EQ(dst[i]->bytes, src[i]->bytes) << "QP pair " << i;
        EXPECT_EQ(msg_dst[i]->bytes, msg_src[i]->bytes) << "QP pair " << i;
    }
}

} // namespace
} // namespace droce::test

namespace droce::test {
namespace {

// One QP carrying 256 KiB READs, 4 KiB WRITEs and fetch-and-adds in turn, as a storage target or
// an MPI rendezvous mixes them: each READ's response spans several engine passes, and what came
// behind it arrived while the response was still going out. It used to be dropped there, and came
// back only by a sequence NAK (go-back-N over everything behind it) or the requester's ACK timer:
// 200 rounds of a READ and a WRITE took 15 ACK timeouts (over a second) and 5,930 retransmitted
// packets. Now nothing is retransmitted on the lossless fabric, every byte is where it belongs and
// every fetch-and-add returned the count before it.
TEST(TransferMixed, ReadsWritesAndAtomicsOnOneQpNeedNoRetransmission) {
    TwoEngines t(3);
    QpOptions o;
    o.mtu = rc::Mtu::mtu4096;
    o.timeout = 14; // 67 ms, perftest's default
    QpPair p = t.connect(o);
    constexpr std::size_t kRead = 256 * 1024, kWrite = 4096, kWriteAt = 512 * 1024;
    constexpr int kRounds = 200;
    auto local = t.buffer(0, kWriteAt + kRounds * kWrite, 11);
    auto remote = t.buffer(1, kWriteAt + kRounds * kWrite, 5);
    auto fetched = t.buffer(0, kRounds * 8, 0);
    auto counter = t.buffer(1, 8, 0);
    const std::vector<std::uint8_t> remote_before = remote->bytes;
    for (int i = 0; i < kRounds; ++i) {
        rc::SendWqe r = TwoEngines::wqe(rc::WrOpcode::rdma_read, 2 * i, *local, kRead);
        r.remote_addr = remote->addr();
        r.rkey = remote->mr->rkey;
        rc::SendWqe w = TwoEngines::wqe(rc::WrOpcode::rdma_write, 2 * i + 1, *local, kWrite,
                                        kWriteAt + i * kWrite);
        w.remote_addr = remote->addr(kWriteAt + i * kWrite);
        w.rkey = remote->mr->rkey;
        rc::SendWqe a =
            TwoEngines::wqe(rc::WrOpcode::atomic_fetch_and_add, 3 * i + 2, *fetched, 8, 8 * i);
        a.remote_addr = counter->addr();
        a.rkey = counter->mr->rkey;
        a.compare_add = 1;
        r.wr_id = 3 * i;
        w.wr_id = 3 * i + 1;
        for (const rc::SendWqe* wqe : {&r, &w, &a})
            while (t.post_send(0, p.qp[0], *wqe) != 0) // send queue full: let the engines run
                (void)t.run_until([] { return false; }, 1000);
    }
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 3 * kRounds; }));
    for (std::size_t i = 0; i < t.send_cqes[0].size(); ++i) {
        ASSERT_EQ(t.send_cqes[0][i].status, rc::WcStatus::success) << i;
        EXPECT_EQ(t.send_cqes[0][i].wr_id, i);
    }
    const auto c0 = t.dev[0]->total_counters();
    EXPECT_EQ(c0[Counter::local_ack_timeout_err], 0u);
    EXPECT_EQ(c0[Counter::retransmitted_pkts], 0u);
    EXPECT_EQ(t.dev[1]->total_counters()[Counter::seq_naks_sent], 0u);
    EXPECT_TRUE(
        std::equal(remote_before.begin(), remote_before.begin() + kRead, local->bytes.begin()));
    EXPECT_TRUE(std::equal(local->bytes.begin() + kWriteAt, local->bytes.end(),
                           remote->bytes.begin() + kWriteAt));
    for (std::uint64_t i = 0; i < kRounds; ++i) {
        std::uint64_t v = 0;
        std::memcpy(&v, fetched->bytes.data() + 8 * i, 8);
        EXPECT_EQ(v, i);
    }
    std::uint64_t total = 0;
    std::memcpy(&total, counter->bytes.data(), 8);
    EXPECT_EQ(total, std::uint64_t{kRounds});
}

// A SEND that finds no receive WQE while a READ response ahead of it is still going out gets its
// RNR NAK right after that response: the requester waits its RNR timer, not its ACK timer (67 ms,
// one of retry_cnt; with timeout 0 it waited for ever), and the SEND completes once a receive is
// posted.
TEST(TransferMixed, ASendWithoutAReceiveBehindAReadIsRnrNakedAfterTheResponse) {
    TwoEngines t(5);
    QpOptions o;
    o.mtu = rc::Mtu::mtu4096;
    o.timeout = 14;
    o.rnr_retry = 7;
    QpPair p = t.connect(o);
    constexpr std::size_t kRead = 256 * 1024;
    constexpr int kRounds = 20;
    auto local = t.buffer(0, kRead + 64, 11);
    auto remote = t.buffer(1, kRead, 5);
    auto inbox = t.buffer(1, 64, 0);
    for (int i = 0; i < kRounds; ++i) {
        SCOPED_TRACE("round " + std::to_string(i));
        rc::SendWqe r = TwoEngines::wqe(rc::WrOpcode::rdma_read, 2 * i, *local, kRead);
        r.remote_addr = remote->addr();
        r.rkey = remote->mr->rkey;
        const rc::SendWqe s = TwoEngines::wqe(rc::WrOpcode::send, 2 * i + 1, *local, 64, kRead);
        ASSERT_EQ(t.post_send(0, p.qp[0], r), 0);
        ASSERT_EQ(t.post_send(0, p.qp[0], s), 0);
        const std::size_t done = t.send_cqes[0].size();
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == done + 1; }));
        ASSERT_EQ(t.send_cqes[0].back().wr_id, static_cast<std::uint64_t>(2 * i)); // the READ
        ASSERT_EQ(t.post_recv(1, p.qp[1], *inbox, 100 + i, 64), 0);
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == done + 2; }));
        EXPECT_EQ(t.send_cqes[0].back().status, rc::WcStatus::success);
    }
    EXPECT_EQ(t.recv_cqes[1].size(), std::size_t{kRounds});
    const auto c0 = t.dev[0]->total_counters();
    EXPECT_EQ(c0[Counter::local_ack_timeout_err], 0u);
    EXPECT_GE(c0[Counter::rnr_naks_rcvd], std::uint64_t{kRounds});
    EXPECT_EQ(t.dev[1]->total_counters()[Counter::rnr_naks_sent], c0[Counter::rnr_naks_rcvd]);
}
} // namespace
} // namespace droce::test

namespace droce::test {
namespace {

using rc::WcStatus;
using rc::WrOpcode;

/** What one run of the workload below put on the wire, and what it counted. */
struct Wire {
    std::vector<std::vector<std::uint8_t>> frames; ///< both devices' frames, in transmit order
    std::uint64_t streamed = 0;                    ///< tx_streamed_pkts of both devices
};

/** One's-complement sum of @p n bytes as big-endian 16-bit words (RFC 1071). */
std::uint32_t ones_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
    for (std::size_t i = 0; i + 1 < n; i += 2)
        sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return sum;
}

/** Whether @p f is a whole, correct RoCEv2 frame: it parses with its ICRC, its length is what its
 *  IP header says, and its IPv4 header checksum or (IPv6) UDP checksum holds. */
::testing::AssertionResult frame_is_whole(const std::vector<std::uint8_t>& f) {
    wire::ParsedFrame pf;
    const wire::RejectReason r = wire::parse_frame(f, pf);
    if (r != wire::RejectReason::ok)
        return ::testing::AssertionFailure() << "rejected: " << static_cast<int>(r);
    if (!pf.icrc_checked) return ::testing::AssertionFailure() << "ICRC not checked";
    const std::uint8_t* ip = f.data() + pf.l3_offset;
    if (pf.ipv4 != nullptr) {
        if (wire::ipv4_header_checksum(ip, 20) != 0)
            return ::testing::AssertionFailure() << "IPv4 header checksum";
        if (f.size() != pf.l3_offset + static_cast<std::size_t>(ip[2] << 8 | ip[3]))
            return ::testing::AssertionFailure() << "length " << f.size();
    } else {
        const std::size_t udp_len = static_cast<std::size_t>(ip[4] << 8 | ip[5]);
        if (f.size() != pf.l3_offset + 40 + udp_len)
            return ::testing::AssertionFailure() << "length " << f.size();
        std::uint32_t sum = ones_sum(ip + 8, 32); // addresses
        sum += static_cast<std::uint32_t>(udp_len) + 17;
        if (ones_sum(ip + 40, udp_len, sum) != 0xffff)
            return ::testing::AssertionFailure() << "UDP checksum";
    }
    return ::testing::AssertionSuccess();
}

Wire run(bool ipv6, bool stream_tx) {
    TwoEngines t(11, ipv6, false, stream_tx);
    Wire w;
    for (FilterPort& f : t.filter)
        f.on_tx = [&w](PktBuf& b) {
            w.frames.emplace_back(b.data, b.data + b.len);
            return true;
        };
    QpOptions o;
    o.mtu = rc::Mtu::mtu256;
    QpPair p = t.connect(o);
    // The same memory in both runs, so that both put the same addresses in their RETHs.
    static std::array<std::unique_ptr<Buffer>, 4> mem;
    for (auto& m : mem)
        if (!m) m = std::make_unique<Buffer>();
    const auto reg = [&](int side, int i, std::size_t size, std::uint32_t seed) -> Buffer& {
        Buffer& b = *mem[static_cast<std::size_t>(i)];
        b.bytes.assign(size, 0);
        std::mt19937 rng(seed);
        for (auto& x : b.bytes)
            x = static_cast<std::uint8_t>(seed ? rng() : 0);
        int err = 0;
        b.mr = t.dev[side]->reg_mr(t.pd[side], b.bytes.data(), b.bytes.size(),
                                   rc::kAccessLocalWrite | rc::kAccessRemoteWrite |
                                       rc::kAccessRemoteRead | rc::kAccessRemoteAtomic,
                                   &err);
        EXPECT_NE(b.mr, nullptr);
        return b;
    };
    Buffer* src = &reg(0, 0, 4096, 5);
    Buffer* dst = &reg(1, 1, 4096, 0);
    Buffer* back = &reg(0, 2, 4096, 0);
    Buffer* inbox = &reg(1, 3, 512, 0);
    std::uint64_t wr_id = 1;
    std::size_t off = 0;
    for (std::size_t size : {0, 1, 3, 4, 63, 64, 65, 127, 128, 129, 255, 300}) {
        for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm, WrOpcode::send,
                            WrOpcode::send_with_imm, WrOpcode::rdma_read}) {
            if (op == WrOpcode::send || op == WrOpcode::send_with_imm ||
                op == WrOpcode::rdma_write_with_imm) {
                EXPECT_EQ(t.post_recv(1, p.qp[1], *inbox, wr_id, 512), 0);
            }
            rc::SendWqe s =
                TwoEngines::wqe(op, wr_id++, op == WrOpcode::rdma_read ? *back : *src, size, off);
            s.remote_addr = dst->addr(off);
            s.rkey = dst->mr->rkey;
            s.imm_data = 0x1234;
            EXPECT_EQ(t.post_send(0, p.qp[0], s), 0);
        }
        off += 301;
    }
    rc::SendWqe fa = TwoEngines::wqe(WrOpcode::atomic_fetch_and_add, wr_id++, *back, 8, 4000);
    fa.remote_addr = dst->addr(4000);
    fa.rkey = dst->mr->rkey;
    fa.compare_add = 9;
    EXPECT_EQ(t.post_send(0, p.qp[0], fa), 0);
    const std::size_t posted = wr_id - 1;
    EXPECT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == posted; }));
    for (const rc::Cqe& c : t.send_cqes[0])
        EXPECT_EQ(c.status, WcStatus::success) << rc::to_string(c.status);
    // WRITEs put the bytes at dst[off..); each READ then read them back into back[off..).
    off = 0;
    for (std::size_t size : {0, 1, 3, 4, 63, 64, 65, 127, 128, 129, 255, 300}) {
        EXPECT_EQ(0, std::memcmp(dst->bytes.data() + off, src->bytes.data() + off, size)) << size;
        EXPECT_EQ(0, std::memcmp(back->bytes.data() + off, src->bytes.data() + off, size)) << size;
        off += 301;
    }
    for (int i = 0; i < 2; ++i)
        w.streamed += t.dev[i]->total_counters()[Counter::tx_streamed_pkts];
    return w;
}

class TransferStreamed : public ::testing::TestWithParam<bool> {};

// The frames streamed from the scratch are whole and correct (ICRC, IPv4 header checksum, IPv6 UDP
// checksum summed in the scratch, length) and are the frames built in place: the same opcodes,
// PSNs and lengths in the same order (the bytes differ only by the MRs' random keys).
TEST_P(TransferStreamed, ShortFramesStreamedIntoTheirBuffersAreTheFramesBuiltInPlace) {
    const bool ipv6 = GetParam();
    const Wire plain = run(ipv6, false);
    const Wire streamed = run(ipv6, true);
    EXPECT_EQ(plain.streamed, 0u);
    // At least the 45 requests of up to 128 payload bytes and the 9 READ responses that size.
    EXPECT_GE(streamed.streamed, 54u);
    EXPECT_LT(streamed.streamed, streamed.frames.size()); // longer frames are built in place
    ASSERT_EQ(plain.frames.size(), streamed.frames.size());
    for (std::size_t i = 0; i < plain.frames.size(); ++i) {
        const auto& a = plain.frames[i];
        const auto& b = streamed.frames[i];
        ASSERT_TRUE(frame_is_whole(b)) << "frame " << i;
        ASSERT_EQ(a.size(), b.size()) << "frame " << i;
        wire::ParsedFrame pa;
        wire::ParsedFrame pb;
        ASSERT_EQ(wire::parse_frame(a, pa), wire::RejectReason::ok);
        ASSERT_EQ(wire::parse_frame(b, pb), wire::RejectReason::ok);
        EXPECT_EQ(pa.bth->opcode(), pb.bth->opcode()) << "frame " << i;
        EXPECT_EQ(pa.bth->psn(), pb.bth->psn()) << "frame " << i;
        EXPECT_TRUE(
            std::equal(pa.payload.begin(), pa.payload.end(), pb.payload.begin(), pb.payload.end()))
            << "frame " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Ip, TransferStreamed, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                             return i.param ? "ipv6" : "ipv4";
                         });

} // namespace
} // namespace droce::test
