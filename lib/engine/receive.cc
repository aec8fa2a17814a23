/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The receive path, in the fixed receive order (CONVENTIONS rule 9): frame parse and ICRC (lib/wire),
 * demux by destination QPN, the source check, then the responder (requests) or the completer
 * (ACKs, NAKs, READ and atomic responses). Frames that are not RoCE go to the neighbour responder
 * (ARP, IPv6 ND). Looped-back frames enter here too. Engine thread only.
 */
#include "device.h"

#include <array>
#include <cstring>

namespace droce {

using rc::QpState;

void Device::receive(PktBuf& buf) noexcept {
    if (capture_.fn) capture_.fn(capture_.ctx, buf, CaptureDir::rx);
    wire::ParsedFrame pkt;
    const wire::RejectReason r = wire::parse_frame(buf.frame(), pkt);
    parse_counters_.count(r);
    if (r != wire::RejectReason::ok) {
        // Not RoCE at all (ARP, ND, other traffic) is no error for the transport; malformed RoCE is.
        if (r == wire::RejectReason::bad_icrc) counters_.inc(Counter::rx_dropped_bad_icrc);
        else if (pkt.udp && pkt.udp->dst_port.get() == wire::kRoceV2Port) counters_.inc(Counter::rx_dropped_malformed);
        else if (buf.port < responders_.size()) {
            std::array<std::uint8_t, kNeighMaxReply> reply{};
            const NeighRx nr = responders_[buf.port].handle_frame(buf.frame(), reply);
            if (nr.reply_len > 0) queue_raw(buf.port, std::span(reply.data(), nr.reply_len));
        }
        return;
    }
    if (pkt.bth->opcode() == wire::Opcode::CNP) return; // DCQCN reaction point: a later issue
    if (wire::transport_of(pkt.bth->opcode()) != wire::Transport::rc) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    rc::Qp* qp = qp_by_num(pkt.bth->dest_qp());
    if (!qp || qp->state == QpState::reset || qp->state == QpState::init) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    // RC packets must come from the connected peer (rxe check_addr): same source address.
    const wire::Ipv6Addr& peer = qp->paths[0].hdr.dst_ip;
    const bool from_peer = pkt.ipv4 ? std::memcmp(pkt.ipv4->src.data(), peer.data() + 12, 4) == 0
                                    : std::memcmp(pkt.ipv6->src.data(), peer.data(), 16) == 0;
    if (!from_peer) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    qp->counters.inc(Counter::rcvd_pkts);
    if (pkt.info->is(wire::OpFlags::response)) rc::completer_receive(*qp, pkt, ctx_);
    else rc::responder_receive(*qp, pkt, ctx_);
    activate(qp->qpn - rc::kFirstQpn); // an ACK opens the window, a request owes an ACK: run it this pass
}

std::uint32_t Device::drain_loopback(std::uint32_t budget) noexcept {
    // Only the frames queued before this call: the ACKs and responses they cause wait for the next
    // pass, so one pass is bounded even when two QPs of this device talk back and forth.
    std::uint32_t n = std::min(budget, loopback_.size());
    for (std::uint32_t i = 0; i < n; ++i) {
        PktBuf* buf = loopback_.bufs[loopback_.head++ % LoopbackQueue::kDepth];
        receive(*buf);
        ports_[buf->port].driver->free_bulk(&buf, 1);
    }
    return n;
}

} // namespace droce
