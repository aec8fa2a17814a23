/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Protocol tests of the RC requester and completer: raw send WQEs go in, the test looks at the
 * request packets that come out, feeds crafted ACKs / NAKs / READ responses / ATOMIC ACKs back,
 * moves the virtual clock and checks completions, retransmissions and counters.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "harness.h"
#include "rc/pacer.h"

namespace {

using namespace droce;
using namespace droce::rc;
using droce::test::ProtocolHarness;
using wire::AethKind;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint64_t kRemoteVa = 0x7000'0000'1000ull;
constexpr std::uint32_t kRkey = 0xabcd;

struct Buf {
    std::vector<std::uint8_t> data;
    mem::Mr* mr = nullptr;
    std::uint64_t addr(std::uint32_t off = 0) const {
        return reinterpret_cast<std::uintptr_t>(data.data()) + off;
    }
};

std::unique_ptr<Buf> make_buf(ProtocolHarness& h, std::size_t n, std::uint32_t access,
                              std::uint8_t seed = 1) {
    auto b = std::make_unique<Buf>();
    b->data.resize(n ? n : 8);
    for (std::size_t i = 0; i < b->data.size(); ++i)
        b->data[i] = static_cast<std::uint8_t>(seed + i * 7);
    b->mr = h.reg(b->data, access);
    EXPECT_NE(b->mr, nullptr);
    return b;
}

SendWqe make_wqe(WrOpcode op, std::uint64_t id, const Buf& b, std::uint32_t len,
                 std::uint32_t flags = kSendSignaled) {
    SendWqe w{};
    w.wr_id = id;
    w.opcode = op;
    w.send_flags = flags;
    w.num_sge = 1;
    w.sg_list[0] = Sge{b.addr(), len, b.mr ? b.mr->lkey : 0};
    w.length = len;
    w.remote_addr = kRemoteVa;
    w.rkey = kRkey;
    return w;
}

std::vector<std::uint8_t> ack_frame(const ProtocolHarness& h, std::uint32_t psn,
                                    AethKind kind = AethKind::ack,
                                    std::uint8_t value = wire::kAethCreditsInvalid) {
    wire::PacketFields f{};
    f.opcode = Opcode::RC_ACKNOWLEDGE;
    f.dest_qp = ProtocolHarness::kLocalQpn;
    f.psn = Psn(psn);
    f.syndrome = wire::make_syndrome(kind, value);
    return h.peer_frame(f);
}
std::vector<std::uint8_t> nak_frame(const ProtocolHarness& h, std::uint32_t psn, NakCode code) {
    return ack_frame(h, psn, AethKind::nak, static_cast<std::uint8_t>(code));
}
std::vector<std::uint8_t> read_resp(const ProtocolHarness& h, Opcode op, std::uint32_t psn,
                                    std::span<const std::uint8_t> data) {
    wire::PacketFields f{};
    f.opcode = op;
    f.dest_qp = ProtocolHarness::kLocalQpn;
    f.psn = Psn(psn);
    f.syndrome = wire::make_syndrome(AethKind::ack, wire::kAethCreditsInvalid);
    return h.peer_frame(f, data);
}
std::vector<std::uint8_t> atomic_ack(const ProtocolHarness& h, std::uint32_t psn,
                                     std::uint64_t orig) {
    wire::PacketFields f{};
    f.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
    f.dest_qp = ProtocolHarness::kLocalQpn;
    f.psn = Psn(psn);
    f.syndrome = wire::make_syndrome(AethKind::ack, wire::kAethCreditsInvalid);
    f.orig_rem_data = orig;
    return h.peer_frame(f);
}

/** What a sent request packet carried. */
struct Pkt {
    Opcode op{};
    std::uint32_t psn = 0;
    bool ack_req = false;
    bool se = false;
    bool reth = false;
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t dma_len = 0;
    bool immdt = false;
    std::uint32_t imm = 0;
    bool ieth = false;
    std::uint32_t inv_rkey = 0;
    bool atomic_eth = false;
    std::uint64_t swap_add = 0;
    std::uint64_t compare = 0;
    std::uint32_t dest_qp = 0;
    std::vector<std::uint8_t> payload;
};

std::vector<Pkt> sent_pkts(const ProtocolHarness& h, std::size_t from = 0) {
    std::vector<Pkt> v;
    for (std::size_t i = from; i < h.sent.size(); ++i) {
        wire::ParsedFrame pf = h.sent_frame(i);
        EXPECT_EQ(h.last_reject, wire::RejectReason::ok) << "sent frame " << i << " does not parse";
        if (!pf.bth) continue;
        Pkt p;
        p.op = pf.bth->opcode();
        p.psn = pf.bth->psn().value();
        p.ack_req = pf.bth->ack_req();
        p.se = pf.bth->se();
        p.dest_qp = pf.bth->dest_qp();
        if (pf.reth) {
            p.reth = true;
            p.va = pf.reth->va.get();
            p.rkey = pf.reth->rkey.get();
            p.dma_len = pf.reth->dma_len.get();
        }
        if (pf.immdt) {
            p.immdt = true;
            p.imm = pf.immdt->imm.get();
        }
        if (pf.ieth) {
            p.ieth = true;
            p.inv_rkey = pf.ieth->rkey.get();
        }
        if (pf.atomic_eth) {
            p.atomic_eth = true;
            p.va = pf.atomic_eth->va.get();
            p.rkey = pf.atomic_eth->rkey.get();
            p.swap_add = pf.atomic_eth->swap_add.get();
            p.compare = pf.atomic_eth->compare.get();
        }
        p.payload.assign(pf.payload.begin(), pf.payload.end());
        v.push_back(std::move(p));
    }
    return v;
}

std::uint32_t run(ProtocolHarness& h, std::uint32_t budget = 100000) {
    return requester_run(h.qp, h.ctx, budget);
}

/** Moves the clock by @p ns and runs the timers and the requester, as the engine's poll loop would.
 */
void tick(ProtocolHarness& h, std::uint64_t ns) {
    h.clock.advance(ns);
    completer_timers(h.qp, h.ctx);
    run(h);
}

std::vector<std::uint8_t> slice(const Buf& b, std::size_t off, std::size_t n) {
    return {b.data.begin() + static_cast<std::ptrdiff_t>(off),
            b.data.begin() + static_cast<std::ptrdiff_t>(off + n)};
}

// ---------------------------------------------------------------- segmentation

class Segmentation : public ::testing::TestWithParam<std::tuple<Mtu, int, WrOpcode>> {};

TEST_P(Segmentation, OpcodesPsnsPayloadsRethAckReq) {
    const auto [mtu_code, size_kind, op] = GetParam();
    ProtocolHarness h(mtu_code);
    const std::uint32_t mtu = mtu_bytes(mtu_code);
    const std::uint32_t sizes[] = {0, 1, mtu - 1, mtu, mtu + 1};
    const std::uint32_t len = sizes[size_kind];
    h.qp.req.next_psn = Psn(100);
    h.qp.comp.oldest_unacked = Psn(100);
    auto b = make_buf(h, len + 8, kAccessLocalWrite, 3);
    h.post_send(make_wqe(op, 1, *b, len));
    run(h);
    const auto pk = sent_pkts(h);
    const std::uint32_t npkts = len == 0 ? 1 : (len + mtu - 1) / mtu;
    const SqWqe& w = h.qp.sq.slot(0);
    EXPECT_EQ(w.first_psn, Psn(100));
    EXPECT_EQ(w.npkts, npkts);
    EXPECT_EQ(w.last_psn(), Psn(100 + npkts - 1));

    if (op == WrOpcode::rdma_read) {
        ASSERT_EQ(pk.size(), 1u);
        EXPECT_EQ(pk[0].op, Opcode::RC_RDMA_READ_REQUEST);
        EXPECT_EQ(pk[0].psn, 100u);
        EXPECT_TRUE(pk[0].reth);
        EXPECT_EQ(pk[0].va, kRemoteVa);
        EXPECT_EQ(pk[0].rkey, kRkey);
        EXPECT_EQ(pk[0].dma_len, len);
        EXPECT_TRUE(pk[0].ack_req);
        EXPECT_TRUE(pk[0].payload.empty());
        EXPECT_EQ(h.qp.req.next_psn, Psn(100 + npkts))
            << "a READ consumes one PSN per response packet";
        EXPECT_EQ(h.qp.req.rd_atomic_inflight, 1u);
        return;
    }
    ASSERT_EQ(pk.size(), npkts);
    std::uint32_t off = 0;
    for (std::uint32_t i = 0; i < npkts; ++i) {
        const bool first = i == 0, last = i + 1 == npkts;
        Opcode want;
        if (op == WrOpcode::send)
            want = first && last ? Opcode::RC_SEND_ONLY
                   : first       ? Opcode::RC_SEND_FIRST
                   : last        ? Opcode::RC_SEND_LAST
                                 : Opcode::RC_SEND_MIDDLE;
        else
            want = first && last ? Opcode::RC_RDMA_WRITE_ONLY
                   : first       ? Opcode::RC_RDMA_WRITE_FIRST
                   : last        ? Opcode::RC_RDMA_WRITE_LAST
                                 : Opcode::RC_RDMA_WRITE_MIDDLE;
        EXPECT_EQ(pk[i].op, want) << "packet " << i;
        EXPECT_EQ(pk[i].psn, 100 + i);
        EXPECT_EQ(pk[i].dest_qp, ProtocolHarness::kRemoteQpn);
        EXPECT_EQ(pk[i].ack_req, last) << "AckReq only on the last packet of a short message";
        const std::uint32_t plen = std::min(mtu, len - off);
        EXPECT_EQ(pk[i].payload.size(), plen);
        EXPECT_EQ(pk[i].payload, slice(*b, off, plen));
        if (op == WrOpcode::rdma_write && first) {
            EXPECT_TRUE(pk[i].reth);
            EXPECT_EQ(pk[i].va, kRemoteVa);
            EXPECT_EQ(pk[i].dma_len, len) << "RETH carries the whole DMA length";
        } else {
            EXPECT_FALSE(pk[i].reth) << "RETH only on a WRITE's first packet";
        }
        off += plen;
    }
    EXPECT_EQ(h.qp.req.next_psn, Psn(100 + npkts));
    EXPECT_EQ(h.qp.counters[Counter::sent_pkts], npkts);
    EXPECT_NE(h.qp.req.ack_deadline_ns, 0u) << "the ACK timer is armed by sending";
}

INSTANTIATE_TEST_SUITE_P(Sizes, Segmentation,
                         ::testing::Combine(::testing::Values(Mtu::mtu256, Mtu::mtu1024,
                                                              Mtu::mtu4096),
                                            ::testing::Values(0, 1, 2, 3, 4),
                                            ::testing::Values(WrOpcode::send, WrOpcode::rdma_write,
                                                              WrOpcode::rdma_read)));

TEST(Requester, AckReqEvery64Packets) {
    ProtocolHarness h(Mtu::mtu256);
    const std::uint32_t n = 130;
    auto b = make_buf(h, n * 256, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, n * 256));
    run(h);
    const auto pk = sent_pkts(h);
    ASSERT_EQ(pk.size(), n);
    for (std::uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(pk[i].ack_req, i == 63 || i == 127 || i == n - 1) << "packet " << i;
}

TEST(Requester, InlineImmediateInvalidateSolicited) {
    ProtocolHarness h(Mtu::mtu256);
    SendWqe w{};
    w.wr_id = 7;
    w.opcode = WrOpcode::send_with_imm;
    w.send_flags = kSendInline | kSendSolicited | kSendSignaled;
    w.length = 200;
    for (std::uint32_t i = 0; i < 200; ++i)
        w.inline_data[i] = static_cast<std::uint8_t>(0x40 + i);
    w.imm_data = 0xdeadbeef;
    h.post_send(w);
    auto b = make_buf(h, 300, 0);
    SendWqe inv = make_wqe(WrOpcode::send_with_inv, 8, *b, 300, kSendSolicited);
    inv.invalidate_rkey = 0x5566;
    h.post_send(inv);
    SendWqe wi = make_wqe(WrOpcode::rdma_write_with_imm, 9, *b, 10, kSendSolicited);
    wi.imm_data = 0x1234;
    h.post_send(wi);
    run(h);
    const auto pk = sent_pkts(h);
    ASSERT_EQ(pk.size(), 4u);
    EXPECT_EQ(pk[0].op, Opcode::RC_SEND_ONLY_WITH_IMMEDIATE);
    EXPECT_EQ(pk[0].imm, 0xdeadbeefu);
    EXPECT_TRUE(pk[0].se);
    ASSERT_EQ(pk[0].payload.size(), 200u);
    EXPECT_EQ(0, std::memcmp(pk[0].payload.data(), w.inline_data, 200));
    EXPECT_EQ(pk[1].op, Opcode::RC_SEND_FIRST);
    EXPECT_FALSE(pk[1].se) << "SE only on the last packet";
    EXPECT_FALSE(pk[1].ieth);
    EXPECT_EQ(pk[2].op, Opcode::RC_SEND_LAST_WITH_INVALIDATE);
    EXPECT_TRUE(pk[2].ieth);
    EXPECT_EQ(pk[2].inv_rkey, 0x5566u);
    EXPECT_TRUE(pk[2].se);
    EXPECT_EQ(pk[2].payload, slice(*b, 256, 44));
    EXPECT_EQ(pk[3].op, Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
    EXPECT_TRUE(pk[3].reth);
    EXPECT_TRUE(pk[3].immdt);
    EXPECT_EQ(pk[3].imm, 0x1234u);
    EXPECT_TRUE(pk[3].se);
}

TEST(Requester, PsnWrap) {
    ProtocolHarness h(Mtu::mtu256);
    h.qp.req.next_psn = Psn(0xfffffe);
    h.qp.comp.oldest_unacked = Psn(0xfffffe);
    auto b = make_buf(h, 1024, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, 1024));
    run(h);
    const auto pk = sent_pkts(h);
    ASSERT_EQ(pk.size(), 4u);
    EXPECT_EQ(pk[0].psn, 0xfffffeu);
    EXPECT_EQ(pk[1].psn, 0xffffffu);
    EXPECT_EQ(pk[2].psn, 0x000000u);
    EXPECT_EQ(pk[3].psn, 0x000001u);
    EXPECT_EQ(pk[3].op, Opcode::RC_RDMA_WRITE_LAST);
    h.to_completer(ack_frame(h, 1));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[0].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(h.qp.comp.oldest_unacked, Psn(2));
}

TEST(Requester, EmitFailureLosesNothing) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 768, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 768));
    h.block_tx(true);
    EXPECT_EQ(run(h), 0u);
    EXPECT_TRUE(h.sent.empty());
    EXPECT_EQ(h.qp.req.next_psn, Psn(0));
    h.block_tx(false);
    EXPECT_EQ(run(h, 1), 1u);
    h.block_tx(true);
    EXPECT_EQ(run(h), 0u);
    EXPECT_EQ(h.qp.counters[Counter::tx_no_buffer], 2u);
    h.block_tx(false);
    run(h);
    const auto pk = sent_pkts(h);
    ASSERT_EQ(pk.size(), 3u);
    EXPECT_EQ(pk[0].op, Opcode::RC_SEND_FIRST);
    EXPECT_EQ(pk[0].psn, 0u);
    EXPECT_EQ(pk[1].op, Opcode::RC_SEND_MIDDLE);
    EXPECT_EQ(pk[1].psn, 1u);
    EXPECT_EQ(pk[1].payload, slice(*b, 256, 256));
    EXPECT_EQ(pk[2].op, Opcode::RC_SEND_LAST);
    EXPECT_EQ(pk[2].psn, 2u);
}

