/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Protocol tests of the RC responder (lib/rc/responder.cc): crafted request packets in through
 * ProtocolHarness::to_responder(), assertions on the frames it transmits and the completions it
 * generates. One test (or parameterised family) per rule of IBTA Vol 1 §9.7.5.2 / rxe's responder.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "peer.h"

namespace {

using namespace droce::test::responder;

// ------------------------------------------------------------------ in order, at several PMTUs

class ResponderMtu : public ::testing::TestWithParam<rc::Mtu> {};

TEST_P(ResponderMtu, MultiPacketSendScattersIntoSgesAndCompletes) {
    Peer p(GetParam());
    const std::uint32_t m = p.mtu();
    auto data = pattern(3 * m + m / 2, 3);
    auto& rbuf = p.buffer(data.size() + 64, 0);
    // Three SGEs with odd boundaries so that packets straddle them.
    p.post_recv(rbuf, {m / 2 + 1, 2 * m - 3,
                       static_cast<std::uint32_t>(data.size()) - (m / 2 + 1) - (2 * m - 3) + 64});
    p.h.qp.resp.expected_psn = Psn(100);
    ASSERT_EQ(p.send_message(100, data), 4u);

    EXPECT_EQ(std::memcmp(rbuf.mem.data(), data.data(), data.size()), 0);
    EXPECT_EQ(rbuf.mem[data.size()], 0xee) << "wrote past the message";
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::success);
    EXPECT_EQ(cqes[0].opcode, rc::WcOpcode::recv);
    EXPECT_EQ(cqes[0].byte_len, data.size());
    EXPECT_EQ(cqes[0].wr_id, 0x77u);
    EXPECT_EQ(cqes[0].src_qp, ProtocolHarness::kRemoteQpn);
    EXPECT_EQ(cqes[0].qp_num, ProtocolHarness::kLocalQpn);
    EXPECT_EQ(cqes[0].wc_flags, 0u);
    EXPECT_EQ(p.h.qp.rq.ready(), 0u) << "RQ slot released";
    // One ACK, for the last packet (the only one with AckReq).
    ASSERT_EQ(p.h.sent.size(), 1u);
    Out a = p.out(0);
    EXPECT_EQ(a.op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(a.psn, 103u);
    EXPECT_EQ(a.dest_qp, ProtocolHarness::kRemoteQpn);
    EXPECT_EQ(a.syndrome, kAck);
    EXPECT_EQ(a.msn, 1u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(104));
    EXPECT_EQ(p.ctr(Counter::acks_sent), 1u);
}

TEST_P(ResponderMtu, MultiPacketWritePlacesAtVaAndAcksLast) {
    Peer p(GetParam());
    const std::uint32_t m = p.mtu();
    auto data = pattern(4 * m - 5, 9);
    auto& tgt = p.remote(data.size() + 100);
    p.h.qp.resp.expected_psn = Psn(7);
    ASSERT_EQ(p.send_message(7, data, true, tgt.va() + 50, tgt.mr->rkey), 4u);
    EXPECT_EQ(std::memcmp(tgt.mem.data() + 50, data.data(), data.size()), 0);
    EXPECT_EQ(tgt.mem[49], 0xee);
    EXPECT_EQ(tgt.mem[50 + data.size()], 0xee);
    EXPECT_TRUE(ProtocolHarness::drain(p.h.recv_cq).empty()) << "plain WRITE completes nothing";
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).psn, 10u);
    EXPECT_EQ(p.out(0).syndrome, kAck);
    EXPECT_EQ(p.out(0).msn, 1u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(11));
}

TEST_P(ResponderMtu, WriteWithImmediateConsumesRwqeAtLast) {
    Peer p(GetParam());
    const std::uint32_t m = p.mtu();
    auto data = pattern(2 * m + 1, 1);
    auto& tgt = p.remote(data.size());
    auto& rbuf = p.buffer(16, 0);
    p.post_recv(rbuf, {16}, 0x99);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_FIRST, 0);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey;
    f.dma_len = static_cast<std::uint32_t>(data.size());
    p.feed(f, std::span(data).subspan(0, m));
    p.feed(Peer::req(Opcode::RC_RDMA_WRITE_MIDDLE, 1), std::span(data).subspan(m, m));
    PacketFields l = Peer::req(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 2, true);
    l.imm = 0xdeadbeef;
    p.feed(l, std::span(data).subspan(2 * m));
    EXPECT_EQ(tgt.mem, data);
    EXPECT_EQ(rbuf.mem, std::vector<std::uint8_t>(16, 0xee))
        << "WRITE data never lands in the RWQE";
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].wr_id, 0x99u);
    EXPECT_EQ(cqes[0].opcode, rc::WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(cqes[0].byte_len, data.size());
    EXPECT_EQ(cqes[0].imm_data, 0xdeadbeefu);
    EXPECT_EQ(cqes[0].wc_flags, static_cast<std::uint32_t>(rc::kWcWithImm));
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).psn, 2u);
}

TEST_P(ResponderMtu, MultiPacketReadRespondsFirstMiddleLast) {
    Peer p(GetParam());
    const std::uint32_t m = p.mtu();
    auto& src = p.remote(4 * m);
    auto data = pattern(4 * m, 5);
    std::ranges::copy(data, src.mem.begin()); // keep the registered storage
    const std::uint32_t len = 2 * m + m / 2 + 3;
    p.h.qp.resp.expected_psn = Psn(50);
    PacketFields f = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 50, true);
    f.va = src.va() + 11;
    f.rkey = src.mr->rkey;
    f.dma_len = len;
    p.feed(f);
    ASSERT_EQ(p.h.sent.size(), 3u);
    const Opcode ops[] = {Opcode::RC_RDMA_READ_RESPONSE_FIRST, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                          Opcode::RC_RDMA_READ_RESPONSE_LAST};
    std::vector<std::uint8_t> got;
    for (std::uint32_t i = 0; i < 3; ++i) {
        Out o = p.out(i);
        EXPECT_EQ(o.op, ops[i]);
        EXPECT_EQ(o.psn, 50 + i);
        EXPECT_EQ(o.has_aeth, i != 1) << "AETH on FIRST and LAST only";
        if (o.has_aeth) {
            EXPECT_EQ(o.syndrome, kAck);
            EXPECT_EQ(o.msn, 1u);
        }
        EXPECT_EQ(o.payload.size(), i < 2 ? m : len - 2 * m);
        got.insert(got.end(), o.payload.begin(), o.payload.end());
    }
    EXPECT_EQ(got, std::vector<std::uint8_t>(data.begin() + 11, data.begin() + 11 + len));
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(53));
    EXPECT_FALSE(p.h.qp.resp.read_active);
    EXPECT_EQ(p.ctr(Counter::acks_sent), 0u) << "the response is the acknowledgement";
}

TEST_P(ResponderMtu, ReadOfExactlyOnePmtuIsOnePacket) {
    Peer p(GetParam());
    auto& src = p.remote(p.mtu());
    std::ranges::copy(pattern(p.mtu(), 2), src.mem.begin()); // keep the registered storage
    PacketFields f = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 0);
    f.va = src.va();
    f.rkey = src.mr->rkey;
    f.dma_len = p.mtu();
    p.feed(f);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).op, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    EXPECT_EQ(p.out(0).payload, src.mem);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(1));
}

