/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Hostile MRC input: forged and malformed MRC packets sent at an MRC QP from the peer's addresses
 * (the receive filter already drops other sources). The standard: each is dropped or refused and
 * counted, nothing is written outside a registered region, nothing crashes, and the QP keeps
 * working for what is legitimate. Built twice: plain (suite mrc) and with ASan + UBSan (suite
 * asan).
 */
#include "mrc_pair.h"
#include "wire/icrc.h"

namespace droce::test {
namespace {

using wire::Opcode;

constexpr std::size_t kGuard = 4096;

/** Frames from side 0's addresses on plane @p plane to side 1's QP, straight into the fabric. */
struct Forger {
    MrcPair& t;
    std::uint32_t plane = 0;

    wire::PathHeaders path() const {
        wire::PathHeaders h;
        h.src_mac = sim::Fabric::mac(0, plane);
        h.dst_mac = sim::Fabric::mac(1, plane);
        h.src_ip = MrcPair::gid(0, plane);
        h.dst_ip = MrcPair::gid(1, plane);
        h.udp_sport = 0xc000;
        return h;
    }
    wire::PacketFields fields(Opcode op, std::uint32_t psn) const {
        wire::PacketFields f;
        f.opcode = op;
        f.dest_qp = t.qp[1]->qpn;
        f.psn = wire::Psn(psn);
        return f;
    }
    void send_bytes(std::span<const std::uint8_t> bytes) {
        PktBuf* b = nullptr;
        PortDriver& port = t.fabric.port(0, plane);
        ASSERT_EQ(port.alloc_bulk(&b, 1), 1);
        std::memcpy(b->data, bytes.data(), bytes.size());
        b->len = static_cast<std::uint32_t>(bytes.size());
        ASSERT_EQ(port.tx_burst(&b, 1), 1);
    }
    void send(const wire::PacketFields& f, std::span<const std::uint8_t> payload = {}) {
        std::array<std::uint8_t, 4608> buf{};
        const std::size_t n = wire::build_frame(path(), f, payload, buf);
        ASSERT_GT(n, 0u);
        send_bytes(std::span(buf.data(), n));
    }
};

TEST(MrcHostile, ForgedDataIsRefusedAndNeverWritesOutsideTheRegion) {
    MrcPair t(91);
    t.connect();
    // The victim's region sits between two guard areas that must stay untouched.
    auto whole = t.buffer(1, 3 * kGuard, 0);
    std::memset(whole->bytes.data(), 0xa5, whole->bytes.size());
    int err = 0;
    mem::Mr* mr = t.dev[1]->reg_mr(t.pd[1], whole->bytes.data() + kGuard, kGuard,
                                   rc::kAccessLocalWrite | rc::kAccessRemoteWrite, &err);
    ASSERT_NE(mr, nullptr);
    const std::uint64_t va = whole->addr(kGuard);
    Forger f{t};
    std::vector<std::uint8_t> payload(1024, 0x5a);
    std::uint32_t psn = 100;
    auto data = [&](std::uint64_t at, std::uint32_t rkey, std::uint32_t len, std::uint32_t p) {
        wire::PacketFields pf = f.fields(Opcode::MRC_WRITE, p);
        pf.va = at;
        pf.rkey = rkey;
        pf.dma_len = len;
        pf.mrc_flags = wire::kMdethFirst | wire::kMdethLast;
        pf.mrc_msg_length = len;
        f.send(pf, std::span(payload.data(), std::min<std::size_t>(len, payload.size())));
    };
    data(va + kGuard - 512, mr->rkey, 1024, psn); // runs past the end
    data(va - 512, mr->rkey, 1024, psn);          // starts before the start
    data(va, mr->rkey ^ 0xff, 1024, psn);         // wrong key byte
    data(va, mr->rkey + 0x100, 1024, psn);        // another MR's index
    data(~0ull - 100, mr->rkey, 1024, psn);       // VA wraps
    t.run_for(200'000);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::access_errors), 5u) << t.dump();
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::nacks_sent), 5u);
    for (std::size_t i = 0; i < whole->bytes.size(); ++i)
        ASSERT_EQ(whole->bytes[i], 0xa5) << "byte " << i << " written";

