/* SPDX-License-Identifier: BSD-3-Clause */
#include "trace_explain.h"

#include <cstdio>

#include "aeth_decode.h"
#include "mrc_decode.h"

namespace droce::trace {

namespace wire = droce::wire;
using wire::OpFlags;

std::string format_rnr_timer(std::uint8_t code) {
    char buf[32];
    const std::uint32_t us = rnr_timer_usec(code);
    std::snprintf(buf, sizeof buf, "%u.%02u ms", us / 1000u, (us % 1000u) / 10u);
    return buf;
}

namespace {

/** The sentence of an MRC opcode (wire/mrc.h); empty for another opcode. */
std::string describe_mrc_opcode(wire::Opcode op) {
    std::string s;
    switch (op) {
    case wire::Opcode::MRC_WRITE:
        s = "MRC WRITE: one packet of an RDMA WRITE; it carries its own placement (RETH: the "
            "address of its first byte, the R_Key and its own length) and its place in the message "
            "(MDETH), so the responder writes it to memory as soon as it arrives, in whatever "
            "order the paths deliver it. The responder reports it in a SACK; the requester "
            "resends only what is missing.";
        break;
    case wire::Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE:
        s = "MRC WRITE, last packet of an RDMA WRITE with immediate: placed on arrival like every "
            "MRC WRITE packet; its immediate data completes a pre-posted receive WQE at the "
            "responder only once every PSN up to this one has arrived, so immediates reach the "
            "consumer in message order although packets arrive in any order.";
        break;
    case wire::Opcode::MRC_SACK:
        s = "MRC SACK: the responder's selective acknowledgement: a cumulative PSN (every PSN "
            "before it arrived) and a 256-bit bitmap of the PSNs that arrived, with the "
            "responder's MPR window and the planes it has up. The requester retires what is "
            "reported, finds the packets that are missing while later ones arrived (RACK) and "
            "resends only those, preferably on another plane.";
        break;
    case wire::Opcode::MRC_NACK:
        s = "MRC NACK: the responder refuses one PSN and says why in the NETH: a trimmed packet "
            "or one beyond its window is resent, an access or request error fails the work "
            "request.";
        break;
    case wire::Opcode::MRC_PROBE:
        s = "MRC PROBE: the requester tests a path it marked ASSUMED_BAD after a loss, by sending "
            "this probe on it; enough answered probes in a row make the path GOOD again.";
        break;
    case wire::Opcode::MRC_PROBE_REPLY:
        s = "MRC PROBE REPLY: the responder's echo of a probe, with the prober's path, number and "
            "timestamp unchanged, so the prober knows the path works and how long the round trip "
            "took.";
        break;
    case wire::Opcode::MRC_PORT_STATUS:
        s = "MRC PORT STATUS: the sender tells its peer which of its ports (planes) are up (OCP "
            "MRC endpoint operation PORT_STATUS_UPDATE); the peer stops sending on planes that "
            "are down here. A copy goes out on every plane that is up, repeated a few times.";
        break;
    default:
        return {};
    }
    return s + " MRC, droce's multipath reliable connection (wire format v1): one QP sprayed "
               "over many paths (UDP source ports) on several planes, placed out of order and "
               "repaired by selective acknowledgement.";
}

} // namespace

std::string describe_opcode(wire::Opcode op) {
    const wire::OpcodeInfo& info = wire::opcode_info(op);
    if (!info.known) return "an opcode droce does not know";
    if (wire::transport_of(op) == wire::Transport::mrc) {
        std::string s = describe_mrc_opcode(op);
        if (!s.empty()) return s;
    }
    if (info.is(OpFlags::cnp)) {
        return "CNP, congestion notification packet (RoCEv2 Annex A17.9): a receiver that got "
               "ECN-CE marked packets tells the sending QP, named in dest_qp, to lower its rate "
               "(the DCQCN reaction point decides by how much).";
    }
    std::string s;
    const bool imm = info.is(OpFlags::immdt);
    if (info.is(OpFlags::send)) {
        s = "SEND: the payload goes into the buffer of the next receive WQE the responder's "
            "consumer posted";
    } else if (info.is(OpFlags::write)) {
        s = "RDMA WRITE: the payload is placed directly in the responder's memory at the address "
            "named by the RETH of the message's first packet, without the responder's CPU";
        if (imm) {
            s += "; with immediate, the last packet also consumes a receive WQE so the responder "
                 "gets a completion carrying the immediate data";
        }
    } else if (info.is(OpFlags::read) && info.is(OpFlags::request)) {
        s = "RDMA READ request: asks the responder to send back dma_length bytes of its memory; "
            "the "
            "data returns in READ RESPONSE packets numbered from this PSN on, so the request uses "
            "up one PSN per response packet";
    } else if (info.is(OpFlags::read)) {
        s = "RDMA READ response: data flowing back to the requester for a READ request; the "
            "First, Last and Only packets carry an AETH, Middle packets do not";
    } else if (op == wire::Opcode::RC_COMPARE_SWAP) {
        s = "COMPARE & SWAP: the responder atomically compares the 8 bytes at the target address "
            "with compare_data and, if they are equal, replaces them with swap_data; the old "
            "value comes back in an ATOMIC ACKNOWLEDGE";
    } else if (op == wire::Opcode::RC_FETCH_ADD) {
        s = "FETCH & ADD: the responder atomically adds add_data to the 8 bytes at the target "
            "address; the old value comes back in an ATOMIC ACKNOWLEDGE";
    } else if (op == wire::Opcode::RC_ATOMIC_ACKNOWLEDGE) {
        s = "ATOMIC ACKNOWLEDGE: the responder's answer to an atomic request, carrying the value "
            "the target held before the operation";
    } else if (op == wire::Opcode::RC_ACKNOWLEDGE) {
        s = "ACKNOWLEDGE: the responder reports on the requests up to this PSN; the AETH says "
            "whether this is an ACK, an RNR NAK or a NAK";
    } else {
        s = "an operation droce-trace has no sentence for";
    }
    // Message position matters for the multi-packet operations: SEND, WRITE and READ responses.
    if (info.is(OpFlags::send) || info.is(OpFlags::write) ||
        info.is(OpFlags::read | OpFlags::response)) {
        if (info.is(OpFlags::only)) {
            s += "; this packet is a whole message";
        } else if (info.is(OpFlags::first)) {
            s += "; this is the first packet of a multi-packet message";
        } else if (info.is(OpFlags::middle)) {
            s += "; this is a middle packet of a message";
        } else if (info.is(OpFlags::last)) {
            s += "; this is the last packet of a message";
        }
    }
    if (imm && info.is(OpFlags::send)) {
        s += "; with immediate, 4 bytes of immediate data go to the responder's completion";
    }
    if (info.is(OpFlags::ieth)) {
        s += "; with invalidate, the responder invalidates the R_Key in the IETH once the message "
             "is complete";
    }
    s += '.';
    if (info.is(OpFlags::completes)) s += " The responder generates a completion for it.";
    switch (wire::transport_of(op)) {
    case wire::Transport::rc:
        s += " RC, reliable connection: every request is acknowledged and retransmitted if lost.";
        break;
    case wire::Transport::uc:
        s += " UC, unreliable connection: never acknowledged; a lost packet loses its message.";
        break;
    case wire::Transport::ud:
        s += " UD, unreliable datagram: one-packet messages to any QP that knows the Q_Key; never "
             "acknowledged.";
        break;
    default:
        break;
    }
    return s;
}

namespace {

std::string nak_meaning(std::uint8_t code) {
    switch (static_cast<wire::NakCode>(code)) {
    case wire::NakCode::psn_sequence_error:
        return "PSN sequence error: a request arrived with a PSN past the one the responder "
               "expected, so something was lost; the requester goes back and resends from the PSN "
               "of this NAK";
    case wire::NakCode::invalid_request:
        return "invalid request: the responder cannot carry out this request (an opcode the QP "
               "does not allow, a length over the limit, or a malformed packet); the requester's "
               "work request completes with an error";
    case wire::NakCode::remote_access_error:
        return "remote access error: the R_Key, the address range or the access rights of the "
               "memory region do not allow this RDMA or atomic; the requester's work request "
               "completes with an error";
    case wire::NakCode::remote_operational_error:
        return "remote operational error: the responder hit a fault of its own and could not "
               "complete the request; the requester's work request completes with an error";
    case wire::NakCode::invalid_rd_request:
        return "invalid RD request: a reliable-datagram request was refused (RD is not used over "
               "RoCE)";
    }
    return "reserved NAK code " + std::to_string(code) + ": no meaning is defined for it";
}

} // namespace

std::string describe_syndrome(std::uint8_t syndrome) {
    const std::uint8_t low = syndrome & 0x1fu;
    switch (static_cast<wire::AethKind>(syndrome >> 5)) {
    case wire::AethKind::ack: {
        if (low == wire::kAethCreditsInvalid) {
            return "ACK; credit count 31 = end-to-end credits not in use";
        }
        const std::uint32_t credits = aeth_credits(low).value_or(0);
        return "ACK; credit count " + std::to_string(low) + " = the responder has " +
               std::to_string(credits) + " receive WQE" + (credits == 1 ? "" : "s") +
               " posted (end-to-end flow control: the requester may send that many more SEND "
               "messages)";
    }
    case wire::AethKind::rnr_nak:
        return "RNR NAK: responder had no receive WQE; retry after the encoded minimum RNR timer "
               "(" +
               std::to_string(low) + " = " + format_rnr_timer(low) + ")";
    case wire::AethKind::nak:
        return "NAK: " + nak_meaning(low);
    case wire::AethKind::reserved:
        break;
    }
    return "reserved syndrome (bits 7:5 = 010): a responder never sends it";
}

std::string not_ethernet_sentence(int link_type) {
    return "This capture's link type is " + link_type_name(link_type) +
           ", not Ethernet; droce-trace decodes RoCEv2 in Ethernet captures only, so every frame "
           "of the file is skipped.";
}

namespace {

std::string skip_sentence(const DecodedFrame& d) {
    switch (d.skip) {
    case SkipKind::link_type:
        return not_ethernet_sentence(d.raw.link_type);
    case SkipKind::truncated:
        return "The frame ends before its protocol can be told, so it is not decoded.";
    case SkipKind::ieee8023:
        return "An IEEE 802.3 frame whose type field is a length, carrying LLC (spanning tree, "
               "for example); link-level housekeeping, not RoCE.";
    case SkipKind::arp:
        return "ARP maps an IPv4 address to a MAC address. A RoCE endpoint needs that answer "
               "before it can address its first packet to a peer, but ARP itself is not RoCE.";
    case SkipKind::roce_v1:
        return "RoCE v1 carries the InfiniBand GRH straight over Ethernet (EtherType 0x8915), so "
               "it cannot cross an IP router; droce speaks only RoCEv2, which runs over UDP.";
    case SkipKind::mac_control:
        return "A MAC control frame: PAUSE or priority flow control (PFC), which stops a sender "
               "on one link, per priority for PFC, so that a lossless RoCE class does not drop.";
    case SkipKind::lldp:
        return "LLDP announces a port's neighbour and, with DCBX, the PFC and ETS settings a "
               "lossless RoCE network depends on; it is not RoCE traffic.";
    case SkipKind::unknown_ethertype:
        return "An EtherType droce-trace does not know; not RoCEv2.";
    case SkipKind::ip_fragment:
        return "A later fragment of a fragmented IP packet; RoCEv2 packets are never fragmented.";
    case SkipKind::icmp:
        return "ICMP carries IPv4 errors and echo (ping); not RoCE.";
    case SkipKind::icmpv6:
        return "ICMPv6 carries IPv6 neighbour discovery (the IPv6 counterpart of ARP), multicast "
               "listener reports, errors and echo; not RoCE.";
    case SkipKind::tcp:
        return "TCP is not RoCE, but RDMA programs often use a TCP connection beside it to swap "
               "QP numbers, PSNs, addresses and R_Keys before the RDMA traffic starts.";
    case SkipKind::udp:
        return "A UDP datagram whose destination port is not 4791, so it is not RoCEv2.";
    case SkipKind::other_ip:
        return "An IP protocol other than UDP; RoCEv2 always rides on UDP.";
    case SkipKind::droce_probe:
        return "droce's own probe between io_uring ports, not RoCE: transport version 15, which "
               "every RoCE receiver drops. Processes sharing UDP 4791 probe their slots with it, "
               "and a port with gso = auto asks each peer whether it receives on a UDP socket "
               "(then several frames may go as one GSO send); a droce port that does answers.";
    case SkipKind::none:
        break;
    }
    return "Not RoCEv2.";
}

void add(std::vector<Explanation>& v, unsigned depth, std::string header, std::string text) {
    v.push_back(Explanation{depth, std::move(header), std::move(text)});
}

void explain_ip(const wire::ParsedFrame& p, std::vector<Explanation>& v) {
    const bool v6 = p.ipv6 != nullptr;
    const unsigned tclass = v6 ? p.ipv6->traffic_class() : p.ipv4->tos;
    add(v, 0, v6 ? "IPv6" : "IPv4",
        "The IP header carries RoCEv2 across routers, which RoCE v1 could not cross; the ICRC "
        "ignores the fields routers rewrite (" +
            std::string(v6 ? "traffic class, flow label, hop limit" : "TOS, TTL, checksum") + ").");
    add(v, 1, "dscp",
        std::to_string(tclass >> 2) + ": selects the switches' traffic class; RoCE is usually "
                                      "given a lossless, PFC-protected one.");
    std::string ecn = std::string(ecn_name(tclass & 3u)) + ": ";
    switch (tclass & 3u) {
    case 0:
        ecn += "the sender does not take part in ECN, so a congested switch cannot mark the "
               "packet; it "
               "can only pause the link (PFC) or drop it.";
        break;
    case 1:
    case 2:
        ecn += "the sender takes part in ECN; a congested switch marks the packet CE instead of "
               "dropping it.";
        break;
    default:
        ecn += "a switch on the path was congested; the receiver (DCQCN notification point) "
               "answers with a CNP to the sending QP, at most one per QP per interval.";
        break;
    }
    add(v, 1, "ecn", std::move(ecn));
}

/** What the UDP source port of an MRC packet says about its path. */
std::string mrc_udp_sentence(const wire::ParsedFrame& p) {
    const std::uint16_t sport = p.udp->src_port.get();
    std::string s = "Destination port 4791 marks the datagram as RoCEv2; MRC keeps it so that "
                    "Wireshark and NIC filters still see an ordinary BTH. The source port (" +
                    std::to_string(sport) + " = " + hex(sport, 4) +
                    ") is the path: an MRC QP gives each of its paths (entropy values) its own "
                    "source port, ev_base + path index, so that ECMP switches hash every path "
                    "onto its own route, and sends consecutive packets on different paths.";
    if (const wire::Mdeth* m = p.mdeth()) {
        const std::uint16_t path = m->path.get();
        s += " The MDETH names path " + std::to_string(path);
        if (sport >= path) {
            s += ", so this QP's ev_base is " + hex(sport - path, 4) +
                 (sport - path == kDefaultEvBase ? " (the default)." : ".");
        } else {
            s += ", above the source port: the two disagree.";
        }
    } else if (sport >= kDefaultEvBase && sport - kDefaultEvBase < 256) {
        s += " A control packet goes out on one of the sender's own paths: with the default "
             "ev_base 0xc000 this is its path " +
             std::to_string(sport - kDefaultEvBase) + ".";
    } else {
        s += " A control packet goes out on one of the sender's own paths; this port is outside "
             "the default range (0xc000 + index), so the sender's ev_base is not the default.";
    }
    return s;
}

void explain_udp(const wire::ParsedFrame& p, const DecodedFrame& d, std::vector<Explanation>& v) {
    const wire::UdpHdr& u = *p.udp;
    const bool ipv4 = p.ipv4 != nullptr;
    std::string s = is_mrc(d) ? mrc_udp_sentence(p)
                              : "Destination port 4791 marks the datagram as RoCEv2. The source "
                                "port (" +
                                    std::to_string(u.src_port.get()) +
                                    ") means nothing to the receiver: it is flow entropy that "
                                    "ECMP switches hash to choose a path, kept fixed per QP so "
                                    "that a QP's packets stay in order.";
    if (ipv4 && u.checksum.get() == 0) {
        s += " The UDP checksum is 0 (unused): the ICRC already covers the packet end to end.";
    }
    add(v, 0, "UDP", std::move(s));
}

std::string qp_sentence(const wire::Bth& b, const wire::OpcodeInfo* info) {
    const std::uint32_t qp = b.dest_qp();
    std::string s = hex(qp, 6) + ": ";
    if (info != nullptr && info->is(OpFlags::cnp)) {
        return s + "in a CNP this is the sender's QP that must slow down.";
    }
    s += "the queue pair at the receiver this packet belongs to";
    if (qp == 1) {
        s += "; QP 1 is the General Services Interface, where management datagrams (MADs) such as "
             "the connection manager's requests arrive";
    } else if (qp == 0) {
        s += "; QP 0 is the Subnet Management Interface, which RoCE does not use";
    }
    return s + '.';
}

std::string psn_sentence(const wire::ParsedFrame& p, const wire::OpcodeInfo* info) {
    const wire::Bth& b = *p.bth;
    const std::string psn = std::to_string(b.psn().value()) + ": ";
    if (info == nullptr) return psn + "24-bit packet sequence number.";
    if (info->is(OpFlags::cnp))
        return psn + "a CNP is not part of any sequence; the field is unused.";
    const wire::Transport t = wire::transport_of(b.opcode());
    if (t == wire::Transport::ud) {
        return psn + "UD packets carry a PSN, but a UD receiver does not check it.";
    }
    if (t == wire::Transport::uc) {
        return psn + "a UC receiver uses the PSN only to notice a missing packet and drop the rest "
                     "of that message; nothing is resent.";
    }
    if (t == wire::Transport::mrc) {
        if (info->is(OpFlags::mdeth)) {
            return psn + "this packet's place in the QP's one PSN sequence, shared by all its "
                         "paths; the responder places the packet whatever the order and marks "
                         "this PSN in its SACK bitmap. The requester never sends further than the "
                         "responder's MPR window past the cumulative PSN.";
        }
        if (info->is(OpFlags::neth)) return psn + "the refused PSN, as in the NETH.";
        return psn + "not used by this MRC control packet (droce sends 0); its numbers are in the "
                     "extension header.";
    }
    if (info->is(OpFlags::read | OpFlags::response)) {
        return psn + "READ responses are numbered on from the PSN of their READ request, one per "
                     "packet.";
    }
    if (p.aeth != nullptr && info->is(OpFlags::response)) {
        switch (p.aeth->kind()) {
        case wire::AethKind::ack:
            return psn + "every request packet up to and including this PSN has been received and "
                         "carried out.";
        case wire::AethKind::rnr_nak:
            return psn + "the request the responder could not take; the requester resends from it "
                         "once the RNR timer has run out.";
        case wire::AethKind::nak:
            return psn + "the PSN the NAK refers to; after a sequence error it is the PSN the "
                         "responder expected next, where the requester resumes.";
        case wire::AethKind::reserved:
            break;
        }
    }
    return psn + "the 24-bit sequence number of this request packet; the responder expects "
                 "consecutive PSNs and answers a gap with a NAK (PSN sequence error).";
}

std::string ack_req_sentence(const wire::Bth& b, const wire::OpcodeInfo* info) {
    const bool set = b.ack_req();
    const std::string state = set ? "set: " : "clear: ";
    const wire::Transport t = wire::transport_of(b.opcode());
    if (info != nullptr && info->is(OpFlags::cnp)) return state + "a CNP is never acknowledged.";
    if (t == wire::Transport::mrc) {
        return state + "MRC does not use the bit: the responder sends a SACK after every batch of "
                       "data packets it takes, asked or not.";
    }
    if (t == wire::Transport::uc || t == wire::Transport::ud) {
        return state + "UC and UD packets are never acknowledged, so the bit has no effect.";
    }
    if (info != nullptr && info->is(OpFlags::response)) {
        return state + "the bit means something only on requests; responses leave it clear.";
    }
    if (set) {
        return state +
               "the requester asks the responder to acknowledge now; it sets the bit on the "
               "last packet of a message and from time to time inside long ones, so that its "
               "window of unacknowledged packets keeps moving.";
    }
    return state + "no immediate acknowledgement is asked for; the responder may wait and cover "
                   "this packet with the ACK of a later one (coalescing).";
}

std::string pad_sentence(const wire::ParsedFrame& p) {
    const std::size_t n = p.payload.size();
    const unsigned pad = p.pad;
    std::string s = std::to_string(pad) + ": ";
    if (pad == 0) {
        s += n == 0
                 ? std::string("no payload, so nothing to pad")
                 : "the " + std::to_string(n) + "-byte payload already ends on a 4-byte boundary";
    } else {
        s += std::to_string(pad) + " zero byte" + (pad == 1 ? "" : "s") + " follow the " +
             std::to_string(n) +
             "-byte payload so that payload and pad fill whole 4-byte words; the receiver "
             "discards them";
    }
    return s + '.';
}

void explain_bth(const DecodedFrame& d, std::vector<Explanation>& v) {
    const wire::ParsedFrame& p = d.parsed;
    const wire::Bth& b = *p.bth;
    const wire::OpcodeInfo* info = known_opcode(b);
    add(v, 0, "BTH",
        "Base Transport Header, first in every RoCEv2 packet: it says what the packet does, which "
        "queue pair receives it and where it falls in that QP's packet sequence.");
    add(v, 1, "opcode",
        hex(b.opcode_byte, 2) + " " + (info != nullptr ? std::string(info->name) : "unknown") +
            ": " +
            (info != nullptr ? describe_opcode(b.opcode())
                             : std::string("not in the opcode table.")));
    add(v, 1, "dest_qp", qp_sentence(b, info));
    add(v, 1, "psn", psn_sentence(p, info));
    add(v, 1, "ack_req", ack_req_sentence(b, info));
    if (p.info != nullptr && p.info->is(OpFlags::payload) &&
        (d.kind == FrameKind::roce || d.reason == wire::RejectReason::bad_icrc)) {
        add(v, 1, "pad_count", pad_sentence(p));
    }
    if (b.se()) {
        add(v, 1, "se",
            "set (solicited event): if the responder's consumer armed its CQ for solicited "
            "completions only, this message's completion wakes it.");
    }
    if (b.fecn()) {
        add(v, 1, "fecn",
            "set: forward explicit congestion notification; congestion was seen on the way here.");
    }
    if (b.becn()) {
        add(v, 1, "becn",
            p.cnp != nullptr
                ? "set: backward explicit congestion notification; every CNP carries it."
                : "set: the receiver is told that the path back to it is congested.");
    }
    add(v, 1, "p_key",
        hex(b.pkey.get(), 4) +
            (b.pkey.get() == wire::kDefaultPkey
                 ? ": the default partition, full membership; RoCE rarely uses others."
                 : ": a partition key; a receiver drops packets whose P_Key is not in its table."));
}

void explain_deth(const wire::Deth& h, std::vector<Explanation>& v) {
    add(v, 0, "DETH",
        "Datagram Extended Transport Header: what a UD receiver needs to accept a datagram and "
        "to answer it.");
    const std::uint32_t qkey = h.qkey.get();
    std::string s =
        hex(qkey, 8) + ": must match the Q_Key of the receiving QP, or the datagram is dropped";
    if (qkey & 0x80000000u) {
        s += "; the high bit makes it a controlled key that only privileged senders may use";
        if (qkey == 0x80010000u) s += " (0x80010000 is the well-known Q_Key of QP 1)";
    }
    add(v, 1, "q_key", s + '.');
    add(v, 1, "src_qp",
        hex(h.src_qp(), 6) + ": the sending QP, so the receiver knows where to reply.");
}

void explain_mrc_reth(const wire::ParsedFrame& p, const DecodedFrame& d,
                      std::vector<Explanation>& v) {
    const wire::Reth& r = *p.reth;
    add(v, 0, "RETH",
        "RDMA Extended Transport Header: in MRC every data packet carries one, for its own bytes, "
        "so that it can be placed on arrival whatever the order.");
    add(v, 1, "va",
        hex(r.va.get(), 16) +
            ": the responder's virtual address of this packet's first byte (where the message "
            "starts plus msg_offset).");
    add(v, 1, "r_key",
        hex(r.rkey.get(), 8) +
            ": must name a memory region registered at the responder with remote write access "
            "that covers this packet's bytes, or the answer is NACK remote_access.");
    const std::uint32_t len = r.dma_len.get();
    std::string s = std::to_string(len) + ": bytes of this packet's payload, not of the message";
    const bool have_payload = d.kind == FrameKind::roce || d.reason == wire::RejectReason::bad_icrc;
    if (have_payload && p.payload.size() < len) {
        s += "; only " + std::to_string(p.payload.size()) +
             " arrived: a switch trimmed this packet under congestion, so the responder answers "
             "NACK trimmed and the requester resends it at once (congestion, not loss)";
    }
    add(v, 1, "dma_length", s + '.');
}

void explain_reth(const wire::Reth& r, const wire::OpcodeInfo* info, std::vector<Explanation>& v) {
    const bool read = info != nullptr && info->is(OpFlags::read);
    add(v, 0, "RETH",
        std::string("RDMA Extended Transport Header: which responder memory the RDMA ") +
            (read ? "reads from" : "writes to") +
            " and how much of it; only the first packet of a message carries it.");
    add(v, 1, "va",
        hex(r.va.get(), 16) + ": the virtual address of the first byte at the responder.");
    add(v, 1, "r_key",
        hex(r.rkey.get(), 8) +
            ": must name a memory region registered at the responder with remote " +
            (read ? "read" : "write") +
            " access that covers the whole range, or the answer is a NAK "
            "remote access error.");
    std::string len =
        std::to_string(r.dma_len.get()) + ": bytes in the whole message, not in this packet";
    if (r.dma_len.get() == 0) {
        len += "; a zero-length operation moves no data but is ordered and acknowledged like any "
               "other";
    } else if (read) {
        len += "; they come back in as many READ RESPONSE packets as the path MTU requires";
    }
    add(v, 1, "dma_length", len + '.');
}

void explain_atomic_eth(const wire::AtomicEth& a, wire::Opcode op, std::vector<Explanation>& v) {
    const bool cmp_swap = op == wire::Opcode::RC_COMPARE_SWAP;
    add(v, 0, "AtomicETH",
        "Atomic Extended Transport Header: the target and the operands of one 8-byte atomic "
        "operation, carried out at the responder as a single indivisible step.");
    const std::uint64_t va = a.va.get();
    std::string s =
        hex(va, 16) + ": the target address at the responder; it must be 8-byte aligned";
    if ((va & 7u) != 0)
        s += ", and this one is not, so the responder must answer NAK invalid request";
    add(v, 1, "va", s + '.');
    add(v, 1, "r_key",
        hex(a.rkey.get(), 8) + ": must name a memory region with remote atomic access.");
    if (cmp_swap) {
        add(v, 1, "swap_data",
            hex(a.swap_add.get(), 16) + ": written to the target if the compare succeeds.");
        add(v, 1, "compare_data",
            hex(a.compare.get(), 16) + ": compared with the 8 bytes at the target.");
    } else {
        add(v, 1, "add_data",
            hex(a.swap_add.get(), 16) + ": added to the 8 bytes at the target (wrapping).");
        add(v, 1, "compare_data", hex(a.compare.get(), 16) + ": unused by FETCH & ADD.");
    }
}

void explain_aeth(const wire::Aeth& a, std::vector<Explanation>& v) {
    add(v, 0, "AETH",
        "ACK Extended Transport Header: the responder's verdict on the requests up to this PSN, "
        "and how many messages it has completed.");
    add(v, 1, "syndrome", hex(a.syndrome, 2) + ": " + describe_syndrome(a.syndrome) + '.');
    add(v, 1, "msn",
        std::to_string(a.msn()) +
            ": message sequence number, the count of messages the responder has completed on this "
            "QP (modulo 2^24); the requester retires its work requests up to it.");
}

std::string icrc_bytes(std::uint32_t icrc) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02x %02x %02x %02x", icrc & 0xffu, (icrc >> 8) & 0xffu,
                  (icrc >> 16) & 0xffu, icrc >> 24);
    return buf;
}

