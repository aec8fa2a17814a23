/* SPDX-License-Identifier: BSD-3-Clause */
#include "trace_format.h"

#include <arpa/inet.h>
#include <pcap/pcap.h>
#include <sys/socket.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <span>

#include "aeth_decode.h"
#include "mrc_decode.h"
#include "trace_explain.h"
#include "wire/droce_probe.h"
#include "wire/ipv4.h"

namespace droce::trace {

namespace wire = droce::wire;

std::string hex(std::uint64_t v, int digits) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%0*" PRIx64, digits, v);
    return buf;
}

const char* ecn_name(unsigned ecn) noexcept {
    switch (ecn & 3u) {
    case 0:
        return "Not-ECT";
    case 1:
        return "ECT(1)";
    case 2:
        return "ECT(0)";
    default:
        return "CE";
    }
}

const wire::OpcodeInfo* known_opcode(const wire::Bth& bth) noexcept {
    const wire::OpcodeInfo& info = wire::kOpcodeTable[bth.opcode_byte];
    return info.known ? &info : nullptr;
}

bool is_mrc(const DecodedFrame& d) noexcept {
    return d.kind != FrameKind::skipped && d.parsed.bth != nullptr &&
           known_opcode(*d.parsed.bth) != nullptr &&
           wire::transport_of(d.parsed.bth->opcode()) == wire::Transport::mrc;
}

std::string link_type_name(int link_type) {
    const char* name = pcap_datalink_val_to_name(link_type);
    return name != nullptr ? std::string(name) : "DLT " + std::to_string(link_type);
}

