/* SPDX-License-Identifier: BSD-3-Clause */
// Bugs from Linux rxe's history, each its own test, on two engines over the sim fabric.
#include <gtest/gtest.h>

#include "two_engines.h"

namespace droce::test {
namespace {

using rc::WcStatus;
using rc::WrOpcode;
using wire::AethKind;
using wire::Opcode;

// 1. An RNR NAK carrying min_rnr_timer 1.28 ms, with a local ACK timeout of about 8 us: the first
//    retry comes no sooner than 1.28 ms after the NAK (the ACK timer must not retry early).
TEST(RxeRegression, RnrRetryWaitsTheRnrTimerNotTheAckTimeout) {
    TwoEngines t(11);
    QpOptions o;
    o.timeout = 1;        // 4.096 us << 1 = 8.192 us
    o.min_rnr_timer = 14; // 1.28 ms (IBTA table 45)
    QpPair p = t.connect(o);
    std::uint64_t nak_ns = 0;
    std::vector<std::uint64_t> send_times;
    t.filter[1].on_tx = [&](PktBuf& b) {
        wire::ParsedFrame f = parse(b);
        if (f.aeth && f.aeth->kind() == AethKind::rnr_nak && nak_ns == 0) {
            nak_ns = t.clock.now_ns();
            EXPECT_EQ(f.aeth->value(), 14);
        }
        return true;
    };
    t.filter[0].on_tx = [&](PktBuf& b) {
        if (parse(b).bth->opcode() == Opcode::RC_SEND_ONLY) send_times.push_back(t.clock.now_ns());
        return true;
    };
    auto src = t.buffer(0, 64, 1);
    auto dst = t.buffer(1, 64, 0);
    ASSERT_EQ(t.post_send(0, p.qp[0], TwoEngines::wqe(WrOpcode::send, 1, *src, 64)), 0);
    ASSERT_TRUE(t.run_until([&] { return send_times.size() >= 2; }));
    ASSERT_NE(nak_ns, 0u);
    EXPECT_GE(send_times[1], nak_ns + 1'280'000)
        << "retried " << (send_times[1] - nak_ns) << " ns after the RNR NAK";
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::local_ack_timeout_err], 0u);
    // Once a receive WQE exists the retry lands.
    ASSERT_EQ(t.post_recv(1, p.qp[1], *dst, 7, 64), 0);
    ASSERT_TRUE(
        t.run_until([&] { return t.send_cqes[0].size() == 1 && t.recv_cqes[1].size() == 1; }));
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 64));
}

// 2. RDMA WRITE with a bad rkey: NAK remote access error and REM_ACCESS_ERR at the requester, not a
// timeout.
TEST(RxeRegression, BadRkeyWriteIsRemAccessErrNotTimeout) {
    TwoEngines t(12);
    QpPair p = t.connect();
    auto src = t.buffer(0, 128, 1);
    auto dst = t.buffer(1, 128, 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *src, 128);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey ^ 0x100; // another index: no such MR
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::rem_access_err);
    EXPECT_EQ(t.dev[0]->total_counters()[Counter::local_ack_timeout_err], 0u);
    EXPECT_EQ(p.qp[0]->counters[Counter::req_remote_access_errors], 1u);
    EXPECT_EQ(p.qp[0]->state, rc::QpState::err);
    EXPECT_TRUE(
        std::all_of(dst->bytes.begin(), dst->bytes.end(), [](std::uint8_t b) { return b == 0; }));
}