std::string icrc_sentence(const wire::ParsedFrame& p) {
    const std::string value =
        hex(p.icrc_wire, 8) + " (bytes " + icrc_bytes(p.icrc_wire) + " on the wire)";
    if (p.icrc_computed == p.icrc_wire) {
        return "Invariant CRC " + value +
               " matches. It covers the IP, UDP and transport headers, with every field a router "
               "may rewrite masked out, and the payload: it catches corruption anywhere between "
               "the two endpoints, where the Ethernet FCS covers one link only.";
    }
    return "ICRC BAD: the packet carries " + value + " but its contents give " +
           hex(p.icrc_computed, 8) +
           ". A receiver drops it without a word; the requester's retransmit timer recovers it.";
}

void explain_mrc_version(std::uint8_t version, std::vector<Explanation>& v) {
    if (version == wire::kMrcVersion) {
        add(v, 1, "version", "1: droce's MRC wire format v1.");
    } else {
        add(v, 1, "version",
            std::to_string(version) +
                ": not a version droce knows (it speaks 1); a droce receiver drops the packet and "
                "counts it (bad_version) rather than misread it.");
    }
}

std::string ranges_sentence(const std::vector<PsnRange>& r) {
    return r.empty() ? std::string("none") : format_ranges(r);
}

void explain_mdeth(const wire::Mdeth& m, const DecodedFrame& d, std::vector<Explanation>& v) {
    const wire::ParsedFrame& p = d.parsed;
    add(v, 0, "MDETH",
        "MRC Data Extended Transport Header: where this packet belongs in its message, so the "
        "responder can place and count it whatever order the paths deliver packets in.");
    explain_mrc_version(m.version, v);
    const std::uint16_t path = m.path.get();
    std::string s = std::to_string(path) +
                    ": the requester's path (entropy value index) this packet left on, sent from "
                    "UDP source port ev_base + " +
                    std::to_string(path);
    if (p.udp != nullptr) s += " = " + std::to_string(p.udp->src_port.get());
    if (d.raw.interface) {
        s += "; it was seen on interface " + std::to_string(*d.raw.interface) +
             ", so this path is on plane " + std::to_string(*d.raw.interface);
    } else {
        s += "; path i runs on plane i mod (the QP's number of planes), which the capture does "
             "not tell";
    }
    add(v, 1, "path", s + '.');
    add(v, 1, "msn",
        std::to_string(m.msn.get()) + ": the message (work request) this packet belongs to, "
                                      "counted by the requester from 0.");
    const std::uint32_t off = m.msg_offset.get();
    const std::uint32_t len = m.msg_length.get();
    std::string o = std::to_string(off) + ": this packet's payload starts " + std::to_string(off) +
                    " bytes into the message";
    if (p.reth != nullptr && p.reth->dma_len.get() > 0) {
        o += " (bytes " + std::to_string(off) + "-" +
             std::to_string(std::uint64_t{off} + p.reth->dma_len.get() - 1) + ")";
    }
    add(v, 1, "msg_offset", o + '.');
    add(v, 1, "msg_length",
        std::to_string(len) + ": bytes in the whole message, the byte_len of the responder's "
                              "completion.");
    std::string f = mdeth_flags_text(m.flags) + ": ";
    const bool first = m.flags & wire::kMdethFirst, last = m.flags & wire::kMdethLast;
    if (first && last) {
        f += "the whole message is in this packet";
    } else if (first) {
        f += "the first packet of its message";
    } else if (last) {
        f += "the last packet of its message (by offset, not necessarily the last to arrive)";
    } else {
        f += "a packet inside its message, neither first nor last";
    }
    f += (m.flags & wire::kMdethRetransmit)
             ? "; a retransmission of a PSN sent before (selective repeat; the flag is "
               "informational, for traces and counters)"
             : "; a first transmission";
    add(v, 1, "flags", f + '.');
}

