/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The RC responder attacked behind a READ response still going out (lib/rc/responder.cc: requests
 * accepted behind it, answers owed): every kind of request and error behind one, PSN wrap, full
 * resource rings, ERR and RESET meanwhile, a randomized go-back-N requester with and without loss,
 * and hostile random requests, through ProtocolHarness as in responder_test.cc. The first three
 * tests each failed before the fix they name.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "peer.h"

namespace {

using namespace droce::test::responder;

// ------------------------------------------------------------------ attack helpers

using P = std::pair<Opcode, std::uint32_t>;

std::vector<P> sent_ops(Peer& p) {
    std::vector<P> got;
    for (std::size_t i = 0; i < p.h.sent.size(); ++i)
        got.emplace_back(p.out(i).op, p.out(i).psn);
    return got;
}

// Runs the QP as the engine's pass does (qp_run) a few times and reports whether it still asks for
// another pass (Device::pass keeps a QP in its active list, and never naps, while has_work says
// so).
bool still_has_work_after_passes(Peer& p, int passes = 5) {
    bool wait_release = false;
    for (int i = 0; i < passes; ++i)
        (void)rc::qp_run(p.h.qp, p.h.ctx, 64, &wait_release);
    return rc::qp_has_work(p.h.qp);
}

/** A READ of 1000 bytes at PSN 0 whose response the blocked tx path refused, then a SEND at PSN 4
 *  with no receive WQE: its RNR NAK owed behind the response. @return whether it is owed. */
bool owe_rnr_nak_behind_a_read(Peer& p) {
    auto& src = p.remote(1024);
    p.h.block_tx(true);
    p.read(0, src, 0, 1000);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 4, true), pattern(8, 1));
    return p.h.qp.resp.rnr_nak_owed;
}

// ------------------------------------------------------------------ found by this file

// An ERR QP sends nothing, so an ACK owed when it fails is dropped (qp_enter_error). It was kept:
// qp_run returns at once in ERR, so nothing cleared it, and qp_has_work asked for a pass for ever
// (the engine never napped: a core until the QP was destroyed). Reached by any failure while an
// ACK was owed behind a READ response: a modify to ERR, the READ's MR deregistered, a CQ overrun.
TEST(ResponderAttack, AnErrQpOwesNoAck) {
    for (int how = 0; how < 3; ++how) {
        SCOPED_TRACE(how == 0 ? "modify to ERR" : how == 1 ? "MR deregistered" : "CQ overrun");
        Peer p(rc::Mtu::mtu256);
        p.h.ctx.defer_acks = true;
        auto& src = p.remote(1024);
        auto& tgt = p.remote(8);
        auto& rbuf = p.buffer(64, 0);
        p.post_recv(rbuf, {64});
        p.h.block_tx(true);
        p.read(0, src, 0, 1000);                    // PSN 0-3, refused by the tx path
        p.write_byte(4, tgt.va(), tgt.mr->rkey, 1); // executed, its ACK owed until the READ is out
        ASSERT_TRUE(p.h.qp.resp.read_active);
        ASSERT_TRUE(p.h.qp.resp.ack_pending);
        if (how == 0) {
            rc::QpAttr a{};
            a.qp_state = rc::QpState::err;
            const std::uint32_t mtu[1] = {4096};
            ASSERT_EQ(rc::qp_modify(&p.h.qp, a, rc::kQpState, mtu, p.h.ctx), 0);
            p.h.block_tx(false);
        } else if (how == 1) {
            ASSERT_EQ(p.h.mrs.deregister(src.mr), 0);
            p.h.block_tx(false);
            rc::responder_run(p.h.qp, p.h.ctx, 100); // NAK remote access, QP to ERR
        } else {
            // A SEND behind the READ that overruns the receive CQ (class G: QP to ERR).
            while (p.h.recv_cq.ring.free_slots() > 0) {
                p.h.recv_cq.ring.producer_slot() = rc::Cqe{};
                p.h.recv_cq.ring.publish();
            }
            const auto d = pattern(8, 1);
            p.feed(Peer::req(Opcode::RC_SEND_ONLY, 5, true), d);
            p.h.block_tx(false);
        }
        if (how == 2 && p.h.qp.state != rc::QpState::err) continue; // dropped behind it (fix)
        ASSERT_EQ(p.h.qp.state, rc::QpState::err);
        (void)p.h.sent.size();
        EXPECT_FALSE(still_has_work_after_passes(p))
            << "ack_pending=" << p.h.qp.resp.ack_pending
            << ": the ERR QP asks for a pass for ever and nothing will ever clear it";
    }
}

// The same without a READ (older than the queue behind READs): a deferred ACK (the engine always
// defers) owed for a WRITE, then a SEND in the same receive burst that overruns the CQ (class G).
TEST(ResponderAttack, AnErrQpByCqOverrunOwesNoAck) {
    Peer p;
    p.h.ctx.defer_acks = true;
    auto& tgt = p.remote(8);
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    while (p.h.recv_cq.ring.free_slots() > 0) {
        p.h.recv_cq.ring.producer_slot() = rc::Cqe{};
        p.h.recv_cq.ring.publish();
    }
    p.write_byte(0, tgt.va(), tgt.mr->rkey, 1);
    const auto d = pattern(8, 1);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 1, true), d);
    ASSERT_EQ(p.h.qp.state, rc::QpState::err);
    EXPECT_FALSE(still_has_work_after_passes(p));
}

// A request behind a READ response that would take the QP to ERR once executed (a SEND with
// Invalidate, class J; a completion the CQ has no room for, class G) is not accepted behind it:
// the READ is answered first, as rxe's packet queue and a ConnectX do, and the request handled
// when it comes again. Accepted, it discarded the READ response (qp_enter_error), and the
// requester's READ ended in RETRY_EXC_ERR.
TEST(ResponderAttack, AFatalRequestBehindAReadLetsTheReadBeAnsweredFirst) {
    for (const bool inv : {true, false}) {
        SCOPED_TRACE(inv ? "SEND with invalidate" : "SEND overrunning the CQ");
        Peer p(rc::Mtu::mtu256);
        auto& src = p.remote(1024);
        std::ranges::copy(pattern(1024, 3), src.mem.begin());
        auto& rbuf = p.buffer(64, 0);
        p.post_recv(rbuf, {64});
        p.h.block_tx(true);
        p.read(0, src, 0, 1000); // PSN 0-3
        const auto d = pattern(12, 1);
        if (inv) {
            PacketFields s = Peer::req(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 4, true);
            s.inv_rkey = rbuf.mr->rkey;
            p.feed(s, d);
        } else {
            while (p.h.recv_cq.ring.free_slots() > 0) {
                p.h.recv_cq.ring.producer_slot() = rc::Cqe{};
                p.h.recv_cq.ring.publish();
            }
            p.feed(Peer::req(Opcode::RC_SEND_ONLY, 4, true), d);
        }
        p.h.block_tx(false);
        rc::responder_run(p.h.qp, p.h.ctx, 100);
        const auto got = sent_ops(p);
        if (got.size() < 4u) {
            ADD_FAILURE() << "the READ response (PSN 0-3) was never sent; QP "
                          << rc::to_string(p.h.qp.state);
            continue;
        }
        EXPECT_EQ(got[0], P(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0));
        EXPECT_EQ(got[3], P(Opcode::RC_RDMA_READ_RESPONSE_LAST, 3));
    }
}

