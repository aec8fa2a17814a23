/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The requester side of the responder's protocol tests (responder_test.cc,
 * responder_attack_test.cc): a Peer crafts request packets into a ProtocolHarness's QP and decodes
 * what its responder sends back. Header-only, test code only.
 */
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <vector>

#include "harness.h"

namespace droce::test::responder {

using droce::Counter;
using droce::test::ProtocolHarness;
using droce::wire::AethKind;
using droce::wire::NakCode;
using droce::wire::Opcode;
using droce::wire::PacketFields;
using droce::wire::Psn;
namespace rc = droce::rc;

constexpr std::uint8_t kAck =
    droce::wire::make_syndrome(AethKind::ack, droce::wire::kAethCreditsInvalid);
constexpr std::uint8_t kNakSeq = droce::wire::make_syndrome(AethKind::nak, 0);
constexpr std::uint8_t kNakInvReq = droce::wire::make_syndrome(AethKind::nak, 1);
constexpr std::uint8_t kNakRemAccess = droce::wire::make_syndrome(AethKind::nak, 2);

/** What the responder sent, decoded. */
struct Out {
    Opcode op{};
    std::uint32_t psn = 0;
    std::uint32_t dest_qp = 0;
    bool has_aeth = false;
    std::uint8_t syndrome = 0;
    std::uint32_t msn = 0;
    std::uint64_t orig = 0;
    std::vector<std::uint8_t> payload;
};

inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 8));
    return v;
}

class Peer {
  public:
    explicit Peer(rc::Mtu mtu = rc::Mtu::mtu1024) : h(mtu) {}

    ProtocolHarness h;

    std::uint32_t mtu() const { return h.qp.mtu; }

    static PacketFields req(Opcode op, std::uint32_t psn, bool ack_req = false) {
        PacketFields f;
        f.opcode = op;
        f.dest_qp = ProtocolHarness::kLocalQpn;
        f.psn = Psn(psn);
        f.ack_req = ack_req;
        return f;
    }
    void feed(const PacketFields& f, std::span<const std::uint8_t> payload = {}) {
        h.to_responder(h.peer_frame(f, payload));
    }

    Out out(std::size_t i) const {
        auto pf = h.sent_frame(i);
        EXPECT_EQ(h.last_reject, droce::wire::RejectReason::ok);
        Out o;
        if (!pf.bth) return o;
        o.op = pf.bth->opcode();
        o.psn = pf.bth->psn().value();
        o.dest_qp = pf.bth->dest_qp();
        if (pf.aeth) {
            o.has_aeth = true;
            o.syndrome = pf.aeth->syndrome;
            o.msn = pf.aeth->msn();
        }
        if (pf.atomic_ack_eth) o.orig = pf.atomic_ack_eth->orig_rem_data.get();
        o.payload.assign(pf.payload.begin(), pf.payload.end());
        return o;
    }

    /** A buffer registered with @p access (plus local write, which remote write/atomic need). */
    struct Buf {
        std::vector<std::uint8_t> mem;
        droce::mem::Mr* mr = nullptr;
        std::uint64_t va() const { return reinterpret_cast<std::uintptr_t>(mem.data()); }
    };
    Buf& buffer(std::size_t n, std::uint32_t access) {
        bufs_.emplace_back();
        Buf& b = bufs_.back();
        b.mem.assign(n, 0xee);
        b.mr = h.reg(b.mem, access | rc::kAccessLocalWrite);
        EXPECT_NE(b.mr, nullptr);
        return b;
    }
    Buf& remote(std::size_t n) {
        return buffer(n, rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic);
    }

    /** Posts a receive WQE over @p b, split into SGEs of the given sizes. */
    void post_recv(Buf& b, std::vector<std::uint32_t> sges, std::uint64_t wr_id = 0x77) {
        rc::RecvWqe w;
        w.wr_id = wr_id;
        std::uint64_t off = 0;
        for (auto len : sges) {
            w.sg_list[w.num_sge++] = rc::Sge{b.va() + off, len, b.mr->lkey};
            off += len;
        }
        h.post_recv(w);
    }