void explain_seth(const wire::Seth& h, std::vector<Explanation>& v) {
    add(v, 0, "SETH",
        "SACK Extended Transport Header: the responder's report of which PSNs have arrived, with "
        "its window and its planes.");
    explain_mrc_version(h.version, v);
    const bool ece = h.flags & wire::kSethEcnEcho;
    add(v, 1, "path",
        std::to_string(h.path.get()) +
            (ece ? ": the requester path on which a data packet arrived marked CE."
                 : ": the requester path of the last data packet the responder took "
                   "(informational without ecn_echo)."));
    add(v, 1, "flags",
        seth_flags_text(h.flags) +
            (ece ? ": a data packet on path " + std::to_string(h.path.get()) +
                       " arrived marked CE (congestion experienced) since the last SACK; the "
                       "requester keeps off that path for a while (ecn_avoid_ns) without "
                       "retiring it."
                 : std::string(": no CE-marked packet since the last SACK.")));
    const std::uint32_t cum = h.cum_psn.get() & wire::Psn::kMask;
    const std::uint32_t base = h.sack_base.get() & wire::Psn::kMask;
    add(v, 1, "cum_psn",
        std::to_string(cum) + ": every PSN before " + std::to_string(cum) +
            " has arrived; it is the next PSN the responder needs. The requester retires those "
            "packets and completes the work requests they end.");
    add(v, 1, "sack_base",
        std::to_string(base) + ": bit i of the bitmap stands for PSN " + std::to_string(base) +
            " + i, so this SACK covers PSNs " + std::to_string(base) + "-" +
            std::to_string((wire::Psn(base) + (wire::kSackBits - 1)).value()) + ".");
    const std::vector<PsnRange> sacked = sack_ranges(h);
    const std::vector<PsnRange> past = ranges_from(sacked, cum);
    const std::vector<PsnRange> holes = sack_holes(h);
    std::string b = "sacked " + ranges_sentence(sacked) + ": the PSNs the bitmap reports received";
    if (past.empty()) {
        b += "; none past the cumulative PSN, so nothing arrived out of order in this window.";
    } else {
        b += "; past the cumulative PSN: " + format_ranges(past);
        if (!holes.empty()) b += "; still missing before them: " + format_ranges(holes);
        b += ". The requester never resends a reported PSN; a missing one with later packets "
             "reported is declared lost once a round trip plus the reorder window have passed "
             "(RACK) and resent, preferably on another plane.";
    }
    add(v, 1, "bitmap", b);
    add(v, 1, "mpr_dest",
        h.mpr_dest == 0
            ? std::string("0: no window given; the requester keeps the one it knew.")
            : std::to_string(h.mpr_dest) +
                  " x 128 = " + std::to_string(std::uint32_t{h.mpr_dest} * wire::kMprUnit) +
                  " PSNs: the responder's MPR window past the cumulative PSN; the requester "
                  "sends no PSN further ahead (one beyond draws NACK mpr_exceeded).");
    add(v, 1, "port_mask",
        hex(h.port_mask, 2) + ": planes " + plane_list(h.port_mask) +
            " are up at the responder (bit i = plane i, OCP port i + 1); the requester sprays "
            "only over planes up at both ends and takes a plane missing here as down.");
}