namespace {

constexpr std::uint8_t kIpProtoIcmp = 1;
constexpr std::uint8_t kIpProtoIgmp = 2;
constexpr std::uint8_t kIpProtoTcp = 6;
constexpr std::uint8_t kIpProtoIcmpv6 = 58;
constexpr std::uint16_t kEtherTypeMacControl = 0x8808;
constexpr std::uint16_t kEtherTypeLldp = 0x88cc;
constexpr std::uint16_t kEtherTypeQinQ = 0x88a8;

/** Big-endian 16-bit read at @p off; the caller has checked that two bytes are there. */
std::uint16_t be16_at(std::span<const std::uint8_t> b, std::size_t off) noexcept {
    return static_cast<std::uint16_t>(b[off] << 8 | b[off + 1]);
}

/** Result of looking past the point where parse_frame() stopped, to name a non-RoCE frame. */
struct Classification {
    bool looks_like_roce = false; ///< UDP to port 4791: show as a rejected RoCE frame
    SkipKind skip = SkipKind::truncated;
    std::string what;
    std::optional<std::uint16_t> src_port;
    std::optional<std::uint16_t> dst_port;
    std::uint16_t ether_type = 0;
};

/** Names the transport above IP, @p l4 bytes into the frame; @p v6 says which IP carries it. */
void classify_l4(std::span<const std::uint8_t> b, std::size_t l4, std::uint8_t proto, bool v6,
                 Classification& c) {
    const std::string family = v6 ? "IPv6" : "IPv4";
    const bool have_ports = b.size() >= l4 + 4;
    switch (proto) {
    case kIpProtoTcp:
    case wire::kIpProtoUdp: {
        const bool udp = proto == wire::kIpProtoUdp;
        c.skip = udp ? SkipKind::udp : SkipKind::tcp;
        const char* name = udp ? "UDP" : "TCP";
        if (!have_ports) {
            c.skip = SkipKind::truncated;
            c.what = std::string(name) + " (truncated before the ports)";
            return;
        }
        const std::uint16_t sport = be16_at(b, l4);
        const std::uint16_t dport = be16_at(b, l4 + 2);
        c.src_port = sport;
        c.dst_port = dport;
        if (udp && dport == wire::kRoceV2Port) {
            c.looks_like_roce = true;
            return;
        }
        if (udp && sport == wire::kRoceV2Port) {
            // Only the destination port marks RoCEv2; say so rather than print a bare 4791.
            c.what = "UDP port " + std::to_string(dport) +
                     " (source port 4791; RoCEv2 is recognised by destination port)";
            return;
        }
        // The lower port is the service port: ephemeral (client) ports are the high ones.
        c.what = std::string(name) + " port " + std::to_string(sport < dport ? sport : dport);
        return;
    }
    case kIpProtoIcmp:
    case kIpProtoIcmpv6:
        c.skip = proto == kIpProtoIcmpv6 ? SkipKind::icmpv6 : SkipKind::icmp;
        c.what = family + " ICMP";
        if (b.size() > l4) c.what += " type " + std::to_string(b[l4]);
        return;
    case kIpProtoIgmp:
        c.skip = SkipKind::other_ip;
        c.what = family + " IGMP";
        return;
    default:
        c.skip = SkipKind::other_ip;
        c.what = family + (v6 ? " next header " : " protocol ") + std::to_string(proto);
        return;
    }
}

/** Names a frame that parse_frame() did not accept, or finds that it is RoCEv2 after all. */
Classification classify(std::span<const std::uint8_t> b) {
    Classification c;
    if (b.size() < sizeof(wire::EthHdr)) {
        c.what = "truncated Ethernet frame, " + std::to_string(b.size()) + " bytes";
        return c;
    }
    std::size_t off = 12;
    std::uint16_t et = be16_at(b, off);
    off += 2;
    if (et == wire::kEtherTypeVlan) {
        if (b.size() < off + 4) {
            c.what = "truncated 802.1Q tag";
            return c;
        }
        et = be16_at(b, off + 2);
        off += 4;
    }
    c.ether_type = et;
    if (et < 0x0600) {
        c.skip = SkipKind::ieee8023;
        c.what = "IEEE 802.3 frame with length " + std::to_string(et) + " (LLC)";
        return c;
    }
    switch (et) {
    case wire::kEtherTypeArp:
        c.skip = SkipKind::arp;
        c.what = "ARP";
        return c;
    case wire::kEtherTypeRoceV1:
        c.skip = SkipKind::roce_v1;
        c.what = "RoCE v1 (EtherType 0x8915)";
        return c;
    case kEtherTypeMacControl:
        c.skip = SkipKind::mac_control;
        c.what = "MAC control, PAUSE or PFC (EtherType 0x8808)";
        return c;
    case kEtherTypeLldp:
        c.skip = SkipKind::lldp;
        c.what = "LLDP (EtherType 0x88cc)";
        return c;
    case kEtherTypeQinQ:
        c.skip = SkipKind::unknown_ethertype;
        c.what = "802.1ad QinQ tag (EtherType 0x88a8), not decoded";
        return c;
    case wire::kEtherTypeIpv4: {
        if (b.size() < off + sizeof(wire::Ipv4Hdr)) {
            c.what = "IPv4 (truncated header)";
            return c;
        }
        const std::size_t ihl = (b[off] & 0xfu) * 4u;
        const std::uint8_t proto = b[off + 9];
        const std::uint16_t frag_offset = be16_at(b, off + 6) & 0x1fff;
        if (frag_offset != 0) {
            c.skip = SkipKind::ip_fragment;
            c.what = "IPv4 fragment, protocol " + std::to_string(proto) + ", offset " +
                     std::to_string(frag_offset * 8u);
            return c;
        }
        classify_l4(b, off + (ihl < 20 ? 20 : ihl), proto, false, c);
        return c;
    }
    case wire::kEtherTypeIpv6: {
        if (b.size() < off + sizeof(wire::Ipv6Hdr)) {
            c.what = "IPv6 (truncated header)";
            return c;
        }
        std::uint8_t nh = b[off + 6];
        std::size_t l4 = off + sizeof(wire::Ipv6Hdr);
        // Walk the extension headers (hop-by-hop, routing, fragment, AH, destination options) to
        // the upper-layer protocol; MLD reports, for one, come after a hop-by-hop header.
        for (int i = 0; i < 8; ++i) {
            if (nh != 0 && nh != 43 && nh != 44 && nh != 51 && nh != 60) break;
            if (b.size() < l4 + 8) {
                c.what = "IPv6 (truncated extension header)";
                return c;
            }
            std::size_t len;
            if (nh == 44) {
                if ((be16_at(b, l4 + 2) & 0xfff8) != 0) {
                    c.skip = SkipKind::ip_fragment;
                    c.what = "IPv6 fragment, next header " + std::to_string(b[l4]);
                    return c;
                }
                len = 8;
            } else if (nh == 51) {
                len = (b[l4 + 1] + 2u) * 4u;
            } else {
                len = (b[l4 + 1] + 1u) * 8u;
            }
            nh = b[l4];
            l4 += len;
        }
        classify_l4(b, l4, nh, true, c);
        return c;
    }
    default:
        c.skip = SkipKind::unknown_ethertype;
        c.what = "unknown EtherType " + hex(et, 4);
        return c;
    }
}

std::string format_ip(const void* addr, bool v6) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (inet_ntop(v6 ? AF_INET6 : AF_INET, addr, buf, sizeof buf) == nullptr) return "?";
    return buf;
}

std::string format_mac(const wire::MacAddr& m) {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                  m[5]);
    return buf;
}