TEST(Requester, PsnWindowLimit) {
    ProtocolHarness h(Mtu::mtu256);
    const std::uint32_t n = kPsnWindow + 100;
    auto b = make_buf(h, n * 256, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, n * 256));
    run(h);
    EXPECT_EQ(h.sent.size(), kPsnWindow);
    h.to_completer(ack_frame(h, 49));
    run(h);
    EXPECT_EQ(h.sent.size(), kPsnWindow + 50);
}

TEST(Requester, PacerHoldsPackets) {
    ProtocolHarness h;
    auto b = make_buf(h, 1000, 0);
    rc::pacer_set_rate_limit(h.qp, 1000); // 1 Gb/s: 8 ns per wire byte
    for (std::uint64_t i = 0; i < 10; ++i)
        h.post_send(make_wqe(WrOpcode::send, i, *b, 1000));
    // A packet's wire length (1000 B + headers) takes longer than the 2 us burst credit: one goes,
    // then one per wire length.
    EXPECT_EQ(run(h), 1u);
    const std::uint64_t wire_ns = h.sent[0].size() * 8;
    const std::uint64_t start = h.clock.now_ns();
    for (std::uint32_t k = 1; k < 10; ++k) {
        const std::uint64_t at = h.qp.pacer.next_send_ns;
        ASSERT_GT(at, h.clock.now_ns());
        h.clock.set(at - 1);
        EXPECT_EQ(run(h), 0u) << "packet " << k << " sent before its time";
        h.clock.set(at);
        EXPECT_EQ(run(h), 1u) << "packet " << k;
    }
    // Nine more packets took nine wire lengths, less the burst credit of the first.
    EXPECT_GE(h.clock.now_ns() - start, 9 * wire_ns - rc::kPacerBurstNs);
    EXPECT_LE(h.clock.now_ns() - start, 9 * wire_ns);
}