std::string nack_reason_sentence(std::uint8_t reason) {
    switch (static_cast<wire::NackReason>(reason)) {
    case wire::NackReason::trimmed:
        return "trimmed: a switch cut the payload off under congestion (packet trimming); the "
               "packet was not lost to a fault, so the requester resends it at once and keeps "
               "off that path for a while.";
    case wire::NackReason::mpr_exceeded:
        return "mpr_exceeded: the PSN lies beyond the responder's MPR window past its "
               "cumulative PSN; the requester resends it once the window has moved.";
    case wire::NackReason::wimm_exceeded:
        return "wimm_exceeded: max_wimm_dest WRITE-with-immediate messages already wait at the "
               "responder (its pre-posted receives ran out); droce's requester holds its "
               "retransmissions for a probe interval and then resends, as after an RNR NAK.";
    case wire::NackReason::remote_access:
        return "remote_access: the R_Key, the bounds or the access rights refused the write; "
               "fatal: the work request completes with REM_ACCESS_ERR and the QP goes to the "
               "error state.";
    case wire::NackReason::invalid_request:
        return "invalid_request: the packet was malformed (its lengths disagree); fatal: the "
               "work request completes with REM_INV_REQ_ERR and the QP goes to the error state.";
    }
    return std::to_string(reason) +
           ": a reason droce does not know; droce's requester treats it as invalid_request "
           "(fatal).";
}

