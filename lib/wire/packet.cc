/* SPDX-License-Identifier: BSD-3-Clause */
#include "packet.h"

#include <bit>
#include <cstring>
#include <type_traits>

#include "icrc.h"

namespace droce::wire {

namespace {

constexpr std::string_view kRejectNames[] = {
#define DROCE_REJECT_NAME(name, text) #name,
    DROCE_REJECT_REASONS(DROCE_REJECT_NAME)
#undef DROCE_REJECT_NAME
};
constexpr std::string_view kRejectTexts[] = {
#define DROCE_REJECT_TEXT(name, text) text,
    DROCE_REJECT_REASONS(DROCE_REJECT_TEXT)
#undef DROCE_REJECT_TEXT
};

template <typename T>
const T* header_at(std::span<const std::uint8_t> f, std::size_t off) noexcept {
    // Headers are byte arrays (alignment 1), so viewing the buffer through them is well defined.
    return reinterpret_cast<const T*>(f.data() + off);
}

std::uint32_t ones_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum) noexcept {
    for (std::size_t i = 0; i + 1 < n; i += 2)
        sum += static_cast<std::uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1) sum += static_cast<std::uint32_t>(p[n - 1] << 8);
    return sum;
}

std::uint16_t fold(std::uint32_t sum) noexcept {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

} // namespace

std::string_view to_string(RejectReason r) noexcept {
    auto i = static_cast<std::size_t>(r);
    return i < kNumRejectReasons ? kRejectNames[i] : std::string_view("invalid");
}

std::string_view describe(RejectReason r) noexcept {
    auto i = static_cast<std::size_t>(r);
    return i < kNumRejectReasons ? kRejectTexts[i] : std::string_view("invalid");
}

std::uint16_t ipv4_header_checksum(const void* hdr, unsigned len) noexcept {
    // Every frame built pays this: 32-bit loads in memory order instead of 16-bit big-endian
    // words. The one's-complement sum does not depend on byte order (RFC 1071 section 2(B)): the
    // sum of the header's words loaded in host order, folded, is the network-order sum,
    // byte-swapped on a little-endian host.
    const auto* p = static_cast<const std::uint8_t*>(hdr);
    std::uint64_t le = 0;
    unsigned i = 0;
    for (; i + 4 <= len; i += 4) {
        std::uint32_t w;
        std::memcpy(&w, p + i, sizeof w);
        le += w;
    }
    le = (le & 0xffffffffu) + (le >> 32);
    le = (le & 0xffffu) + (le >> 16);
    le = (le & 0xffffu) + (le >> 16);
    le = (le & 0xffffu) + (le >> 16);
    auto words = static_cast<std::uint16_t>(le);
    if constexpr (std::endian::native == std::endian::little)
        words = static_cast<std::uint16_t>(words << 8 | words >> 8);
    return fold(ones_sum(p + i, len - i, words));
}

const char* aeth_kind_name(AethKind kind) noexcept {
    switch (kind) {
    case AethKind::ack:
        return "ACK";
    case AethKind::rnr_nak:
        return "RNR NAK";
    case AethKind::nak:
        return "NAK";
    case AethKind::reserved:
        break;
    }
    return "reserved";
}

const char* nak_code_name(std::uint8_t code) noexcept {
    switch (static_cast<NakCode>(code)) {
#define DROCE_NAK_X(name, value)                                                                   \
    case NakCode::name:                                                                            \
        return #name;
        DROCE_NAK_CODES(DROCE_NAK_X)
#undef DROCE_NAK_X
    }
    return "reserved";
}