TEST(Requester, SqdFinishesCurrentMessageOnly) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 768, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 768));
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 10));
    EXPECT_EQ(run(h, 1), 1u);
    h.qp.state = QpState::sqd;
    run(h);
    EXPECT_EQ(h.sent.size(), 3u) << "the current message finishes, the next one does not start";
}

TEST(Requester, NotInRts) {
    ProtocolHarness h;
    auto b = make_buf(h, 10, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 10));
    h.qp.state = QpState::rtr;
    EXPECT_EQ(run(h), 0u);
}

// ---------------------------------------------------------------- local errors

TEST(Requester, BadLkeyIsLocalProtectionError) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    SendWqe w = make_wqe(WrOpcode::send, 5, *b, 64);
    w.sg_list[0].lkey = 0xdead00;
    h.post_send(w);
    h.post_send(make_wqe(WrOpcode::send, 6, *b, 64));
    run(h);
    EXPECT_TRUE(h.sent.empty());
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 5u);
    EXPECT_EQ(c[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(c[1].wr_id, 6u);
    EXPECT_EQ(c[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(h.qp.state, QpState::err);
    EXPECT_EQ(h.qp.counters[Counter::local_protection_err], 1u);
}

TEST(Requester, BadLkeyAfterOutstandingWqeCompletesInOrder) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    SendWqe bad = make_wqe(WrOpcode::rdma_write, 2, *b, 64);
    bad.sg_list[0].addr += 32; // out of the MR's bounds
    h.post_send(bad);
    run(h);
    EXPECT_EQ(h.sent.size(), 1u);
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty())
        << "the error waits for the WQE before it";
    h.to_completer(ack_frame(h, 0));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[1].wr_id, 2u);
    EXPECT_EQ(c[1].status, WcStatus::loc_prot_err);
    EXPECT_EQ(h.qp.state, QpState::err);
}