void explain_neth(const wire::Neth& h, std::vector<Explanation>& v) {
    add(v, 0, "NETH", "NACK Extended Transport Header: one PSN the responder refused, and why.");
    explain_mrc_version(h.version, v);
    add(v, 1, "reason", nack_reason_sentence(h.reason));
    add(v, 1, "path",
        std::to_string(h.path.get()) + ": the requester path the refused packet came on.");
    add(v, 1, "psn", std::to_string(h.psn.get() & wire::Psn::kMask) + ": the refused PSN.");
    add(v, 1, "cum_psn",
        std::to_string(h.cum_psn.get() & wire::Psn::kMask) +
            ": the responder's cumulative PSN: every PSN before it has arrived.");
}

void explain_peth(const wire::Peth& h, bool reply, std::vector<Explanation>& v) {
    add(v, 0, "PETH",
        reply ? "Probe Extended Transport Header, echoed: the answer to a path probe."
              : "Probe Extended Transport Header: a health check of one path.");
    explain_mrc_version(h.version, v);
    add(v, 1, "path",
        std::to_string(h.path.get()) +
            (reply ? ": the prober's path under test, echoed; the reply itself travels on a path "
                     "of the responder's, so it tells the prober that this path carried its "
                     "probe."
                   : ": the prober's path under test; the probe is sent on it (UDP source port "
                     "ev_base + " +
                         std::to_string(h.path.get()) + ")."));
    add(v, 1, "seq",
        std::to_string(h.seq.get()) +
            ": the prober's probe number, echoed, so an answer to an older probe is not taken for "
            "this one.");
    add(v, 1, "timestamp_ns",
        std::to_string(h.timestamp_ns.get()) +
            (reply ? ": the prober's clock when it sent the probe, echoed: the prober's clock now "
                     "minus this is the path's round trip time."
                   : ": the prober's clock when it sent the probe, in nanoseconds; the reply "
                     "echoes it."));
}

