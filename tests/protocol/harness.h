/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Test seam for protocol tests: one RC QP with its rings, an MR table, a
 * virtual clock, and a transmit hook that records every frame the transport emits. Tests craft
 * packets with wire::build_frame, feed them to the responder or the completer, and assert on what
 * was sent and completed. No NIC, no engine thread, no DPDK.
 */
#pragma once

#include <cstdlib>
#include <cstring>
#include <vector>

#include "rc/qp.h"
#include "wire/packet.h"

namespace droce::test {

class ProtocolHarness {
  public:
    static constexpr std::uint32_t kLocalQpn = 0x11;
    static constexpr std::uint32_t kRemoteQpn = 0x12;

    Clock clock = Clock::virtual_clock();
    mem::MrTable mrs{64};
    mem::Pd pd{1};
    Counters dev_counters;
    rc::Cq send_cq;
    rc::Cq recv_cq;
    rc::Qp qp;
    rc::TransportCtx ctx;
    /** Deep enough that a test's single requester_run() is never cut short by the stage. */
    static constexpr std::uint32_t kStageDepth = 8192;
    TxStage stage{kStageDepth};

    /**
     * Every frame the transport staged, in order, built the way the engine builds them. Reading
     * it builds what the transport staged since the last read, so a test asserts right after a
     * transport call as if frames left at once.
     */
    class SentFrames {
      public:
        explicit SentFrames(ProtocolHarness& h) : h_(h) {}
        [[nodiscard]] std::size_t size() const { return drained().size(); }
        [[nodiscard]] bool empty() const { return drained().empty(); }
        const std::vector<std::uint8_t>& operator[](std::size_t i) const { return drained()[i]; }
        const std::vector<std::uint8_t>& at(std::size_t i) const { return drained().at(i); }
        void clear() {
            drained();
            frames_.clear();
        }

      private:
        const std::vector<std::vector<std::uint8_t>>& drained() const {
            for (const TxPacket& p : h_.stage.packets()) {
                std::size_t len = 0;
                for (auto span : p.payload_spans())
                    len += span.size();
                std::vector<std::uint8_t> out(wire::frame_length(*p.path, p.fields.opcode, len));
                out.resize(wire::build_frame(*p.path, p.fields, p.payload_spans(), out));
                // As the engine does: every packet built is counted once, on its QP.
                if (!out.empty()) p.counters->inc(Counter::sent_pkts);
                frames_.push_back(std::move(out));
            }
            h_.reopen_stage(); // every read starts a new "pass" with the room the test chose
            return frames_;
        }
        ProtocolHarness& h_;
        mutable std::vector<std::vector<std::uint8_t>> frames_;
    };
    SentFrames sent{*this};

    /** Models a full transmit queue: while blocked, the stage has no room and refuses packets. */
    void block_tx(bool blocked) {
        (void)sent.size(); // what was staged before stays sent
        tx_blocked_ = blocked;
        reopen_stage();
    }
    /** Models a transmit queue with room for @p packets per pass (kStageDepth: the default). */
    void limit_tx(std::uint32_t packets) {
        (void)sent.size();
        tx_room_ = packets;
        reopen_stage();
    }
    void reopen_stage() {
        const std::uint32_t room[1] = {tx_blocked_ ? 0u : tx_room_};
        stage.open(room, tx_blocked_ ? 0u : tx_room_);
    }
    bool tx_blocked_ = false;
    std::uint32_t tx_room_ = kStageDepth;