TEST(Requester, ReadIntoReadOnlyMrIsLocalProtectionError) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0); // no local write
    h.post_send(make_wqe(WrOpcode::rdma_read, 1, *b, 64));
    run(h);
    EXPECT_TRUE(h.sent.empty());
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::loc_prot_err);
}

TEST(Requester, TooLongIsLocalLengthError) {
    ProtocolHarness h;
    SendWqe w{};
    w.wr_id = 3;
    w.opcode = WrOpcode::rdma_write;
    w.length = static_cast<std::uint32_t>(kMaxMsgSize + 1);
    h.post_send(w);
    run(h);
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::loc_len_err);
    EXPECT_TRUE(h.sent.empty());
}

TEST(Requester, MisalignedAtomicIsLocalQpOperationError) {
    ProtocolHarness h;
    auto b = make_buf(h, 8, kAccessLocalWrite);
    SendWqe w = make_wqe(WrOpcode::atomic_fetch_and_add, 4, *b, 8);
    w.remote_addr = kRemoteVa + 4;
    h.post_send(w);
    run(h);
    EXPECT_TRUE(h.sent.empty());
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::loc_qp_op_err);
    EXPECT_EQ(h.qp.state, QpState::err);
}

// ---------------------------------------------------------------- ACKs

TEST(Completer, AckCompletesInOrderSignaledAndUnsignaled) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 64, 0)); // unsignaled
    h.post_send(make_wqe(WrOpcode::rdma_write, 3, *b, 64));
    run(h);
    ASSERT_EQ(h.sent.size(), 3u);
    h.to_completer(ack_frame(h, 0));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[0].opcode, WcOpcode::send);
    EXPECT_EQ(c[0].byte_len, 64u);
    h.to_completer(ack_frame(h, 1));
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty()) << "unsignaled: released silently";
    EXPECT_EQ(h.qp.sq.ready(), 1u);
    h.to_completer(ack_frame(h, 2));
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 3u);
    EXPECT_EQ(c[0].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(h.qp.sq.ready(), 0u);
    EXPECT_EQ(h.qp.req.ack_deadline_ns, 0u) << "nothing outstanding: ACK timer stopped";
    EXPECT_EQ(h.qp.counters[Counter::acks_rcvd], 3u);
    EXPECT_EQ(h.dev_counters[Counter::acks_rcvd], 0u) << "per-QP events are counted on the QP only";
    EXPECT_EQ(h.dev_counters[Counter::sent_pkts], 0u);
}

TEST(Completer, SqSigAllSignalsEverything) {
    ProtocolHarness h;
    h.qp.sq_sig_all = true;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64, 0));
    run(h);
    h.to_completer(ack_frame(h, 0));
    EXPECT_EQ(ProtocolHarness::drain(h.send_cq).size(), 1u);
}

TEST(Completer, CoalescedAckCompletesSeveral) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 600, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 600)); // PSN 0..2
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 10));  // 3
    h.post_send(make_wqe(WrOpcode::send, 3, *b, 300)); // 4..5
    run(h);
    ASSERT_EQ(h.sent.size(), 6u);
    h.to_completer(ack_frame(h, 1)); // partial: nothing completes
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    EXPECT_EQ(h.qp.comp.oldest_unacked, Psn(2));
    h.to_completer(ack_frame(h, 4));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[1].wr_id, 2u);
    h.to_completer(ack_frame(h, 5));
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 3u);
}