// 3. FETCH_ADD of 1 on 0 with the first ATOMIC ACKNOWLEDGE dropped: the retried request returns 0
//    (replayed from the responder resource) and memory ends at 1.
TEST(RxeRegression, DuplicateFetchAddIsReplayedNotReexecuted) {
    TwoEngines t(13);
    QpOptions o;
    o.timeout = 4;
    QpPair p = t.connect(o);
    auto target = t.buffer(1, 8, 0);
    auto result = t.buffer(0, 8, 0);
    std::memset(result->bytes.data(), 0xee, 8);
    int atomic_acks = 0;
    t.filter[1].on_tx = [&](PktBuf& b) {
        if (parse(b).bth->opcode() == Opcode::RC_ATOMIC_ACKNOWLEDGE) return ++atomic_acks > 1;
        return true;
    };
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::atomic_fetch_and_add, 1, *result, 8);
    w.remote_addr = target->addr();
    w.rkey = target->mr->rkey;
    w.compare_add = 1;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(atomic_acks, 2);
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
    std::uint64_t returned, memory;
    std::memcpy(&returned, result->bytes.data(), 8);
    std::memcpy(&memory, target->bytes.data(), 8);
    EXPECT_EQ(returned, 0u);
    EXPECT_EQ(memory, 1u);
    EXPECT_EQ(p.qp[1]->counters[Counter::duplicate_request], 1u);
}

// 4. Start PSN 0xFFFFFE and a 4-packet WRITE: PSNs FFFFFE, FFFFFF, 000000, 000001 accepted in
// order.
TEST(RxeRegression, PsnWrapsInsideOneMessage) {
    TwoEngines t(14);
    QpOptions o;
    o.mtu = rc::Mtu::mtu256;
    o.psn[0] = 0xfffffe;
    QpPair p = t.connect(o);
    std::vector<std::uint32_t> psns;
    t.filter[0].on_tx = [&](PktBuf& b) {
        psns.push_back(parse(b).bth->psn().value());
        return true;
    };
    auto src = t.buffer(0, 1024, 3);
    auto dst = t.buffer(1, 1024, 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *src, 1024);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
    EXPECT_EQ(psns, (std::vector<std::uint32_t>{0xfffffe, 0xffffff, 0x000000, 0x000001}));
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 1024));
    EXPECT_EQ(p.qp[1]->counters[Counter::out_of_sequence], 0u);
    EXPECT_EQ(p.qp[1]->counters[Counter::duplicate_request], 0u);
    EXPECT_EQ(p.qp[1]->resp.expected_psn, wire::Psn(2));
}

// 5. A QP in ERR with 3 SENDs posted: exactly 3 WR_FLUSH_ERR completions, wr_id 1, 2, 3, once each.
TEST(RxeRegression, PostedInErrFlushesEachWqeOnce) {
    TwoEngines t(15);
    QpPair p = t.connect();
    rc::QpAttr a;
    a.qp_state = rc::QpState::err;
    ASSERT_EQ(t.dev[0]->modify_qp(p.qp[0], a, rc::kQpState), 0);
    auto src = t.buffer(0, 16, 1);
    for (std::uint64_t id = 1; id <= 3; ++id) {
        rc::SendWqe w = TwoEngines::wqe(WrOpcode::send, id, *src, 16);
        w.send_flags =
            id == 2 ? 0u : std::uint32_t{rc::kSendSignaled}; // unsignaled ones are flushed too
        ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    }
    t.run_until([] { return false; }, 10'000'000);
    ASSERT_EQ(t.send_cqes[0].size(), 3u);
    for (std::uint64_t id = 1; id <= 3; ++id) {
        EXPECT_EQ(t.send_cqes[0][id - 1].wr_id, id);
        EXPECT_EQ(t.send_cqes[0][id - 1].status, WcStatus::wr_flush_err);
    }
}

// 6. retry_cnt 7 towards a peer that never answers: RETRY_EXC_ERR after 7 retries, not endless.
TEST(RxeRegression, RetryCount7IsNotInfinite) {
    TwoEngines t(16);
    QpOptions o;
    o.timeout = 2;
    o.retry_cnt = 7;
    QpPair p = t.connect(o);
    int transmissions = 0;
    t.filter[0].on_tx = [&](PktBuf&) {
        ++transmissions;
        return false; // the peer never hears anything
    };
    auto src = t.buffer(0, 16, 1);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *src, 16);
    auto dst = t.buffer(1, 16, 0);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }, 10'000'000'000ull));
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::retry_exc_err);
    EXPECT_EQ(transmissions, 1 + 7);
    EXPECT_EQ(p.qp[0]->counters[Counter::local_ack_timeout_err], 8u);
    EXPECT_EQ(p.qp[0]->state, rc::QpState::err);
}