TEST_P(ResponderMtu, AtomicsExecuteAndReturnOriginalValue) {
    Peer p(GetParam());
    auto& tgt = p.remote(64);
    std::uint64_t v = 1000;
    std::memcpy(tgt.mem.data() + 8, &v, 8);
    PacketFields fa = Peer::req(Opcode::RC_FETCH_ADD, 0);
    fa.va = tgt.va() + 8;
    fa.rkey = tgt.mr->rkey;
    fa.swap_add = 5;
    p.feed(fa);
    PacketFields cs = Peer::req(Opcode::RC_COMPARE_SWAP, 1);
    cs.va = tgt.va() + 8;
    cs.rkey = tgt.mr->rkey;
    cs.compare = 1005;
    cs.swap_add = 42;
    p.feed(cs);
    PacketFields cs_miss = cs; // compare fails: memory unchanged, original returned
    cs_miss.psn = Psn(2);
    cs_miss.compare = 1005;
    cs_miss.swap_add = 7;
    p.feed(cs_miss);
    ASSERT_EQ(p.h.sent.size(), 3u);
    for (std::uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(p.out(i).op, Opcode::RC_ATOMIC_ACKNOWLEDGE);
        EXPECT_EQ(p.out(i).psn, i);
        EXPECT_EQ(p.out(i).syndrome, kAck);
        EXPECT_EQ(p.out(i).msn, i + 1);
    }
    EXPECT_EQ(p.out(0).orig, 1000u);
    EXPECT_EQ(p.out(1).orig, 1005u);
    EXPECT_EQ(p.out(2).orig, 42u);
    std::memcpy(&v, tgt.mem.data() + 8, 8);
    EXPECT_EQ(v, 42u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(3));
}

INSTANTIATE_TEST_SUITE_P(Pmtu, ResponderMtu,
                         ::testing::Values(rc::Mtu::mtu256, rc::Mtu::mtu1024, rc::Mtu::mtu4096),
                         [](const auto& tp) {
                             return "mtu" + std::to_string(rc::mtu_bytes(tp.param));
                         });

// ------------------------------------------------------------------ ACK coalescing

TEST(Responder, AcksOnlyPacketsWithAckReq) {
    Peer p;
    const std::uint32_t m = p.mtu();
    auto data = pattern(4 * m, 4);
    auto& tgt = p.remote(data.size());
    const bool ackreq[] = {false, true, false, false}; // "every N packets" on #1, none on the last
    for (std::uint32_t i = 0; i < 4; ++i) {
        Opcode op = i == 0   ? Opcode::RC_RDMA_WRITE_FIRST
                    : i == 3 ? Opcode::RC_RDMA_WRITE_LAST
                             : Opcode::RC_RDMA_WRITE_MIDDLE;
        PacketFields f = Peer::req(op, i, ackreq[i]);
        f.va = tgt.va();
        f.rkey = tgt.mr->rkey;
        f.dma_len = static_cast<std::uint32_t>(data.size());
        p.feed(f, std::span(data).subspan(i * m, m));
    }
    EXPECT_EQ(tgt.mem, data);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).psn, 1u);
    EXPECT_EQ(p.out(0).msn, 0u) << "message not complete yet at PSN 1";
    // A SEND ONLY without AckReq: completed, not acknowledged.
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    auto small = pattern(10, 1);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 4), small);
    EXPECT_EQ(ProtocolHarness::drain(p.h.recv_cq).size(), 1u);
    EXPECT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(5));
    EXPECT_EQ(p.h.qp.resp.msn, 2u);
}

// ------------------------------------------------------------------ PSN checks

TEST(Responder, DeferredAcksCoalescePerBurstAndKeepOrder) {
    // TransportCtx::defer_acks (what the Device sets): ACKs of a burst are owed, and one cumulative
    // ACK — the newest — leaves at responder_flush_ack() or before the QP's next other response.
    Peer p;
    p.h.ctx.defer_acks = true;
    auto& tgt = p.remote(64);
    p.h.qp.resp.expected_psn = Psn(20);
    auto write_only = [&](std::uint32_t psn) {
        PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, psn, true);
        f.va = tgt.va() + (psn % 32);
        f.rkey = tgt.mr->rkey;
        f.dma_len = 1;
        const std::uint8_t b[1] = {static_cast<std::uint8_t>(psn)};
        p.feed(f, b);
    };
    write_only(20);
    write_only(21);
    write_only(22);
    EXPECT_EQ(p.h.sent.size(), 0u) << "owed, not sent";
    EXPECT_TRUE(p.h.qp.resp.ack_pending);
    rc::responder_flush_ack(p.h.qp, p.h.ctx);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).syndrome, kAck);
    EXPECT_EQ(p.out(0).psn, 22u);
    EXPECT_EQ(p.out(0).msn, 3u);
    EXPECT_EQ(p.ctr(Counter::acks_sent), 1u);
    rc::responder_flush_ack(p.h.qp, p.h.ctx);
    EXPECT_EQ(p.h.sent.size(), 1u) << "nothing owed any more";
    // An owed ACK goes out before a NAK decided after it (a gap: PSN 25 while 24 is expected).
    write_only(23);
    write_only(25);
    ASSERT_EQ(p.h.sent.size(), 3u);
    EXPECT_EQ(p.out(1).syndrome, kAck);
    EXPECT_EQ(p.out(1).psn, 23u);
    EXPECT_EQ(p.out(2).syndrome, kNakSeq);
    EXPECT_EQ(p.out(2).psn, 24u);
    // responder_run() (every engine pass) flushes too.
    write_only(24);
    EXPECT_EQ(p.h.sent.size(), 3u);
    rc::responder_run(p.h.qp, p.h.ctx, 8);
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(3).psn, 24u);
    EXPECT_EQ(tgt.mem[24 % 32], 24);
}

TEST(Responder, PsnAheadNaksOnceThenSilentThenRecovers) {
    Peer p;
    auto& tgt = p.remote(64);
    p.h.qp.resp.expected_psn = Psn(10);
    auto write_only = [&](std::uint32_t psn, std::uint8_t byte) {
        PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, psn, true);
        f.va = tgt.va() + (psn % 32);
        f.rkey = tgt.mr->rkey;
        f.dma_len = 1;
        const std::uint8_t b[1] = {byte};
        p.feed(f, b);
    };
    write_only(12, 0x12);
    ASSERT_EQ(p.h.sent.size(), 1u);
    Out n = p.out(0);
    EXPECT_EQ(n.op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(n.syndrome, kNakSeq);
    EXPECT_EQ(n.psn, 10u) << "NAK sequence error carries the expected PSN";
    EXPECT_TRUE(p.h.qp.resp.sent_psn_nak);
    write_only(13, 0x13);
    write_only(14, 0x14);
    EXPECT_EQ(p.h.sent.size(), 1u) << "silent until in order";
    EXPECT_EQ(tgt.mem[12], 0xee);
    EXPECT_EQ(p.ctr(Counter::seq_naks_sent), 1u);
    EXPECT_EQ(p.ctr(Counter::out_of_sequence), 3u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    // Go-back-N from 10.
    write_only(10, 0x10);
    EXPECT_FALSE(p.h.qp.resp.sent_psn_nak);
    write_only(11, 0x11);
    write_only(12, 0x12);
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(1).syndrome, kAck);
    EXPECT_EQ(p.out(1).psn, 10u);
    EXPECT_EQ(p.out(3).psn, 12u);
    EXPECT_EQ(tgt.mem[10], 0x10);
    EXPECT_EQ(tgt.mem[12], 0x12);
    // A new gap gets a new NAK.
    write_only(20, 0x20);
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(4).syndrome, kNakSeq);
    EXPECT_EQ(p.out(4).psn, 13u);
}