    // Payload longer than its RETH says, an offset past the message, a PSN far beyond MPR, an
    // unknown MDETH version: refused, counted.
    {
        wire::PacketFields pf = f.fields(Opcode::MRC_WRITE, psn);
        pf.va = va;
        pf.rkey = mr->rkey;
        pf.dma_len = 100;
        pf.mrc_msg_length = 100;
        f.send(pf, std::span(payload.data(), 200));
        pf.dma_len = 64;
        pf.mrc_msg_offset = 4000;
        pf.mrc_msg_length = 100;
        f.send(pf, std::span(payload.data(), 64));
    }
    data(va, mr->rkey, 64, psn + 100'000);
    std::array<std::uint8_t, 4608> raw{};
    {
        wire::PacketFields pf = f.fields(Opcode::MRC_WRITE, psn);
        pf.va = va;
        pf.rkey = mr->rkey;
        pf.dma_len = 64;
        pf.mrc_msg_length = 64;
        const std::size_t n = wire::build_frame(f.path(), pf, std::span(payload.data(), 64), raw);
        wire::ParsedFrame parsed;
        ASSERT_EQ(wire::parse_frame(std::span(raw.data(), n), parsed), wire::RejectReason::ok);
        // Version byte 2, ICRC fixed up by building again is not possible: patch and recompute.
        const std::size_t mdeth_off = parsed.mrc_ext - raw.data();
        raw[mdeth_off] = 2;
        wire::ParsedFrame again;
        (void)wire::parse_frame(std::span(raw.data(), n), again);
        wire::store_icrc(raw.data() + n - wire::kIcrcSize, again.icrc_computed);
        f.send_bytes(std::span(raw.data(), n));
    }
    t.run_for(200'000);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::access_errors), 7u) << t.dump();
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::mpr_exceeded), 1u);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::bad_version), 1u);
    for (std::size_t i = 0; i < whole->bytes.size(); ++i)
        ASSERT_EQ(whole->bytes[i], 0xa5) << "byte " << i << " written";

    // The QP still works for the real peer.
    auto src = t.buffer(0, 65536, 4);
    auto dst = t.buffer(1, 65536, 0);
    ASSERT_EQ(t.write(0, *src, *dst, 0, 65536, 1), 0);
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; })) << t.dump();
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 65536), 0);
}

TEST(MrcHostile, ImmediatesBeyondMaxWimmDestAreRefused) {
    MrcOptions o;
    o.attr.max_wimm_dest = 4;
    MrcPair t(92, o);
    t.connect();
    auto dst = t.buffer(1, 4096, 0);
    Forger f{t};
    std::vector<std::uint8_t> payload(8, 1);
    // Ten one-packet WRITEs with immediate, PSNs 101..110, leaving PSN 100 a hole so none can be
    // released: the fifth and later find max_wimm_dest held.
    for (std::uint32_t i = 1; i <= 10; ++i) {
        wire::PacketFields pf = f.fields(Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE, 100 + i);
        pf.va = dst->addr();
        pf.rkey = dst->mr->rkey;
        pf.dma_len = 8;
        pf.mrc_flags = wire::kMdethFirst | wire::kMdethLast;
        pf.mrc_msg_length = 8;
        pf.imm = i;
        f.send(pf, payload);
    }
    t.run_for(200'000);
    EXPECT_EQ(mrc::wimm_dest_use(*t.qp[1]).max, 4u);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::wimm_exceeded), 6u);
    EXPECT_TRUE(t.recv_cqes[1].empty()) << "an immediate released before its predecessors";
}

