/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Helpers shared by the lib/wire tests (unit, asan and interop suites): reading pcap files,
 * building frames with recognisable field values, and independent oracles (an ICRC computed with
 * zlib from the rule in IBTA Annex A17.3.3, RFC 1071 checksums) that do not call the code under
 * test.
 *
 * Header-only so that the AddressSanitizer build of a test compiles it with the test's own flags.
 */
#pragma once

#include <pcap/pcap.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "wire/packet.h"

namespace droce::wire {
/** Lets GoogleTest print a RejectReason by name ("bad_icrc") instead of as a byte. */
inline void PrintTo(RejectReason r, std::ostream* os) {
    *os << to_string(r);
}
} // namespace droce::wire

namespace droce::wire::test {

using Bytes = std::vector<std::uint8_t>;

/** Directory of the real captures (tests/data/captures): $DROCE_CAPTURES_DIR, set by
 * tests/unit/meson.build. */
inline std::string captures_dir() {
    const char* d = std::getenv("DROCE_CAPTURES_DIR");
    return d ? std::string(d) : std::string();
}

/** The records of one pcap file, or an error text. */
struct PcapFile {
    int linktype = -1;
    std::vector<Bytes> frames;
    std::size_t truncated = 0; ///< records whose caplen is below their wire length
    std::string error;
};

inline PcapFile read_pcap(const std::string& path) {
    PcapFile out;
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    pcap_t* p = pcap_open_offline(path.c_str(), errbuf);
    if (!p) {
        out.error = errbuf;
        return out;
    }
    out.linktype = pcap_datalink(p);
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    int rc;
    while ((rc = pcap_next_ex(p, &hdr, &data)) == 1) {
        out.frames.emplace_back(data, data + hdr->caplen);
        if (hdr->caplen < hdr->len) ++out.truncated;
    }
    if (rc == PCAP_ERROR) out.error = pcap_geterr(p);
    pcap_close(p);
    return out;
}

/** Writes @p frames as an Ethernet pcap file; returns an error text or "". */
inline std::string write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
    pcap_t* p = pcap_open_dead(DLT_EN10MB, 65535);
    if (!p) return "pcap_open_dead failed";
    pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
    if (!d) {
        std::string err = pcap_geterr(p);
        pcap_close(p);
        return err;
    }
    long usec = 0;
    for (const Bytes& f : frames) {
        pcap_pkthdr hdr{};
        hdr.ts.tv_sec = 1700000000;
        hdr.ts.tv_usec = usec++;
        hdr.caplen = hdr.len = static_cast<bpf_u_int32>(f.size());
        pcap_dump(reinterpret_cast<u_char*>(d), &hdr, f.data());
    }
    pcap_dump_close(d);
    pcap_close(p);
    return {};
}

/** A copy of @p bytes in a heap block of exactly that size, so AddressSanitizer sees any overread.
 */
class ExactBuffer {
  public:
    explicit ExactBuffer(std::span<const std::uint8_t> bytes)
        : size_(bytes.size()), data_(new std::uint8_t[bytes.size()]) {
        std::copy(bytes.begin(), bytes.end(), data_.get());
    }
    [[nodiscard]] std::span<const std::uint8_t> span() const { return {data_.get(), size_}; }

  private:
    std::size_t size_;
    std::unique_ptr<std::uint8_t[]> data_;
};

/** parse_frame() of a private exact-size copy; the copy lives as long as this object. */
struct Parsed {
    ExactBuffer copy;
    ParsedFrame frame;
    RejectReason reason = RejectReason::ok;

    /** Offset of @p hdr (a pointer into the copy) from the first byte of the frame. */
    [[nodiscard]] std::size_t offset_of(const void* hdr) const {
        return static_cast<std::size_t>(static_cast<const std::uint8_t*>(hdr) - copy.span().data());
    }
};

inline Parsed parse_copy(std::span<const std::uint8_t> bytes, ParseOptions opts = {}) {
    Parsed r{ExactBuffer(bytes), {}, RejectReason::ok};
    r.reason = parse_frame(r.copy.span(), r.frame, opts);
    return r;
}