namespace {
/** Offset of the UDP payload (the BTH) of a frame names_roce_port() accepts, else 0. */
std::size_t roce_bth_offset(std::span<const std::uint8_t> f) noexcept {
    std::size_t off = sizeof(EthHdr);
    if (f.size() < off) return 0;
    std::uint16_t et = header_at<EthHdr>(f, 0)->ether_type.get();
    if (et == kEtherTypeVlan) {
        if (f.size() < off + sizeof(VlanTag)) return 0;
        et = header_at<VlanTag>(f, off)->ether_type.get();
        off += sizeof(VlanTag);
    }
    if (et == kEtherTypeIpv4) {
        if (f.size() < off + sizeof(Ipv4Hdr)) return 0;
        const auto* ip = header_at<Ipv4Hdr>(f, off);
        if (ip->version() != 4 || ip->protocol != kIpProtoUdp ||
            ip->header_length() < sizeof(Ipv4Hdr))
            return 0;
        off += ip->header_length();
    } else if (et == kEtherTypeIpv6) {
        if (f.size() < off + sizeof(Ipv6Hdr)) return 0;
        const auto* ip = header_at<Ipv6Hdr>(f, off);
        if (ip->version() != 6 || ip->next_header != kIpProtoUdp) return 0;
        off += sizeof(Ipv6Hdr);
    } else {
        return 0;
    }
    if (f.size() < off + sizeof(UdpHdr) || header_at<UdpHdr>(f, off)->dst_port.get() != kRoceV2Port)
        return 0;
    return off + sizeof(UdpHdr);
}
} // namespace

bool names_roce_port(std::span<const std::uint8_t> f) noexcept {
    return roce_bth_offset(f) != 0;
}

std::uint32_t peek_dest_qp(std::span<const std::uint8_t> f) noexcept {
    const std::size_t off = roce_bth_offset(f);
    if (off == 0 || f.size() < off + sizeof(Bth)) return kNoDestQp;
    return header_at<Bth>(f, off)->dest_qp();
}