TEST(Responder, PsnWrapIsInOrder) {
    Peer p(rc::Mtu::mtu256);
    auto data = pattern(3 * 256 - 1, 8);
    auto& rbuf = p.buffer(2048, 0);
    p.post_recv(rbuf, {2048});
    p.post_recv(rbuf, {2048});
    p.h.qp.resp.expected_psn = Psn(0xfffffe);
    ASSERT_EQ(p.send_message(0xfffffe, data), 3u); // 0xfffffe, 0xffffff, 0x000000
    auto one = pattern(5, 1);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 1, true), one);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 2u);
    EXPECT_EQ(cqes[0].byte_len, data.size());
    EXPECT_EQ(cqes[1].byte_len, 5u);
    EXPECT_EQ(std::memcmp(rbuf.mem.data(), one.data(), 5), 0);
    EXPECT_EQ(std::memcmp(rbuf.mem.data() + 5, data.data() + 5, data.size() - 5), 0);
    ASSERT_EQ(p.h.sent.size(), 2u);
    EXPECT_EQ(p.out(0).psn, 0u);
    EXPECT_EQ(p.out(1).psn, 1u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(2));
    EXPECT_EQ(p.ctr(Counter::duplicate_request), 0u);
    EXPECT_EQ(p.ctr(Counter::out_of_sequence), 0u);
}

// ------------------------------------------------------------------ duplicates

TEST(Responder, DuplicateSendIsAckedNotCompletedTwice) {
    Peer p;
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64}, 1);
    p.post_recv(rbuf, {64}, 2);
    p.h.qp.resp.expected_psn = Psn(5);
    auto data = pattern(20, 3);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 5, true), data);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 6, false), data);
    ASSERT_EQ(ProtocolHarness::drain(p.h.recv_cq).size(), 2u);
    // The ACK of PSN 5 was lost; the requester resends 5 (without AckReq to show it does not
    // matter).
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 5, false), data);
    EXPECT_TRUE(ProtocolHarness::drain(p.h.recv_cq).empty());
    ASSERT_EQ(p.h.sent.size(), 2u);
    Out a = p.out(1);
    EXPECT_EQ(a.syndrome, kAck);
    EXPECT_EQ(a.psn, 6u) << "C9-105: duplicate ACKed with expected PSN - 1";
    EXPECT_EQ(a.msn, 2u);
    EXPECT_EQ(p.ctr(Counter::duplicate_request), 1u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(7));
    EXPECT_EQ(p.h.qp.resp.msn, 2u);
}

TEST(Responder, DuplicateReadReplaysIdenticalResponses) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    std::ranges::copy(pattern(1024, 6), src.mem.begin()); // keep the registered storage
    PacketFields f = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 30);
    f.va = src.va();
    f.rkey = src.mr->rkey;
    f.dma_len = 700; // 3 packets: PSN 30, 31, 32
    p.h.qp.resp.expected_psn = Psn(30);
    p.feed(f);
    ASSERT_EQ(p.h.sent.size(), 3u);
    // A WRITE after it, so that the READ is no longer the newest request.
    auto& tgt = p.remote(8);
    PacketFields w = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, 33);
    w.va = tgt.va();
    w.rkey = tgt.mr->rkey;
    w.dma_len = 4;
    const std::uint8_t four[4] = {1, 2, 3, 4};
    p.feed(w, four);
    // Responses lost: the whole READ again.
    p.feed(f);
    ASSERT_EQ(p.h.sent.size(), 6u);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(p.h.sent[3 + i], p.h.sent[i]) << "replayed packet " << i;
    // Only the last response lost: the requester asks again from PSN 32 at offset 512.
    PacketFields tail = f;
    tail.psn = Psn(32);
    tail.va = src.va() + 512;
    tail.dma_len = 700 - 512;
    p.feed(tail);
    ASSERT_EQ(p.h.sent.size(), 7u);
    Out o = p.out(6);
    EXPECT_EQ(o.op, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    EXPECT_EQ(o.psn, 32u);
    EXPECT_EQ(o.payload, std::vector<std::uint8_t>(src.mem.begin() + 512, src.mem.begin() + 700));
    // A duplicate naming memory outside the original READ, or another rkey: dropped.
    PacketFields wider = f;
    wider.dma_len = 800;
    p.feed(wider);
    PacketFields other_key = f;
    other_key.rkey = tgt.mr->rkey;
    p.feed(other_key);
    EXPECT_EQ(p.h.sent.size(), 7u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(34));
    EXPECT_EQ(p.ctr(Counter::duplicate_request), 4u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
}

TEST(Responder, DuplicateFetchAddReplaysWithoutReexecuting) {
    Peer p;
    auto& tgt = p.remote(16);
    std::uint64_t v = 7;
    std::memcpy(tgt.mem.data(), &v, 8);
    PacketFields fa = Peer::req(Opcode::RC_FETCH_ADD, 3);
    fa.va = tgt.va();
    fa.rkey = tgt.mr->rkey;
    fa.swap_add = 100;
    p.h.qp.resp.expected_psn = Psn(3);
    p.feed(fa);
    p.feed(fa);
    p.feed(fa);
    ASSERT_EQ(p.h.sent.size(), 3u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(p.out(i).op, Opcode::RC_ATOMIC_ACKNOWLEDGE);
        EXPECT_EQ(p.out(i).orig, 7u);
        EXPECT_EQ(p.out(i).psn, 3u);
    }
    std::memcpy(&v, tgt.mem.data(), 8);
    EXPECT_EQ(v, 107u) << "added exactly once";
    EXPECT_EQ(p.ctr(Counter::duplicate_request), 2u);
    // A duplicate atomic that no resource remembers is dropped silently.
    PacketFields old = fa;
    old.psn = Psn(1);
    p.feed(old);
    EXPECT_EQ(p.h.sent.size(), 3u);
    std::memcpy(&v, tgt.mem.data(), 8);
    EXPECT_EQ(v, 107u);
}

// ------------------------------------------------------------------ access errors (class C)

void expect_fatal_nak(Peer& p, std::uint8_t syndrome, std::uint32_t psn) {
    ASSERT_FALSE(p.h.sent.empty());
    Out o = p.out(p.h.sent.size() - 1);
    EXPECT_EQ(o.op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(o.syndrome, syndrome);
    EXPECT_EQ(o.psn, psn) << "NAK carries the offending PSN";
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

TEST(Responder, WriteWithBadRkeyNaksRemoteAccess) {
    Peer p;
    auto& tgt = p.remote(64);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, 0, true);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey ^ 0x100; // another index
    f.dma_len = 8;
    auto data = pattern(8, 1);
    p.feed(f, data);
    ASSERT_EQ(p.h.sent.size(), 1u);
    expect_fatal_nak(p, kNakRemAccess, 0);
    EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(64, 0xee));
    EXPECT_EQ(p.ctr(Counter::resp_remote_access_errors), 1u);
    // The QP is in ERR now: further requests are dropped.
    f.rkey = tgt.mr->rkey;
    f.psn = Psn(1);
    p.feed(f, data);
    EXPECT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(64, 0xee));
}