void explain_epeth(const wire::Epeth& h, std::vector<Explanation>& v) {
    add(v, 0, "EPETH",
        "Endpoint-operation Extended Transport Header: news about the sender's ports.");
    explain_mrc_version(h.version, v);
    const bool known = h.op == static_cast<std::uint8_t>(wire::EndpointOp::port_status);
    add(v, 1, "op",
        known ? std::string("1 port_status: port_mask is the set of the sender's ports (planes) "
                            "that are up.")
              : std::to_string(h.op) + ": an operation droce does not know; ignored.");
    const auto down = static_cast<std::uint8_t>(~h.port_mask);
    add(v, 1, "port_mask",
        hex(h.port_mask, 2) + ": planes up at the sender: " + plane_list(h.port_mask) +
            "; down or absent: " + plane_list(down) +
            " (the mask does not say how many planes the sender has). The peer stops sending on "
            "a plane that is down here and treats what it had in flight there as lost.");
    add(v, 1, "seq",
        std::to_string(h.seq.get()) +
            ": the sender's count of port status messages; copies go out on every plane and "
            "repeat, and the receiver applies only one newer than the last it applied.");
}

void explain_mrc(const DecodedFrame& d, std::vector<Explanation>& v) {
    const wire::ParsedFrame& p = d.parsed;
    if (const wire::Mdeth* m = p.mdeth()) explain_mdeth(*m, d, v);
    if (const wire::Seth* h = p.seth()) explain_seth(*h, v);
    if (const wire::Neth* h = p.neth()) explain_neth(*h, v);
    if (const wire::Peth* h = p.peth())
        explain_peth(*h, p.bth->opcode() == wire::Opcode::MRC_PROBE_REPLY, v);
    if (const wire::Epeth* h = p.epeth()) explain_epeth(*h, v);
}

} // namespace