RejectReason parse_frame(std::span<const std::uint8_t> f, ParsedFrame& out,
                         ParseOptions opts) noexcept {
    // A copy of a constant empty frame, not `out = ParsedFrame{}`: GCC zeroes that with `rep stos`,
    // which was 60 % of this function's own time (perf, bench/engine); the copy is a dozen vector
    // stores.
    static_assert(std::is_trivially_copyable_v<ParsedFrame>);
    static constexpr ParsedFrame kEmpty{};
    std::memcpy(static_cast<void*>(&out), &kEmpty, sizeof out);
    out.frame = f;
    std::size_t off = sizeof(EthHdr);
    if (f.size() < off) return RejectReason::too_short;
    out.eth = header_at<EthHdr>(f, 0);
    std::uint16_t et = out.eth->ether_type.get();
    if (et == kEtherTypeVlan) {
        if (f.size() < off + sizeof(VlanTag)) return RejectReason::too_short;
        out.vlan = header_at<VlanTag>(f, off);
        et = out.vlan->ether_type.get();
        off += sizeof(VlanTag);
    }
    out.ether_type = et;
    out.l3_offset = static_cast<std::uint16_t>(off);

    std::size_t l3_end; // one past the last byte the IP header says belongs to the packet
    if (et == kEtherTypeIpv4) {
        if (f.size() < off + sizeof(Ipv4Hdr)) return RejectReason::too_short;
        const auto* ip = header_at<Ipv4Hdr>(f, off);
        out.ipv4 = ip;
        if (ip->version() != 4) return RejectReason::bad_ip_version;
        const std::size_t ihl = ip->header_length();
        const std::size_t total = ip->total_length.get();
        if (ihl < sizeof(Ipv4Hdr) || total < ihl || off + total > f.size())
            return RejectReason::bad_ip_length;
        if ((ip->flags_frag.get() & 0x3fff) != 0) return RejectReason::ip_fragment;
        if (ip->protocol != kIpProtoUdp) return RejectReason::not_udp;
        l3_end = off + total;
        off += ihl;
    } else if (et == kEtherTypeIpv6) {
        if (f.size() < off + sizeof(Ipv6Hdr)) return RejectReason::too_short;
        const auto* ip = header_at<Ipv6Hdr>(f, off);
        out.ipv6 = ip;
        if (ip->version() != 6) return RejectReason::bad_ip_version;
        l3_end = off + sizeof(Ipv6Hdr) + ip->payload_length.get();
        if (l3_end > f.size()) return RejectReason::bad_ip_length;
        if (ip->next_header != kIpProtoUdp) return RejectReason::not_udp;
        off += sizeof(Ipv6Hdr);
    } else {
        return RejectReason::not_ip;
    }

    if (l3_end < off + sizeof(UdpHdr)) return RejectReason::too_short;
    out.udp = header_at<UdpHdr>(f, off);
    if (out.udp->dst_port.get() != kRoceV2Port) return RejectReason::not_roce_port;
    if (out.udp->length.get() != l3_end - off) return RejectReason::bad_udp_length;
    off += sizeof(UdpHdr);

    if (l3_end < off + sizeof(Bth) + kIcrcSize) return RejectReason::too_short;
    out.bth = header_at<Bth>(f, off);
    if (out.bth->tver() != kBthTver) return RejectReason::bad_bth_version;
    const OpcodeInfo& info = kOpcodeTable[out.bth->opcode_byte];
    if (!info.known) return RejectReason::unknown_opcode;
    out.info = &info;
    off += sizeof(Bth);

    const std::size_t icrc_off = l3_end - kIcrcSize;
    if (icrc_off < off + info.ext_length) return RejectReason::length_mismatch;
    // Extension headers in IBTA order (table 39 / §9.2.1).
    auto take = [&]<typename T>(const T*& p, OpFlags flag) {
        if (info.is(flag)) {
            p = header_at<T>(f, off);
            off += sizeof(T);
        }
    };
    take(out.deth, OpFlags::deth);
    take(out.reth, OpFlags::reth);
    if (info.is(OpFlags::mdeth) || info.is(OpFlags::seth) || info.is(OpFlags::neth) ||
        info.is(OpFlags::peth) || info.is(OpFlags::epeth)) {
        // One MRC header per opcode; its length is the table's minus the other headers'.
        out.mrc_ext = f.data() + off;
        const std::uint8_t mrc_len =
            info.ext_length - (info.is(OpFlags::reth) ? 16 : 0) - (info.is(OpFlags::immdt) ? 4 : 0);
        off += mrc_len;
    }
    take(out.atomic_eth, OpFlags::atomic_eth);
    take(out.aeth, OpFlags::aeth);
    take(out.atomic_ack_eth, OpFlags::atomic_ack_eth);
    take(out.immdt, OpFlags::immdt);
    take(out.ieth, OpFlags::ieth);
    take(out.cnp, OpFlags::cnp);

    const std::size_t padded = icrc_off - off;
    const unsigned pad = out.bth->pad_count();
    out.pad = static_cast<std::uint8_t>(pad);
    if (!info.is(OpFlags::payload) && padded != 0) return RejectReason::length_mismatch;
    if (pad > padded || (padded & 3u) != 0) return RejectReason::pad_mismatch;
    out.payload = f.subspan(off, padded - pad);
    out.icrc_wire = load_icrc(f.data() + icrc_off);

    if (opts.verify_icrc) {
        out.icrc_checked = true;
        out.icrc_computed =
            icrc_compute(f.subspan(out.l3_offset, icrc_off - out.l3_offset), out.ipv6 != nullptr);
        if (out.icrc_computed != out.icrc_wire) return RejectReason::bad_icrc;
    }
    return RejectReason::ok;
}