/** The verdict of parse_frame() on an exact-size copy of @p bytes. */
inline RejectReason parse_exact(std::span<const std::uint8_t> bytes, ParseOptions opts = {}) {
    return parse_copy(bytes, opts).reason;
}

// ---------------------------------------------------------------------------------------------
// Frames with recognisable contents.

/** An addressing with every field non-zero and distinct, IPv4 or IPv6, with or without 802.1Q. */
inline PathHeaders make_path(bool ipv6, bool vlan) {
    PathHeaders p;
    p.src_mac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
    p.dst_mac = {0x02, 0x66, 0x77, 0x88, 0x99, 0xaa};
    p.has_vlan = vlan;
    p.vlan_tci = 0xa00d; // PCP 5, VID 13
    p.ipv6 = ipv6;
    if (ipv6) {
        p.src_ip = {0xfd, 0x00, 0xd0, 0xce, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x0a};
        p.dst_ip = {0xfd, 0x00, 0xd0, 0xce, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0x0b};
    } else {
        p.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 1};
        p.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 2};
    }
    p.tos = 0x6a; // DSCP 26, ECT(0)
    p.ttl = 37;
    p.flow_label = 0xabcde; // IPv6 only
    p.udp_sport = 0xc132;
    return p;
}

/**
 * Field values for @p op, each with its top bit set where the field has one, so a truncated or
 * shifted field shows. @p flags_on sets every single-bit flag; @p salt varies the values.
 */
inline PacketFields make_fields(Opcode op, bool flags_on, std::uint32_t salt = 0) {
    PacketFields f;
    f.opcode = op;
    f.solicited = flags_on;
    f.mig_req = flags_on;
    f.pkey = static_cast<std::uint16_t>(0x8001 + salt);
    f.fecn = flags_on;
    f.becn = flags_on;
    f.dest_qp = 0xabcdef ^ salt;
    f.ack_req = flags_on;
    f.psn = Psn(0xfedcba + salt);
    f.qkey = 0x80010203u + salt;
    f.src_qp = 0x8a0b0c ^ salt;
    f.va = 0x8123456789abcdefull + salt;
    f.rkey = 0xdeadbeefu ^ salt;
    f.dma_len = 0x80000400u + salt;
    f.swap_add = 0x8877665544332211ull + salt;
    f.compare = 0xf0e0d0c0b0a09080ull + salt;
    f.syndrome = static_cast<std::uint8_t>(0x9f ^ salt); // kind 4 (reserved): every bit is carried
    f.msn = 0xfffffe ^ salt;
    f.orig_rem_data = 0x8000000000000001ull + salt;
    f.imm = 0x8badf00du ^ salt;
    f.inv_rkey = 0xc0ffee01u ^ salt;
    // MDETH (MRC data opcodes); the flags byte carries every bit, known or not
    f.mrc_flags = static_cast<std::uint8_t>(flags_on ? 0xff : (kMdethFirst | 0x80));
    f.mrc_path = static_cast<std::uint16_t>(0x8123 ^ salt);
    f.mrc_msn = 0x80706050u + salt;
    f.mrc_msg_offset = 0x81000000u + salt;
    f.mrc_msg_length = 0xfeedbeefu ^ salt;
    return f;
}

/**
 * Values for an MRC control header (SETH, NETH, PETH, EPETH), each with its top bit set where the
 * field has one and distinct per field; @p salt varies them. Point PacketFields::mrc_ctl at it.
 */