// READs and atomics queued behind a duplicate READ's replay are answered after it: the queue
// begins after the PSN before the first queued request (ResponderState::queue_after), not after
// the replay's last PSN, from which the old, already answered resources were sent again and the
// queued ones never.
TEST(ResponderAttack, ARequestQueuedBehindAReplayIsAnswered) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    std::ranges::copy(pattern(1024, 3), src.mem.begin());
    auto& tgt = p.remote(8);
    p.read(0, src, 0, 100);   // PSN 0, answered
    p.read(1, src, 100, 100); // PSN 1, answered
    ASSERT_EQ(p.h.sent.size(), 2u);
    p.h.sent.clear();
    p.h.block_tx(true);
    p.read(0, src, 0, 100);    // the requester retries from PSN 0: replay, refused
    p.read(1, src, 100, 100);  // its retry of PSN 1: dropped behind the replay
    p.fetch_add(2, tgt, 5, 0); // new: executed and queued
    ASSERT_EQ(p.h.qp.resp.reads_queued, 1u);
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    const auto got = sent_ops(p);
    // rxe / ConnectX: 0 (replay), 1 (replay), 2 (ATOMIC ACKNOWLEDGE). droce must at least answer
    // the atomic that it executed.
    bool atomic_answered = false;
    for (const auto& g : got)
        if (g == P(Opcode::RC_ATOMIC_ACKNOWLEDGE, 2)) atomic_answered = true;
    EXPECT_TRUE(atomic_answered) << "sent " << got.size() << " frames, no ATOMIC ACKNOWLEDGE";
    EXPECT_FALSE(p.h.qp.resp.read_active);
}

// ------------------------------------------------------------------ what holds

// No ACK or NAK leaves ahead of a READ response whose PSN it covers (ignores replays, which
// start over at an older PSN after a duplicate).
void expect_no_ack_ahead_of_read_response(Peer& p) {
    bool have = false;
    Psn max_ack;
    for (std::size_t i = 0; i < p.h.sent.size(); ++i) {
        const Out o = p.out(i);
        const bool read_resp = o.op == Opcode::RC_RDMA_READ_RESPONSE_FIRST ||
                               o.op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE ||
                               o.op == Opcode::RC_RDMA_READ_RESPONSE_LAST ||
                               o.op == Opcode::RC_RDMA_READ_RESPONSE_ONLY;
        if (read_resp && have) {
            EXPECT_GT(Psn(o.psn).distance_from(max_ack), 0)
                << "READ response PSN " << o.psn << " after an ACK/NAK for " << max_ack.value();
        }
        if (o.op == Opcode::RC_ACKNOWLEDGE || o.op == Opcode::RC_ATOMIC_ACKNOWLEDGE) {
            if (!have || Psn(o.psn).distance_from(max_ack) > 0) max_ack = Psn(o.psn);
            have = true;
        }
    }
}

// Behind a READ (PSN 0-2) whose response the tx path refuses: the FIRST (PSN 3) of a 768-byte
// WRITE to @p tgt, accepted. @return the FIRST's fields (to send it again); @p d: the WRITE's data.
PacketFields write_first_behind_a_read(Peer& p, Peer::Buf& src, Peer::Buf& tgt,
                                       const std::vector<std::uint8_t>& d) {
    p.h.block_tx(true);
    p.read(0, src, 0, 600);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_FIRST, 3);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey;
    f.dma_len = 768;
    p.feed(f, std::span(d).subspan(0, 256));
    return f;
}

TEST(ResponderAttack, MultiPacketWriteBehindAReadWithABadMiddleIsDroppedThenNaked) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(1024);
    const auto d = pattern(768, 4);
    const PacketFields f = write_first_behind_a_read(p, src, tgt, d);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(4));
    // MIDDLE one byte short: bad length, dropped without a NAK.
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_MIDDLE, 4), std::span(d).subspan(256, 255));
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(4));
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    // The LAST, now out of sequence: dropped, no sequence NAK ahead of the response.
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_LAST, 5, true), std::span(d).subspan(512, 256));
    EXPECT_TRUE(p.h.sent.empty());
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 3u);
    EXPECT_EQ(p.out(2).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(std::vector<std::uint8_t>(tgt.mem.begin() + 256, tgt.mem.begin() + 257),
              std::vector<std::uint8_t>(1, 0xee));
    // The requester's retry: FIRST is a duplicate (ACKed), the bad MIDDLE is NAKed now.
    p.feed(f, std::span(d).subspan(0, 256));
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_MIDDLE, 4), std::span(d).subspan(256, 255));
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(3).syndrome, kAck);
    EXPECT_EQ(p.out(3).psn, 3u);
    EXPECT_EQ(p.out(4).syndrome, kNakInvReq);
    EXPECT_EQ(p.out(4).psn, 4u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
    expect_no_ack_ahead_of_read_response(p);
}