TEST(Responder, WriteOutOfMrBoundsNaksRemoteAccess) {
    Peer p;
    auto& tgt = p.remote(64);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, 0);
    f.va = tgt.va() + 60;
    f.rkey = tgt.mr->rkey;
    f.dma_len = 8;
    auto data = pattern(8, 1);
    p.feed(f, data);
    expect_fatal_nak(p, kNakRemAccess, 0);
    EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(64, 0xee));
}

TEST(Responder, ReadOfMrWithoutRemoteReadNaksRemoteAccess) {
    Peer p;
    auto& src = p.buffer(64, rc::kAccessRemoteWrite);
    PacketFields f = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 0);
    f.va = src.va();
    f.rkey = src.mr->rkey;
    f.dma_len = 16;
    p.feed(f);
    ASSERT_EQ(p.h.sent.size(), 1u);
    expect_fatal_nak(p, kNakRemAccess, 0);
    EXPECT_EQ(p.ctr(Counter::resp_remote_access_errors), 1u);
}

TEST(Responder, QpWithoutRemoteWriteNaksRemoteAccess) {
    Peer p;
    p.h.qp.attr.qp_access_flags = rc::kAccessRemoteRead;
    auto& tgt = p.remote(64);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, 0);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey;
    f.dma_len = 4;
    auto data = pattern(4, 1);
    p.feed(f, data);
    expect_fatal_nak(p, kNakRemAccess, 0);
    EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(64, 0xee));
}

TEST(Responder, AtomicWithoutRemoteAtomicNaksRemoteAccess) {
    for (bool qp_side : {false, true}) {
        Peer p;
        auto& tgt =
            qp_side ? p.remote(16) : p.buffer(16, rc::kAccessRemoteWrite | rc::kAccessRemoteRead);
        if (qp_side) p.h.qp.attr.qp_access_flags = rc::kAccessRemoteWrite | rc::kAccessRemoteRead;
        PacketFields f = Peer::req(Opcode::RC_FETCH_ADD, 0);
        f.va = tgt.va();
        f.rkey = tgt.mr->rkey;
        f.swap_add = 1;
        p.feed(f);
        expect_fatal_nak(p, kNakRemAccess, 0);
        EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(16, 0xee)) << (qp_side ? "QP" : "MR");
    }
}

TEST(Responder, MisalignedAtomicNaksInvalidRequest) {
    Peer p;
    auto& tgt = p.remote(32);
    PacketFields f = Peer::req(Opcode::RC_COMPARE_SWAP, 0);
    f.va = tgt.va() + 4;
    f.rkey = tgt.mr->rkey;
    f.compare = 0xeeeeeeeeeeeeeeeeull;
    f.swap_add = 1;
    p.feed(f);
    expect_fatal_nak(p, kNakInvReq, 0);
    EXPECT_EQ(tgt.mem, std::vector<std::uint8_t>(32, 0xee));
    EXPECT_EQ(p.ctr(Counter::resp_invalid_request), 1u);
}

// ------------------------------------------------------------------ lengths (class C)

struct LengthCase {
    const char* name;
    Opcode op;
    std::uint32_t payload; // in bytes; kMtu* scaled below
    std::uint32_t dma_len;
    bool after_write_first; // sent after a WRITE FIRST of 2 PMTU + 4
};

void PrintTo(const LengthCase& c, std::ostream* os) {
    *os << c.name;
}

class ResponderLength : public ::testing::TestWithParam<LengthCase> {};

TEST_P(ResponderLength, NaksInvalidRequest) {
    const LengthCase& c = GetParam();
    Peer p(rc::Mtu::mtu256);
    auto& tgt = p.remote(4096);
    auto& rbuf = p.buffer(4096, 0);
    p.post_recv(rbuf, {4096});
    std::uint32_t psn = 0;
    if (c.after_write_first) {
        PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_FIRST, psn++);
        f.va = tgt.va();
        f.rkey = tgt.mr->rkey;
        f.dma_len = 2 * 256 + 4;
        auto d = pattern(256, 1);
        p.feed(f, d);
        ASSERT_TRUE(p.h.sent.empty());
    }
    PacketFields f = Peer::req(c.op, psn);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey;
    f.dma_len = c.dma_len;
    auto d = pattern(c.payload, 2);
    p.feed(f, d);
    ASSERT_EQ(p.h.sent.size(), 1u) << c.name;
    expect_fatal_nak(p, kNakInvReq, psn);
    EXPECT_EQ(p.ctr(Counter::resp_invalid_request), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Lengths, ResponderLength,
    ::testing::Values(
        LengthCase{"send_first_short", Opcode::RC_SEND_FIRST, 252, 0, false},
        LengthCase{"send_first_long", Opcode::RC_SEND_FIRST, 260, 0, false},
        LengthCase{"send_only_over_pmtu", Opcode::RC_SEND_ONLY, 260, 0, false},
        LengthCase{"write_only_over_pmtu", Opcode::RC_RDMA_WRITE_ONLY, 260, 260, false},
        LengthCase{"write_only_over_dma_len", Opcode::RC_RDMA_WRITE_ONLY, 16, 8, false},
        LengthCase{"write_only_under_dma_len", Opcode::RC_RDMA_WRITE_ONLY, 8, 16, false},
        LengthCase{"write_middle_short", Opcode::RC_RDMA_WRITE_MIDDLE, 200, 0, true},
        LengthCase{"write_last_zero", Opcode::RC_RDMA_WRITE_LAST, 0, 0, true},
        LengthCase{"write_last_short_of_dma_len", Opcode::RC_RDMA_WRITE_LAST, 4, 0, true},
        LengthCase{"read_dma_len_over_2g", Opcode::RC_RDMA_READ_REQUEST, 0, 0x80000001u, false}),
    [](const auto& tp) { return std::string(tp.param.name); });

TEST(Responder, SendLastOfZeroBytesNaksInvalidRequest) {
    Peer p(rc::Mtu::mtu256);
    auto& rbuf = p.buffer(1024, 0);
    p.post_recv(rbuf, {1024}, 5);
    p.post_recv(rbuf, {1024}, 6);
    auto d = pattern(256, 1);
    p.feed(Peer::req(Opcode::RC_SEND_FIRST, 0), d);
    p.feed(Peer::req(Opcode::RC_SEND_LAST, 1), {});
    expect_fatal_nak(p, kNakInvReq, 1);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 2u);
    EXPECT_EQ(cqes[0].wr_id, 5u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::rem_inv_req_err);
    EXPECT_EQ(cqes[1].wr_id, 6u);
    EXPECT_EQ(cqes[1].status, rc::WcStatus::wr_flush_err);
}

TEST(Responder, SendLongerThanRwqeCompletesLocLenErr) {
    Peer p;
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {16, 16}, 0x42); // 32 bytes of room
    p.post_recv(rbuf, {64}, 0x43);
    auto d = pattern(40, 1);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 0, true), d);
    ASSERT_EQ(p.h.sent.size(), 1u);
    expect_fatal_nak(p, kNakInvReq, 0);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 2u);
    EXPECT_EQ(cqes[0].wr_id, 0x42u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::loc_len_err);
    EXPECT_EQ(cqes[1].status, rc::WcStatus::wr_flush_err);
    EXPECT_EQ(p.ctr(Counter::resp_local_length_error), 1u);
    EXPECT_EQ(std::vector<std::uint8_t>(rbuf.mem.begin() + 32, rbuf.mem.end()),
              std::vector<std::uint8_t>(32, 0xee))
        << "nothing written beyond the RWQE";
}