namespace {

/** Where write_headers() put things, for the payload, pad, ICRC and IPv6 UDP checksum that follow.
 */
struct HeaderLayout {
    std::size_t total = 0;   ///< whole frame, ICRC included
    std::size_t l3_off = 0;  ///< IP header
    std::size_t udp_off = 0; ///< UDP header
    std::size_t udp_len = 0; ///< UDP length (header to ICRC)
    std::size_t end = 0;     ///< one past the last extension header: where the payload starts
    unsigned pad = 0;
};

/** Writes the SETH / NETH / PETH / EPETH of @p info's opcode from @p c (null: zeroes) at @p out.
 * @return its length. */
std::size_t write_mrc_ctl(const OpcodeInfo& info, const MrcCtlFields* c,
                          std::uint8_t* out) noexcept {
    static constexpr MrcCtlFields kZero{};
    if (c == nullptr) c = &kZero;
    if (info.is(OpFlags::seth)) {
        auto* h = reinterpret_cast<Seth*>(out);
        h->version = kMrcVersion;
        h->flags = c->flags;
        h->path.set(c->path);
        h->cum_psn.set(c->cum_psn & Psn::kMask);
        h->sack_base.set(c->sack_base & Psn::kMask);
        h->mpr_dest = c->mpr_dest;
        h->port_mask = c->port_mask;
        h->reserved.set(0);
        for (std::size_t i = 0; i < kSackBits / 64; ++i)
            h->bitmap[i].set(c->bitmap[i]);
        return sizeof(Seth);
    }
    if (info.is(OpFlags::neth)) {
        auto* h = reinterpret_cast<Neth*>(out);
        h->version = kMrcVersion;
        h->reason = c->reason;
        h->path.set(c->path);
        h->psn.set(c->nack_psn & Psn::kMask);
        h->cum_psn.set(c->cum_psn & Psn::kMask);
        return sizeof(Neth);
    }
    if (info.is(OpFlags::peth)) {
        auto* h = reinterpret_cast<Peth*>(out);
        h->version = kMrcVersion;
        h->reserved = 0;
        h->path.set(c->path);
        h->seq.set(c->seq);
        h->timestamp_ns.set(c->timestamp_ns);
        return sizeof(Peth);
    }
    auto* h = reinterpret_cast<Epeth*>(out);
    h->version = kMrcVersion;
    h->op = c->op;
    h->port_mask = c->port_mask;
    h->reserved = 0;
    h->seq.set(c->seq);
    return sizeof(Epeth);
}

/**
 * Checks and writes Ethernet .. the last extension header for a payload of @p payload_len bytes at
 * @p p, which must hold @p max bytes. @return false when build_frame() would return 0 (with the
 * headers alone having to fit in @p max).
 */
bool write_headers(const PathHeaders& path, const PacketFields& pf, std::size_t payload_len,
                   std::uint8_t* p, std::size_t max, bool whole_frame, HeaderLayout& lay) noexcept {
    const OpcodeInfo& info = opcode_info(pf.opcode);
    if (!info.known) return false;
    if (payload_len != 0 && !info.is(OpFlags::payload)) return false; // parse_frame would reject it
    const std::size_t total = frame_length(path, pf.opcode, payload_len);
    const std::size_t l3_off = sizeof(EthHdr) + (path.has_vlan ? sizeof(VlanTag) : 0);
    const std::size_t ip_len = path.ipv6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr);
    const std::size_t hdr_len = path_header_length(path) + sizeof(Bth) + info.ext_length;
    if ((whole_frame ? total : hdr_len) > max || total - l3_off > 0xffff) return false;

    auto* eth = reinterpret_cast<EthHdr*>(p);
    eth->dst = path.dst_mac;
    eth->src = path.src_mac;
    std::size_t off = sizeof(EthHdr);
    const std::uint16_t l3_type = path.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4;
    if (path.has_vlan) {
        eth->ether_type.set(kEtherTypeVlan);
        auto* tag = reinterpret_cast<VlanTag*>(p + off);
        tag->tci.set(path.vlan_tci);
        tag->ether_type.set(l3_type);
        off += sizeof(VlanTag);
    } else {
        eth->ether_type.set(l3_type);
    }