inline MrcCtlFields make_mrc_ctl(bool flags_on, std::uint32_t salt = 0) {
    MrcCtlFields c;
    c.flags = static_cast<std::uint8_t>(flags_on ? 0xff : 0x80);
    c.path = static_cast<std::uint16_t>(0x8765 ^ salt);
    c.cum_psn = 0xf00001 ^ salt;
    c.sack_base = 0xe00040 ^ salt;
    c.mpr_dest = static_cast<std::uint8_t>(0x90 ^ salt);
    c.port_mask = static_cast<std::uint8_t>(0xa5 ^ salt);
    for (std::size_t i = 0; i < std::size(c.bitmap); ++i)
        c.bitmap[i] = (0x8000000000000001ull | (0x0102030405060708ull << i)) ^ salt;
    c.reason = static_cast<std::uint8_t>(0x83 ^ salt);
    c.nack_psn = 0xd00002 ^ salt;
    c.seq = 0x89abcdefu ^ salt;
    c.timestamp_ns = 0x8877665544332211ull + salt;
    c.op = static_cast<std::uint8_t>(0x81 ^ salt);
    return c;
}

/** @p n bytes of a pattern that differs per position and per @p seed (never all zero). */
inline Bytes make_payload(std::size_t n, std::uint8_t seed = 0) {
    Bytes b(n);
    for (std::size_t i = 0; i < n; ++i)
        b[i] = static_cast<std::uint8_t>(i * 7 + seed + 1 + (i >> 8));
    return b;
}