TEST(MrcHostile, ForgedFeedbackAndGarbageNeverBreakTheRequester) {
    MrcPair t(93);
    t.connect();
    auto src = t.buffer(0, 1 << 20, 2);
    auto dst = t.buffer(1, 1 << 20, 0);
    // Side 1 is the requester here: side 0's addresses forge its feedback.
    Forger f{t};
    std::mt19937_64 rng(7);
    std::array<std::uint8_t, 4608> buf{};
    const std::array<Opcode, 7> ops = {
        Opcode::MRC_WRITE,      Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE,
        Opcode::MRC_SACK,       Opcode::MRC_NACK,
        Opcode::MRC_PROBE,      Opcode::MRC_PROBE_REPLY,
        Opcode::MRC_PORT_STATUS};
    // Side 1 sends a stream to side 0 while garbage arrives: random control headers with
    // random fields (not NACKs that fail the QP: those are a peer's right), random bytes after the
    // BTH, truncated frames.
    std::size_t posted = 0;
    for (int round = 0; round < 2000; ++round) {
        if (posted < 16 && posted - t.send_cqes[1].size() < 4) {
            rc::SendWqe w;
            w.wr_id = posted;
            w.opcode = rc::WrOpcode::rdma_write;
            w.send_flags = rc::kSendSignaled;
            w.num_sge = 1;
            w.sg_list[0] = rc::Sge{dst->addr(), 65536, dst->mr->lkey};
            w.length = 65536;
            w.remote_addr = src->addr((posted % 16) * 65536);
            w.rkey = src->mr->rkey;
            std::uint32_t bad = 0;
            if (t.dev[1]->post_send(t.qp[1], &w, 1, &bad) == 0) ++posted;
        }
        const Opcode op = ops[rng() % ops.size()];
        wire::PacketFields pf = f.fields(op, static_cast<std::uint32_t>(rng()));
        wire::MrcCtlFields ctl;
        ctl.path = static_cast<std::uint16_t>(rng());
        ctl.cum_psn = static_cast<std::uint32_t>(rng());
        ctl.sack_base = static_cast<std::uint32_t>(rng());
        for (auto& w : ctl.bitmap)
            w = rng();
        ctl.reason = static_cast<std::uint8_t>(1 + rng() % 3); // trimmed, mpr, wimm
        ctl.nack_psn = static_cast<std::uint32_t>(rng());
        ctl.port_mask = 0xf; // a peer may say its planes are down; that is not an attack
        ctl.seq = static_cast<std::uint32_t>(rng());
        pf.mrc_ctl = &ctl;
        pf.va = rng();
        pf.rkey = static_cast<std::uint32_t>(rng());
        pf.dma_len = static_cast<std::uint32_t>(rng() % 5000);
        pf.mrc_msg_offset = static_cast<std::uint32_t>(rng());
        pf.mrc_msg_length = static_cast<std::uint32_t>(rng());
        const std::size_t plen =
            wire::opcode_info(op).is(wire::OpFlags::payload) ? rng() % 1500 : 0;
        std::vector<std::uint8_t> payload(plen, 0xee);
        std::size_t n = wire::build_frame(f.path(), pf, payload, buf);
        ASSERT_GT(n, 0u);
        if (rng() % 4 == 0) n = 14 + rng() % (n - 14); // truncated
        f.send_bytes(std::span(buf.data(), n));
        t.step();
    }
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[1].size() == posted; })) << t.dump();
    // Garbage could make the requester resend or wait, never lose or misplace data.
    for (const rc::Cqe& c : t.send_cqes[1])
        EXPECT_TRUE(c.status == rc::WcStatus::success) << rc::to_string(c.status);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 65536), 0);
    // The garbage reached the QP and was judged, not lost on the way.
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::stale_feedback), 100u) << t.dump();
    EXPECT_GT(t.mrc_counter(1, mrc::MrcCounter::mpr_exceeded) +
                  t.mrc_counter(1, mrc::MrcCounter::dup_pkts_rcvd) +
                  t.mrc_counter(1, mrc::MrcCounter::access_errors),
              100u);
    const auto parse = t.dev[1]->rx_parse_counters().snapshot();
    std::uint64_t rejected = 0;
    for (std::size_t r = 1; r < wire::kNumRejectReasons; ++r)
        rejected += parse.v[r];
    EXPECT_GT(rejected, 100u) << "truncated frames";
}

/** A SACK from the peer's address that must change nothing: one acknowledging PSNs never sent
 *  (stale) and one older than the requester's cumulative PSN, each saying "no port of mine is up"
 *  (mask 0). Before, either took every plane away and the next WRITE failed with RETRY_EXC_ERR
 *  after its retries, no byte sent; the real peer, with nothing to SACK, never corrected it. */
TEST(MrcHostile, StaleOrOldSacksChangeNothing) {
    for (const std::uint32_t cum : {100u + 0x400000u, 50u}) {
        MrcPair t(201);
        t.connect();
        auto src = t.buffer(1, 1 << 20, 3);
        auto dst = t.buffer(0, 1 << 20, 0);
        Forger f{t, 0};
        wire::MrcCtlFields ctl;
        ctl.cum_psn = cum;
        ctl.sack_base = cum & ~(wire::kSackBits - 1);
        ctl.mpr_dest = 1;
        ctl.port_mask = 0;
        // Side 0's addresses to side 1, the requester here: a SACK is a response to it.
        wire::PacketFields pf = f.fields(Opcode::MRC_SACK, 0);
        pf.mrc_ctl = &ctl;
        f.send(pf);
        t.run_for(50'000);
        if (cum != 50u) {
            EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::stale_feedback), 1u);
        }
        ASSERT_EQ(t.write(1, *src, *dst, 0, 65536, 1), 0);
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[1].size() == 1; }, 5'000'000'000ull))
            << "cum " << cum << ": no completion in 5 s\n"
            << t.dump();
        EXPECT_EQ(t.send_cqes[1][0].status, rc::WcStatus::success)
            << "cum " << cum << ": " << rc::to_string(t.send_cqes[1][0].status) << "\n"
            << t.dump();
        EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::no_path), 0u) << "cum " << cum;
        EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 65536), 0) << "cum " << cum;
    }
}

/** A NACK with a reason the format does not define (NETH reasons are 1..5) is dropped and counted;
 *  it used to fail the WQE with REM_INV_REQ_ERR and the QP with it. */