    const std::size_t l3_total = total - l3_off;
    const std::size_t udp_len = l3_total - ip_len;
    if (path.ipv6) {
        auto* ip = reinterpret_cast<Ipv6Hdr*>(p + off);
        ip->set_vtc_flow(path.tos, path.flow_label);
        ip->payload_length.set(udp_len);
        ip->next_header = kIpProtoUdp;
        ip->hop_limit = path.ttl;
        ip->src = path.src_ip;
        ip->dst = path.dst_ip;
    } else {
        auto* ip = reinterpret_cast<Ipv4Hdr*>(p + off);
        ip->version_ihl = 0x45;
        ip->tos = path.tos;
        ip->total_length.set(l3_total);
        ip->id.set(0);
        ip->flags_frag.set(kIpv4DontFragment);
        ip->ttl = path.ttl;
        ip->protocol = kIpProtoUdp;
        Ipv4Addr src, dst;
        std::memcpy(src.data(), path.src_ip.data() + 12, 4);
        std::memcpy(dst.data(), path.dst_ip.data() + 12, 4);
        ip->src = src;
        ip->dst = dst;
        ip->checksum.set(ipv4_header_checksum_of(path.tos, static_cast<std::uint16_t>(l3_total), 0,
                                                 kIpv4DontFragment, path.ttl, kIpProtoUdp, src,
                                                 dst));
    }
    off += ip_len;

    auto* udp = reinterpret_cast<UdpHdr*>(p + off);
    udp->src_port.set(path.udp_sport);
    udp->dst_port.set(kRoceV2Port);
    udp->length.set(udp_len);
    udp->checksum.set(0);
    off += sizeof(UdpHdr);

    const std::size_t udp_off = off - sizeof(UdpHdr);
    const unsigned pad = static_cast<unsigned>(-payload_len & 3u);
    auto* bth = reinterpret_cast<Bth*>(p + off);
    bth->set_opcode(pf.opcode);
    bth->set_flags(pf.solicited, pf.mig_req, pad, kBthTver);
    bth->pkey.set(pf.pkey);
    bth->set_fecn_becn(pf.fecn, pf.becn);
    bth->set_dest_qp(pf.dest_qp);
    bth->set_ack_req(pf.ack_req);
    bth->set_psn(pf.psn);
    off += sizeof(Bth);

    if (info.is(OpFlags::deth)) {
        auto* h = reinterpret_cast<Deth*>(p + off);
        h->qkey.set(pf.qkey);
        h->reserved = 0;
        h->set_src_qp(pf.src_qp);
        off += sizeof(Deth);
    }
    if (info.is(OpFlags::reth)) {
        auto* h = reinterpret_cast<Reth*>(p + off);
        h->va.set(pf.va);
        h->rkey.set(pf.rkey);
        h->dma_len.set(pf.dma_len);
        off += sizeof(Reth);
    }
    if (info.is(OpFlags::atomic_eth)) {
        auto* h = reinterpret_cast<AtomicEth*>(p + off);
        h->va.set(pf.va);
        h->rkey.set(pf.rkey);
        h->swap_add.set(pf.swap_add);
        h->compare.set(pf.compare);
        off += sizeof(AtomicEth);
    }
    if (info.is(OpFlags::aeth)) {
        auto* h = reinterpret_cast<Aeth*>(p + off);
        h->syndrome = pf.syndrome;
        h->set_msn(pf.msn);
        off += sizeof(Aeth);
    }
    if (info.is(OpFlags::atomic_ack_eth)) {
        reinterpret_cast<AtomicAckEth*>(p + off)->orig_rem_data.set(pf.orig_rem_data);
        off += sizeof(AtomicAckEth);
    }
    if (info.is(OpFlags::mdeth)) {
        auto* h = reinterpret_cast<Mdeth*>(p + off);
        h->version = kMrcVersion;
        h->flags = pf.mrc_flags;
        h->path.set(pf.mrc_path);
        h->msn.set(pf.mrc_msn);
        h->msg_offset.set(pf.mrc_msg_offset);
        h->msg_length.set(pf.mrc_msg_length);
        off += sizeof(Mdeth);
    }
    if (info.is(OpFlags::seth) || info.is(OpFlags::neth) || info.is(OpFlags::peth) ||
        info.is(OpFlags::epeth))
        off += write_mrc_ctl(info, pf.mrc_ctl, p + off);
    if (info.is(OpFlags::immdt)) {
        reinterpret_cast<ImmDt*>(p + off)->imm.set(pf.imm);
        off += sizeof(ImmDt);
    }
    if (info.is(OpFlags::ieth)) {
        reinterpret_cast<Ieth*>(p + off)->rkey.set(pf.inv_rkey);
        off += sizeof(Ieth);
    }
    if (info.is(OpFlags::cnp)) {
        std::memset(p + off, 0, sizeof(CnpBody));
        off += sizeof(CnpBody);
    }
    lay.total = total;
    lay.l3_off = l3_off;
    lay.udp_off = udp_off;
    lay.udp_len = udp_len;
    lay.end = off;
    lay.pad = pad;
    return true;
}