TEST(Completer, StaleAckIgnoredUnsentAckDropped) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 64));
    run(h);
    h.to_completer(ack_frame(h, 0));
    EXPECT_EQ(ProtocolHarness::drain(h.send_cq).size(), 1u);
    h.to_completer(ack_frame(h, 0));        // duplicate
    h.to_completer(ack_frame(h, 0xffffff)); // before anything
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    EXPECT_EQ(h.qp.counters[Counter::completer_retry_err], 0u);
    h.to_completer(ack_frame(h, 5)); // never sent
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    EXPECT_EQ(h.qp.counters[Counter::completer_retry_err], 1u);
    EXPECT_EQ(h.qp.comp.oldest_unacked, Psn(1));
    EXPECT_EQ(h.qp.state, QpState::rts);
}

// ---------------------------------------------------------------- NAKs

TEST(Completer, NakSequenceErrorGoBackN) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 1024, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 100));        // PSN 0
    h.post_send(make_wqe(WrOpcode::rdma_write, 2, *b, 1024)); // PSN 1..4
    h.post_send(make_wqe(WrOpcode::send, 3, *b, 10));         // PSN 5
    run(h);
    ASSERT_EQ(h.sent.size(), 6u);
    const std::uint8_t retry_before = h.qp.req.retry_left;
    h.to_completer(nak_frame(h, 3, NakCode::psn_sequence_error));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u) << "the NAK implicitly acknowledges PSN 0..2: WQE 1 completes";
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(h.qp.comp.oldest_unacked, Psn(3));
    EXPECT_EQ(h.qp.counters[Counter::packet_seq_err], 1u);
    EXPECT_EQ(h.qp.req.retry_left, retry_before - 1);
    run(h);
    const auto pk = sent_pkts(h, 6);
    ASSERT_EQ(pk.size(), 3u) << "go-back-N resends PSN 3, 4, 5";
    EXPECT_EQ(pk[0].psn, 3u);
    EXPECT_EQ(pk[0].op, Opcode::RC_RDMA_WRITE_MIDDLE);
    EXPECT_FALSE(pk[0].reth);
    EXPECT_EQ(pk[0].payload, slice(*b, 512, 256));
    EXPECT_EQ(pk[1].psn, 4u);
    EXPECT_EQ(pk[1].op, Opcode::RC_RDMA_WRITE_LAST);
    EXPECT_EQ(pk[1].payload, slice(*b, 768, 256));
    EXPECT_EQ(pk[2].psn, 5u);
    EXPECT_EQ(pk[2].op, Opcode::RC_SEND_ONLY);
    EXPECT_EQ(h.qp.counters[Counter::retransmitted_pkts], 3u);
    EXPECT_FALSE(h.qp.req.retransmitting);
    h.to_completer(ack_frame(h, 5));
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 2u);
    EXPECT_EQ(c[1].wr_id, 3u);
    EXPECT_EQ(h.qp.req.retry_left, h.qp.attr.retry_cnt) << "progress restores the retry budget";
}

TEST(Completer, NakRemoteAccessErrorFlushesRestOnce) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    for (std::uint64_t i = 1; i <= 4; ++i)
        h.post_send(make_wqe(WrOpcode::rdma_write, i, *b, 64,
                             i == 3 ? 0u : static_cast<std::uint32_t>(kSendSignaled)));
    run(h);
    ASSERT_EQ(h.sent.size(), 4u);
    h.to_completer(nak_frame(h, 1, NakCode::remote_access_error));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[1].wr_id, 2u);
    EXPECT_EQ(c[1].status, WcStatus::rem_access_err);
    EXPECT_EQ(c[2].wr_id, 3u);
    EXPECT_EQ(c[2].status, WcStatus::wr_flush_err) << "flushes complete even unsignaled WQEs";
    EXPECT_EQ(c[3].wr_id, 4u);
    EXPECT_EQ(c[3].status, WcStatus::wr_flush_err);
    EXPECT_EQ(h.qp.state, QpState::err);
    EXPECT_EQ(h.qp.counters[Counter::req_remote_access_errors], 1u);
    // Anything more changes nothing: each WQE completed exactly once.
    h.to_completer(nak_frame(h, 1, NakCode::remote_access_error));
    h.to_completer(ack_frame(h, 3));
    completer_timers(h.qp, h.ctx);
    EXPECT_EQ(run(h), 0u);
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
}

TEST(Completer, NakInvalidRequestAndRemoteOpError) {
    for (auto [code, status, counter] :
         {std::tuple{NakCode::invalid_request, WcStatus::rem_inv_req_err,
                     Counter::req_remote_invalid_request},
          std::tuple{NakCode::remote_operational_error, WcStatus::rem_op_err,
                     Counter::req_remote_operational_error},
          std::tuple{static_cast<NakCode>(10), WcStatus::rem_op_err,
                     Counter::req_remote_operational_error}}) {
        ProtocolHarness h;
        auto b = make_buf(h, 64, 0);
        h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
        h.post_send(make_wqe(WrOpcode::send, 2, *b, 64));
        run(h);
        h.to_completer(nak_frame(h, 0, code));
        auto c = ProtocolHarness::drain(h.send_cq);
        ASSERT_EQ(c.size(), 2u);
        EXPECT_EQ(c[0].status, status);
        EXPECT_EQ(c[1].status, WcStatus::wr_flush_err);
        EXPECT_EQ(h.qp.counters[counter], 1u);
        EXPECT_EQ(h.qp.state, QpState::err);
    }
}

TEST(Completer, RepeatedSequenceNakRetriesOnce) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 1024, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, 1024)); // PSN 0..3
    run(h);
    const std::uint8_t before = h.qp.req.retry_left;
    h.to_completer(nak_frame(h, 1, NakCode::psn_sequence_error));
    h.to_completer(nak_frame(h, 1, NakCode::psn_sequence_error));
    EXPECT_EQ(h.qp.req.retry_left, before - 1) << "one loss, one go-back-N";
    run(h);
    EXPECT_EQ(h.sent.size(), 4u + 3u);
    h.to_completer(ack_frame(h, 3));
    EXPECT_EQ(ProtocolHarness::drain(h.send_cq).size(), 1u);
}