TEST(MrcHostile, NackWithAnUndefinedReasonIsDroppedAndCounted) {
    for (const std::uint8_t reason : {0, 6, 255}) {
        MrcPair t(203 + reason);
        t.connect();
        auto src = t.buffer(1, 1 << 20, 3);
        auto dst = t.buffer(0, 1 << 20, 0);
        ASSERT_EQ(t.write(1, *src, *dst, 0, 1 << 20, 1), 0);
        t.step(); // PSN 100 and on leave side 1
        Forger f{t, 0};
        wire::MrcCtlFields ctl;
        ctl.reason = reason;
        ctl.nack_psn = 101;
        ctl.cum_psn = 100;
        wire::PacketFields pf = f.fields(Opcode::MRC_NACK, 101);
        pf.mrc_ctl = &ctl;
        f.send(pf);
        ASSERT_TRUE(t.run_until([&] { return t.send_cqes[1].size() == 1; })) << t.dump();
        EXPECT_EQ(t.send_cqes[1][0].status, rc::WcStatus::success)
            << "reason " << int(reason) << ": " << rc::to_string(t.send_cqes[1][0].status);
        EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::bad_nack_reason), 1u) << int(reason);
        EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 1 << 20), 0);
    }
}

/** Zero-length MRC WRITEs (no R_Key needed, IBTA C9-88) that claim a place in a 64 KiB message,
 *  at the PSNs the real requester is about to use, and a zero-length WRITE WITH IMMEDIATE that
 *  claims a message of 4 GiB - 1: refused (invalid request NAK, access_errors). Before, the first
 *  marked the PSNs arrived, the real packets were dropped as duplicates, and the requester got
 *  SUCCESS with 65,287 of 65,536 bytes never written; the second completed a receive with
 *  byte_len 4294967295. */
TEST(MrcHostile, ZeroLengthPacketsThatClaimAMessageAreRefused) {
    MrcPair t(210);
    t.connect();
    auto src = t.buffer(0, 1 << 20, 5);
    auto dst = t.buffer(1, 1 << 20, 0);
    ASSERT_EQ(t.post_recv(1, 77), 0);
    Forger f{t, 1}; // side 0's addresses to side 1, the responder here, on plane 1
    for (std::uint32_t psn = 100; psn < 116; ++psn) {
        wire::PacketFields pf = f.fields(Opcode::MRC_WRITE, psn);
        pf.dma_len = 0;
        pf.mrc_flags = wire::kMdethFirst | wire::kMdethLast;
        pf.mrc_msg_length = 65536;
        pf.mrc_msg_offset = (psn - 100) * 4096;
        f.send(pf);
    }
    wire::PacketFields imm = f.fields(Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE, 116);
    imm.dma_len = 0;
    imm.mrc_flags = wire::kMdethFirst | wire::kMdethLast;
    imm.mrc_msg_length = 0xffffffffu;
    imm.mrc_msg_offset = 0xffffffffu;
    imm.imm = 0xdeadbeef;
    f.send(imm);
    t.run_for(100'000);
    EXPECT_EQ(t.mrc_counter(1, mrc::MrcCounter::access_errors), 17u);
    EXPECT_TRUE(t.recv_cqes[1].empty()) << "byte_len " << t.recv_cqes[1][0].byte_len;
    ASSERT_EQ(t.write(0, *src, *dst, 0, 65536, 1), 0); // 16 packets, PSN 100..115
    ASSERT_TRUE(t.run_until([&] { return t.send_cqes[0].size() == 1; })) << t.dump();
    EXPECT_EQ(t.send_cqes[0][0].status, rc::WcStatus::success);
    EXPECT_EQ(std::memcmp(src->bytes.data(), dst->bytes.data(), 65536), 0)
        << "dup_pkts_rcvd " << t.mrc_counter(1, mrc::MrcCounter::dup_pkts_rcvd);
}

/** A QP in ERR answers no probe (a reply would tell the peer the path to a dead QP is good). */
TEST(MrcHostile, AQpInErrAnswersNoProbe) {
    MrcPair t(213);
    t.connect();
    {
        rc::QpAttr a;
        a.qp_state = rc::QpState::err;
        ASSERT_EQ(t.dev[1]->modify_qp(t.qp[1], a, rc::kQpState), 0);
    }
    t.run_for(100'000);
    std::uint64_t replies = 0;
    for (unsigned p = 0; p < 4; ++p)
        t.taps[1][p]->on_tx = [&](PktBuf& b) {
            const wire::ParsedFrame pf = parse_frame_of(b);
            if (pf.bth && pf.bth->opcode() == Opcode::MRC_PROBE_REPLY) ++replies;
            return true;
        };
    Forger f{t, 0};
    wire::MrcCtlFields ctl;
    ctl.path = 3;
    ctl.seq = 1;
    wire::PacketFields pf = f.fields(Opcode::MRC_PROBE, 0);
    pf.mrc_ctl = &ctl;
    f.send(pf);
    t.run_for(100'000);
    EXPECT_EQ(replies, 0u);
}

} // namespace
} // namespace droce::test