TEST(ResponderAttack, RkeyInvalidatedBetweenWritePacketsBehindAReadTouchesNothing) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(1024);
    const auto d = pattern(768, 4);
    (void)write_first_behind_a_read(p, src, tgt, d);
    ASSERT_EQ(p.h.mrs.deregister(tgt.mr), 0);
    const std::vector<std::uint8_t> before(tgt.mem.begin(), tgt.mem.end());
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_MIDDLE, 4), std::span(d).subspan(256, 256));
    EXPECT_EQ(std::vector<std::uint8_t>(tgt.mem.begin(), tgt.mem.end()), before);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(4));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 3u);
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_MIDDLE, 4), std::span(d).subspan(256, 256));
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(3).syndrome, kNakRemAccess);
    EXPECT_EQ(p.out(3).psn, 4u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

TEST(ResponderAttack, SendOpcodeSequenceErrorBehindAReadKeepsTheRwqeForTheNak) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    auto& rbuf = p.buffer(1024, 0);
    p.post_recv(rbuf, {1024}, 0x55);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // PSN 0-1
    const auto d = pattern(512, 2);
    p.feed(Peer::req(Opcode::RC_SEND_FIRST, 2), std::span(d).subspan(0, 256));
    p.write_byte(3, tgt.va(), tgt.mr->rkey,
                 9); // a WRITE in the middle of the SEND: opcode sequence error
    EXPECT_EQ(tgt.mem[0], 0xee);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(3));
    EXPECT_TRUE(ProtocolHarness::drain(p.h.recv_cq).empty());
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 2u);
    p.write_byte(3, tgt.va(), tgt.mr->rkey,
                 9); // sent again: NAKed, the RWQE completes in error, QP to ERR
    ASSERT_EQ(p.h.sent.size(), 3u);
    EXPECT_EQ(p.out(2).syndrome, kNakInvReq);
    auto c = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 0x55u);
    EXPECT_EQ(c[0].status, rc::WcStatus::rem_inv_req_err);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

// Its RNR NAK follows the response (owed, as the ACK is), and again when the requester retries.
TEST(ResponderAttack, WriteWithImmediateWithoutRwqeBehindAReadIsRnrNakedAfterTheResponse) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // PSN 0-1
    PacketFields w = Peer::req(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 2, true);
    w.va = tgt.va();
    w.rkey = tgt.mr->rkey;
    w.dma_len = 1;
    w.imm = 7;
    const std::uint8_t one[1] = {0x42};
    p.feed(w, one);
    EXPECT_EQ(tgt.mem[0], 0xee);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(2));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 3u);
    EXPECT_EQ(p.out(1).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(p.out(2).syndrome, droce::wire::make_syndrome(AethKind::rnr_nak, 0));
    EXPECT_EQ(p.out(2).psn, 2u);
    EXPECT_EQ(tgt.mem[0], 0xee);
    p.feed(w, one);
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(3).syndrome, droce::wire::make_syndrome(AethKind::rnr_nak, 0));
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
}

TEST(ResponderAttack, PsnWrapWithQueuedReadsAtomicsAndWrites) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(2048);
    std::ranges::copy(pattern(2048, 1), src.mem.begin());
    auto& tgt = p.remote(64);
    p.h.qp.resp.expected_psn = Psn(0xfffffe);
    p.h.block_tx(true);
    p.read(0xfffffe, src, 0, 600); // 0xfffffe, 0xffffff, 0
    p.write_byte(1, tgt.va(), tgt.mr->rkey, 1);
    p.fetch_add(2, tgt, 3, 8);
    p.read(3, src, 600, 300); // 3-4
    p.write_byte(5, tgt.va(), tgt.mr->rkey, 5);
    p.fetch_add(6, tgt, 4, 16);
    p.write_byte(7, tgt.va(), tgt.mr->rkey, 7);
    EXPECT_EQ(p.h.qp.resp.reads_queued, 3u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(8));
    p.h.block_tx(false);
    for (int i = 0; i < 20; ++i)
        rc::responder_run(p.h.qp, p.h.ctx, 1);
    const std::vector<P> want = {
        {Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0xfffffe},
        {Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0xffffff},
        {Opcode::RC_RDMA_READ_RESPONSE_LAST, 0},
        {Opcode::RC_ACKNOWLEDGE, 1},
        {Opcode::RC_ATOMIC_ACKNOWLEDGE, 2},
        {Opcode::RC_RDMA_READ_RESPONSE_FIRST, 3},
        {Opcode::RC_RDMA_READ_RESPONSE_LAST, 4},
        {Opcode::RC_ACKNOWLEDGE, 5}, // hmm: only if the ACK for 5 leaves between 4 and 6
        {Opcode::RC_ATOMIC_ACKNOWLEDGE, 6},
        {Opcode::RC_ACKNOWLEDGE, 7},
    };
    const auto got = sent_ops(p);
    // The owed ACK is the newest (7): it follows the last answer; ACK 1 and 5 are covered by the
    // responses after them. Either form is correct as long as the order holds.
    std::vector<P> answers;
    for (const auto& g : got)
        if (g.first != Opcode::RC_ACKNOWLEDGE) answers.push_back(g);
    std::vector<P> want_answers;
    for (const auto& g : want)
        if (g.first != Opcode::RC_ACKNOWLEDGE) want_answers.push_back(g);
    EXPECT_EQ(answers, want_answers);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back(), P(Opcode::RC_ACKNOWLEDGE, 7));
    expect_no_ack_ahead_of_read_response(p);
    EXPECT_FALSE(p.h.qp.resp.read_active);
    EXPECT_FALSE(p.h.qp.resp.ack_pending);
    EXPECT_FALSE(rc::qp_has_work(p.h.qp));
}

TEST(ResponderAttack, MaxDestRdAtomicOneDropsAtomicsBehindAReadWithoutExecutingThem) {
    Peer p(rc::Mtu::mtu256);
    p.h.qp.attr.max_dest_rd_atomic = 1;
    auto& src = p.remote(1024);
    auto& tgt = p.remote(16);
    std::memset(tgt.mem.data(), 0, 16);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // 0-1
    p.write_byte(2, tgt.va(), tgt.mr->rkey, 0x11);
    p.fetch_add(3, tgt, 1, 8); // no room in a ring of one: dropped, not executed
    EXPECT_EQ(Peer::u64(tgt, 8), 0u);
    p.read(3, src, 0, 10); // nor a READ
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(3));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    EXPECT_EQ(sent_ops(p), (std::vector<P>{{Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0},
                                           {Opcode::RC_RDMA_READ_RESPONSE_LAST, 1},
                                           {Opcode::RC_ACKNOWLEDGE, 2}}));
    p.fetch_add(3, tgt, 1, 8);
    p.fetch_add(3, tgt, 1, 8); // duplicate: replayed
    EXPECT_EQ(Peer::u64(tgt, 8), 1u);
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(4).orig, 0u);
}

TEST(ResponderAttack, MaxDestRdAtomicZeroNaksAReadOrAtomic) {
    Peer p;
    p.h.qp.attr.max_dest_rd_atomic = 0;
    auto& tgt = p.remote(16);
    p.fetch_add(0, tgt, 1, 0);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).syndrome, kNakInvReq);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