std::string wire_bytes_hex(std::uint32_t icrc) {
    // The ICRC is stored least significant byte first (icrc.h); show the bytes in wire order, as
    // Wireshark prints them.
    char buf[9];
    std::snprintf(buf, sizeof buf, "%02x%02x%02x%02x", icrc & 0xffu, (icrc >> 8) & 0xffu,
                  (icrc >> 16) & 0xffu, icrc >> 24);
    return buf;
}

/** Source and destination address of the frame's IP header, if it has one. */
bool ip_addresses(const wire::ParsedFrame& p, std::string& src, std::string& dst) {
    if (p.ipv4 != nullptr) {
        src = format_ip(p.ipv4->src.data(), false);
        dst = format_ip(p.ipv4->dst.data(), false);
        return true;
    }
    if (p.ipv6 != nullptr) {
        src = format_ip(p.ipv6->src.data(), true);
        dst = format_ip(p.ipv6->dst.data(), true);
        return true;
    }
    return false;
}

unsigned ip_ecn(const wire::ParsedFrame& p) {
    if (p.ipv4 != nullptr) return p.ipv4->ecn();
    if (p.ipv6 != nullptr) return p.ipv6->traffic_class() & 3u;
    return 0;
}

/** Appends " name=value" to @p out. */
void field(std::string& out, const char* name, const std::string& value) {
    out += ' ';
    out += name;
    out += '=';
    out += value;
}
void field(std::string& out, const char* name, std::uint64_t value) {
    field(out, name, std::to_string(value));
}

std::string aeth_summary(const wire::Aeth& a) {
    const wire::AethKind kind = a.kind();
    std::string s = wire::aeth_kind_name(kind);
    switch (kind) {
    case wire::AethKind::ack:
        if (a.value() == wire::kAethCreditsInvalid) {
            s += " credits not in use";
        } else {
            // The field is a code (IBTA 9.7.5.1.2, table 45), as the RNR timer is: the count too.
            s += " credit_count=" + std::to_string(a.value());
            if (auto credits = wire::aeth_credits(a.value()))
                s += " (" + std::to_string(*credits) + " credit" + (*credits == 1 ? "" : "s") + ")";
        }
        break;
    case wire::AethKind::rnr_nak:
        s += " rnr_timer=" + std::to_string(a.value()) + " " + format_rnr_timer(a.value());
        break;
    case wire::AethKind::nak:
        s += ' ';
        s += wire::nak_code_name(a.value());
        break;
    case wire::AethKind::reserved:
        break;
    }
    return s;
}

/** " version=N" when an MRC header's version is not the one droce speaks; "" otherwise. */
std::string mrc_version_field(std::uint8_t version) {
    return version == wire::kMrcVersion ? std::string() : " version=" + std::to_string(version);
}

/** " (planes up 0,2; down 1,3-7)" for an EPETH mask, " (planes up 0-1)" for a SETH mask. */
std::string planes_text(std::uint8_t mask, bool with_down) {
    std::string s = " (planes up " + plane_list(mask);
    if (with_down) s += "; down " + plane_list(static_cast<std::uint8_t>(~mask));
    return s + ')';
}

/** True when an MRC data packet's payload is shorter than its RETH says: a switch trimmed it. */
bool mrc_trimmed(const DecodedFrame& d) {
    const wire::ParsedFrame& p = d.parsed;
    return p.mdeth() != nullptr && p.reth != nullptr &&
           (d.kind == FrameKind::roce || d.reason == wire::RejectReason::bad_icrc) &&
           p.payload.size() < p.reth->dma_len.get();
}

void format_mrc_text(const wire::ParsedFrame& p, std::string& out) {
    if (const wire::Mdeth* m = p.mdeth()) {
        out += "  MDETH";
        out += mrc_version_field(m->version);
        field(out, "path", m->path.get());
        field(out, "msn", m->msn.get());
        field(out, "msg_offset", m->msg_offset.get());
        field(out, "msg_length", m->msg_length.get());
        field(out, "flags", mdeth_flags_text(m->flags));
    }
    if (const wire::Seth* h = p.seth()) {
        out += "  SETH";
        out += mrc_version_field(h->version);
        field(out, "path", h->path.get());
        field(out, "cum_psn", h->cum_psn.get() & wire::Psn::kMask);
        field(out, "sack_base", h->sack_base.get() & wire::Psn::kMask);
        field(out, "mpr_dest",
              std::to_string(h->mpr_dest) + " (" +
                  std::to_string(std::uint32_t{h->mpr_dest} * wire::kMprUnit) + " PSNs)");
        field(out, "port_mask", hex(h->port_mask, 2) + planes_text(h->port_mask, false));
        if (h->flags != 0) field(out, "flags", seth_flags_text(h->flags));
        field(out, "sacked", format_ranges(sack_ranges(*h)));
    }
    if (const wire::Neth* h = p.neth()) {
        out += "  NETH";
        out += mrc_version_field(h->version);
        const char* name = nack_reason_name(h->reason);
        field(out, "reason",
              std::string(name) == "unknown" ? std::to_string(h->reason) + " (unknown)" : name);
        field(out, "path", h->path.get());
        field(out, "psn", h->psn.get() & wire::Psn::kMask);
        field(out, "cum_psn", h->cum_psn.get() & wire::Psn::kMask);
    }
    if (const wire::Peth* h = p.peth()) {
        out += "  PETH";
        out += mrc_version_field(h->version);
        field(out, "path", h->path.get());
        field(out, "seq", h->seq.get());
        field(out, "timestamp_ns", h->timestamp_ns.get());
    }
    if (const wire::Epeth* h = p.epeth()) {
        out += "  EPETH";
        out += mrc_version_field(h->version);
        const char* name = endpoint_op_name(h->op);
        field(out, "op",
              std::string(name) == "unknown" ? std::to_string(h->op) + " (unknown)" : name);
        field(out, "port_mask", hex(h->port_mask, 2) + planes_text(h->port_mask, true));
        field(out, "seq", h->seq.get());
    }
}