// 7. One payload byte flipped in an otherwise valid frame: dropped silently (no ACK, no NAK) and
//    recovered by retransmission.
TEST(RxeRegression, CorruptPayloadIsDroppedSilentlyAndRetransmitted) {
    TwoEngines t(17);
    QpOptions o;
    o.timeout = 3;
    QpPair p = t.connect(o);
    bool flipped = false;
    t.filter[0].on_tx = [&](PktBuf& b) {
        wire::ParsedFrame f = parse(b);
        if (!flipped && f.payload.size() > 10) {
            b.data[f.payload.data() - b.data + 10] ^= 0x01;
            flipped = true;
        }
        return true;
    };
    int responses = 0;
    std::uint64_t first_response_ns = 0;
    t.filter[1].on_tx = [&](PktBuf&) {
        if (responses++ == 0) first_response_ns = t.clock.now_ns();
        return true;
    };
    auto src = t.buffer(0, 512, 5);
    auto dst = t.buffer(1, 512, 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *src, 512);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    const std::uint64_t start = t.clock.now_ns();
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    EXPECT_TRUE(flipped);
    EXPECT_EQ(t.send_cqes[0][0].status, WcStatus::success);
    EXPECT_EQ(0, std::memcmp(dst->bytes.data(), src->bytes.data(), 512));
    EXPECT_EQ(t.dev[1]->counters()[Counter::rx_dropped_bad_icrc], 1u);
    EXPECT_EQ(responses,
              1); // only the ACK of the retransmission: nothing answered the corrupt frame
    EXPECT_GE(first_response_ns - start, rc::ack_timeout_ns(3));
    EXPECT_EQ(p.qp[0]->counters[Counter::local_ack_timeout_err], 1u);
}

// 8. The UDP source port of a QP with lqpn 0x11 connected to rqpn 0x12 is 0xC132.
TEST(RxeRegression, UdpSourcePortFollowsRdmaGetUdpSport) {
    TwoEngines t(18);
    int err = 0;
    rc::Qp* spare =
        t.dev[1]->create_qp(t.pd[1], t.send_cq[1], t.recv_cq[1], rc::QpCap{}, false, &err);
    ASSERT_NE(spare, nullptr); // takes QPN 0x11 on side 1, so the next is 0x12
    QpPair p = t.connect();
    ASSERT_EQ(p.qp[0]->qpn, 0x11u);
    ASSERT_EQ(p.qp[1]->qpn, 0x12u);
    std::vector<std::uint16_t> sports[2];
    for (int s = 0; s < 2; ++s)
        t.filter[s].on_tx = [&, s](PktBuf& b) {
            sports[s].push_back(parse(b).udp->src_port.get());
            return true;
        };
    auto src = t.buffer(0, 16, 1);
    auto dst = t.buffer(1, 16, 0);
    rc::SendWqe w = TwoEngines::wqe(WrOpcode::rdma_write, 1, *src, 16);
    w.remote_addr = dst->addr();
    w.rkey = dst->mr->rkey;
    ASSERT_EQ(t.post_send(0, p.qp[0], w), 0);
    ASSERT_TRUE(t.run_until([&] { return !t.send_cqes[0].empty(); }));
    ASSERT_FALSE(sports[0].empty());
    ASSERT_FALSE(sports[1].empty());
    for (int s = 0; s < 2; ++s)
        for (auto port : sports[s])
            EXPECT_EQ(port, 0xC132) << "side " << s;
}

} // namespace
} // namespace droce::test