TEST(ResponderAttack, RingFullOfQueuedAtomicsExecutesEachOnceAndAnswersInOrder) {
    Peer p(rc::Mtu::mtu256);
    p.h.qp.attr.max_dest_rd_atomic = 4;
    auto& src = p.remote(1024);
    auto& tgt = p.remote(64);
    std::memset(tgt.mem.data(), 0, 64);
    p.h.block_tx(true);
    p.read(0, src, 0, 1000); // 0-3
    for (std::uint32_t i = 0; i < 3; ++i)
        p.fetch_add(4 + i, tgt, 1, 0);
    p.fetch_add(7, tgt, 1, 0); // a fourth behind: no room, dropped unexecuted
    EXPECT_EQ(Peer::u64(tgt, 0), 3u);
    for (std::uint32_t i = 0; i < 3; ++i)
        p.fetch_add(4 + i, tgt, 1, 0); // duplicates while queued: dropped
    EXPECT_EQ(Peer::u64(tgt, 0), 3u);
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    const auto got = sent_ops(p);
    ASSERT_EQ(got.size(), 7u);
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(got[4 + i], P(Opcode::RC_ATOMIC_ACKNOWLEDGE, 4 + i));
        EXPECT_EQ(p.out(4 + i).orig, i);
    }
    p.fetch_add(7, tgt, 1, 0);
    for (std::uint32_t i = 0; i < 4; ++i)
        p.fetch_add(4 + i, tgt, 1, 0); // duplicates now: replayed from the ring
    EXPECT_EQ(Peer::u64(tgt, 0), 4u);
    ASSERT_EQ(p.h.sent.size(), 12u);
    for (std::uint32_t i = 0; i < 4; ++i) {
        EXPECT_EQ(p.out(8 + i).psn, 4 + i);
        EXPECT_EQ(p.out(8 + i).orig, i);
    }
}

TEST(ResponderAttack, ZeroLengthReadsQueuedBehindARead) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // 0-1
    PacketFields z = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 2);
    z.rkey = 0xdeadbeef;
    z.va = 0x1234;
    z.dma_len = 0;
    p.feed(z);
    p.write_byte(3, tgt.va(), tgt.mr->rkey, 3);
    z.psn = Psn(4);
    p.feed(z);
    EXPECT_EQ(p.h.qp.resp.reads_queued, 2u);
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    EXPECT_EQ(sent_ops(p), (std::vector<P>{{Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0},
                                           {Opcode::RC_RDMA_READ_RESPONSE_LAST, 1},
                                           {Opcode::RC_RDMA_READ_RESPONSE_ONLY, 2},
                                           {Opcode::RC_ACKNOWLEDGE, 3},
                                           {Opcode::RC_RDMA_READ_RESPONSE_ONLY, 4}}));
    EXPECT_TRUE(p.out(2).payload.empty());
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
}

TEST(ResponderAttack, MrOfAQueuedReadDeregisteredNaksAtItsPsnAfterWhatIsAhead) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& src2 = p.remote(1024);
    auto& tgt = p.remote(8);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // 0-1
    p.write_byte(2, tgt.va(), tgt.mr->rkey, 2);
    p.read(3, src2, 0, 300); // 3-4, queued
    ASSERT_EQ(p.h.mrs.deregister(src2.mr), 0);
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    const auto got = sent_ops(p);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[2], P(Opcode::RC_ACKNOWLEDGE, 2));
    EXPECT_EQ(got[3], P(Opcode::RC_ACKNOWLEDGE, 3));
    EXPECT_EQ(p.out(3).syndrome, kNakRemAccess);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

TEST(ResponderAttack, ResetWithResponsesAndAnAckPendingLeavesNothing) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    p.h.block_tx(true);
    p.read(0, src, 0, 300);
    p.write_byte(2, tgt.va(), tgt.mr->rkey, 2);
    p.fetch_add(3, tgt, 1, 0);
    rc::QpAttr a{};
    a.qp_state = rc::QpState::reset;
    const std::uint32_t mtu[1] = {4096};
    ASSERT_EQ(rc::qp_modify(&p.h.qp, a, rc::kQpState, mtu, p.h.ctx), 0);
    p.h.block_tx(false);
    EXPECT_FALSE(still_has_work_after_passes(p));
    EXPECT_TRUE(p.h.sent.empty());
}

TEST(ResponderAttack, OwedAckRefusedAtTheEndOfAReadStaysOwedAndLeavesAfter) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    p.h.block_tx(true);
    p.read(0, src, 0, 300); // 0-1
    p.write_byte(2, tgt.va(), tgt.mr->rkey, 2);
    p.read(3, src, 0, 300); // 3-4
    p.write_byte(5, tgt.va(), tgt.mr->rkey, 5, false);
    p.write_byte(6, tgt.va(), tgt.mr->rkey, 6, false); // no AckReq: ACK 2 is still the one owed
    // Room for exactly the first READ's responses: nothing else this pass.
    p.h.block_tx(false);
    const std::uint32_t room[1] = {2};
    p.h.stage.open(room, 2);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    EXPECT_TRUE(p.h.qp.resp.read_active);
    EXPECT_TRUE(p.h.qp.resp.ack_pending);
    EXPECT_TRUE(rc::qp_has_work(p.h.qp));
    for (int i = 0; i < 4; ++i) {
        (void)p.h.sent.size(); // a new pass with room
        rc::responder_run(p.h.qp, p.h.ctx, 100);
    }
    const auto got = sent_ops(p);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back(), P(Opcode::RC_ACKNOWLEDGE, 2)); // stale, after READ 3-4, harmless
    expect_no_ack_ahead_of_read_response(p);
    EXPECT_FALSE(rc::qp_has_work(p.h.qp));
}

// ------------------------------------------------------------------ randomized requester model

// A go-back-N requester over a responder whose tx path refuses at random (room 0..3 packets or
// plenty per pass), with optional request and response loss. Messages: READ, WRITE and SEND of
// 1..4 packets, fetch-and-add on one counter. At most max_dest_rd_atomic READs/atomics
// outstanding, as a requester's max_rd_atomic. Checks: every message completes; without loss
// nothing needs a timeout or a sequence NAK; every fetch-and-add executes once and returns the
// count before it; READ data is the source's; each SEND completes once, with its data.
struct FuzzResult {
    bool all_done = false;
    int timeouts = 0;
    int seq_naks = 0;
    int violations = 0;
    std::string first_violation;
};