nlohmann::ordered_json planes_json(std::uint8_t mask) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (unsigned i = 0; i < 8; ++i)
        if ((mask >> i) & 1u) a.push_back(i);
    return a;
}

void format_mrc_json(const DecodedFrame& d, nlohmann::ordered_json& j) {
    using Json = nlohmann::ordered_json;
    const wire::ParsedFrame& p = d.parsed;
    if (p.bth != nullptr && is_mrc(d)) {
        Json m;
        if (const wire::Mdeth* h = p.mdeth()) m["path"] = h->path.get();
        if (p.udp != nullptr) {
            m["udp_src_port"] = p.udp->src_port.get();
            if (const wire::Mdeth* h = p.mdeth(); h && p.udp->src_port.get() >= h->path.get())
                m["ev_base"] = p.udp->src_port.get() - h->path.get();
        }
        if (d.raw.interface) m["plane"] = *d.raw.interface;
        if (p.mdeth() != nullptr && p.reth != nullptr) m["trimmed"] = mrc_trimmed(d);
        j["mrc"] = std::move(m);
    }
    if (const wire::Mdeth* h = p.mdeth()) {
        j["mdeth"] = {{"version", h->version},
                      {"flags", h->flags},
                      {"flag_names", mdeth_flags_text(h->flags)},
                      {"first", (h->flags & wire::kMdethFirst) != 0},
                      {"last", (h->flags & wire::kMdethLast) != 0},
                      {"retransmit", (h->flags & wire::kMdethRetransmit) != 0},
                      {"path", h->path.get()},
                      {"msn", h->msn.get()},
                      {"msg_offset", h->msg_offset.get()},
                      {"msg_length", h->msg_length.get()}};
    }
    if (const wire::Seth* h = p.seth()) {
        const std::vector<PsnRange> sacked = sack_ranges(*h);
        const std::uint32_t cum = h->cum_psn.get() & wire::Psn::kMask;
        Json bitmap = Json::array();
        for (const wire::Be64& w : h->bitmap)
            bitmap.push_back(hex(w.get(), 16));
        j["seth"] = {{"version", h->version},
                     {"flags", h->flags},
                     {"ecn_echo", (h->flags & wire::kSethEcnEcho) != 0},
                     {"path", h->path.get()},
                     {"cum_psn", cum},
                     {"sack_base", h->sack_base.get() & wire::Psn::kMask},
                     {"mpr_dest", h->mpr_dest},
                     {"mpr_dest_psns", std::uint32_t{h->mpr_dest} * wire::kMprUnit},
                     {"port_mask", h->port_mask},
                     {"planes_up", planes_json(h->port_mask)},
                     {"bitmap", std::move(bitmap)},
                     {"sacked", format_ranges(sacked)},
                     {"sacked_past_cum", format_ranges(ranges_from(sacked, cum))},
                     {"missing", format_ranges(sack_holes(*h))}};
    }
    if (const wire::Neth* h = p.neth()) {
        j["neth"] = {{"version", h->version},
                     {"reason", h->reason},
                     {"reason_name", nack_reason_name(h->reason)},
                     {"path", h->path.get()},
                     {"psn", h->psn.get() & wire::Psn::kMask},
                     {"cum_psn", h->cum_psn.get() & wire::Psn::kMask}};
    }
    if (const wire::Peth* h = p.peth()) {
        j["peth"] = {{"version", h->version},
                     {"path", h->path.get()},
                     {"seq", h->seq.get()},
                     {"timestamp_ns", hex(h->timestamp_ns.get(), 16)}};
    }
    if (const wire::Epeth* h = p.epeth()) {
        j["epeth"] = {{"version", h->version},
                      {"op", h->op},
                      {"op_name", endpoint_op_name(h->op)},
                      {"port_mask", h->port_mask},
                      {"planes_up", planes_json(h->port_mask)},
                      {"seq", h->seq.get()}};
    }
}

} // namespace

