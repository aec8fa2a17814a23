/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * MRC transfers on four equal planes: data placed right, completions in order, bytes shared
 * equally by the planes; WRITE with immediate completes in message order and never holds more than
 * max_wimm_dest; MPR is never exceeded; an RC QP runs beside an MRC QP; operations MRC does not
 * carry are refused.
 */
#include "mrc_pair.h"

namespace droce::test {
namespace {

constexpr std::size_t kMsg = 256 * 1024;

/** Posts @p n WRITEs of kMsg from a to b (wrapping in @p size bytes) and runs to their CQEs. */
void stream(MrcPair& t, const MrcPair::Buffer& src, const MrcPair::Buffer& dst, std::size_t n,
            std::size_t first = 0) {
    std::size_t posted = first;
    const std::size_t end = first + n;
    const std::size_t slots = src.bytes.size() / kMsg;
    ASSERT_TRUE(t.run_until([&] {
        while (posted < end && posted - t.send_cqes[0].size() < 64) {
            if (t.write(0, src, dst, (posted % slots) * kMsg, kMsg, posted) != 0) break;
            ++posted;
        }
        return t.send_cqes[0].size() >= end;
    })) << t.dump();
    ASSERT_EQ(t.send_errors(0), 0u) << t.dump();
}

TEST(MrcTransfer, FourEqualPlanesShareBytesEquallyAndPlaceEverything) {
    MrcPair t;
    t.connect();
    auto src = t.buffer(0, 32 * kMsg, 7);
    auto dst = t.buffer(1, 32 * kMsg, 0);
    stream(t, *src, *dst, 128); // 32 MiB
    ASSERT_EQ(t.send_cqes[0].size(), 128u);
    for (std::size_t i = 0; i < 128; ++i) {
        EXPECT_EQ(t.send_cqes[0][i].wr_id, i) << "completions out of order";
        EXPECT_EQ(t.send_cqes[0][i].status, rc::WcStatus::success);
    }
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    std::uint64_t total = 0;
    for (unsigned p = 0; p < 4; ++p)
        total += t.plane_tx_bytes(0, p);
    for (unsigned p = 0; p < 4; ++p) {
        const double share = static_cast<double>(t.plane_tx_bytes(0, p)) / total;
        EXPECT_NEAR(share, 0.25, 0.03) << "plane " << p;
    }
    EXPECT_EQ(t.mrc_counter(0, mrc::MrcCounter::retransmits), 0u);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::sacks_sent), 0u);
    // Links, not the CPU, bound it: about 4 x 10 Gb/s of payload in virtual time.
    const double secs =
        static_cast<double>(t.send_cqe_ns[0].back() - t.send_cqe_ns[0].front()) / 1e9;
    const double gbps = 127.0 * kMsg * 8 / secs / 1e9;
    EXPECT_GT(gbps, 35.0);
    EXPECT_LT(gbps, 40.0);
}

TEST(MrcTransfer, WriteWithImmediateCompletesInOrderWithinMaxWimmDest) {
    MrcOptions o;
    o.attr.max_wimm = 8;
    o.attr.max_wimm_dest = 8;
    MrcPair t(3, o);
    // Heavy reordering on every plane: later messages often arrive whole before earlier ones.
    for (unsigned p = 0; p < 4; ++p)
        t.set_plane_links(p, [](sim::LinkConfig& c) {
            c.reorder = 0.3;
            c.reorder_max_frames = 16;
        });
    t.connect();
    constexpr std::size_t kN = 400;
    auto src = t.buffer(0, kN * 8192, 11);
    auto dst = t.buffer(1, kN * 8192, 0);
    for (std::size_t i = 0; i < kN; ++i)
        ASSERT_EQ(t.post_recv(1, 1000 + i), 0);
    std::size_t posted = 0;
    ASSERT_TRUE(t.run_until([&] {
        while (posted < kN && posted - t.send_cqes[0].size() < 32) {
            // sizes 1 B .. 8 KiB: one to three packets
            const std::size_t len = 1 + (posted * 2654435761u) % 8192;
            if (t.write(0, *src, *dst, posted * 8192, len, posted, true,
                        static_cast<std::uint32_t>(0xabc00000 + posted)) != 0)
                break;
            ++posted;
        }
        return t.send_cqes[0].size() == kN && t.recv_cqes[1].size() == kN;
    }));
    for (std::size_t i = 0; i < kN; ++i) {
        const rc::Cqe& c = t.recv_cqes[1][i];
        EXPECT_EQ(c.status, rc::WcStatus::success);
        EXPECT_EQ(c.opcode, rc::WcOpcode::recv_rdma_with_imm);
        EXPECT_EQ(c.imm_data, 0xabc00000 + i) << "immediates out of message order";
        EXPECT_EQ(c.wr_id, 1000 + i);
        EXPECT_EQ(c.byte_len, 1 + (i * 2654435761u) % 8192);
        EXPECT_EQ(t.send_cqes[0][i].wr_id, i);
    }
    for (std::size_t i = 0; i < kN; ++i) {
        const std::size_t len = 1 + (i * 2654435761u) % 8192;
        ASSERT_EQ(std::memcmp(src->bytes.data() + i * 8192, dst->bytes.data() + i * 8192, len), 0);
    }
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::ooo_pkts_rcvd), 0u);
    const mrc::WimmUse use = mrc::wimm_dest_use(*t.qp[1]);
    EXPECT_GT(use.max, 1u);
    EXPECT_LE(use.max, 8u) << "more WRITE with immediate held than max_wimm_dest";
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::wimm_exceeded), 0u);
}