FuzzResult run_fuzz(std::uint32_t seed, bool lossy, bool defer, std::uint32_t start_psn,
                    std::uint32_t cap) {
    FuzzResult res;
    std::uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    const auto rnd = [&](std::uint32_t n) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return static_cast<std::uint32_t>(rng % n);
    };
    Peer p(rc::Mtu::mtu256);
    p.h.ctx.defer_acks = defer;
    p.h.qp.attr.max_dest_rd_atomic = cap;
    p.h.qp.resp.expected_psn = Psn(start_psn);
    const std::uint32_t m = p.mtu();
    auto& src = p.remote(4096);
    std::ranges::copy(pattern(4096, 11), src.mem.begin());
    auto& tgt = p.remote(4096);
    auto& ctr = p.remote(8);
    std::memset(ctr.mem.data(), 0, 8);
    auto& rbuf = p.buffer(64 * 1024, 0);

    enum Kind { kRead, kWrite, kSend, kFadd };
    struct Msg {
        Kind kind;
        Psn first, last;
        std::size_t first_pkt = 0;
        std::uint32_t off = 0, len = 0;
        std::uint64_t orig = ~0ull;
        std::vector<std::uint8_t> data;
    };
    struct Pkt {
        PacketFields f;
        std::vector<std::uint8_t> payload;
        std::size_t msg;
    };
    std::vector<Msg> msgs;
    std::vector<Pkt> pkts;
    Psn psn(start_psn);
    const int n_msgs = 60;
    int sends = 0;
    for (int i = 0; i < n_msgs; ++i) {
        Msg g;
        g.kind = static_cast<Kind>(rnd(4));
        g.first = psn;
        g.first_pkt = pkts.size();
        if (g.kind == kRead) {
            g.len = rnd(5) == 0 ? 0 : 1 + rnd(4 * m);
            g.off = rnd(4096 - g.len + 1);
            PacketFields f = Peer::req(Opcode::RC_RDMA_READ_REQUEST, psn.value());
            f.va = src.va() + g.off;
            f.rkey = src.mr->rkey;
            f.dma_len = g.len;
            pkts.push_back({f, {}, msgs.size()});
            const std::uint32_t n = g.len == 0 ? 1 : (g.len + m - 1) / m;
            g.last = psn + (n - 1);
            psn = psn + n;
        } else if (g.kind == kFadd) {
            PacketFields f = Peer::req(Opcode::RC_FETCH_ADD, psn.value());
            f.va = ctr.va();
            f.rkey = ctr.mr->rkey;
            f.swap_add = 1;
            pkts.push_back({f, {}, msgs.size()});
            g.last = psn;
            psn = psn + 1;
        } else {
            const bool write = g.kind == kWrite;
            g.len = 1 + rnd(4 * m);
            g.data = pattern(g.len, static_cast<std::uint8_t>(i));
            if (!write) {
                rc::RecvWqe w;
                w.wr_id = static_cast<std::uint64_t>(i);
                w.sg_list[0] = rc::Sge{rbuf.va() + 1024ull * static_cast<std::uint64_t>(sends),
                                       1024, rbuf.mr->lkey};
                w.num_sge = 1;
                p.h.post_recv(w);
                ++sends;
            }
            const std::uint32_t n = (g.len + m - 1) / m;
            for (std::uint32_t k = 0; k < n; ++k) {
                const bool first = k == 0, last = k + 1 == n;
                PacketFields f =
                    Peer::req(Peer::message_opcode(write, first, last), (psn + k).value(), last);
                f.va = tgt.va();
                f.rkey = tgt.mr->rkey;
                f.dma_len = g.len;
                const std::uint32_t o = k * m, l = std::min(m, g.len - o);
                pkts.push_back(
                    {f, std::vector<std::uint8_t>(g.data.begin() + o, g.data.begin() + o + l),
                     msgs.size()});
            }
            g.last = psn + (n - 1);
            psn = psn + n;
        }
        msgs.push_back(std::move(g));
    }

    std::size_t next_pkt = 0, cur = 0, consumed = 0;
    Psn resp_psn(start_psn);
    int idle = 0;
    std::vector<std::uint8_t> read_acc;
    const auto violate = [&](const std::string& s) {
        if (res.violations++ == 0) res.first_violation = s;
    };
    const auto rewind_to_msg = [&](std::size_t mi) {
        next_pkt = msgs[mi].first_pkt;
        resp_psn = msgs[mi].first;
        read_acc.clear();
    };
    const auto ack_upto = [&](Psn a) { // cumulative: complete whole messages up to a
        while (cur < msgs.size() && msgs[cur].last.distance_from(a) <= 0) {
            if (msgs[cur].kind == kRead || msgs[cur].kind == kFadd) {
                rewind_to_msg(cur); // implied NAK: an ACK beyond an unanswered READ / atomic
                return false;
            }
            ++cur;
            resp_psn = cur < msgs.size() ? msgs[cur].first : psn;
        }
        return true;
    };
    bool saw_ack_beyond = false;
    Psn max_ack;
    for (int step = 0; step < 20000 && cur < msgs.size(); ++step) {
        // The requester sends a few packets (go-back-N), max rd/atomic outstanding.
        const std::uint32_t burst = 1 + rnd(6);
        for (std::uint32_t b = 0; b < burst && next_pkt < pkts.size(); ++b) {
            const Pkt& k = pkts[next_pkt];
            const Msg& g = msgs[k.msg];
            if ((g.kind == kRead || g.kind == kFadd)) {
                std::uint32_t rd = 0;
                for (std::size_t i = cur; i < k.msg; ++i)
                    if (msgs[i].kind == kRead || msgs[i].kind == kFadd) ++rd;
                if (rd >= cap) break;
            }
            if (k.msg > cur + 12) break; // window
            if (std::getenv("FUZZ_TRACE") && std::atoi(std::getenv("FUZZ_TRACE")) == int(seed))
                std::printf("step %d feed op=%d psn=%u ackreq=%d len=%u\n", step, int(k.f.opcode),
                            k.f.psn.value(), k.f.ack_req, k.f.dma_len);
            if (!(lossy && rnd(25) == 0)) p.feed(k.f, k.payload);
            ++next_pkt;
        }
        if (defer) rc::responder_flush_ack(p.h.qp, p.h.ctx);
        if (rnd(3) != 0) rc::responder_run(p.h.qp, p.h.ctx, 1 + rnd(4));
        // What went out this pass reaches the requester (or is lost).
        const std::size_t total = p.h.sent.size(); // also opens a new pass
        const std::uint32_t rooms[] = {0, 1, 2, 3, ProtocolHarness::kStageDepth};
        const std::uint32_t room[1] = {rooms[rnd(5)]};
        p.h.stage.open(room, room[0]);
        bool progress = false;
        for (; consumed < total; ++consumed) {
            const Out o = p.out(consumed);
            const bool read_resp = o.op == Opcode::RC_RDMA_READ_RESPONSE_FIRST ||
                                   o.op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE ||
                                   o.op == Opcode::RC_RDMA_READ_RESPONSE_LAST ||
                                   o.op == Opcode::RC_RDMA_READ_RESPONSE_ONLY;
            if (std::getenv("FUZZ_TRACE") && std::atoi(std::getenv("FUZZ_TRACE")) == int(seed))
                std::printf("step %d out op=%d psn=%u syn=%02x msn=%u\n", step, int(o.op), o.psn,
                            o.syndrome, o.msn);
            if (!lossy && read_resp && saw_ack_beyond && Psn(o.psn).distance_from(max_ack) <= 0)
                violate("READ response " + std::to_string(o.psn) + " after ACK " +
                        std::to_string(max_ack.value()));
            if (o.op == Opcode::RC_ACKNOWLEDGE || o.op == Opcode::RC_ATOMIC_ACKNOWLEDGE) {
                if (!saw_ack_beyond || Psn(o.psn).distance_from(max_ack) > 0) max_ack = Psn(o.psn);
                saw_ack_beyond = true;
            }
            if (lossy && rnd(25) == 0) continue;
            if (cur >= msgs.size()) continue;
            if (read_resp || o.op == Opcode::RC_ATOMIC_ACKNOWLEDGE) {
                // A response acknowledges the SENDs and WRITEs before it (implicitly).
                while (cur < msgs.size() && msgs[cur].kind != kRead && msgs[cur].kind != kFadd &&
                       msgs[cur].last.distance_from(Psn(o.psn)) < 0) {
                    ++cur;
                    resp_psn = cur < msgs.size() ? msgs[cur].first : psn;
                    progress = true;
                }
                if (cur >= msgs.size()) continue;
            }
            Msg& g = msgs[cur];
            if (read_resp) {
                if (g.kind != kRead || Psn(o.psn) != resp_psn) continue;
                const std::uint32_t idx =
                    static_cast<std::uint32_t>(o.psn - g.first.value()) & 0xffffffu;
                const std::uint32_t off = idx * m;
                const std::uint32_t len = g.len == 0 ? 0 : std::min(m, g.len - off);
                if (o.payload != std::vector<std::uint8_t>(src.mem.begin() + g.off + off,
                                                           src.mem.begin() + g.off + off + len))
                    violate("READ data wrong at PSN " + std::to_string(o.psn));
                resp_psn = resp_psn + 1;
                progress = true;
                if (resp_psn.distance_from(g.last) > 0) {
                    ++cur;
                    resp_psn = cur < msgs.size() ? msgs[cur].first : psn;
                }
            } else if (o.op == Opcode::RC_ATOMIC_ACKNOWLEDGE) {
                if (g.kind != kFadd || Psn(o.psn) != g.first) continue;
                g.orig = o.orig;
                ++cur;
                resp_psn = cur < msgs.size() ? msgs[cur].first : psn;
                progress = true;
            } else if (o.op == Opcode::RC_ACKNOWLEDGE) {
                const std::uint8_t kind = o.syndrome >> 5;
                if (kind == 0) {
                    const std::size_t before = cur;
                    ack_upto(Psn(o.psn));
                    progress = progress || cur != before;
                } else if (o.syndrome == kNakSeq) {
                    ++res.seq_naks;
                    if (ack_upto(Psn(o.psn) - 1))
                        for (std::size_t i = 0; i < pkts.size(); ++i)
                            if (pkts[i].f.psn == Psn(o.psn)) next_pkt = i;
                    progress = true;
                } else if (kind == 1) { // RNR NAK
                    if (ack_upto(Psn(o.psn) - 1)) rewind_to_msg(cur);
                } else {
                    violate("NAK syndrome " + std::to_string(o.syndrome) + " at PSN " +
                            std::to_string(o.psn));
                    return res;
                }
            }
        }
        if (progress) {
            idle = 0;
        } else if (++idle > 40 && cur < msgs.size()) { // the ACK timer
            ++res.timeouts;
            if (std::getenv("FUZZ_TRACE") && std::atoi(std::getenv("FUZZ_TRACE")) == int(seed))
                std::printf("step %d TIMEOUT cur=%zu first=%u kind=%d resp_psn=%u\n", step, cur,
                            msgs[cur].first.value(), int(msgs[cur].kind), resp_psn.value());
            idle = 0;
            rewind_to_msg(cur);
        }
    }
    res.all_done = cur >= msgs.size();
    // Exactly once: the n-th fetch-and-add saw n - 1 before it, the counter is their number.
    std::uint64_t fadds = 0;
    for (const Msg& g : msgs)
        if (g.kind == kFadd) {
            if (g.orig != fadds)
                violate("fetch-and-add " + std::to_string(fadds) + " returned " +
                        std::to_string(g.orig));
            ++fadds;
        }
    if (Peer::u64(ctr, 0) != fadds)
        violate("counter " + std::to_string(Peer::u64(ctr, 0)) + " after " + std::to_string(fadds) +
                " fetch-and-adds");
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    if (res.all_done && cqes.size() != static_cast<std::size_t>(sends))
        violate(std::to_string(cqes.size()) + " receive completions for " + std::to_string(sends));
    int si = 0;
    for (std::size_t i = 0; i < msgs.size() && si < static_cast<int>(cqes.size()); ++i) {
        if (msgs[i].kind != kSend) continue;
        const rc::Cqe& c = cqes[static_cast<std::size_t>(si)];
        if (c.status != rc::WcStatus::success || c.wr_id != i || c.byte_len != msgs[i].len ||
            std::memcmp(rbuf.mem.data() + 1024 * si, msgs[i].data.data(), msgs[i].len) != 0)
            violate("SEND " + std::to_string(i) + " completed wrong");
        ++si;
    }
    if (p.h.qp.state != rc::QpState::rts) violate("QP left RTS");
    // Drain: nothing owed stays owed.
    (void)p.h.sent.size();
    rc::responder_run(p.h.qp, p.h.ctx, 1000);
    (void)p.h.sent.size();
    if (rc::qp_has_work(p.h.qp)) violate("has_work after everything completed");
    return res;
}