namespace {
/** What droce probe the UDP datagram at @p udp in @p frame is (wire/droce_probe.h), or nullptr
 *  when it is none. */
const char* droce_probe_name(std::span<const std::uint8_t> frame, const wire::UdpHdr* udp) {
    const auto* u = reinterpret_cast<const std::uint8_t*>(udp);
    if (u < frame.data() || u + 8 + wire::kDroceProbeLen > frame.data() + frame.size())
        return nullptr;
    if (udp->length.get() != 8 + wire::kDroceProbeLen) return nullptr;
    const std::uint8_t* p = u + 8;
    if (!wire::is_droce_probe(p, wire::kDroceProbeLen)) return nullptr;
    return wire::droce_probe_name(p[wire::kDroceProbeKindByte]);
}
} // namespace

std::vector<std::vector<std::uint8_t>> split_gso_send(const RawFrame& raw) {
    std::vector<std::vector<std::uint8_t>> out;
    if (raw.link_type != kLinkTypeEthernet || raw.bytes.size() != raw.wire_length) return out;
    wire::ParsedFrame whole;
    const wire::RejectReason why = wire::parse_frame(raw.bytes, whole);
    // A UDP 4791 datagram that did not pass as one packet, with a BTH to start from.
    if (why == wire::RejectReason::ok || whole.udp == nullptr || whole.bth == nullptr ||
        whole.vlan != nullptr)
        return out;
    const std::uint8_t* f = raw.bytes.data();
    const auto* udp = reinterpret_cast<const std::uint8_t*>(whole.udp);
    const std::size_t udp_off = static_cast<std::size_t>(udp - f);
    const std::size_t l3_off = 14;
    const std::size_t len = udp_off + whole.udp->length.get();
    if (whole.udp->length.get() < 8 || len != raw.bytes.size()) return out;
    const std::uint8_t* p = udp + 8;
    const std::size_t total = len - udp_off - 8;
    const auto be24 = [](const std::uint8_t* b) {
        return (static_cast<std::uint32_t>(b[0]) << 16) | (static_cast<std::uint32_t>(b[1]) << 8) |
               b[2];
    };
    const std::uint32_t qp = be24(p + 5), psn = be24(p + 9);
    // The segment size: the first offset where the next packet of the same QP starts, checked at
    // every multiple of it (a BTH of TVer 0, that QP, the PSN one more each time). A RoCE packet
    // holds at most a 4096-byte path MTU of payload behind its headers: no larger size is tried,
    // so a hostile capture costs a few thousand cheap checks per frame, not one per byte.
    constexpr std::size_t kMaxSegment = 4096 + 64;
    for (std::size_t seg = 12 + 4; seg < total && seg <= kMaxSegment; ++seg) {
        const std::size_t n = (total + seg - 1) / seg;
        if (n > 64) continue; // the kernel's UDP_MAX_SEGMENTS
        bool fits = true;
        for (std::size_t k = 1; k < n && fits; ++k) {
            const std::uint8_t* b = p + k * seg;
            fits = total - k * seg >= 12 + 4 && (b[1] & 0x0f) == 0 && be24(b + 5) == qp &&
                   be24(b + 9) == ((psn + k) & 0xffffff);
        }
        if (!fits) continue;
        std::vector<std::vector<std::uint8_t>> segs;
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t plen = std::min(seg, total - k * seg);
            std::vector<std::uint8_t> s(f, f + udp_off + 8);
            s.insert(s.end(), p + k * seg, p + k * seg + plen);
            std::uint8_t* ip = s.data() + l3_off;
            const auto put16 = [](std::uint8_t* at, std::size_t v) {
                at[0] = static_cast<std::uint8_t>(v >> 8);
                at[1] = static_cast<std::uint8_t>(v);
            };
            if (whole.ipv4 != nullptr) {
                put16(ip + 2, udp_off - l3_off + 8 + plen);
                put16(ip + 10, 0);
                put16(ip + 10, wire::ipv4_header_checksum(ip, (ip[0] & 0xfu) * 4u));
            } else {
                put16(ip + 4, 8 + plen);
            }
            put16(s.data() + udp_off + 4, 8 + plen);
            if (whole.ipv6 != nullptr || whole.udp->checksum.get() != 0) {
                // The checksum the kernel writes into each datagram it cuts (the ICRC masks it).
                if (!wire::set_udp_checksum(s, l3_off, udp_off, 8 + plen, whole.ipv6 != nullptr)) {
                    segs.clear();
                    break;
                }
            }
            wire::ParsedFrame one;
            if (wire::parse_frame(s, one) != wire::RejectReason::ok) {
                segs.clear();
                break;
            }
            segs.push_back(std::move(s));
        }
        if (!segs.empty()) return segs;
    }
    return out;
}