TEST(Responder, SendIntoSgeWithBadLkeyFailsTheRwqe) {
    Peer p;
    auto& rbuf = p.buffer(64, 0);
    rc::RecvWqe w;
    w.wr_id = 9;
    w.num_sge = 1;
    w.sg_list[0] = rc::Sge{rbuf.va(), 64, rbuf.mr->lkey + 0x100};
    p.h.post_recv(w);
    auto d = pattern(8, 1);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 0), d);
    expect_fatal_nak(
        p,
        droce::wire::make_syndrome(AethKind::nak,
                                   static_cast<std::uint8_t>(NakCode::remote_operational_error)),
        0);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::loc_prot_err);
    EXPECT_EQ(rbuf.mem, std::vector<std::uint8_t>(64, 0xee));
}

// ------------------------------------------------------------------ opcode sequence (class C)

struct SeqCase {
    const char* name;
    Opcode before; // sent first (or RC_ACKNOWLEDGE for none)
    Opcode bad;
};

void PrintTo(const SeqCase& c, std::ostream* os) {
    *os << c.name;
}

class ResponderOpSeq : public ::testing::TestWithParam<SeqCase> {};

TEST_P(ResponderOpSeq, NaksInvalidRequest) {
    const SeqCase& c = GetParam();
    Peer p(rc::Mtu::mtu256);
    auto& tgt = p.remote(4096);
    auto& rbuf = p.buffer(4096, 0);
    p.post_recv(rbuf, {4096});
    p.post_recv(rbuf, {4096});
    auto full = pattern(256, 1);
    std::uint32_t psn = 0;
    auto make = [&](Opcode op) {
        PacketFields f = Peer::req(op, psn++);
        f.va = tgt.va();
        f.rkey = tgt.mr->rkey;
        f.dma_len = 3 * 256;
        return f;
    };
    auto payload_for = [&](Opcode op) -> std::span<const std::uint8_t> {
        const auto& info = droce::wire::opcode_info(op);
        if (!info.is(droce::wire::OpFlags::payload)) return {};
        return std::span<const std::uint8_t>(full).subspan(
            0,
            info.is(droce::wire::OpFlags::first) && info.is(droce::wire::OpFlags::last) ? 8 : 256);
    };
    if (c.before != Opcode::RC_ACKNOWLEDGE) {
        PacketFields f = make(c.before);
        p.feed(f, payload_for(c.before));
        ASSERT_TRUE(p.h.sent.empty()) << c.name;
    }
    PacketFields f = make(c.bad);
    if (c.bad == Opcode::RC_RDMA_WRITE_ONLY || c.bad == Opcode::RC_RDMA_READ_REQUEST) f.dma_len = 8;
    p.feed(f, payload_for(c.bad));
    ASSERT_EQ(p.h.sent.size(), 1u) << c.name;
    expect_fatal_nak(p, kNakInvReq, psn - 1);
}

INSTANTIATE_TEST_SUITE_P(
    OpSeq, ResponderOpSeq,
    ::testing::Values(
        SeqCase{"send_middle_without_first", Opcode::RC_ACKNOWLEDGE, Opcode::RC_SEND_MIDDLE},
        SeqCase{"send_last_without_first", Opcode::RC_ACKNOWLEDGE, Opcode::RC_SEND_LAST},
        SeqCase{"write_middle_without_first", Opcode::RC_ACKNOWLEDGE, Opcode::RC_RDMA_WRITE_MIDDLE},
        SeqCase{"write_last_imm_without_first", Opcode::RC_ACKNOWLEDGE,
                Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE},
        SeqCase{"send_first_then_write_middle", Opcode::RC_SEND_FIRST,
                Opcode::RC_RDMA_WRITE_MIDDLE},
        SeqCase{"write_first_then_send_last", Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_SEND_LAST},
        SeqCase{"send_first_then_send_only", Opcode::RC_SEND_FIRST, Opcode::RC_SEND_ONLY},
        SeqCase{"send_first_then_send_first", Opcode::RC_SEND_FIRST, Opcode::RC_SEND_FIRST},
        SeqCase{"write_first_then_write_only", Opcode::RC_RDMA_WRITE_FIRST,
                Opcode::RC_RDMA_WRITE_ONLY},
        SeqCase{"write_first_then_read", Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_READ_REQUEST},
        SeqCase{"send_first_then_fetch_add", Opcode::RC_SEND_FIRST, Opcode::RC_FETCH_ADD}),
    [](const auto& tp) { return std::string(tp.param.name); });

// ------------------------------------------------------------------ RNR

TEST(Responder, NoRwqeSendsRnrNakThenRetrySucceeds) {
    Peer p;
    p.h.qp.attr.min_rnr_timer = 14;
    p.h.qp.resp.expected_psn = Psn(40);
    auto d = pattern(30, 2);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 40, true), d);
    ASSERT_EQ(p.h.sent.size(), 1u);
    Out o = p.out(0);
    EXPECT_EQ(o.op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(o.syndrome, droce::wire::make_syndrome(AethKind::rnr_nak, 14));
    EXPECT_EQ(o.syndrome, 0x2eu);
    EXPECT_EQ(o.psn, 40u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(40)) << "state not advanced";
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    EXPECT_EQ(p.ctr(Counter::rnr_naks_sent), 1u);
    EXPECT_TRUE(ProtocolHarness::drain(p.h.recv_cq).empty());

    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 40, true), d);
    ASSERT_EQ(p.h.sent.size(), 2u);
    EXPECT_EQ(p.out(1).syndrome, kAck);
    EXPECT_EQ(p.out(1).psn, 40u);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].byte_len, 30u);
    EXPECT_EQ(std::memcmp(rbuf.mem.data(), d.data(), d.size()), 0);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(41));
}

TEST(Responder, WriteWithImmediateWithoutRwqeIsRnrAtLast) {
    Peer p(rc::Mtu::mtu256);
    auto& tgt = p.remote(512);
    auto d = pattern(300, 2);
    PacketFields f = Peer::req(Opcode::RC_RDMA_WRITE_FIRST, 0);
    f.va = tgt.va();
    f.rkey = tgt.mr->rkey;
    f.dma_len = 300;
    p.feed(f, std::span(d).subspan(0, 256));
    PacketFields l = Peer::req(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 1, true);
    l.imm = 5;
    p.feed(l, std::span(d).subspan(256));
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).syndrome, droce::wire::make_syndrome(AethKind::rnr_nak, 0));
    EXPECT_EQ(p.out(0).psn, 1u);
    auto& rbuf = p.buffer(8, 0);
    p.post_recv(rbuf, {8});
    p.feed(l, std::span(d).subspan(256));
    ASSERT_EQ(p.h.sent.size(), 2u);
    EXPECT_EQ(p.out(1).syndrome, kAck);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].byte_len, 300u);
    EXPECT_EQ(cqes[0].imm_data, 5u);
    EXPECT_EQ(std::vector<std::uint8_t>(tgt.mem.begin(), tgt.mem.begin() + 300), d);
}

// ------------------------------------------------------------------ zero length, immediate,
// invalidate