TEST(ResponderAttack, RandomizedRequesterWithoutLossNeedsNoTimer) {
    int bad = 0;
    // The engine always defers ACKs (Device: ctx_.defer_acks = true); without it an ACK the tx
    // path refuses is lost by design of send_ack(), which the harness alone can exercise.
    for (std::uint32_t seed = 1; seed <= 3000; ++seed) {
        const bool defer = true;
        const std::uint32_t start = seed % 3 == 0 ? 0xffffe0u : seed * 977u;
        const std::uint32_t cap = 1 + seed % 4;
        const FuzzResult r = run_fuzz(seed, false, defer, start & 0xffffffu, cap);
        if (!r.all_done || r.timeouts != 0 || r.seq_naks != 0 || r.violations != 0) {
            if (++bad <= 5)
                ADD_FAILURE() << "seed " << seed << " cap " << cap << " defer " << defer
                              << ": done=" << r.all_done << " timeouts=" << r.timeouts
                              << " seq_naks=" << r.seq_naks << " violations=" << r.violations << " "
                              << r.first_violation;
        }
    }
    EXPECT_EQ(bad, 0);
}

TEST(ResponderAttack, RandomizedRequesterWithLossCompletesExactlyOnce) {
    int bad = 0, timeouts = 0;
    for (std::uint32_t seed = 1; seed <= 3000; ++seed) {
        const bool defer = seed % 2 == 1;
        const std::uint32_t start = seed % 3 == 1 ? 0xfffff0u : seed * 7919u;
        const std::uint32_t cap = 1 + seed % 4;
        const FuzzResult r = run_fuzz(seed, true, defer, start & 0xffffffu, cap);
        timeouts += r.timeouts;
        if (!r.all_done || r.violations != 0) {
            if (++bad <= 5)
                ADD_FAILURE() << "seed " << seed << " cap " << cap << " defer " << defer
                              << ": done=" << r.all_done << " timeouts=" << r.timeouts
                              << " violations=" << r.violations << " " << r.first_violation;
        }
    }
    EXPECT_EQ(bad, 0);
    std::printf("lossy runs: %d timeouts in 3000 runs\n", timeouts);
}