DecodedFrame decode_frame(const RawFrame& raw) {
    DecodedFrame d;
    d.raw = raw;
    if (raw.link_type != kLinkTypeEthernet) {
        d.kind = FrameKind::skipped;
        d.skip = SkipKind::link_type;
        d.what = "link type " + link_type_name(raw.link_type);
        return d;
    }
    d.reason = wire::parse_frame(raw.bytes, d.parsed);
    d.ether_type = d.parsed.ether_type;
    if (d.reason == wire::RejectReason::ok) {
        d.kind = FrameKind::roce;
        return d;
    }
    // parse_frame() sets the UDP header before it checks the port, so a UDP header with any reason
    // but not_roce_port means destination port 4791: a RoCEv2 packet that broke a rule.
    if (d.parsed.udp != nullptr && d.reason != wire::RejectReason::not_roce_port) {
        if (const char* what = droce_probe_name(raw.bytes, d.parsed.udp)) {
            d.kind = FrameKind::skipped;
            d.skip = SkipKind::droce_probe;
            d.what = what;
            d.src_port = d.parsed.udp->src_port.get();
            d.dst_port = d.parsed.udp->dst_port.get();
            return d;
        }
        d.kind = FrameKind::rejected;
        return d;
    }
    Classification c = classify(raw.bytes);
    if (c.ether_type != 0) d.ether_type = c.ether_type;
    if (c.looks_like_roce) {
        // UDP to 4791 that parse_frame() refused before reaching the UDP header (bad IP length,
        // a first fragment, a truncated capture ...).
        d.kind = FrameKind::rejected;
        return d;
    }
    d.kind = FrameKind::skipped;
    d.skip = c.skip;
    d.what = std::move(c.what);
    d.src_port = c.src_port;
    d.dst_port = c.dst_port;
    return d;
}