TEST(Completer, LateAckDuringGoBackNDoesNotReleaseSlotsBeingResent) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 1024, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, 1024)); // PSN 0..3
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 10));         // PSN 4
    run(h);
    h.to_completer(nak_frame(h, 1, NakCode::psn_sequence_error));
    h.to_completer(ack_frame(h, 4)); // late: overtaken by the rewind
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    EXPECT_EQ(h.qp.sq.ready(), 2u);
    run(h);
    const auto pk = sent_pkts(h, 5);
    ASSERT_EQ(pk.size(), 4u);
    EXPECT_EQ(pk[0].psn, 1u);
    EXPECT_EQ(pk[3].op, Opcode::RC_SEND_ONLY);
    h.to_completer(ack_frame(h, 4));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[1].wr_id, 2u);
}

TEST(Completer, ReservedAethTypeDropped) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    run(h);
    h.to_completer(ack_frame(h, 0, AethKind::reserved, 0));
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    EXPECT_EQ(h.qp.state, QpState::rts);
    EXPECT_EQ(h.qp.counters[Counter::completer_retry_err], 1u);
}

// ---------------------------------------------------------------- RNR

TEST(Completer, RnrWaitsTheRnrTimerNotTheAckTimeout) {
    ProtocolHarness h;
    h.qp.attr.timeout = 1; // ACK timeout 8.192 us
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    run(h);
    ASSERT_EQ(h.sent.size(), 1u);
    h.to_completer(ack_frame(h, 0, AethKind::rnr_nak, 14)); // 1.28 ms
    EXPECT_EQ(h.qp.counters[Counter::rnr_naks_rcvd], 1u);
    const std::uint64_t t_nak = h.clock.now_ns();
    EXPECT_EQ(completer_next_deadline(h.qp), t_nak + 1'280'000);
    while (h.clock.now_ns() + 8'192 < t_nak + 1'280'000)
        tick(h, 8'192);
    EXPECT_EQ(h.sent.size(), 1u) << "no retransmission before the RNR timer";
    EXPECT_EQ(h.qp.counters[Counter::local_ack_timeout_err], 0u);
    h.clock.set(t_nak + 1'280'000 - 1);
    completer_timers(h.qp, h.ctx);
    run(h);
    EXPECT_EQ(h.sent.size(), 1u);
    h.clock.set(t_nak + 1'280'000);
    completer_timers(h.qp, h.ctx);
    run(h);
    ASSERT_EQ(h.sent.size(), 2u) << "retransmitted right when the RNR timer ends";
    EXPECT_EQ(sent_pkts(h, 1)[0].psn, 0u);
    h.to_completer(ack_frame(h, 0));
    EXPECT_EQ(ProtocolHarness::drain(h.send_cq).size(), 1u);
}

TEST(Completer, RnrNakImplicitlyAcknowledgesEarlierPsns) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, 10)); // PSN 0
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 10));       // PSN 1
    run(h);
    h.to_completer(ack_frame(h, 1, AethKind::rnr_nak, 1));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 1u);
    tick(h, 10'000);
    ASSERT_EQ(h.sent.size(), 3u);
    EXPECT_EQ(sent_pkts(h, 2)[0].psn, 1u);
    EXPECT_EQ(sent_pkts(h, 2)[0].op, Opcode::RC_SEND_ONLY);
}

TEST(Completer, TimeoutZeroDisablesTheAckTimer) {
    ProtocolHarness h;
    h.qp.attr.timeout = 0;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 10));
    run(h);
    EXPECT_EQ(h.qp.req.ack_deadline_ns, 0u);
    EXPECT_EQ(completer_next_deadline(h.qp), 0u);
    tick(h, 100'000'000'000ull);
    EXPECT_EQ(h.sent.size(), 1u);
    EXPECT_EQ(h.qp.state, QpState::rts);
}

TEST(Completer, RnrRetryInfiniteWithSeven) {
    ProtocolHarness h;
    h.qp.attr.rnr_retry = 7;
    h.qp.req.rnr_retry_left = 7;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    run(h);
    for (int i = 0; i < 20; ++i) {
        h.to_completer(ack_frame(h, 0, AethKind::rnr_nak, 1)); // 10 us
        tick(h, 10'000);
    }
    EXPECT_EQ(h.sent.size(), 21u);
    EXPECT_EQ(h.qp.state, QpState::rts);
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
}

TEST(Completer, RnrRetryExhausted) {
    ProtocolHarness h;
    h.qp.attr.rnr_retry = 2;
    h.qp.req.rnr_retry_left = 2;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 64));
    run(h);
    ASSERT_EQ(h.sent.size(), 2u);
    for (int i = 0; i < 2; ++i) {
        h.to_completer(ack_frame(h, 0, AethKind::rnr_nak, 1));
        tick(h, 10'000);
        EXPECT_EQ(h.sent.size(), 4u + 2u * i) << "retry " << i + 1 << " resends PSN 0 and 1";
    }
    h.to_completer(ack_frame(h, 0, AethKind::rnr_nak, 1));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, WcStatus::rnr_retry_exc_err);
    EXPECT_EQ(c[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(h.qp.counters[Counter::rnr_nak_retry_err], 1u);
    EXPECT_EQ(h.qp.state, QpState::err);
}

// ---------------------------------------------------------------- local ACK timeout

TEST(Completer, RetryCnt7IsSevenRetriesNotInfinite) {
    ProtocolHarness h;
    h.qp.attr.timeout = 1;
    h.qp.attr.retry_cnt = 7;
    h.qp.req.retry_left = 7;
    auto b = make_buf(h, 64, 0);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 64));
    run(h);
    for (int i = 0; i < 30 && h.qp.state == QpState::rts; ++i)
        tick(h, ack_timeout_ns(1));
    EXPECT_EQ(h.sent.size(), 1u + 7u) << "the first send plus exactly seven retries";
    EXPECT_EQ(h.qp.counters[Counter::retransmitted_pkts], 7u);
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::retry_exc_err);
    EXPECT_EQ(h.qp.counters[Counter::retry_exceeded_err], 1u);
    EXPECT_EQ(h.qp.counters[Counter::local_ack_timeout_err], 8u);
    EXPECT_EQ(h.qp.state, QpState::err);
}