std::vector<Explanation> explain_frame(const DecodedFrame& d) {
    std::vector<Explanation> v;
    if (d.kind == FrameKind::skipped) {
        add(v, 0, "skipped", skip_sentence(d));
        return v;
    }
    const wire::ParsedFrame& p = d.parsed;
    if (d.raw.interface) {
        const std::string n = std::to_string(*d.raw.interface);
        // droce's captures name each interface "<device>/port<N>": the number is that port, from
        // 0, not the capture's interface id (one per device port, in the order they opened).
        const std::string where =
            d.raw.if_id && *d.raw.if_id != *d.raw.interface ? " (capture interface " +
                                                                  std::to_string(*d.raw.if_id) +
                                                                  ", named after that port)"
                                                            : "";
        if (is_mrc(d)) {
            add(v, 0, "plane",
                n + ": the frame was seen on port " + n + " of its device, counted from 0" + where +
                    "; each port of an MRC device is a plane, a network of its own, so this "
                    "packet crossed plane " +
                    n + ".");
        } else {
            add(v, 0, "interface",
                n + ": the frame was seen on port " + n + " of its device, counted from 0" + where +
                    ".");
        }
    }
    if (d.raw.direction == 1 || d.raw.direction == 2) {
        add(v, 0, "dir",
            d.raw.direction == 1
                ? "in: captured as it arrived at that port (the receiving end's copy)."
                : "out: captured as it left that port (the sending end's copy); a capture of "
                  "both ends also holds the copy that arrived, as dir=in on the peer's port.");
    }
    if (p.vlan != nullptr) {
        add(v, 0, "802.1Q",
            "VLAN " + std::to_string(p.vlan->vid()) + ", priority (PCP) " +
                std::to_string(p.vlan->pcp()) +
                ": PFC pauses traffic per priority, so the PCP decides whether this packet rides "
                "a lossless class.");
    }
    if (p.ipv4 != nullptr || p.ipv6 != nullptr) explain_ip(p, v);
    if (p.udp != nullptr) explain_udp(p, d, v);
    if (p.bth != nullptr) explain_bth(d, v);
    if (p.deth != nullptr) explain_deth(*p.deth, v);
    if (p.reth != nullptr) {
        if (p.mdeth() != nullptr)
            explain_mrc_reth(p, d, v);
        else
            explain_reth(*p.reth, known_opcode(*p.bth), v);
    }
    if (p.atomic_eth != nullptr) explain_atomic_eth(*p.atomic_eth, p.bth->opcode(), v);
    if (p.aeth != nullptr) explain_aeth(*p.aeth, v);
    if (p.atomic_ack_eth != nullptr) {
        add(v, 0, "AtomicAckETH",
            "Atomic Acknowledge Extended Transport Header: the result of an atomic operation.");
        add(v, 1, "orig_remote_data",
            hex(p.atomic_ack_eth->orig_rem_data.get(), 16) +
                ": the 8 bytes at the target before the atomic ran (a compare & swap succeeded if "
                "this equals its compare data).");
    }
    explain_mrc(d, v);
    if (p.immdt != nullptr) {
        add(v, 0, "ImmDt",
            "Immediate Data Extended Transport Header: 4 bytes for the responder's consumer that "
            "travel with the message.");
        add(v, 1, "imm_data",
            hex(p.immdt->imm.get(), 8) +
                (p.mdeth() != nullptr
                     ? ": handed to the responder's completion (wc.imm_data), not written to "
                       "memory; it consumes a pre-posted receive WQE once every PSN up to this "
                       "one has arrived (never an RNR), with at most max_wimm_dest such messages "
                       "waiting at the responder."
                     : ": handed to the responder's completion (wc.imm_data) instead of being "
                       "written to memory; it consumes a receive WQE."));
    }
    if (p.ieth != nullptr) {
        add(v, 0, "IETH", "Invalidate Extended Transport Header: a key the responder must retire.");
        add(v, 1, "r_key",
            hex(p.ieth->rkey.get(), 8) +
                ": invalidated at the responder when this SEND completes, so the buffer it opened "
                "can no longer be reached remotely.");
    }
    if (p.cnp != nullptr) {
        add(v, 0, "CNP",
            "16 reserved bytes. A CNP says only which QP should slow down, not by how much: the "
            "rate cut is up to the sender's DCQCN reaction point.");
    }
    if (p.icrc_checked) add(v, 0, "ICRC", icrc_sentence(p));
    if (d.kind == FrameKind::rejected) {
        add(v, 0, "rejected",
            std::string(wire::to_string(d.reason)) + ": " + std::string(wire::describe(d.reason)) +
                ". A receiver drops such a frame without answering it.");
    }
    return v;
}