std::string format_text(const DecodedFrame& d) {
    const wire::ParsedFrame& p = d.parsed;
    std::string out = std::to_string(d.raw.index);
    if (d.raw.gso_segments != 0) {
        out +=
            "  gso=" + std::to_string(d.raw.gso_segment) + "/" + std::to_string(d.raw.gso_segments);
    }
    if (d.raw.interface) {
        out += is_mrc(d) ? "  plane=" : "  if=";
        out += std::to_string(*d.raw.interface);
    }
    // Which copy: a capture of both ends holds each packet as sent and as received.
    if (d.raw.direction == 1) out += "  dir=in";
    if (d.raw.direction == 2) out += "  dir=out";
    if (p.vlan != nullptr) {
        out += "  vlan=" + std::to_string(p.vlan->vid()) + " pcp=" + std::to_string(p.vlan->pcp());
    }
    std::string src, dst;
    if (ip_addresses(p, src, dst)) {
        out += "  " + src + " > " + dst;
        if (d.kind != FrameKind::skipped && ip_ecn(p) != 0) field(out, "ecn", ecn_name(ip_ecn(p)));
    }
    if (d.kind == FrameKind::skipped) {
        out += "  skipped (" + d.what + ")";
        return out;
    }
    if (p.udp != nullptr) {
        out += "  udp " + std::to_string(p.udp->src_port.get()) + " > " +
               std::to_string(p.udp->dst_port.get());
    }
    if (p.bth != nullptr) {
        const wire::Bth& b = *p.bth;
        out += "  ";
        const wire::OpcodeInfo* info = known_opcode(b);
        out += info != nullptr ? std::string(info->name) : "opcode " + hex(b.opcode_byte, 2);
        field(out, "dest_qp", hex(b.dest_qp(), 6));
        field(out, "psn", b.psn().value());
        field(out, "ack_req", b.ack_req() ? 1u : 0u);
        if (b.se()) field(out, "se", 1);
        if (b.fecn()) field(out, "fecn", 1);
        if (b.becn()) field(out, "becn", 1);
        if (b.pkey.get() != wire::kDefaultPkey) field(out, "p_key", hex(b.pkey.get(), 4));
    }
    if (p.deth != nullptr) {
        out += "  DETH";
        field(out, "q_key", hex(p.deth->qkey.get(), 8));
        field(out, "src_qp", hex(p.deth->src_qp(), 6));
    }
    if (p.reth != nullptr) {
        out += "  RETH";
        field(out, "va", hex(p.reth->va.get(), 16));
        field(out, "r_key", hex(p.reth->rkey.get(), 8));
        field(out, "dma_length", p.reth->dma_len.get());
    }
    if (p.atomic_eth != nullptr) {
        const bool cmp_swap = p.bth->opcode() == wire::Opcode::RC_COMPARE_SWAP;
        out += "  AtomicETH";
        field(out, "va", hex(p.atomic_eth->va.get(), 16));
        field(out, "r_key", hex(p.atomic_eth->rkey.get(), 8));
        field(out, cmp_swap ? "swap_data" : "add_data", hex(p.atomic_eth->swap_add.get(), 16));
        field(out, "compare_data", hex(p.atomic_eth->compare.get(), 16));
    }
    if (p.aeth != nullptr) {
        out += "  AETH";
        field(out, "syndrome", hex(p.aeth->syndrome, 2) + " (" + aeth_summary(*p.aeth) + ")");
        field(out, "msn", p.aeth->msn());
    }
    if (p.atomic_ack_eth != nullptr) {
        out += "  AtomicAckETH";
        field(out, "orig_remote_data", hex(p.atomic_ack_eth->orig_rem_data.get(), 16));
    }
    format_mrc_text(p, out);
    if (p.immdt != nullptr) {
        out += "  ImmDt";
        field(out, "imm_data", hex(p.immdt->imm.get(), 8));
    }
    if (p.ieth != nullptr) {
        out += "  IETH";
        field(out, "r_key", hex(p.ieth->rkey.get(), 8));
    }
    if ((d.kind == FrameKind::roce || d.reason == wire::RejectReason::bad_icrc) &&
        p.info != nullptr && p.info->is(wire::OpFlags::payload)) {
        out += " ";
        field(out, "payload", p.payload.size());
        field(out, "pad", p.pad);
        if (mrc_trimmed(d)) field(out, "trimmed", 1);
    }
    if (p.icrc_checked) {
        if (p.icrc_computed == p.icrc_wire) {
            out += "  ICRC ok";
        } else {
            out += "  ICRC BAD";
            field(out, "wire", hex(p.icrc_wire, 8));
            field(out, "computed", hex(p.icrc_computed, 8));
        }
    }
    if (d.kind == FrameKind::rejected) {
        out += "  rejected ";
        out += wire::to_string(d.reason);
        out += " (";
        out += wire::describe(d.reason);
        out += ')';
    }
    if (d.raw.wire_length > d.raw.bytes.size()) {
        out += "  [captured " + std::to_string(d.raw.bytes.size()) + " of " +
               std::to_string(d.raw.wire_length) + " bytes]";
    }
    return out;
}