/** Adds @p n bytes to a ones-complement sum whose data so far had @p odd length (RFC 1071). */
std::uint32_t ones_sum_at(const std::uint8_t* p, std::size_t n, std::uint32_t sum,
                          bool& odd) noexcept {
    if (n == 0) return sum;
    if (odd) { // this byte is the low half of the 16-bit word begun before
        sum += p[0];
        ++p;
        --n;
    }
    sum = ones_sum(p, n, sum);
    odd = (n & 1) != 0;
    while (sum >> 24)
        sum = (sum & 0xffff) + (sum >> 16); // keep room: spans may add up to 64 KiB
    return sum;
}

/** Folds @p sum (pseudo-header and datagram) into @p udp's checksum; a zero result is sent as
 *  0xffff (RFC 768: zero means "no checksum"). */
void store_udp_checksum(UdpHdr* udp, std::uint32_t sum) noexcept {
    const std::uint16_t c = fold(sum);
    udp->checksum.set(c == 0 ? 0xffff : c);
}

/** Writes the UDP checksum of the IPv6 frame @p p: its pseudo-header (addresses, @p udp_len, next
 *  header) added to @p body_sum, the one's-complement sum of the whole UDP datagram. */
void set_udp6_checksum(std::uint8_t* p, std::size_t l3_off, std::size_t udp_off,
                       std::size_t udp_len, std::uint32_t body_sum) noexcept {
    const auto* ip = reinterpret_cast<const Ipv6Hdr*>(p + l3_off);
    std::uint32_t sum = ones_sum(ip->src.data(), 32, body_sum);
    sum += static_cast<std::uint32_t>(udp_len >> 16) + static_cast<std::uint32_t>(udp_len & 0xffff);
    sum += kIpProtoUdp;
    store_udp_checksum(reinterpret_cast<UdpHdr*>(p + udp_off), sum);
}

} // namespace

std::size_t build_frame_deferred(const PathHeaders& path, const PacketFields& pf,
                                 std::span<const std::span<const std::uint8_t>> payload,
                                 std::span<std::uint8_t> out, FrameFinish& finish) noexcept {
    std::size_t payload_len = 0;
    for (auto s : payload)
        payload_len += s.size();
    HeaderLayout lay;
    std::uint8_t* p = out.data();
    if (!write_headers(path, pf, payload_len, p, out.size(), true, lay)) return 0;
    std::size_t off = lay.end;
    for (auto s : payload) {
        if (!s.empty()) std::memcpy(p + off, s.data(), s.size());
        off += s.size();
    }
    // Four zero bytes whatever the pad (0 - 3): the frame has the pad and the 4-byte ICRC after
    // the payload, and finish_frame() stores the ICRC over what lies beyond the pad. A constant
    // size is one store; memset of the pad's length was a libc call per packet.
    std::memset(p + off, 0, kIcrcSize);
    off += lay.pad;
    finish.l3_off = static_cast<std::uint32_t>(lay.l3_off);
    finish.icrc_off = static_cast<std::uint32_t>(off);
    finish.udp_off = static_cast<std::uint32_t>(lay.udp_off);
    finish.udp_len = static_cast<std::uint32_t>(lay.udp_len);
    finish.ipv6 = path.ipv6;
    return off + kIcrcSize;
}