TEST(MrcTransfer, MprIsNeverExceededUnderHeavyReordering) {
    MrcOptions o;
    o.attr.mpr = 2; // 256 PSNs
    o.attr.mpr_dest = 2;
    o.attr.max_inflight = 0; // only MPR bounds the window
    o.attr.reorder_window_ns = 400'000;
    MrcPair t(5, o);
    for (unsigned p = 0; p < 4; ++p)
        t.set_plane_links(p, [&](sim::LinkConfig& c) {
            c.reorder = 0.5;
            c.reorder_max_frames = 64;
            c.reorder_max_ns = 200'000;
        });
    t.connect();
    auto src = t.buffer(0, 16 * kMsg, 9);
    auto dst = t.buffer(1, 16 * kMsg, 0);
    stream(t, *src, *dst, 64);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    EXPECT_LE(mrc::max_psn_distance_sent(*t.qp[0]), 256u);
    EXPECT_LT(mrc::max_psn_distance_rcvd(*t.qp[1]), 256u);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::mpr_exceeded), 0u);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::ooo_pkts_rcvd), 100u);
}

TEST(MrcTransfer, OperationsMrcDoesNotCarryAreRefused) {
    MrcPair t;
    t.connect();
    auto src = t.buffer(0, 4096, 1);
    for (const rc::WrOpcode op : {rc::WrOpcode::send, rc::WrOpcode::send_with_imm,
                                  rc::WrOpcode::rdma_read, rc::WrOpcode::atomic_fetch_and_add}) {
        rc::SendWqe w;
        w.opcode = op;
        w.num_sge = 1;
        w.sg_list[0] = rc::Sge{src->addr(), 8, src->mr->lkey};
        w.length = 8;
        std::uint32_t bad = 0;
        EXPECT_EQ(t.dev[0]->post_send(t.qp[0], &w, 1, &bad), EOPNOTSUPP) << rc::to_string(op);
    }
}

TEST(MrcTransfer, SlottedQpnsOfProcessesSharingAUdpPortTransferAsBefore) {
    // drivers/uring share = yes: each process's device carries its steering slot in the QPN's top
    // byte (Device::set_qpn_steering_slot). MRC's SACKs, retransmits and path probes address the
    // peer QP by number: slotted numbers must go everywhere the plain ones did.
    MrcPair t;
    ASSERT_EQ(t.dev[0]->set_qpn_steering_slot(3), 0);
    ASSERT_EQ(t.dev[1]->set_qpn_steering_slot(200), 0);
    t.connect();
    EXPECT_EQ(t.qp[0]->qpn, 0x030000u | rc::kFirstQpn);
    EXPECT_EQ(t.qp[1]->qpn, 0xc80000u | rc::kFirstQpn);
    EXPECT_EQ(t.dev[0]->qp_by_num(t.qp[0]->qpn), t.qp[0]);
    EXPECT_EQ(t.dev[0]->qp_by_num(rc::kFirstQpn), nullptr); // the unslotted number is nobody's
    EXPECT_EQ(t.dev[0]->set_qpn_steering_slot(4), EBUSY);   // QPs exist: their numbers stay
    auto src = t.buffer(0, 8 * kMsg, 11);
    auto dst = t.buffer(1, 8 * kMsg, 0);
    stream(t, *src, *dst, 16);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), src->bytes.size()), 0);
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::sacks_sent), 0u);
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::rx_dropped_bad_qp], 0u);
    EXPECT_EQ(t.dev[1]->total_counters()[Counter::rx_dropped_bad_qp], 0u);
}

TEST(MrcTransfer, RcAndMrcQpsRunSideBySide) {
    MrcPair t;
    t.connect();
    // An RC QP pair on plane 0 of the same devices.
    const auto rcq = t.connect_rc_pair();
    auto src = t.buffer(0, 8 * kMsg, 3);
    auto dst = t.buffer(1, 8 * kMsg, 0);
    auto rc_dst = t.buffer(1, kMsg, 0);
    for (int k = 0; k < 8; ++k)
        ASSERT_EQ(t.write(0, *src, *dst, k * kMsg, kMsg, k), 0);
    rc::SendWqe w;
    w.wr_id = 99;
    w.opcode = rc::WrOpcode::rdma_write;
    w.send_flags = rc::kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = rc::Sge{src->addr(), static_cast<std::uint32_t>(kMsg), src->mr->lkey};
    w.length = kMsg;
    w.remote_addr = rc_dst->addr();
    w.rkey = rc_dst->mr->rkey;
    std::uint32_t bad = 0;
    ASSERT_EQ(t.dev[0]->post_send(rcq[0], &w, 1, &bad), 0);
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 9; }));
    EXPECT_EQ(t.send_errors(0), 0u);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), dst->bytes.size()), 0);
    EXPECT_EQ(std::memcmp(src->bytes.data(), rc_dst->bytes.data(), kMsg), 0);
    // Neither QP took the other's packets.
    EXPECT_EQ(t.dev[1]->total_counters()[Counter::rx_dropped_bad_qp], 0u);
}

} // namespace
} // namespace droce::test