/** build_frame() into a vector of the size it reports; empty if it refused. */
inline Bytes build(const PathHeaders& path, const PacketFields& fields,
                   std::span<const std::uint8_t> payload) {
    Bytes out(frame_length(path, fields.opcode, payload.size()) + 64, 0xee);
    std::size_t n = build_frame(path, fields, payload, out);
    out.resize(n);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Frame geometry, computed from the bytes (not from the parser).

struct Layout {
    std::size_t l3 = 0; ///< offset of the IP header
    bool ipv6 = false;
    std::size_t ip_hdr = 0; ///< IP header bytes
    std::size_t l4 = 0;     ///< offset of the UDP header
    std::size_t bth = 0;    ///< offset of the BTH
    std::size_t l3_end = 0; ///< one past the last byte the IP length covers
    std::size_t icrc = 0;   ///< offset of the ICRC
};

inline std::uint16_t rd16(std::span<const std::uint8_t> f, std::size_t off) {
    return static_cast<std::uint16_t>(f[off] << 8 | f[off + 1]);
}
inline void wr16(std::span<std::uint8_t> f, std::size_t off, std::size_t v) {
    f[off] = static_cast<std::uint8_t>(v >> 8);
    f[off + 1] = static_cast<std::uint8_t>(v);
}

/** Layout of a well-formed Ethernet [802.1Q] / IPv4|IPv6 / UDP / BTH frame. */
inline Layout layout_of(std::span<const std::uint8_t> f) {
    Layout l;
    l.l3 = 14;
    std::uint16_t et = rd16(f, 12);
    if (et == 0x8100) {
        et = rd16(f, 16);
        l.l3 = 18;
    }
    l.ipv6 = et == 0x86dd;
    if (l.ipv6) {
        l.ip_hdr = 40;
        l.l3_end = l.l3 + 40 + rd16(f, l.l3 + 4);
    } else {
        l.ip_hdr = (f[l.l3] & 0xfu) * 4u;
        l.l3_end = l.l3 + rd16(f, l.l3 + 2);
    }
    l.l4 = l.l3 + l.ip_hdr;
    l.bth = l.l4 + 8;
    l.icrc = l.l3_end - 4;
    return l;
}

/** Rewrites the IP and UDP lengths (and the IPv4 header checksum) for an IP packet of @p l3_len
 * bytes. */
inline void set_l3_length(Bytes& f, std::size_t l3_len) {
    const Layout l = layout_of(f);
    if (l.ipv6) {
        wr16(f, l.l3 + 4, l3_len - 40);
    } else {
        wr16(f, l.l3 + 2, l3_len);
        wr16(f, l.l3 + 10, 0);
        std::uint32_t sum = 0;
        for (std::size_t i = 0; i < l.ip_hdr; i += 2)
            sum += rd16(f, l.l3 + i);
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        wr16(f, l.l3 + 10, ~sum & 0xffff);
    }
    if (l3_len >= l.ip_hdr + 6) wr16(f, l.l4 + 4, l3_len - l.ip_hdr);
}

// ---------------------------------------------------------------------------------------------
// Independent oracles.

/**
 * ICRC of the packet in @p f (laid out by layout_of), by the rule of IBTA Annex A17.3.3 as the
 * captures README states it, computed with zlib: 8 × 0xff, the IP header with its variant fields
 * set to ones, UDP with checksum ones, BTH with byte 4 ones, then the rest up to the ICRC.
 */
inline std::uint32_t reference_icrc(std::span<const std::uint8_t> f) {
    const Layout l = layout_of(f);
    Bytes covered(f.begin() + static_cast<std::ptrdiff_t>(l.l3),
                  f.begin() + static_cast<std::ptrdiff_t>(l.icrc));
    if (l.ipv6) {
        covered[0] |= 0x0f;
        covered[1] = covered[2] = covered[3] = 0xff;
        covered[7] = 0xff;
    } else {
        covered[1] = 0xff;
        covered[8] = 0xff;
        covered[10] = covered[11] = 0xff;
    }
    covered[l.ip_hdr + 6] = covered[l.ip_hdr + 7] = 0xff;
    covered[l.ip_hdr + 8 + 4] = 0xff;
    const std::uint8_t lrh[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, lrh, sizeof lrh);
    crc = crc32(crc, covered.data(), static_cast<uInt>(covered.size()));
    return static_cast<std::uint32_t>(crc);
}

/** The ICRC stored in the frame (least significant byte first). */
inline std::uint32_t wire_icrc(std::span<const std::uint8_t> f) {
    const Layout l = layout_of(f);
    return static_cast<std::uint32_t>(f[l.icrc]) | static_cast<std::uint32_t>(f[l.icrc + 1]) << 8 |
           static_cast<std::uint32_t>(f[l.icrc + 2]) << 16 |
           static_cast<std::uint32_t>(f[l.icrc + 3]) << 24;
}

/** Recomputes and stores the ICRC with the reference routine (for frames mutated on purpose). */
inline void refresh_icrc(Bytes& f) {
    const Layout l = layout_of(f);
    const std::uint32_t c = reference_icrc(f);
    for (int i = 0; i < 4; ++i)
        f[l.icrc + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(c >> (8 * i));
}

/** RFC 1071 one's complement sum of 16-bit big-endian words (odd tail padded with zero). */
inline std::uint32_t ones_complement_sum(std::span<const std::uint8_t> b, std::uint32_t sum = 0) {
    for (std::size_t i = 0; i < b.size(); i += 2)
        sum += static_cast<std::uint32_t>(b[i] << 8 | (i + 1 < b.size() ? b[i + 1] : 0));
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return sum;
}

/** True when the IPv4 header at @p l3 sums to 0xffff (RFC 1071 verification). */
inline bool ipv4_checksum_valid(std::span<const std::uint8_t> f, std::size_t l3) {
    const std::size_t ihl = (f[l3] & 0xfu) * 4u;
    return ones_complement_sum(f.subspan(l3, ihl)) == 0xffff;
}

/** True when the UDP checksum of the IPv6 packet at @p l3 verifies (RFC 8200 §8.1 pseudo-header).
 */
inline bool ipv6_udp_checksum_valid(std::span<const std::uint8_t> f, std::size_t l3) {
    const std::size_t udp_len = rd16(f, l3 + 4); // IPv6 payload length: UDP is the only header
    if (rd16(f, l3 + 40 + 6) == 0) return false; // zero is forbidden over IPv6
    std::uint32_t sum = ones_complement_sum(f.subspan(l3 + 8, 32));
    sum += static_cast<std::uint32_t>(udp_len);
    sum += 17;
    sum = ones_complement_sum(f.subspan(l3 + 40, udp_len), sum);
    return sum == 0xffff;
}

} // namespace droce::wire::test