TEST(Responder, ZeroLengthWriteAndReadNeedNoRkey) {
    Peer p;
    PacketFields w = Peer::req(Opcode::RC_RDMA_WRITE_ONLY, 0, true);
    w.rkey = 0; // C9-88: never looked up
    w.va = 0;
    w.dma_len = 0;
    p.feed(w);
    PacketFields r = Peer::req(Opcode::RC_RDMA_READ_REQUEST, 1);
    r.dma_len = 0;
    p.feed(r);
    ASSERT_EQ(p.h.sent.size(), 2u);
    EXPECT_EQ(p.out(0).syndrome, kAck);
    EXPECT_EQ(p.out(0).psn, 0u);
    Out o = p.out(1);
    EXPECT_EQ(o.op, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    EXPECT_EQ(o.psn, 1u);
    EXPECT_TRUE(o.payload.empty());
    EXPECT_EQ(o.syndrome, kAck);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(2));
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    // A zero-length SEND still consumes a receive WQE and completes with byte_len 0.
    auto& rbuf = p.buffer(8, 0);
    p.post_recv(rbuf, {8});
    PacketFields s = Peer::req(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, 2);
    s.imm = 0x01020304;
    p.feed(s);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].byte_len, 0u);
    EXPECT_EQ(cqes[0].imm_data, 0x01020304u);
    EXPECT_EQ(cqes[0].wc_flags, static_cast<std::uint32_t>(rc::kWcWithImm));
}

TEST(Responder, SendWithInvalidateOfAnMrIsClassJ) {
    // Only a type 2 memory window or a fast-register MR may be invalidated by the peer; droce's
    // MRs are ibv_reg_mr's. Class J (IBTA §9.9.3, as rxe): the data is placed and acknowledged,
    // the receive WQE completes with Remote Invalid Request Error, the QP goes to ERR. It used to
    // complete with IBV_WC_WITH_INV while the MR stayed valid.
    Peer p;
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    PacketFields s = Peer::req(Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 0, true);
    s.inv_rkey = rbuf.mr->rkey;
    auto d = pattern(12, 1);
    p.feed(s, d);
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::rem_inv_req_err);
    EXPECT_EQ(cqes[0].wc_flags & rc::kWcWithInv, 0u);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(p.out(0).syndrome, kAck);
    EXPECT_EQ(p.out(0).psn, 0u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
    EXPECT_EQ(p.ctr(Counter::resp_invalidate_errors), 1u);
    EXPECT_TRUE(p.h.mrs.find(rbuf.mr->rkey) != nullptr) << "the MR itself is untouched";
}

// ------------------------------------------------------------------ QP state, tx back-pressure

TEST(Responder, QpNotReadyDropsRequests) {
    for (rc::QpState st : {rc::QpState::reset, rc::QpState::init, rc::QpState::err}) {
        Peer p;
        p.h.qp.state = st;
        p.h.qp.attr.qp_state = st;
        auto& rbuf = p.buffer(64, 0);
        p.post_recv(rbuf, {64});
        auto d = pattern(8, 1);
        p.feed(Peer::req(Opcode::RC_SEND_ONLY, 0, true), d);
        EXPECT_TRUE(p.h.sent.empty()) << rc::to_string(st);
        EXPECT_TRUE(ProtocolHarness::drain(p.h.recv_cq).empty());
        EXPECT_EQ(rbuf.mem, std::vector<std::uint8_t>(64, 0xee));
        EXPECT_EQ(p.ctr(Counter::rx_dropped_bad_qp), 1u);
        // Per-QP events are counted on the QP only (Device::total_counters adds device and QPs).
        EXPECT_EQ(p.h.dev_counters[Counter::rx_dropped_bad_qp], 0u);
        EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(0));
    }
    // RTR, RTS, SQD and SQE answer.
    for (rc::QpState st :
         {rc::QpState::rtr, rc::QpState::rts, rc::QpState::sqd, rc::QpState::sqe}) {
        Peer p;
        p.h.qp.state = st;
        p.h.qp.attr.qp_state = st;
        auto& rbuf = p.buffer(64, 0);
        p.post_recv(rbuf, {64});
        auto d = pattern(8, 1);
        p.feed(Peer::req(Opcode::RC_SEND_ONLY, 0, true), d);
        ASSERT_EQ(p.h.sent.size(), 1u) << rc::to_string(st);
        EXPECT_EQ(p.out(0).syndrome, kAck);
        EXPECT_EQ(ProtocolHarness::drain(p.h.recv_cq).size(), 1u);
    }
}

TEST(Responder, ReadResponseResumesAfterTxBackPressure) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    std::ranges::copy(pattern(1024, 3), src.mem.begin()); // keep the registered storage
    p.h.block_tx(true);
    p.read(0, src, 0, 1000); // 4 packets
    EXPECT_TRUE(p.h.sent.empty());
    EXPECT_TRUE(p.h.qp.resp.read_active);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(4));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 1);
    ASSERT_EQ(p.h.sent.size(), 1u);
    EXPECT_EQ(p.out(0).op, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 4u);
    std::vector<std::uint8_t> got;
    for (std::uint32_t i = 0; i < 4; ++i) {
        Out o = p.out(i);
        EXPECT_EQ(o.psn, i);
        got.insert(got.end(), o.payload.begin(), o.payload.end());
    }
    EXPECT_EQ(p.out(3).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(got, std::vector<std::uint8_t>(src.mem.begin(), src.mem.begin() + 1000));
    EXPECT_FALSE(p.h.qp.resp.read_active);
}

// A WRITE or SEND that arrives in sequence while a READ response cannot go out (the tx path
// full) is executed at once, as rxe's packet queue holds it for its responder, and its ACK leaves
// right after the READ's last response: never ahead of it (a requester takes an ACK beyond an
// outstanding READ for a lost response). Dropping them cost a mixed READ / WRITE stream its ACK
// timeouts (TransferMixed below).
TEST(Responder, WritesAndSendsBehindAReadBeingAnsweredAreExecutedAndAckedAfterIt) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    std::ranges::copy(pattern(1024, 3), src.mem.begin());
    auto& tgt = p.remote(8);
    auto& rbuf = p.buffer(64, 0);
    p.post_recv(rbuf, {64});
    p.h.block_tx(true);
    p.read(0, src, 0, 1000); // PSN 0-3
    p.write_byte(4, tgt.va(), tgt.mr->rkey, 0x5a);
    EXPECT_EQ(tgt.mem[0], 0x5a); // placed at once
    const auto d = pattern(40, 9);
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 5, true), d);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(6));
    auto cqes = ProtocolHarness::drain(p.h.recv_cq);
    ASSERT_EQ(cqes.size(), 1u);
    EXPECT_EQ(cqes[0].status, rc::WcStatus::success);
    EXPECT_EQ(cqes[0].byte_len, 40u);
    EXPECT_TRUE(std::equal(d.begin(), d.end(), rbuf.mem.begin()));
    EXPECT_TRUE(p.h.sent.empty());
    // An out-of-sequence request and a duplicate are still dropped, with no NAK ahead of the
    // responses.
    p.feed(Peer::req(Opcode::RC_SEND_ONLY, 8, true), d);
    p.write_byte(4, tgt.va(), tgt.mr->rkey, 0x5b);
    EXPECT_EQ(tgt.mem[0], 0x5a);
    EXPECT_TRUE(p.h.sent.empty());
    EXPECT_EQ(p.ctr(Counter::seq_naks_sent), 0u);
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 5u);
    for (std::uint32_t i = 0; i < 4; ++i)
        EXPECT_EQ(p.out(i).psn, i);
    EXPECT_EQ(p.out(3).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    // One cumulative ACK for both, after the response.
    EXPECT_EQ(p.out(4).op, Opcode::RC_ACKNOWLEDGE);
    EXPECT_EQ(p.out(4).syndrome, kAck);
    EXPECT_EQ(p.out(4).psn, 5u);
    EXPECT_EQ(p.out(4).msn, 3u);
    EXPECT_FALSE(p.h.qp.resp.ack_pending);
}