nlohmann::ordered_json format_json(const DecodedFrame& d, bool explain) {
    using Json = nlohmann::ordered_json;
    const wire::ParsedFrame& p = d.parsed;
    Json j;
    j["index"] = d.raw.index;
    if (d.raw.gso_segments != 0) {
        j["gso_segment"] = d.raw.gso_segment;
        j["gso_segments"] = d.raw.gso_segments;
    }
    j["length"] = d.raw.wire_length;
    if (d.raw.wire_length > d.raw.bytes.size()) j["captured_length"] = d.raw.bytes.size();
    if (d.raw.interface) j["interface"] = *d.raw.interface;
    j["status"] = d.kind == FrameKind::roce       ? "ok"
                  : d.kind == FrameKind::rejected ? "rejected"
                                                  : "skipped";
    if (d.kind == FrameKind::skipped) {
        j["skipped"] = d.what;
        if (d.skip == SkipKind::link_type) j["link_type"] = link_type_name(d.raw.link_type);
    }
    if (d.kind == FrameKind::rejected) {
        j["reject"] = wire::to_string(d.reason);
        j["reject_description"] = wire::describe(d.reason);
    }
    if (p.eth != nullptr) {
        j["eth"] = {{"src", format_mac(p.eth->src)},
                    {"dst", format_mac(p.eth->dst)},
                    {"ether_type", d.ether_type}};
    }
    if (p.vlan != nullptr) j["vlan"] = {{"vid", p.vlan->vid()}, {"pcp", p.vlan->pcp()}};
    std::string src, dst;
    if (ip_addresses(p, src, dst)) {
        Json ip;
        ip["version"] = p.ipv4 != nullptr ? 4 : 6;
        ip["src"] = src;
        ip["dst"] = dst;
        if (p.ipv4 != nullptr) {
            ip["dscp"] = p.ipv4->dscp();
            ip["ecn"] = p.ipv4->ecn();
            ip["ttl"] = p.ipv4->ttl;
        } else {
            ip["dscp"] = p.ipv6->traffic_class() >> 2;
            ip["ecn"] = p.ipv6->traffic_class() & 3u;
            ip["flow_label"] = p.ipv6->flow_label();
            ip["hop_limit"] = p.ipv6->hop_limit;
        }
        ip["ecn_name"] = ecn_name(ip["ecn"].get<unsigned>());
        j["ip"] = std::move(ip);
    }
    if (d.kind == FrameKind::skipped) {
        if (d.src_port) j["src_port"] = *d.src_port;
        if (d.dst_port) j["dst_port"] = *d.dst_port;
    }
    if (p.udp != nullptr && d.kind != FrameKind::skipped) {
        j["udp"] = {{"src_port", p.udp->src_port.get()},
                    {"dst_port", p.udp->dst_port.get()},
                    {"length", p.udp->length.get()},
                    {"checksum", p.udp->checksum.get()}};
    }
    if (p.bth != nullptr) {
        const wire::Bth& b = *p.bth;
        const wire::OpcodeInfo* info = known_opcode(b);
        j["opcode"] = info != nullptr ? std::string(info->name) : "UNKNOWN";
        j["opcode_value"] = b.opcode_byte;
        j["se"] = b.se();
        j["m"] = b.mig_req();
        j["pad_count"] = b.pad_count();
        j["tver"] = b.tver();
        j["p_key"] = b.pkey.get();
        j["fecn"] = b.fecn();
        j["becn"] = b.becn();
        j["dest_qp"] = b.dest_qp();
        j["ack_req"] = b.ack_req();
        j["psn"] = b.psn().value();
    }
    if (p.deth != nullptr)
        j["deth"] = {{"q_key", p.deth->qkey.get()}, {"src_qp", p.deth->src_qp()}};
    if (p.reth != nullptr) {
        j["reth"] = {{"va", hex(p.reth->va.get(), 16)},
                     {"r_key", p.reth->rkey.get()},
                     {"dma_length", p.reth->dma_len.get()}};
    }
    if (p.atomic_eth != nullptr) {
        j["atomic_eth"] = {{"va", hex(p.atomic_eth->va.get(), 16)},
                           {"r_key", p.atomic_eth->rkey.get()},
                           {"swap_add_data", hex(p.atomic_eth->swap_add.get(), 16)},
                           {"compare_data", hex(p.atomic_eth->compare.get(), 16)}};
    }
    if (p.aeth != nullptr) {
        const wire::Aeth& a = *p.aeth;
        Json aeth;
        aeth["syndrome"] = a.syndrome;
        aeth["msn"] = a.msn();
        aeth["kind"] = wire::aeth_kind_name(a.kind());
        switch (a.kind()) {
        case wire::AethKind::ack:
            aeth["credit_count"] = a.value();
            if (auto credits = aeth_credits(a.value())) aeth["credits"] = *credits;
            break;
        case wire::AethKind::rnr_nak:
            aeth["rnr_timer"] = a.value();
            aeth["rnr_timer_ms"] = rnr_timer_usec(a.value()) / 1000.0;
            break;
        case wire::AethKind::nak:
            aeth["nak_code"] = a.value();
            aeth["nak"] = wire::nak_code_name(a.value());
            break;
        case wire::AethKind::reserved:
            break;
        }
        j["aeth"] = std::move(aeth);
    }
    if (p.atomic_ack_eth != nullptr) {
        j["atomic_ack_eth"] = {
            {"orig_remote_data", hex(p.atomic_ack_eth->orig_rem_data.get(), 16)}};
    }
    format_mrc_json(d, j);
    if (p.immdt != nullptr) j["imm_data"] = p.immdt->imm.get();
    if (p.ieth != nullptr) j["ieth"] = {{"r_key", p.ieth->rkey.get()}};
    if (p.cnp != nullptr) j["cnp"] = {{"reserved_bytes", sizeof(wire::CnpBody)}};
    if (d.kind == FrameKind::roce || d.reason == wire::RejectReason::bad_icrc) {
        j["payload_length"] = p.payload.size();
    }
    if (p.icrc_checked) {
        j["icrc"] = p.icrc_computed == p.icrc_wire ? "ok" : "bad";
        j["icrc_value"] = p.icrc_wire;
        j["icrc_wire_bytes"] = wire_bytes_hex(p.icrc_wire);
        if (p.icrc_computed != p.icrc_wire) j["icrc_computed"] = p.icrc_computed;
    }
    if (explain) {
        Json list = Json::array();
        for (const Explanation& e : explain_frame(d)) {
            list.push_back({{"header", e.header}, {"text", e.text}});
        }
        j["explain"] = std::move(list);
    }
    return j;
}

} // namespace droce::trace