// Hostile requester: random opcodes, PSNs near the expected one, rkeys, lengths, MRs deregistered
// and registered again, the tx path refusing at random, QP modified to ERR / RESET and back. Only
// the sanitizers judge (build this file with -fsanitize=address,undefined); no crash, no access
// outside a region.
TEST(ResponderAttack, HostileRandomRequestsBehindReadResponses) {
    static const Opcode kOps[] = {Opcode::RC_SEND_FIRST,
                                  Opcode::RC_SEND_MIDDLE,
                                  Opcode::RC_SEND_LAST,
                                  Opcode::RC_SEND_ONLY,
                                  Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                                  Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
                                  Opcode::RC_RDMA_WRITE_FIRST,
                                  Opcode::RC_RDMA_WRITE_MIDDLE,
                                  Opcode::RC_RDMA_WRITE_LAST,
                                  Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                                  Opcode::RC_RDMA_WRITE_ONLY,
                                  Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                                  Opcode::RC_RDMA_READ_REQUEST,
                                  Opcode::RC_COMPARE_SWAP,
                                  Opcode::RC_FETCH_ADD};
    for (std::uint32_t seed = 1; seed <= 300; ++seed) {
        std::uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 7;
        const auto rnd = [&](std::uint32_t n) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            return static_cast<std::uint32_t>(rng % n);
        };
        Peer p(rc::Mtu::mtu256);
        p.h.ctx.defer_acks = rnd(2) == 0;
        p.h.qp.attr.max_dest_rd_atomic = rnd(5);
        p.h.qp.resp.expected_psn = Psn(0xfffff0u + rnd(32));
        std::vector<Peer::Buf*> bufs;
        for (int i = 0; i < 3; ++i)
            bufs.push_back(&p.remote(1024 + 8 * static_cast<std::size_t>(i)));
        auto& rbuf = p.buffer(4096, 0);
        for (int i = 0; i < 8; ++i)
            p.post_recv(rbuf, {512, 256});
        const std::uint32_t mtu[1] = {4096};
        for (int step = 0; step < 400; ++step) {
            const std::uint32_t r = rnd(100);
            if (r < 8) {
                p.h.block_tx(rnd(2) == 0);
            } else if (r < 10) {
                Peer::Buf& b = *bufs[rnd(3)];
                if (b.mr != nullptr && rnd(2) == 0) {
                    (void)p.h.mrs.deregister(b.mr);
                    b.mr = p.h.reg(b.mem, rc::kAccessRemoteWrite | rc::kAccessRemoteRead |
                                              rc::kAccessRemoteAtomic | rc::kAccessLocalWrite);
                }
            } else if (r < 11) {
                rc::QpAttr a{};
                a.qp_state = rnd(2) == 0 ? rc::QpState::err : rc::QpState::reset;
                (void)rc::qp_modify(&p.h.qp, a, rc::kQpState, mtu, p.h.ctx);
                if (a.qp_state == rc::QpState::reset) { // back to RTS by hand (the harness way)
                    p.h.qp.state = rc::QpState::rts;
                    p.h.qp.attr.qp_state = rc::QpState::rts;
                    p.h.qp.resp.expected_psn = Psn(rnd(1u << 24));
                }
            } else if (r < 25) {
                bool wr = false;
                (void)rc::qp_run(p.h.qp, p.h.ctx, 1 + rnd(8), &wr);
                if (p.h.ctx.defer_acks) rc::responder_flush_ack(p.h.qp, p.h.ctx);
                (void)p.h.sent.size();
            } else {
                const Opcode op = kOps[rnd(sizeof kOps / sizeof kOps[0])];
                PacketFields f =
                    Peer::req(op, (p.h.qp.resp.expected_psn + rnd(3) - 1).value(), rnd(2) == 0);
                Peer::Buf& b = *bufs[rnd(3)];
                f.rkey = rnd(8) == 0 ? rnd(1u << 16) : (b.mr ? b.mr->rkey : 0);
                f.va = b.va() + (rnd(4) == 0 ? rnd(2048) : rnd(64) * 8);
                f.dma_len = rnd(4) == 0 ? rnd(3000) : rnd(600);
                f.swap_add = 1;
                f.inv_rkey = f.rkey;
                const std::uint32_t n = rnd(4) == 0 ? rnd(300) : (rnd(2) == 0 ? 256 : rnd(257));
                std::vector<std::uint8_t> pl(n, static_cast<std::uint8_t>(step));
                if (op == Opcode::RC_RDMA_READ_REQUEST || op == Opcode::RC_COMPARE_SWAP ||
                    op == Opcode::RC_FETCH_ADD)
                    pl.clear();
                p.feed(f, pl);
                if (rnd(10) == 0)
                    for (int i = 0; i < 2 && p.h.qp.rq.free_slots() > 0; ++i)
                        p.post_recv(rbuf, {512, 256});
                (void)ProtocolHarness::drain(p.h.recv_cq);
            }
        }
    }
}

} // namespace