    /** An RDMA READ REQUEST at @p psn for @p len bytes of @p b from @p off on. */
    void read(std::uint32_t psn, const Buf& b, std::uint32_t off, std::uint32_t len) {
        PacketFields f = req(Opcode::RC_RDMA_READ_REQUEST, psn);
        f.va = b.va() + off;
        f.rkey = b.mr->rkey;
        f.dma_len = len;
        feed(f);
    }
    /** A FETCH_ADD at @p psn of @p add to the 8 bytes at @p b + @p off. */
    void fetch_add(std::uint32_t psn, const Buf& b, std::uint64_t add, std::uint32_t off = 0) {
        PacketFields fa = req(Opcode::RC_FETCH_ADD, psn);
        fa.va = b.va() + off;
        fa.rkey = b.mr->rkey;
        fa.swap_add = add;
        feed(fa);
    }
    /** The 8 bytes at @p b + @p off. */
    static std::uint64_t u64(const Buf& b, std::size_t off = 0) {
        std::uint64_t v = 0;
        std::memcpy(&v, b.mem.data() + off, 8);
        return v;
    }
    /** A one-byte RDMA WRITE ONLY at @p psn: @p byte to @p va under @p rkey, AckReq unless
     *  @p ack_req is false. */
    void write_byte(std::uint32_t psn, std::uint64_t va, std::uint32_t rkey, std::uint8_t byte,
                    bool ack_req = true) {
        PacketFields w = req(Opcode::RC_RDMA_WRITE_ONLY, psn, ack_req);
        w.va = va;
        w.rkey = rkey;
        w.dma_len = 1;
        const std::uint8_t one[1] = {byte};
        feed(w, one);
    }

    /** The opcode of a SEND's (or with @p write an RDMA WRITE's) packet: ONLY, FIRST, LAST or
     *  MIDDLE. */
    static Opcode message_opcode(bool write, bool first, bool last) {
        if (write)
            return first && last ? Opcode::RC_RDMA_WRITE_ONLY
                   : first       ? Opcode::RC_RDMA_WRITE_FIRST
                   : last        ? Opcode::RC_RDMA_WRITE_LAST
                                 : Opcode::RC_RDMA_WRITE_MIDDLE;
        return first && last ? Opcode::RC_SEND_ONLY
               : first       ? Opcode::RC_SEND_FIRST
               : last        ? Opcode::RC_SEND_LAST
                             : Opcode::RC_SEND_MIDDLE;
    }

    /** Sends @p data as a multi-packet SEND (or WRITE with @p reth) starting at @p psn; AckReq on
     * the last. */
    std::uint32_t send_message(std::uint32_t psn, const std::vector<std::uint8_t>& data,
                               bool write = false, std::uint64_t va = 0, std::uint32_t rkey = 0) {
        const std::uint32_t m = mtu();
        const std::size_t n = data.empty() ? 1 : (data.size() + m - 1) / m;
        for (std::size_t i = 0; i < n; ++i) {
            const bool first = i == 0, last = i + 1 == n;
            PacketFields f =
                req(message_opcode(write, first, last), psn + static_cast<std::uint32_t>(i), last);
            f.va = va;
            f.rkey = rkey;
            f.dma_len = static_cast<std::uint32_t>(data.size());
            const std::size_t off = i * m;
            const std::size_t len =
                std::min<std::size_t>(m, data.size() - std::min(off, data.size()));
            feed(f, std::span<const std::uint8_t>(data.data() + std::min(off, data.size()), len));
        }
        return static_cast<std::uint32_t>(n);
    }

    std::uint64_t ctr(Counter c) const { return h.qp.counters[c]; }

  private:
    std::deque<Buf> bufs_;
};

} // namespace droce::test::responder