TEST(Completer, TimeoutGoesBackToOldestUnacked) {
    ProtocolHarness h(Mtu::mtu256);
    h.qp.attr.timeout = 1;
    auto b = make_buf(h, 1024, 0);
    h.post_send(make_wqe(WrOpcode::rdma_write, 1, *b, 1024));
    run(h);
    h.to_completer(ack_frame(h, 1));
    EXPECT_EQ(completer_next_deadline(h.qp), h.clock.now_ns() + ack_timeout_ns(1));
    h.clock.advance(ack_timeout_ns(1) - 1);
    completer_timers(h.qp, h.ctx);
    run(h);
    EXPECT_EQ(h.sent.size(), 4u) << "not yet";
    tick(h, 1);
    const auto pk = sent_pkts(h, 4);
    ASSERT_EQ(pk.size(), 2u);
    EXPECT_EQ(pk[0].psn, 2u);
    EXPECT_EQ(pk[0].op, Opcode::RC_RDMA_WRITE_MIDDLE);
    EXPECT_EQ(pk[1].psn, 3u);
    EXPECT_EQ(h.qp.counters[Counter::local_ack_timeout_err], 1u);
}

// ---------------------------------------------------------------- READ and atomics

TEST(Completer, ReadResponsesPlacedAtOffsets) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 2 * 256 + 300, kAccessLocalWrite, 0);
    auto b2 = make_buf(h, 100, kAccessLocalWrite, 0);
    std::fill(b->data.begin(), b->data.end(), 0);
    std::fill(b2->data.begin(), b2->data.end(), 0);
    SendWqe w = make_wqe(WrOpcode::rdma_read, 9, *b, 700);
    w.num_sge = 2; // 700 bytes: 600 in the first SGE, 100 in the second
    w.sg_list[0].length = 600;
    w.sg_list[1] = Sge{b2->addr(), 100, b2->mr->lkey};
    h.post_send(w);
    run(h);
    ASSERT_EQ(h.sent.size(), 1u);
    EXPECT_EQ(h.qp.req.next_psn, Psn(3));
    std::vector<std::uint8_t> remote(700);
    for (std::size_t i = 0; i < remote.size(); ++i)
        remote[i] = static_cast<std::uint8_t>(i * 13 + 5);
    const std::span<const std::uint8_t> r(remote);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, r.subspan(0, 256)));
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1, r.subspan(256, 256)));
    EXPECT_TRUE(ProtocolHarness::drain(h.send_cq).empty());
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_LAST, 2, r.subspan(512, 188)));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[0].opcode, WcOpcode::rdma_read);
    EXPECT_EQ(c[0].byte_len, 700u);
    EXPECT_EQ(0, std::memcmp(b->data.data(), remote.data(), 600));
    EXPECT_EQ(0, std::memcmp(b2->data.data(), remote.data() + 600, 100));
    EXPECT_EQ(h.qp.req.rd_atomic_inflight, 0u);
}

TEST(Completer, ReadResponseAheadIsImpliedNakAndReRequestsRemainder) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 1000, kAccessLocalWrite);
    h.post_send(make_wqe(WrOpcode::rdma_read, 1, *b, 1000)); // PSN 0..3
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 10));        // PSN 4
    run(h);
    ASSERT_EQ(h.sent.size(), 2u);
    std::vector<std::uint8_t> remote(1000);
    for (std::size_t i = 0; i < remote.size(); ++i)
        remote[i] = static_cast<std::uint8_t>(i * 3 + 1);
    const std::span<const std::uint8_t> r(remote);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0, r.subspan(0, 256)));
    h.to_completer(
        read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 2, r.subspan(512, 256))); // PSN 1 lost
    EXPECT_EQ(h.qp.counters[Counter::implied_nak_seq_err], 1u);
    h.to_completer(
        read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, r.subspan(768, 232))); // ignored
    EXPECT_EQ(h.qp.req.retry_left, h.qp.attr.retry_cnt - 1) << "one retry for one gap";
    run(h);
    const auto pk = sent_pkts(h, 2);
    ASSERT_EQ(pk.size(), 2u);
    EXPECT_EQ(pk[0].op, Opcode::RC_RDMA_READ_REQUEST);
    EXPECT_EQ(pk[0].psn, 1u);
    EXPECT_EQ(pk[0].va, kRemoteVa + 256);
    EXPECT_EQ(pk[0].dma_len, 1000u - 256);
    EXPECT_EQ(pk[1].op, Opcode::RC_SEND_ONLY);
    EXPECT_EQ(pk[1].psn, 4u);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 1, r.subspan(256, 256)));
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 2, r.subspan(512, 256)));
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, r.subspan(768, 232)));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(b->data, remote);
    h.to_completer(ack_frame(h, 4));
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 2u);
}

TEST(Completer, AckPastUnansweredReadIsImpliedNak) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 64, kAccessLocalWrite);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 10));      // PSN 0
    h.post_send(make_wqe(WrOpcode::rdma_read, 2, *b, 64)); // PSN 1
    h.post_send(make_wqe(WrOpcode::send, 3, *b, 10));      // PSN 2
    run(h);
    h.to_completer(ack_frame(h, 2)); // the READ response was lost
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(h.qp.counters[Counter::implied_nak_seq_err], 1u);
    run(h);
    const auto pk = sent_pkts(h, 3);
    ASSERT_EQ(pk.size(), 2u);
    EXPECT_EQ(pk[0].op, Opcode::RC_RDMA_READ_REQUEST);
    EXPECT_EQ(pk[0].psn, 1u);
}