std::string format_explained(const DecodedFrame& d) {
    std::string out = format_text(d);
    for (const Explanation& e : explain_frame(d)) {
        out += '\n';
        out += std::string(4 + 2 * e.depth, ' ');
        out += e.header;
        const std::size_t width = e.depth == 0 ? 12 : 10;
        out += std::string(e.header.size() < width ? width - e.header.size() : 1, ' ');
        out += e.text;
    }
    return out;
}

namespace {

/** "src>dst" of a frame's IP addresses, in the order given, or empty when it has no IP header. */
std::string direction_key(const wire::ParsedFrame& p, bool reversed) {
    std::string a, b;
    if (p.ipv4 != nullptr) {
        a.assign(reinterpret_cast<const char*>(p.ipv4->src.data()), 4);
        b.assign(reinterpret_cast<const char*>(p.ipv4->dst.data()), 4);
    } else if (p.ipv6 != nullptr) {
        a.assign(reinterpret_cast<const char*>(p.ipv6->src.data()), 16);
        b.assign(reinterpret_cast<const char*>(p.ipv6->dst.data()), 16);
    } else {
        return {};
    }
    return reversed ? b + '>' + a : a + '>' + b;
}

unsigned ecn_of(const wire::ParsedFrame& p) {
    if (p.ipv4 != nullptr) return p.ipv4->tos & 3u;
    if (p.ipv6 != nullptr) return p.ipv6->traffic_class() & 3u;
    return 0;
}

std::string hex(std::uint32_t v, int width) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%0*x", width, v);
    return buf;
}

} // namespace

CnpCauses::Marks& CnpCauses::at(const std::string& key) {
    for (auto& [k, m] : directions_)
        if (k == key) return m;
    directions_.emplace_back(key, Marks{});
    return directions_.back().second;
}

std::string CnpCauses::observe(const DecodedFrame& d) {
    const wire::ParsedFrame& p = d.parsed;
    // A frame cut by the capture's snap length is rejected by the parser (its IP length exceeds
    // what was captured), but its mark still counts: find its UDP header and BTH behind the IP
    // header, if they were captured.
    const wire::Bth* bth = p.bth;
    if (bth == nullptr && d.kind == FrameKind::rejected && d.raw.bytes.size() < d.raw.wire_length &&
        (p.ipv4 != nullptr || p.ipv6 != nullptr)) {
        const auto* l3 = p.ipv4 != nullptr ? reinterpret_cast<const std::uint8_t*>(p.ipv4)
                                           : reinterpret_cast<const std::uint8_t*>(p.ipv6);
        const bool udp = p.ipv4 != nullptr ? p.ipv4->protocol == 17 : p.ipv6->next_header == 17;
        const std::size_t l3_len = p.ipv4 != nullptr ? p.ipv4->header_length() : 40;
        const std::uint8_t* at = l3 + l3_len;
        const std::uint8_t* end = d.raw.bytes.data() + d.raw.bytes.size();
        if (udp && at + sizeof(wire::UdpHdr) + sizeof(wire::Bth) <= end &&
            reinterpret_cast<const wire::UdpHdr*>(at)->dst_port.get() == wire::kRoceV2Port)
            bth = reinterpret_cast<const wire::Bth*>(at + sizeof(wire::UdpHdr));
    }
    if (bth == nullptr || (d.kind != FrameKind::roce && d.kind != FrameKind::rejected)) return {};
    const wire::OpcodeInfo& info = wire::opcode_info(bth->opcode());
    if (!info.is(OpFlags::cnp)) {
        if (ecn_of(p) != 3u) return {};
        Marks& m = at(direction_key(p, false));
        m.last_frame = d.raw.index;
        m.last_what = std::string(wire::to_string(bth->opcode())) + " PSN " +
                      hex(bth->psn().value(), 6) + " to QP " + hex(bth->dest_qp(), 6);
        ++m.since_cnp;
        return {};
    }
    // A CNP from B to A answers the marks on A -> B.
    Marks& m = at(direction_key(p, true));
    ++m.cnps;
    std::string s;
    if (m.last_frame == 0) {
        s = "no ECN-CE marked packet toward this CNP's sender is in the capture before it: the "
            "mark it answers was not captured (the capture started later, or saw only one "
            "direction).";
    } else if (m.since_cnp == 0) {
        s = "no new CE mark since this direction's previous CNP: the notification point answers "
            "each marked packet once its min_time_between_cnps has passed, so this one answers "
            "frame #" +
            std::to_string(m.last_frame) + " (" + m.last_what + ") again or a mark not captured.";
    } else {
        s = "the receiver got ECN-CE marked packets from this CNP's destination: " +
            std::to_string(m.since_cnp) + " since the previous CNP of this direction, the latest " +
            "frame #" + std::to_string(m.last_frame) + " (" + m.last_what +
            "). A switch marked them because its queue toward the receiver was building; the "
            "receiver (DCQCN notification point) tells QP " +
            hex(bth->dest_qp(), 6) +
            " to slow down; the sender's reaction point cuts its rate by alpha / 2 (at most once "
            "per rate_reduce_monitor_period).";
    }
    m.since_cnp = 0;
    return s;
}

} // namespace droce::trace