    explicit ProtocolHarness(rc::Mtu mtu = rc::Mtu::mtu1024, std::uint32_t sq_depth = 64,
                             std::uint32_t rq_depth = 64) {
        send_cq.ring = SpscRing<rc::Cqe>(256);
        recv_cq.ring = SpscRing<rc::Cqe>(256);
        qp.qpn = kLocalQpn;
        qp.pd = &pd;
        qp.send_cq = &send_cq;
        qp.recv_cq = &recv_cq;
        if (!rc::make_sq(qp, sq_depth)) std::abort();
        qp.rq = SpscRing<rc::RecvWqe>(rq_depth);
        qp.state = rc::QpState::rts;
        qp.attr.qp_state = rc::QpState::rts;
        qp.attr.path_mtu = mtu;
        qp.attr.dest_qp_num = kRemoteQpn;
        qp.attr.qp_access_flags =
            rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
        qp.attr.max_rd_atomic = 4;
        qp.attr.max_dest_rd_atomic = 4;
        qp.attr.timeout = 14;
        qp.attr.retry_cnt = 7;
        qp.attr.rnr_retry = 7;
        qp.mtu = rc::mtu_bytes(mtu);
        qp.req.retry_left = qp.attr.retry_cnt;
        qp.req.rnr_retry_left = qp.attr.rnr_retry;
        qp.paths[0].hdr.src_mac = {0x02, 0, 0, 0, 0, 1};
        qp.paths[0].hdr.dst_mac = {0x02, 0, 0, 0, 0, 2};
        qp.paths[0].hdr.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
        qp.paths[0].hdr.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
        ctx.clock = &clock;
        ctx.mrs = &mrs;
        ctx.dev_counters = &dev_counters;
        ctx.tx = &stage;
        reopen_stage();
    }

    /** Registers @p buf with @p access; returns the MR (asserting success is the caller's job). */
    mem::Mr* reg(std::vector<std::uint8_t>& buf, std::uint32_t access) {
        int err = 0;
        return mrs.register_mr(&pd, buf.data(), buf.size(),
                               reinterpret_cast<std::uintptr_t>(buf.data()), access, &err);
    }

    /** A frame from the peer (src/dst swapped) carrying @p f and @p payload. */
    std::vector<std::uint8_t> peer_frame(wire::PacketFields f,
                                         std::span<const std::uint8_t> payload = {}) const {
        wire::PathHeaders p = qp.paths[0].hdr;
        std::swap(p.src_mac, p.dst_mac);
        std::swap(p.src_ip, p.dst_ip);
        std::vector<std::uint8_t> out(wire::frame_length(p, f.opcode, payload.size()));
        std::size_t n = wire::build_frame(p, f, payload, out);
        out.resize(n);
        return out;
    }

    /** Parses @p frame (must be valid) and hands it to the responder. */
    void to_responder(const std::vector<std::uint8_t>& frame) {
        wire::ParsedFrame pf;
        if (wire::parse_frame(frame, pf) == wire::RejectReason::ok)
            rc::responder_receive(qp, pf, ctx);
        else
            ++bad_frames;
    }
    /** Parses @p frame (must be valid) and hands it to the completer. */
    void to_completer(const std::vector<std::uint8_t>& frame) {
        wire::ParsedFrame pf;
        if (wire::parse_frame(frame, pf) == wire::RejectReason::ok)
            rc::completer_receive(qp, pf, ctx);
        else
            ++bad_frames;
    }

    /** Parsed view of sent frame @p i (valid while `sent` is not modified). */
    wire::ParsedFrame sent_frame(std::size_t i) const {
        wire::ParsedFrame pf;
        last_reject = wire::parse_frame(sent.at(i), pf);
        return pf;
    }

    /** Pops every CQE of @p cq. */
    static std::vector<rc::Cqe> drain(rc::Cq& cq) {
        std::vector<rc::Cqe> v;
        while (cq.ring.ready() > 0) {
            v.push_back(cq.ring.slot(cq.ring.consumer_index()));
            cq.ring.release();
        }
        return v;
    }

    /** Posts a send WQE (no validation: the native API validates; protocol tests post raw WQEs). */
    rc::SqWqe& post_send(const rc::SendWqe& w) {
        rc::SqWqe& slot = qp.sq.producer_slot();
        slot.fill(w, qp.sq_ext_of(slot));
        if (w.length != 0) slot.length = w.length; // as posted, even when it disagrees
        qp.sq.publish();
        return slot;
    }
    void post_recv(const rc::RecvWqe& w) {
        rc::RecvWqe& slot = qp.rq.producer_slot();
        slot = w;
        if (slot.length == 0)
            for (std::uint32_t i = 0; i < slot.num_sge; ++i)
                slot.length += slot.sg_list[i].length;
        qp.rq.publish();
    }

    int bad_frames = 0;
    mutable wire::RejectReason last_reject = wire::RejectReason::ok;
};

} // namespace droce::test