// Between two READs being answered, the ACK of what was accepted between them leaves between
// their responses; when requests behind the second READ are owed too, the second READ's
// responses acknowledge the first ones and one ACK follows them.
TEST(Responder, AnAckOwedBehindAReadLeavesBetweenItAndTheNextQueuedRead) {
    for (const bool write_after_second : {false, true}) {
        SCOPED_TRACE(write_after_second ? "WRITE behind the second READ" : "WRITE between");
        Peer p(rc::Mtu::mtu256);
        auto& src = p.remote(1024);
        std::ranges::copy(pattern(1024, 5), src.mem.begin());
        auto& tgt = p.remote(8);
        p.h.block_tx(true);
        p.read(0, src, 0, 600); // PSN 0-2
        p.write_byte(3, tgt.va(), tgt.mr->rkey, 3);
        p.read(4, src, 0, 300); // PSN 4-5, queued
        if (write_after_second) p.write_byte(6, tgt.va(), tgt.mr->rkey, 6);
        EXPECT_EQ(p.h.qp.resp.reads_queued, 1u);
        p.h.block_tx(false);
        rc::responder_run(p.h.qp, p.h.ctx, 100);
        std::vector<std::pair<Opcode, std::uint32_t>> got;
        for (std::size_t i = 0; i < p.h.sent.size(); ++i)
            got.emplace_back(p.out(i).op, p.out(i).psn);
        using P = std::pair<Opcode, std::uint32_t>;
        std::vector<P> want = {{Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0},
                               {Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1},
                               {Opcode::RC_RDMA_READ_RESPONSE_LAST, 2}};
        if (!write_after_second) want.emplace_back(Opcode::RC_ACKNOWLEDGE, 3);
        want.emplace_back(Opcode::RC_RDMA_READ_RESPONSE_FIRST, 4);
        want.emplace_back(Opcode::RC_RDMA_READ_RESPONSE_LAST, 5);
        if (write_after_second) want.emplace_back(Opcode::RC_ACKNOWLEDGE, 6);
        EXPECT_EQ(got, want);
        EXPECT_EQ(tgt.mem[0], write_after_second ? 6 : 3);
        EXPECT_FALSE(p.h.qp.resp.read_active);
        EXPECT_FALSE(p.h.qp.resp.ack_pending);
    }
}

// An atomic that arrives in sequence behind a READ response still going out executes at once and
// its ATOMIC ACKNOWLEDGE (the original value) follows the response; a duplicate of it meanwhile is
// dropped, and answered from the saved result once the answer is out.
TEST(Responder, AnAtomicBehindAReadBeingAnsweredIsAnsweredAfterIt) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    auto& tgt = p.remote(8);
    const std::uint64_t initial = 40;
    std::memcpy(tgt.mem.data(), &initial, 8);
    p.h.block_tx(true);
    p.read(0, src, 0, 600); // PSN 0-2
    p.fetch_add(3, tgt, 2);
    EXPECT_EQ(Peer::u64(tgt), 42u); // executed on arrival
    p.fetch_add(3, tgt, 2);         // its duplicate: dropped while the answers wait
    EXPECT_EQ(p.h.qp.resp.reads_queued, 1u);
    EXPECT_TRUE(p.h.sent.empty());
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 4u);
    EXPECT_EQ(p.out(2).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(p.out(3).op, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    EXPECT_EQ(p.out(3).psn, 3u);
    EXPECT_EQ(p.out(3).orig, initial);
    EXPECT_EQ(p.out(3).msn, 2u);
    EXPECT_FALSE(p.h.qp.resp.read_active);
    p.fetch_add(3, tgt, 2); // a duplicate now replays the saved result, not a second add
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(4).op, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    EXPECT_EQ(p.out(4).orig, initial);
    EXPECT_EQ(Peer::u64(tgt), 42u);
}

// A request behind a READ response that fails a check would send its NAK ahead of the response:
// it is dropped as if it had not arrived, and answered when the requester sends it again.
TEST(Responder, AnErrorBehindAReadBeingAnsweredIsNakedOnlyWhenSentAgain) {
    Peer p(rc::Mtu::mtu256);
    auto& src = p.remote(1024);
    p.h.block_tx(true);
    p.read(0, src, 0, 1000);                              // PSN 0-3
    p.write_byte(4, src.va(), src.mr->rkey + 1000, 0x5a); // no such rkey
    EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(4));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 4u); // the response alone
    EXPECT_EQ(p.out(3).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    p.write_byte(4, src.va(), src.mr->rkey + 1000, 0x5a);
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(4).syndrome, kNakRemAccess);
    EXPECT_EQ(p.out(4).psn, 4u);
    EXPECT_EQ(p.h.qp.state, rc::QpState::err);
}

// A SEND behind a READ response that finds no receive WQE is answered with its RNR NAK right after
// the response (and after the ACK of what was accepted between them), as rxe and a ConnectX send
// it: the requester waits its RNR timer and tries again. Dropped until the resend, as it was, it
// cost the requester an ACK timeout and a retry_cnt, and with timeout 0 (infinite) a QP that never
// sent the SEND again.
TEST(Responder, AnRnrBehindAReadBeingAnsweredIsNakedRightAfterIt) {
    for (const bool refused : {false, true}) {
        SCOPED_TRACE(refused ? "NAK refused once" : "NAK taken");
        Peer p(rc::Mtu::mtu256);
        auto& src = p.remote(1024);
        auto& tgt = p.remote(8);
        p.h.block_tx(true);
        p.read(0, src, 0, 1000);                       // PSN 0-3
        p.write_byte(4, tgt.va(), tgt.mr->rkey, 0x5a); // executed, its ACK owed
        const auto d = pattern(8, 1);
        const PacketFields s = Peer::req(Opcode::RC_SEND_ONLY, 5, true);
        p.feed(s, d); // no receive WQE
        EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(5));
        EXPECT_TRUE(p.h.qp.resp.rnr_nak_owed);
        EXPECT_TRUE(p.h.sent.empty());
        if (refused) {
            // The response and the ACK go, the NAK finds the stage full: it stays owed.
            p.h.limit_tx(5);
            p.h.block_tx(false);
            rc::responder_run(p.h.qp, p.h.ctx, 100);
            ASSERT_EQ(p.h.sent.size(), 5u);
            EXPECT_TRUE(p.h.qp.resp.rnr_nak_owed);
            EXPECT_TRUE(rc::qp_has_work(p.h.qp));
            p.h.limit_tx(ProtocolHarness::kStageDepth);
        } else {
            p.h.block_tx(false);
        }
        rc::responder_run(p.h.qp, p.h.ctx, 100);
        ASSERT_EQ(p.h.sent.size(), 6u);
        EXPECT_EQ(p.out(3).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
        EXPECT_EQ(p.out(4).syndrome, kAck);
        EXPECT_EQ(p.out(4).psn, 4u);
        EXPECT_EQ(p.out(5).op, Opcode::RC_ACKNOWLEDGE);
        EXPECT_EQ(p.out(5).syndrome,
                  droce::wire::make_syndrome(AethKind::rnr_nak, p.h.qp.attr.min_rnr_timer));
        EXPECT_EQ(p.out(5).psn, 5u);
        EXPECT_FALSE(p.h.qp.resp.rnr_nak_owed);
        EXPECT_FALSE(rc::qp_has_work(p.h.qp));
        EXPECT_EQ(p.h.qp.counters[Counter::rnr_naks_sent], 1u);
        // The retry, with a receive WQE posted meanwhile, is accepted and acknowledged.
        auto& rbuf = p.buffer(64, 0);
        p.post_recv(rbuf, {64});
        p.feed(s, d);
        ASSERT_EQ(p.h.sent.size(), 7u);
        EXPECT_EQ(p.out(6).syndrome, kAck);
        EXPECT_EQ(p.out(6).psn, 5u);
        EXPECT_EQ(ProtocolHarness::drain(p.h.recv_cq).size(), 1u);
        EXPECT_EQ(p.h.qp.state, rc::QpState::rts);
    }
}