// ------------------------------------------------------------------ owed RNR NAKs
namespace {

// READ 0-3 (refused), READ at 4 and FETCH_ADD at 5 queued, WRITE at 6 (ACK owed), SEND at 7 with
// no receive WQE (RNR NAK owed). Whatever room the tx path has per pass, the responses, the ACK and
// the NAK leave once each, in this order, and the QP then asks for no pass. Also across the PSN
// wrap (base 0xfffffa).
TEST(ResponderAttack, OwedRnrNakAfterQueuedReadsAtomicAndAckAtEveryRoom) {
    for (const std::uint32_t base : {0u, 0xfffffau}) {
        for (std::uint32_t room = 1; room <= 9; ++room) {
            SCOPED_TRACE("base " + std::to_string(base) + " room " + std::to_string(room));
            Peer p(rc::Mtu::mtu256);
            p.h.qp.resp.expected_psn = Psn(base);
            const auto at = [&](std::uint32_t k) { return (base + k) & 0xffffffu; };
            auto& src = p.remote(1024);
            auto& tgt = p.remote(8);
            auto& cnt = p.remote(8);
            p.h.block_tx(true);
            p.read(at(0), src, 0, 1000); // 4 packets
            p.read(at(4), src, 0, 10);
            p.fetch_add(at(5), cnt, 3);
            p.write_byte(at(6), tgt.va(), tgt.mr->rkey, 0x5a);
            const auto d = pattern(8, 1);
            p.feed(Peer::req(Opcode::RC_SEND_ONLY, at(7), true), d);
            ASSERT_TRUE(p.h.qp.resp.rnr_nak_owed);
            ASSERT_EQ(p.h.qp.resp.expected_psn, Psn(at(7)));
            p.h.limit_tx(room);
            p.h.block_tx(false);
            bool wait_release = false;
            for (int i = 0; i < 40; ++i) {
                (void)p.h.sent.size();
                p.h.reopen_stage();
                (void)rc::qp_run(p.h.qp, p.h.ctx, 64, &wait_release);
            }
            const std::vector<P> want = {{Opcode::RC_RDMA_READ_RESPONSE_FIRST, at(0)},
                                         {Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, at(1)},
                                         {Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, at(2)},
                                         {Opcode::RC_RDMA_READ_RESPONSE_LAST, at(3)},
                                         {Opcode::RC_RDMA_READ_RESPONSE_ONLY, at(4)},
                                         {Opcode::RC_ATOMIC_ACKNOWLEDGE, at(5)},
                                         {Opcode::RC_ACKNOWLEDGE, at(6)},
                                         {Opcode::RC_ACKNOWLEDGE, at(7)}};
            EXPECT_EQ(sent_ops(p), want);
            if (p.h.sent.size() == 8) {
                EXPECT_EQ(p.out(6).syndrome, kAck);
                EXPECT_EQ(p.out(7).syndrome,
                          droce::wire::make_syndrome(AethKind::rnr_nak, p.h.qp.attr.min_rnr_timer));
            }
            EXPECT_EQ(p.h.qp.counters[Counter::rnr_naks_sent], 1u);
            EXPECT_FALSE(p.h.qp.resp.rnr_nak_owed);
            EXPECT_FALSE(rc::qp_has_work(p.h.qp));
        }
    }
}

// An owed RNR NAK and a modify: to SQD it still leaves; to ERR / RESET it is dropped and the QP
// asks for no pass.
TEST(ResponderAttack, OwedRnrNakAcrossModify) {
    for (const auto to : {rc::QpState::sqd, rc::QpState::err, rc::QpState::reset}) {
        SCOPED_TRACE(static_cast<int>(to));
        Peer p(rc::Mtu::mtu256);
        ASSERT_TRUE(owe_rnr_nak_behind_a_read(p));
        rc::QpAttr a{};
        a.qp_state = to;
        const std::uint32_t mtu[1] = {4096};
        const int rc_ = rc::qp_modify(&p.h.qp, a, rc::kQpState, mtu, p.h.ctx);
        if (rc_ != 0) {
            ADD_FAILURE() << "modify refused " << rc_;
            continue;
        }
        p.h.block_tx(false);
        const bool work = still_has_work_after_passes(p);
        EXPECT_FALSE(work);
        if (to == rc::QpState::sqd) {
            const auto got = sent_ops(p);
            ASSERT_EQ(got.size(), 5u);
            EXPECT_EQ(got[4], P(Opcode::RC_ACKNOWLEDGE, 4));
        }
    }
}

// The NAK refused outside a READ (handle_error), then a duplicate SEND, a duplicate READ and the
// retry with a receive posted: the NAK leaves once, first, and the retry is accepted.
TEST(ResponderAttack, RefusedRnrNakThenDuplicatesThenRetry) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    p.read(0, src, 0, 10); // PSN 0, answered
    ASSERT_EQ(p.h.sent.size(), 1u);
    p.h.block_tx(true);
    const auto d = pattern(8, 1);
    const PacketFields s = Peer::req(Opcode::RC_SEND_ONLY, 1, true);
    p.feed(s, d);
    ASSERT_TRUE(p.h.qp.resp.rnr_nak_owed);
    p.h.block_tx(false);
    p.read(0, src, 0, 10); // duplicate READ: replay
    const auto got = sent_ops(p);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[1], P(Opcode::RC_ACKNOWLEDGE, 1)); // the owed NAK, then the replay
    EXPECT_EQ(got[2], P(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0));
    EXPECT_FALSE(p.h.qp.resp.rnr_nak_owed);
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    p.feed(s, d);
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(3).syndrome, kAck);
    EXPECT_EQ(p.h.qp.counters[Counter::rnr_naks_sent], 1u);
    EXPECT_FALSE(still_has_work_after_passes(p));
}

// The path is unresolved while the NAK is owed: the READ and the NAK wait for the neighbour, and
// once it is resolved they leave in order, nothing left to spin on.
TEST(ResponderAttack, OwedRnrNakPathUnresolvedDoesNotSpin) {
    Peer p(rc::Mtu::mtu256);
    ASSERT_TRUE(owe_rnr_nak_behind_a_read(p));
    p.h.block_tx(false);
    p.h.qp.path_resolved = false;
    (void)still_has_work_after_passes(p);
    EXPECT_TRUE(p.h.qp.resp.read_active); // the READ waits for the neighbour, as before
    p.h.qp.path_resolved = true;
    EXPECT_FALSE(still_has_work_after_passes(p));
    const auto got = sent_ops(p);
    ASSERT_EQ(got.size(), 5u);
    EXPECT_EQ(got[4], P(Opcode::RC_ACKNOWLEDGE, 4));
}

} // namespace
