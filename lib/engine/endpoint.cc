/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Connectionless MRC endpoint operations: EV probes (OCP MRC controller API, mrc_ctl.h endpoint
 * operation MRC_CTL_EP_OP_EV_PROBE). A controller probes one entropy value (UDP source port, IPv6
 * flow label) from one of this device's ports to a peer's GID and learns the round trip time; no
 * QP exists on either side.
 *
 * Wire (wire/mrc.h): MRC_PROBE and MRC_PROBE_REPLY with the PETH, addressed to QP1
 * (wire::kMrcEndpointQpn). PETH.path carries the caller's req_id, PETH.seq a nonce, PETH
 * .timestamp_ns the prober's device clock at sending; the responder echoes all three from the
 * probe's destination address back to its source on the port it came by, with the same UDP source
 * port, flow label and DSCP, so the reply measures the EV's path in both directions.
 *
 * Threads: send_ep_probe() is a control call (it holds a ControlSection, so the engine's transmit
 * queues and neighbour table are the caller's while it runs); receive_endpoint() runs on the
 * engine thread; take_ep_replies() on any one thread at a time (the consumer of ep_replies_).
 */
#include "device.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace droce {

namespace {

/** An MRC_PROBE or MRC_PROBE_REPLY frame is at most this long (Ethernet + 802.1Q + IPv6 + UDP +
 *  BTH + PETH + ICRC = 98 bytes). */
constexpr std::size_t kEpFrameRoom = 128;

/** TOS / traffic class with ECN = ECT(0) (RFC 3168 §5): EV probes see the marking data would. */
constexpr std::uint8_t with_ect0(unsigned tos) noexcept {
    return static_cast<std::uint8_t>((tos & ~3u) | 2u);
}

/** True for a GID that names one host: not unspecified, not multicast, not IPv4 broadcast. */
bool is_unicast_gid(const wire::Ipv6Addr& gid) noexcept {
    if (wire::is_ipv4_mapped(gid)) {
        const wire::Ipv4Addr v4 = wire::ipv4_of_mapped(gid);
        const bool zero = v4 == wire::Ipv4Addr{};
        const bool multicast = (v4[0] & 0xf0u) == 0xe0u; // 224.0.0.0/4 (RFC 5771)
        const bool broadcast = v4 == wire::Ipv4Addr{0xff, 0xff, 0xff, 0xff};
        return !zero && !multicast && !broadcast;
    }
    return gid != wire::Ipv6Addr{} && gid[0] != 0xff; // ::, ff00::/8 (RFC 4291 §2.7)
}

/** True for a source address a reply may go back to: one host, not loopback. */
bool is_reply_address(const wire::Ipv6Addr& gid) noexcept {
    if (!is_unicast_gid(gid)) return false;
    if (wire::is_ipv4_mapped(gid)) {
        const wire::Ipv4Addr v4 = wire::ipv4_of_mapped(gid);
        return v4[0] != 127 && v4[0] != 0; // 127.0.0.0/8, 0.0.0.0/8 (RFC 1122 §3.2.1.3)
    }
    constexpr wire::Ipv6Addr kLoopback{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return gid != kLoopback;
}

/** The PETH fields of an EV probe or its reply (host order). */
wire::MrcCtlFields peth_fields(std::uint16_t req_id, std::uint32_t nonce,
                               std::uint64_t timestamp_ns) noexcept {
    wire::MrcCtlFields c;
    c.path = req_id;
    c.seq = nonce;
    c.timestamp_ns = timestamp_ns;
    return c;
}

} // namespace

int Device::send_ep_probe(const EpProbeRequest& req) noexcept {
    ControlSection section(*this);
    // Arguments first (EINVAL), then the port (ENETDOWN), then the neighbour (EAGAIN,
    // EHOSTUNREACH), then the buffer (ENOBUFS): an error says the first thing that is wrong.
    if (req.port >= ports_.size()) return EINVAL;
    const PortSpec& ps = ports_[req.port];
    if (req.sgid != ps.gid) return EINVAL;
    const bool ipv4 = wire::is_ipv4_mapped(req.dgid);
    if (ipv4 != wire::is_ipv4_mapped(req.sgid)) return EINVAL;
    if (!is_unicast_gid(req.dgid)) return EINVAL;
    // A probe to this device itself would never reach the fabric whose path it is meant to measure.
    for (const PortSpec& own : ports_)
        if (own.gid == req.dgid) return EINVAL;
    if (!admin_up_[req.port] || ps.driver == nullptr || !ps.driver->link_up()) return ENETDOWN;

    // An l3 port (the kernel routes, PortSpec::l3) has no neighbour to ask and would never get
    // an answer: the probe goes at once, with the MAC the driver ignores, as a path's frames do.
    NeighLookup l{};
    if (ps.l3) {
        l.result = NeighResolve::resolved;
        l.mac = kL3PortNextHopMac;
    } else {
        l = neigh_.lookup(req.dgid);
    }
    if (l.send_request) { // first request, a retransmission, or a STALE entry's refresh
        std::array<std::uint8_t, kNeighMaxReply> arp{};
        const std::size_t n = responders_[req.port].build_request(req.dgid, arp);
        if (n) queue_raw(req.port, std::span(arp.data(), n), Counter::neigh_tx);
    }
    switch (l.result) {
    case NeighResolve::resolved:
        break;
    case NeighResolve::pending:
        flush_tx(req.port);
        return EAGAIN;
    case NeighResolve::failed:
    case NeighResolve::no_space:
        flush_tx(req.port);
        return EHOSTUNREACH;
    }

    wire::PathHeaders h;
    h.src_mac = ps.mac;
    h.dst_mac = l.mac;
    h.ipv6 = !ipv4;
    h.src_ip = req.sgid;
    h.dst_ip = req.dgid;
    h.tos = with_ect0(req.traffic_class);
    h.ttl = 64;
    h.flow_label = ipv4 ? 0 : req.flow_label & 0xfffffu;
    h.udp_sport = req.udp_sport;
    const wire::MrcCtlFields ctl = peth_fields(req.req_id, req.nonce, clock_->now_ns());
    wire::PacketFields f;
    f.opcode = wire::Opcode::MRC_PROBE;
    f.pkey = wire::kDefaultPkey;
    // QP1 of this device's steering slot: the reply echoes it, so that on a shared UDP port the
    // kernel steers the reply back to this process (wire/mrc.h). Slot 0: plain QP1.
    f.dest_qp = wire::mrc_endpoint_qpn(qpn_steering_slot());
    f.mrc_ctl = &ctl;
    std::array<std::uint8_t, kEpFrameRoom> frame{};
    const std::size_t len = wire::build_frame(h, f, std::span<const std::uint8_t>{}, frame);
    // len is never 0 here (a fixed-size control opcode in a buffer large enough for it).
    if (len == 0 || !queue_raw(req.port, std::span(frame.data(), len), Counter::ep_probes_sent)) {
        flush_tx(req.port);
        return ENOBUFS;
    }
    flush_tx(req.port);
    ep_active_until_ns_.store(clock_->now_ns() + kEpActiveNs, std::memory_order_relaxed);
    // An engine thread napping in sleep_until_doorbell() would notice the reply only when its nap
    // ends (up to EngineThread's max_sleep_ns) and add that to the RTT: wake it to poll.
    if (asleep_.load(std::memory_order_seq_cst)) ring_doorbell();
    return 0;
}

bool Device::take_ep_reply_token(std::uint64_t now_ns) noexcept {
    constexpr std::uint64_t kInterval = 1'000'000'000ull / kEpReplyRate;
    if (now_ns > ep_reply_refill_ns_) {
        const std::uint64_t add = (now_ns - ep_reply_refill_ns_) / kInterval;
        if (add >= kEpReplyBurst) {
            ep_reply_tokens_ = kEpReplyBurst;
            ep_reply_refill_ns_ = now_ns;
        } else if (add > 0) {
            ep_reply_tokens_ = std::min<std::uint64_t>(kEpReplyBurst, ep_reply_tokens_ + add);
            ep_reply_refill_ns_ += add * kInterval;
        }
    }
    if (ep_reply_tokens_ == 0) return false;
    --ep_reply_tokens_;
    return true;
}

void Device::receive_endpoint(const wire::ParsedFrame& pkt, unsigned port) noexcept {
    // Probes and replies keep this device out of the long nap for a while (kNoReceiverNapNs).
    ep_active_until_ns_.store(clock_->now_ns() + kEpActiveNs, std::memory_order_relaxed);
    const wire::Opcode op = pkt.bth->opcode();
    if (op != wire::Opcode::MRC_PROBE && op != wire::Opcode::MRC_PROBE_REPLY) {
        counters_.inc(Counter::rx_dropped_bad_qp); // no other MRC operation is connectionless
        return;
    }
    // A port the controller took out of service (set_port_admin) neither answers probes (its
    // paths would look good to the prober, and the reply would leave by a disabled port) nor
    // takes replies.
    if (port >= ports_.size() || !admin_up_[port]) {
        counters_.inc(Counter::ep_dropped_port_down);
        return;
    }
    const wire::Peth* peth = pkt.peth(); // both opcodes carry one (parse_frame checked the length)
    if (peth->version != wire::kMrcVersion) {
        counters_.inc(Counter::ep_dropped_bad_version);
        return;
    }
    if (op == wire::Opcode::MRC_PROBE_REPLY) {
        const std::uint64_t now = clock_->now_ns();
        const std::uint64_t sent = peth->timestamp_ns.get();
        if (ep_replies_.free_slots() == 0) { // the consumer is behind: newest replies are lost
            counters_.inc(Counter::ep_probe_replies_dropped);
            return;
        }
        EpProbeReply& r = ep_replies_.producer_slot();
        r.req_id = peth->path.get();
        r.nonce = peth->seq.get();
        r.port = static_cast<std::uint8_t>(port);
        r.rtt_ns = now >= sent ? now - sent : 0;
        ep_replies_.publish(); // release: the slot is written before take_ep_replies() sees it
        counters_.inc(Counter::ep_probe_replies_rcvd);
        return;
    }
    // MRC_PROBE: answer at once on the port it came by, back to where it came from, on the same
    // EV (UDP source port, flow label) and DSCP, echoing the PETH. The receive filter accepted the
    // frame for this port's MAC and one of our GIDs, which become the reply's source.
    // Only to one other host: a probe "from" a group MAC or a broadcast, multicast, unspecified,
    // loopback or own address would have the reply sent to every host of the link or to ourselves
    // (RFC 1122 §3.2.2: no answer to such sources).
    const wire::Ipv6Addr src_ip = pkt.ipv4 ? wire::ipv4_mapped(pkt.ipv4->src) : pkt.ipv6->src;
    bool own = false;
    for (const PortSpec& ps : ports_)
        own |= ps.gid == src_ip;
    if (is_group_mac(pkt.eth->src) || own || !is_reply_address(src_ip)) {
        counters_.inc(Counter::ep_dropped_bad_source);
        return;
    }
    if (!take_ep_reply_token(clock_->now_ns())) {
        counters_.inc(Counter::ep_probes_rate_limited);
        return;
    }
    wire::PathHeaders h;
    h.src_mac = pkt.eth->dst;
    h.dst_mac = pkt.eth->src;
    if (pkt.vlan) {
        h.has_vlan = true;
        h.vlan_tci = pkt.vlan->tci.get();
    }
    if (pkt.ipv4) {
        h.ipv6 = false;
        h.src_ip = wire::ipv4_mapped(pkt.ipv4->dst);
        h.dst_ip = wire::ipv4_mapped(pkt.ipv4->src);
        h.tos = with_ect0(pkt.ipv4->tos);
    } else {
        h.ipv6 = true;
        h.src_ip = pkt.ipv6->dst;
        h.dst_ip = pkt.ipv6->src;
        h.tos = with_ect0(pkt.ipv6->traffic_class());
        h.flow_label = pkt.ipv6->flow_label();
    }
    h.ttl = 64;
    h.udp_sport = pkt.udp->src_port.get();
    const wire::MrcCtlFields ctl =
        peth_fields(peth->path.get(), peth->seq.get(), peth->timestamp_ns.get());
    wire::PacketFields f;
    f.opcode = wire::Opcode::MRC_PROBE_REPLY;
    f.pkey = wire::kDefaultPkey;
    f.dest_qp = pkt.bth->dest_qp(); // the prober's slotted QP1: back to the prober (wire/mrc.h)
    f.mrc_ctl = &ctl;
    std::array<std::uint8_t, kEpFrameRoom> frame{};
    const std::size_t len = wire::build_frame(h, f, std::span<const std::uint8_t>{}, frame);
    // On no buffer queue_raw counts tx_no_buffer: the prober sees a lost reply, as on a full link.
    if (len) queue_raw(port, std::span(frame.data(), len), Counter::ep_probe_replies_sent);
}

std::size_t Device::take_ep_replies(std::span<EpProbeReply> out) noexcept {
    // Consumer side of ep_replies_: ready() acquires the engine's publish(), so the slots up to it
    // are fully written; release() stores with release, so these reads finish before the engine
    // may reuse the slots.
    const std::uint32_t n =
        static_cast<std::uint32_t>(std::min<std::size_t>(ep_replies_.ready(), out.size()));
    const std::uint32_t first = ep_replies_.consumer_index();
    for (std::uint32_t i = 0; i < n; ++i)
        out[i] = ep_replies_.slot(first + i);
    if (n) ep_replies_.release(n);
    return n;
}

} // namespace droce
