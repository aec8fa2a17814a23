/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The receive path, in the fixed receive order: frame parse and ICRC
 * (lib/wire), the receive filter (destination MAC, then destination IP), connectionless MRC
 * endpoint operations to QP1 (endpoint.cc), demux by destination QPN,
 * the source check, then the responder (requests) or the completer (ACKs, NAKs, READ and atomic
 * responses). Frames that are not RoCE go to the neighbour responder (ARP, IPv6 ND). Looped-back
 * frames enter here too. Engine thread only.
 */
#include "device.h"
#include "rc/pacer.h"

#include <array>
#include <cstring>

namespace droce {

using rc::QpState;

namespace {

/** 33:33:…, where IPv6 multicast groups map (RFC 2464 §7), ND's solicited-node groups among them.
 */
bool is_ipv6_multicast_mac(const wire::MacAddr& m) noexcept {
    return m[0] == 0x33 && m[1] == 0x33;
}

} // namespace

bool Device::dst_mac_accepted(const wire::ParsedFrame& pkt, bool roce, unsigned port,
                              bool looped) const noexcept {
    const wire::MacAddr& dst = pkt.eth->dst;
    if (!is_group_mac(dst)) {
        if (port < ports_.size() && wire::same_mac(dst, ports_[port].mac)) return true;
        // A looped-back frame leaves by the sending QP's port and is received by the port that owns
        // its destination GID: any of this device's own MACs is that port's.
        if (!looped) return false;
        for (const PortSpec& own : ports_)
            if (wire::same_mac(dst, own.mac)) return true;
        return false;
    }
    // A group MAC reaches every host on the link: a RoCE RC frame is never sent to one, so
    // accepting it would let any host address every device at once. Only what the neighbour
    // responder needs passes: ARP requests (broadcast) and ND to solicited-node or all-nodes
    // groups.
    if (roce) return false;
    if (dst == kBroadcastMac) return pkt.ether_type == wire::kEtherTypeArp;
    return is_ipv6_multicast_mac(dst) && pkt.ether_type == wire::kEtherTypeIpv6;
}

bool Device::dst_ip_is_gid(const wire::ParsedFrame& pkt) const noexcept {
    // An IPv4-mapped GID is reached by IPv4 frames only, as droce sends them (set_path): the
    // mapped form is an API convention (RFC 4291 §2.5.5.2), not an IPv6 destination. The
    // addresses were sorted by family once (own_ipv4_, own_ipv6_): one compare per port here.
    if (pkt.ipv4) {
        std::uint32_t dst;
        std::memcpy(&dst, pkt.ipv4->dst.data(), sizeof dst);
        for (const std::uint32_t own : own_ipv4_)
            if (own == dst) return true;
        return false;
    }
    for (const wire::Ipv6Addr& own : own_ipv6_)
        if (pkt.ipv6->dst == own) return true;
    return false;
}

void Device::receive(PktBuf& buf, bool looped) noexcept {
    // The declaration's zeroing is a `rep stos` (60 % of this function's own time, perf on
    // bench/engine); overwritten at once by a copy of a constant, the compiler drops it and copies
    // with vector stores. parse_frame() resets the frame again, as cheaply.
    static constexpr wire::ParsedFrame kEmpty{};
    wire::ParsedFrame pkt;
    std::memcpy(static_cast<void*>(&pkt), &kEmpty, sizeof pkt);
    const wire::RejectReason r = wire::parse_frame(buf.frame(), pkt);
    receive_parsed(buf, pkt, r, looped);
}

void Device::receive_parsed(PktBuf& buf, const wire::ParsedFrame& pkt, wire::RejectReason r,
                            bool looped) noexcept {
    if (capturing()) capture(buf, CaptureDir::rx, looped);
    parse_counters_.count(r);
    // A frame cut short (or with impossible lengths) still names its UDP port: RoCE that is
    // malformed, not traffic of another protocol. Only rejected frames need the second look.
    const bool roce_port = pkt.udp
                               ? pkt.udp->dst_port.get() == wire::kRoceV2Port
                               : r != wire::RejectReason::ok && wire::names_roce_port(buf.frame());
    // The receive filter, before anything acts on the frame: a port hears frames for other hosts
    // (promiscuous PMDs, software switches), and executing them would let any host on the link
    // write through this device's QPs. Frames too short for an Ethernet header carry no address
    // and are the parser's (or the neighbour responder's) to reject.
    if (pkt.eth && !dst_mac_accepted(pkt, roce_port, buf.port, looped)) {
        counters_.inc(Counter::rx_dropped_dst_mac);
        return;
    }
    if (r != wire::RejectReason::ok) {
        // Not RoCE at all (ARP, ND, other traffic) is no error for the transport; malformed RoCE
        // is.
        if (r == wire::RejectReason::bad_icrc)
            counters_.inc(Counter::rx_dropped_bad_icrc);
        else if (roce_port)
            counters_.inc(Counter::rx_dropped_malformed);
        else if (buf.port < responders_.size()) {
            std::array<std::uint8_t, kNeighMaxReply> reply{};
            const NeighRx nr = responders_[buf.port].handle_frame(buf.frame(), reply);
            if (nr.reply_len > 0)
                queue_raw(buf.port, std::span(reply.data(), nr.reply_len), Counter::neigh_tx);
            // A QP waiting for this neighbour should not wait for the next control-rate pass
            // (every 256th: 100s of ms when the engine naps between passes; seen against an
            // af_packet peer, whose ACKs waited for ARP until the requester timed out): the next
            // pass does the control work, resolve_paths() included. Only on an answer (the entry
            // is then REACHABLE): one learned from a request is STALE and would cost a probe.
            if (paths_pending_ &&
                (nr.status == NeighStatus::arp_reply || nr.status == NeighStatus::na))
                polls_ &= ~255u;
        }
        return;
    }
    // As rxe checks the destination GID against its GID table: an IP that is not ours names a
    // QPN space that is not ours either.
    if (!dst_ip_is_gid(pkt)) {
        counters_.inc(Counter::rx_dropped_dst_ip);
        return;
    }
    // One partition, the default (IBTA 10.9.1): a P_Key outside it is dropped before any QP sees
    // the frame, as rxe's check_keys does (membership bit either way: both sides are members).
    if ((pkt.bth->pkey.get() & 0x7fffu) != (wire::kDefaultPkey & 0x7fffu)) [[unlikely]] {
        counters_.inc(Counter::rx_dropped_bad_pkey);
        return;
    }
    // Connectionless MRC endpoint operations (EV probes) go to QP1, which is no data QP: they are
    // answered or queued here, before the QP lookup (endpoint.cc). Other opcodes to QP1 find no QP
    // below.
    if (wire::is_mrc_endpoint_qpn(pkt.bth->dest_qp()) &&
        wire::transport_of(pkt.bth->opcode()) == wire::Transport::mrc) {
        receive_endpoint(pkt, buf.port);
        return;
    }
    // A port taken out of service (set_port_admin, mrc_ctl_modify_port) is documented as a pulled
    // cable, and a pulled cable hears nothing: what the peer sent on it before it learned (the
    // MRC port status) is lost and recovered as a loss. admin_up_ changes only between passes.
    if (!looped && buf.port < admin_up_.size() && !admin_up_[buf.port]) [[unlikely]] {
        counters_.inc(Counter::rx_dropped_port_down);
        return;
    }
    const bool cnp = pkt.bth->opcode() == wire::Opcode::CNP;
    rc::Qp* qp = qp_by_num(pkt.bth->dest_qp());
    // An opcode of another transport (an MRC packet for an RC QP, UC/UD for anyone) is dropped
    // here, before any transport reads it. A CNP belongs to no transport: DCQCN's, for any QP.
    if (!qp || qp->state == QpState::reset || qp->state == QpState::init ||
        (!cnp && wire::transport_of(pkt.bth->opcode()) != qp->transport->family)) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    // RC packets must come from the connected peer (rxe check_addr): same source address. A
    // multiplane QP's peer has one address per plane: the one on the plane the frame came by.
    const unsigned pi = buf.port < qp->num_paths ? buf.port : 0;
    const wire::Ipv6Addr& peer = qp->paths[pi].hdr.dst_ip;
    const bool from_peer = pkt.ipv4 ? std::memcmp(pkt.ipv4->src.data(), peer.data() + 12, 4) == 0
                                    : std::memcmp(pkt.ipv6->src.data(), peer.data(), 16) == 0;
    if (!from_peer) {
        counters_.inc(Counter::rx_dropped_bad_qp);
        return;
    }
    const std::uint32_t slot = qp_index(qp->qpn);
    if (cnp) { // DCQCN reaction point: the peer's NP says our packets were marked
        rc::pacer_on_cnp(*qp, clock_->now_ns());
        activate(slot); // the rate and the QP's deadline changed
        return;
    }
    qp->counters.inc(Counter::rcvd_pkts);
    ctx_.rx_port = buf.port;
    ctx_.rx_ecn_ce = buf.ecn_ce || (pkt.ipv4 ? (pkt.ipv4->tos & 3u) == 3u
                                             : (pkt.ipv6->traffic_class() & 3u) == 3u);
    if (ctx_.rx_ecn_ce && qp->pacer.dcqcn != nullptr) send_cnp(*qp, pi);
    if (pkt.info->is(wire::OpFlags::response))
        qp->transport->receive_response(*qp, pkt, ctx_);
    else
        qp->transport->receive_request(*qp, pkt, ctx_);
    activate(qp_index(qp->qpn)); // an ACK opens the window, a request owes an ACK: run it now
}

void Device::send_cnp(rc::Qp& qp, unsigned path_index) noexcept {
    // DCQCN notification point: a CE mark on a packet for this QP; at most one CNP per
    // min_time_between_cnps (IBTA Annex A17.9.3 wire format, mlx5's NP rules).
    qp.counters.inc(Counter::np_ecn_marked_roce_packets);
    const cc::DcqcnProfile& prof = *qp.pacer.dcqcn;
    if (!qp.pacer.np.on_marked(clock_->now_ns(), prof)) return;
    const rc::Path& path = qp.paths[path_index];
    qp.pacer.cnp_path = path.hdr;
    qp.pacer.cnp_path.tos = static_cast<std::uint8_t>((prof.cnp_dscp << 2) | (path.hdr.tos & 3u));
    wire::PacketFields f{};
    f.opcode = wire::Opcode::CNP;
    f.becn = true;
    f.pkey = wire::kDefaultPkey;
    f.dest_qp = qp.attr.dest_qp_num;
    if (stage_.append(qp.pacer.cnp_path, path.port, qp.loopback_peer, f, {}, nullptr, &qp.counters))
        qp.counters.inc(Counter::np_cnp_sent);
    else
        qp.counters.inc(Counter::tx_no_buffer);
}

std::uint32_t Device::drain_loopback(std::uint32_t budget) noexcept {
    // Only the frames queued before this call: the ACKs and responses they cause wait for the next
    // pass, so one pass is bounded even when two QPs of this device talk back and forth.
    std::uint32_t n = std::min(budget, loopback_.size());
    for (std::uint32_t i = 0; i < n; ++i) {
        PktBuf* buf = loopback_.bufs[loopback_.head++ % LoopbackQueue::kDepth];
        receive(*buf, true);
        ports_[buf->port].driver->free_bulk(&buf, 1);
    }
    return n;
}

} // namespace droce