TEST(Completer, ResponsesImplicitlyAcknowledgeEarlierRequests) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, kAccessLocalWrite);
    h.post_send(make_wqe(WrOpcode::send, 1, *b, 10));                // PSN 0
    h.post_send(make_wqe(WrOpcode::rdma_read, 2, *b, 16));           // PSN 1
    h.post_send(make_wqe(WrOpcode::rdma_write, 3, *b, 10));          // PSN 2
    h.post_send(make_wqe(WrOpcode::atomic_fetch_and_add, 4, *b, 8)); // PSN 3
    run(h);
    ASSERT_EQ(h.sent.size(), 4u);
    std::vector<std::uint8_t> d(16, 0x77);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 1, d)); // no ACK for PSN 0 came
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 1u);
    EXPECT_EQ(c[1].wr_id, 2u);
    EXPECT_EQ(c[1].byte_len, 16u);
    h.to_completer(atomic_ack(h, 3, 42)); // acknowledges the WRITE at PSN 2 too
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].wr_id, 3u);
    EXPECT_EQ(c[1].wr_id, 4u);
    EXPECT_EQ(h.qp.req.rd_atomic_inflight, 0u);
    EXPECT_EQ(h.qp.comp.oldest_unacked, Psn(4));
}

TEST(Completer, ReadResponseTooLongFails) {
    ProtocolHarness h(Mtu::mtu256);
    auto b = make_buf(h, 100, kAccessLocalWrite);
    h.post_send(make_wqe(WrOpcode::rdma_read, 1, *b, 100));
    run(h);
    std::vector<std::uint8_t> data(120, 0x55);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, data));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(h.qp.counters[Counter::req_local_length_error], 1u);
    EXPECT_EQ(h.qp.state, QpState::err);
}

TEST(Completer, ZeroLengthRead) {
    ProtocolHarness h;
    SendWqe w{};
    w.wr_id = 1;
    w.opcode = WrOpcode::rdma_read;
    w.send_flags = kSendSignaled;
    w.remote_addr = kRemoteVa;
    w.rkey = kRkey;
    h.post_send(w);
    run(h);
    ASSERT_EQ(h.sent.size(), 1u);
    EXPECT_EQ(sent_pkts(h)[0].dma_len, 0u);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, {}));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[0].byte_len, 0u);
}

TEST(Completer, AtomicAckStoresOriginalValue) {
    ProtocolHarness h;
    auto b = make_buf(h, 8, kAccessLocalWrite);
    SendWqe w = make_wqe(WrOpcode::atomic_cmp_and_swp, 1, *b, 8);
    w.compare_add = 0x1111;
    w.swap = 0x2222;
    h.post_send(w);
    SendWqe f = make_wqe(WrOpcode::atomic_fetch_and_add, 2, *b, 8);
    f.compare_add = 5;
    h.post_send(f);
    run(h);
    const auto pk = sent_pkts(h);
    ASSERT_EQ(pk.size(), 2u);
    EXPECT_EQ(pk[0].op, Opcode::RC_COMPARE_SWAP);
    EXPECT_TRUE(pk[0].ack_req);
    EXPECT_EQ(pk[0].va, kRemoteVa);
    EXPECT_EQ(pk[0].compare, 0x1111u);
    EXPECT_EQ(pk[0].swap_add, 0x2222u);
    EXPECT_EQ(pk[1].op, Opcode::RC_FETCH_ADD);
    EXPECT_EQ(pk[1].psn, 1u);
    EXPECT_EQ(pk[1].swap_add, 5u);
    h.to_completer(atomic_ack(h, 0, 0x0102030405060708ull));
    auto c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].opcode, WcOpcode::comp_swap);
    EXPECT_EQ(c[0].byte_len, 8u);
    std::uint64_t v = 0;
    std::memcpy(&v, b->data.data(), 8);
    EXPECT_EQ(v, 0x0102030405060708ull);
    h.to_completer(atomic_ack(h, 1, 0x99));
    c = ProtocolHarness::drain(h.send_cq);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].opcode, WcOpcode::fetch_add);
    std::memcpy(&v, b->data.data(), 8);
    EXPECT_EQ(v, 0x99u);
}

TEST(Requester, MaxRdAtomicHoldsBackNextRead) {
    ProtocolHarness h(Mtu::mtu256);
    h.qp.attr.max_rd_atomic = 2;
    auto b = make_buf(h, 64, kAccessLocalWrite);
    for (std::uint64_t i = 1; i <= 3; ++i)
        h.post_send(make_wqe(WrOpcode::rdma_read, i, *b, 16));
    run(h);
    EXPECT_EQ(h.sent.size(), 2u);
    EXPECT_EQ(h.qp.req.rd_atomic_inflight, 2u);
    std::vector<std::uint8_t> d(16, 1);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, d));
    EXPECT_EQ(ProtocolHarness::drain(h.send_cq).size(), 1u);
    run(h);
    ASSERT_EQ(h.sent.size(), 3u);
    EXPECT_EQ(sent_pkts(h, 2)[0].psn, 2u);
}

TEST(Requester, FenceWaitsForEarlierReads) {
    ProtocolHarness h;
    auto b = make_buf(h, 64, kAccessLocalWrite);
    h.post_send(make_wqe(WrOpcode::rdma_read, 1, *b, 16));
    h.post_send(make_wqe(WrOpcode::send, 2, *b, 16, kSendSignaled | kSendFence));
    run(h);
    EXPECT_EQ(h.sent.size(), 1u) << "the fenced SEND waits";
    std::vector<std::uint8_t> d(16, 1);
    h.to_completer(read_resp(h, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0, d));
    run(h);
    ASSERT_EQ(h.sent.size(), 2u);
    EXPECT_EQ(sent_pkts(h, 1)[0].op, Opcode::RC_SEND_ONLY);
}

} // namespace