// An answer that the tx path refuses stays owed for the QP's next pass, as a READ response does:
// an ACK owed at the end of a burst, and an atomic's ATOMIC ACKNOWLEDGE (refused as it was made).
// Lost, each cost the requester its ACK timeout whenever nothing after it acknowledged the same
// PSNs (seen in TransferMixed: the last ACK, and an atomic right after a READ response that filled
// the stage).
TEST(Responder, AnAnswerRefusedByAFullTxPathStaysOwed) {
    for (const bool atomic : {false, true}) {
        SCOPED_TRACE(atomic ? "atomic" : "ACK");
        Peer p;
        p.h.ctx.defer_acks = true;
        auto& tgt = p.remote(8);
        const std::uint64_t before = 0xeeeeeeeeeeeeeeeeull;
        if (atomic) {
            p.h.block_tx(true);
            p.fetch_add(0, tgt, 3);
            EXPECT_EQ(Peer::u64(tgt), before + 3); // executed once, now
        } else {
            p.write_byte(0, tgt.va(), tgt.mr->rkey, 0x5a);
            EXPECT_TRUE(p.h.qp.resp.ack_pending);
            p.h.block_tx(true);
            rc::responder_run(p.h.qp, p.h.ctx, 100);
        }
        EXPECT_TRUE(p.h.sent.empty());
        EXPECT_TRUE(rc::qp_has_work(p.h.qp));
        p.h.block_tx(false);
        rc::responder_run(p.h.qp, p.h.ctx, 100);
        ASSERT_EQ(p.h.sent.size(), 1u);
        EXPECT_EQ(p.out(0).op, atomic ? Opcode::RC_ATOMIC_ACKNOWLEDGE : Opcode::RC_ACKNOWLEDGE);
        EXPECT_EQ(p.out(0).psn, 0u);
        if (atomic) {
            EXPECT_EQ(p.out(0).orig, before);
        }
        EXPECT_FALSE(p.h.qp.resp.ack_pending);
        EXPECT_FALSE(p.h.qp.resp.read_active);
        EXPECT_FALSE(rc::qp_has_work(p.h.qp));
    }
}

// ib_read_bw keeps 16 READs outstanding: those that arrive while an earlier READ's response is
// still going out (the tx path full) are queued and answered after it in PSN order, as rxe's
// packet queue holds them, not dropped until a sequence NAK or the ACK timer brings them back.
// An out-of-sequence READ, any other request and a READ beyond the resource ring still wait.
TEST(Responder, ReadsBehindAReadBeingAnsweredAreQueuedInOrder) {
    Peer p(rc::Mtu::mtu256);
    p.h.qp.attr.max_dest_rd_atomic = 4;
    auto& src = p.remote(4096);
    std::ranges::copy(pattern(4096, 7), src.mem.begin());
    p.h.block_tx(true);
    const auto read = [&](std::uint32_t psn, std::uint32_t off, std::uint32_t len) {
        p.read(psn, src, off, len);
    };
    read(0, 0, 1000);   // PSN 0-3, stays active
    read(4, 1000, 600); // PSN 4-6, queued
    read(8, 2000, 100); // out of sequence (7 expected): dropped, no NAK ahead of the responses
    read(7, 1600, 300); // PSN 7-8, queued
    read(9, 3000, 10);  // PSN 9, queued: the ring (4) holds the active READ and 3 behind it
    read(10, 3100, 10); // a fourth behind it is dropped
    EXPECT_TRUE(p.h.sent.empty());
    EXPECT_EQ(p.h.qp.resp.reads_queued, 3u);
    EXPECT_EQ(p.h.qp.resp.expected_psn, Psn(10));
    p.h.block_tx(false);
    rc::responder_run(p.h.qp, p.h.ctx, 100);
    ASSERT_EQ(p.h.sent.size(), 10u);
    std::vector<std::uint8_t> got;
    for (std::uint32_t i = 0; i < 10; ++i) {
        Out o = p.out(i);
        EXPECT_EQ(o.psn, i);
        got.insert(got.end(), o.payload.begin(), o.payload.end());
    }
    EXPECT_EQ(p.out(3).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(p.out(4).op, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    EXPECT_EQ(p.out(6).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(p.out(7).op, Opcode::RC_RDMA_READ_RESPONSE_FIRST);
    EXPECT_EQ(p.out(8).op, Opcode::RC_RDMA_READ_RESPONSE_LAST);
    EXPECT_EQ(p.out(9).op, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    std::vector<std::uint8_t> want(src.mem.begin(), src.mem.begin() + 1900);
    want.insert(want.end(), src.mem.begin() + 3000, src.mem.begin() + 3010);
    EXPECT_EQ(got, want);
    EXPECT_FALSE(p.h.qp.resp.read_active);
    EXPECT_EQ(p.h.qp.resp.reads_queued, 0u);
    // The dropped one comes again and is answered now.
    read(10, 3100, 10);
    ASSERT_EQ(p.h.sent.size(), 11u);
    EXPECT_EQ(p.out(10).op, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    EXPECT_EQ(p.out(10).psn, 10u);
}

TEST(Responder, ResourceRingKeepsMaxDestRdAtomicEntries) {
    Peer p;
    p.h.qp.attr.max_dest_rd_atomic = 2;
    auto& tgt = p.remote(32);
    for (std::uint32_t i = 0; i < 3; ++i) {
        PacketFields fa = Peer::req(Opcode::RC_FETCH_ADD, i);
        fa.va = tgt.va() + 8 * i;
        fa.rkey = tgt.mr->rkey;
        fa.swap_add = 1;
        p.feed(fa);
    }
    ASSERT_EQ(p.h.sent.size(), 3u);
    // PSN 0 fell out of the two-entry ring: its duplicate is dropped; PSN 1 and 2 replay.
    for (std::uint32_t i = 0; i < 3; ++i) {
        PacketFields fa = Peer::req(Opcode::RC_FETCH_ADD, i);
        fa.va = tgt.va() + 8 * i;
        fa.rkey = tgt.mr->rkey;
        fa.swap_add = 1;
        p.feed(fa);
    }
    ASSERT_EQ(p.h.sent.size(), 5u);
    EXPECT_EQ(p.out(3).psn, 1u);
    EXPECT_EQ(p.out(4).psn, 2u);
}

} // namespace