void finish_frame(std::uint8_t* frame, const FrameFinish& f) noexcept {
    store_icrc(frame + f.icrc_off,
               icrc_compute(std::span<const std::uint8_t>(frame + f.l3_off, f.icrc_off - f.l3_off),
                            f.ipv6));
    if (f.ipv6)
        set_udp6_checksum(frame, f.l3_off, f.udp_off, f.udp_len,
                          ones_sum(frame + f.udp_off, f.udp_len, 0));
}

std::size_t build_frame(const PathHeaders& path, const PacketFields& pf,
                        std::span<const std::span<const std::uint8_t>> payload,
                        std::span<std::uint8_t> out) noexcept {
    FrameFinish finish;
    const std::size_t len = build_frame_deferred(path, pf, payload, out, finish);
    if (len != 0) finish_frame(out.data(), finish);
    return len;
}

bool build_frame_split(const PathHeaders& path, const PacketFields& pf,
                       std::span<const std::span<const std::uint8_t>> payload,
                       std::span<std::uint8_t> out, SplitFrame& sf) noexcept {
    std::size_t payload_len = 0;
    for (auto s : payload)
        payload_len += s.size();
    HeaderLayout lay;
    std::uint8_t* p = out.data();
    if (!write_headers(path, pf, payload_len, p, out.size(), false, lay)) return false;
    sf.header_len = lay.end;
    sf.payload_len = payload_len;
    // ICRC: the headers, then each span, then the pad, as one CRC continued across the buffers.
    std::uint32_t crc = icrc_compute(
        std::span<const std::uint8_t>(p + lay.l3_off, lay.end - lay.l3_off), path.ipv6);
    for (auto s : payload)
        crc = icrc_continue(crc, s);
    sf.trailer = {};
    crc = icrc_continue(crc, std::span<const std::uint8_t>(sf.trailer.data(), lay.pad));
    store_icrc(sf.trailer.data() + lay.pad, crc);
    sf.trailer_len = static_cast<std::uint8_t>(lay.pad + kIcrcSize);
    if (path.ipv6) {
        bool odd = false;
        std::uint32_t sum = ones_sum_at(p + lay.udp_off, lay.end - lay.udp_off, 0, odd);
        for (auto s : payload)
            sum = ones_sum_at(s.data(), s.size(), sum, odd);
        sum = ones_sum_at(sf.trailer.data(), sf.trailer_len, sum, odd);
        set_udp6_checksum(p, lay.l3_off, lay.udp_off, lay.udp_len, sum);
    }
    return true;
}

bool set_udp_checksum(std::span<std::uint8_t> frame, std::size_t l3_off, std::size_t udp_off,
                      std::size_t udp_len, bool ipv6) noexcept {
    const std::size_t ip_hdr = ipv6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr);
    if (l3_off > frame.size() || ip_hdr > frame.size() - l3_off || udp_off < l3_off + ip_hdr ||
        udp_off > frame.size() || udp_len < sizeof(UdpHdr) || udp_len > 0xffff ||
        udp_len > frame.size() - udp_off)
        return false;
    std::uint8_t* p = frame.data();
    auto* udp = reinterpret_cast<UdpHdr*>(p + udp_off);
    udp->checksum.set(0);
    const std::uint32_t body = ones_sum(p + udp_off, udp_len, 0);
    if (ipv6) {
        set_udp6_checksum(p, l3_off, udp_off, udp_len, body);
        return true;
    }
    const auto* ip = reinterpret_cast<const Ipv4Hdr*>(p + l3_off);
    std::uint32_t sum = ones_sum(ip->src.data(), 8, body); // source and destination addresses
    sum += static_cast<std::uint32_t>(udp_len) + kIpProtoUdp;
    store_udp_checksum(udp, sum);
    return true;
}

} // namespace droce::wire
