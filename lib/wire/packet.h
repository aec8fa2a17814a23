/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Parsing and building whole RoCEv2 frames: Ethernet [802.1Q] / IPv4 or IPv6 / UDP 4791 / BTH /
 * extension headers / payload / pad / ICRC (IBTA Vol 1 ch. 9, Annex A17).
 *
 * Parsing works on a read-only view and never reads outside it. The checks run in a fixed order:
 * lengths, IP, UDP, BTH version, opcode table, extension and pad lengths,
 * ICRC; the first failure is the reject reason. Nothing here allocates, throws or locks.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/counters.h"

#include "aeth.h"
#include "atomic_ack_eth.h"
#include "atomic_eth.h"
#include "bth.h"
#include "cnp.h"
#include "deth.h"
#include "eth.h"
#include "ieth.h"
#include "immdt.h"
#include "ipv4.h"
#include "ipv6.h"
#include "mrc.h"
#include "opcode.h"
#include "reth.h"
#include "udp.h"

namespace droce::wire {

/** Bytes of the ICRC trailer. */
inline constexpr std::size_t kIcrcSize = 4;

// clang-format off
/** X(name, description) of every outcome of parse_frame(); the first, ok, is not a reject. */
#define DROCE_REJECT_REASONS(X)                                                                    \
    X(ok,              "accepted")                                                                 \
    X(too_short,       "frame ends before a header it announces")                                  \
    X(not_ip,          "EtherType is neither IPv4 nor IPv6")                                       \
    X(bad_ip_version,  "IP version field disagrees with the EtherType")                            \
    X(bad_ip_length,   "IP header or total length is impossible or exceeds the frame")             \
    X(ip_fragment,     "IPv4 fragment; RoCEv2 is never fragmented")                                \
    X(not_udp,         "IP protocol / next header is not UDP")                                     \
    X(not_roce_port,   "UDP destination port is not 4791")                                         \
    X(bad_udp_length,  "UDP length disagrees with the IP length")                                  \
    X(bad_bth_version, "BTH TVer is not 0")                                                        \
    X(unknown_opcode,  "BTH opcode is not in the opcode table")                                    \
    X(length_mismatch, "packet too short for its extension headers, or payload on an opcode without one") \
    X(pad_mismatch,    "pad count exceeds the payload, or payload plus pad is not a multiple of 4") \
    X(bad_icrc,        "ICRC does not match the packet")
// clang-format on

enum class RejectReason : std::uint8_t {
#define DROCE_REJECT_ENUM(name, text) name,
    DROCE_REJECT_REASONS(DROCE_REJECT_ENUM)
#undef DROCE_REJECT_ENUM
};

inline constexpr std::size_t kNumRejectReasons = 0
#define DROCE_REJECT_COUNT(name, text) +1
    DROCE_REJECT_REASONS(DROCE_REJECT_COUNT)
#undef DROCE_REJECT_COUNT
    ;

/** Enumerator name of @p r, e.g. "bad_icrc". */
[[nodiscard]] std::string_view to_string(RejectReason r) noexcept;
/** One-sentence explanation of @p r. */
[[nodiscard]] std::string_view describe(RejectReason r) noexcept;

/** Enumerator names of RejectReason, indexed by value (for counter registries). */
inline constexpr std::string_view kRejectReasonNames[kNumRejectReasons] = {
#define DROCE_REJECT_NAME(name, text) #name,
    DROCE_REJECT_REASONS(DROCE_REJECT_NAME)
#undef DROCE_REJECT_NAME
};

/** Per-reason counters for frames seen by a receive path: one writer (its engine thread), any
 *  reader (common/counters.h). */
struct ParseCounters : CounterBlock<RejectReason, kNumRejectReasons> {
    void count(RejectReason r) noexcept { inc(r); }
};

/**
 * A parsed frame: pointers into the caller's buffer, valid while that buffer lives.
 * Header pointers are null when the header is absent. Fields are filled as far as parsing got, so a
 * frame rejected for bad_icrc still shows all its headers (droce-trace prints them).
 */
struct ParsedFrame {
    std::span<const std::uint8_t> frame;
    const EthHdr* eth = nullptr;
    const VlanTag* vlan = nullptr;
    const Ipv4Hdr* ipv4 = nullptr;
    const Ipv6Hdr* ipv6 = nullptr;
    const UdpHdr* udp = nullptr;
    const Bth* bth = nullptr;
    const Deth* deth = nullptr;
    const Reth* reth = nullptr;
    const AtomicEth* atomic_eth = nullptr;
    const Aeth* aeth = nullptr;
    const AtomicAckEth* atomic_ack_eth = nullptr;
    const ImmDt* immdt = nullptr;
    const Ieth* ieth = nullptr;
    const CnpBody* cnp = nullptr;
    /** The MRC extension header (wire/mrc.h), whichever the opcode carries: read it through
     *  mdeth() / seth() / neth() / peth() / epeth(). */
    const std::uint8_t* mrc_ext = nullptr;
    const OpcodeInfo* info = nullptr;
    std::span<const std::uint8_t> payload; ///< payload bytes, pad excluded
    std::uint16_t ether_type = 0;          ///< the innermost EtherType (after any 802.1Q tag)
    std::uint16_t l3_offset = 0;           ///< byte offset of the IP header in the frame
    std::uint8_t pad = 0;                  ///< pad bytes between payload and ICRC (0..3)
    std::uint32_t icrc_wire = 0;           ///< the ICRC found in the frame
    std::uint32_t icrc_computed = 0;       ///< the ICRC droce computes for it (0 if not verified)
    bool icrc_checked = false;

    /** The MRC header of that kind, or null when the opcode carries none. */
    [[nodiscard]] const Mdeth* mdeth() const noexcept { return ext_as<Mdeth>(OpFlags::mdeth); }
    [[nodiscard]] const Seth* seth() const noexcept { return ext_as<Seth>(OpFlags::seth); }
    [[nodiscard]] const Neth* neth() const noexcept { return ext_as<Neth>(OpFlags::neth); }
    [[nodiscard]] const Peth* peth() const noexcept { return ext_as<Peth>(OpFlags::peth); }
    [[nodiscard]] const Epeth* epeth() const noexcept { return ext_as<Epeth>(OpFlags::epeth); }

  private:
    template <typename T>
    [[nodiscard]] const T* ext_as(OpFlags f) const noexcept {
        return mrc_ext && info && info->is(f) ? reinterpret_cast<const T*>(mrc_ext) : nullptr;
    }
};

struct ParseOptions {
    bool verify_icrc = true;
};

/**
 * Parses and checks one Ethernet frame.
 * @param frame the whole frame from the destination MAC; bytes past the IP length (Ethernet
 * padding) are ignored.
 * @param[out] out headers found; reset first.
 * @return RejectReason::ok, or the first rule the frame broke.
 * Thread safety: pure; reads only inside @p frame.
 */
[[nodiscard]] RejectReason parse_frame(std::span<const std::uint8_t> frame, ParsedFrame& out,
                                       ParseOptions opts = {}) noexcept;

/**
 * Whether @p frame names UDP port 4791 as its destination: an IPv4 or IPv6 frame (an 802.1Q tag
 * allowed) whose first IP header and UDP header are in the frame, however its IP or UDP lengths
 * disagree with it. For counting a frame parse_frame() rejected (cut short, say) as malformed
 * RoCE rather than as traffic of another protocol; it says nothing of the rest of the frame.
 * Thread safety: pure; reads only inside @p frame.
 */
[[nodiscard]] bool names_roce_port(std::span<const std::uint8_t> frame) noexcept;

/**
 * Writes the UDP checksum (RFC 768; IPv6: RFC 8200 8.1) of the @p udp_len-byte datagram at
 * @p udp_off (its header included) of the IPv4 (@p ipv6 false) or IPv6 packet whose header is at
 * @p l3_off of @p frame: what a kernel writes into each datagram it cuts from a UDP GSO send. The
 * field is zeroed before the sum; a sum of zero is written as 0xffff. @return false, writing
 * nothing, when the headers or the datagram do not lie inside @p frame or @p udp_len is over
 * 65535. Writes only the checksum field; thread safe for distinct frames.
 */
[[nodiscard]] bool set_udp_checksum(std::span<std::uint8_t> frame, std::size_t l3_off,
                                    std::size_t udp_off, std::size_t udp_len, bool ipv6) noexcept;

/** What peek_dest_qp() returns for a frame without a whole BTH on UDP port 4791 (QPNs are 24 bits).
 */
inline constexpr std::uint32_t kNoDestQp = 0xffffffffu;

/**
 * The BTH destination QP of @p frame, found as names_roce_port() finds the UDP port, or kNoDestQp.
 * A hint for prefetching the QP before the frame is parsed: nothing else is checked (IP lengths,
 * opcode, ICRC), so the frame may still be rejected. Thread safety: pure; reads only inside
 * @p frame.
 */
[[nodiscard]] std::uint32_t peek_dest_qp(std::span<const std::uint8_t> frame) noexcept;

/**
 * Addressing of one path: everything below the BTH. A QP prepares one per path at modify time so
 * that the per-packet build only fills the BTH and what follows.
 * IPv4 addresses live in the last four bytes of src_ip/dst_ip (the IPv4-mapped GID layout).
 */
struct PathHeaders {
    MacAddr src_mac{};
    MacAddr dst_mac{};
    bool has_vlan = false;
    std::uint16_t vlan_tci = 0;
    bool ipv6 = false;
    Ipv6Addr src_ip{};
    Ipv6Addr dst_ip{};
    std::uint8_t tos = 0;         ///< IPv4 TOS / IPv6 traffic class: DSCP << 2 | ECN
    std::uint8_t ttl = 64;        ///< IPv4 TTL / IPv6 hop limit
    std::uint32_t flow_label = 0; ///< IPv6 only, 20 bits
    std::uint16_t udp_sport = 0xc000;
};

/**
 * Values of the BTH and of every extension header. build_frame() writes only the headers the
 * opcode carries (opcode table) and ignores the other fields. Values are host order.
 */
struct PacketFields {
    Opcode opcode = Opcode::RC_SEND_ONLY;
    bool solicited = false;
    bool mig_req = false;
    std::uint16_t pkey = kDefaultPkey;
    bool fecn = false;
    bool becn = false;
    std::uint32_t dest_qp = 0; ///< 24 bits
    bool ack_req = false;
    Psn psn;
    // DETH
    std::uint32_t qkey = 0;
    std::uint32_t src_qp = 0;
    // RETH (va, rkey also used by AtomicETH)
    std::uint64_t va = 0;
    std::uint32_t rkey = 0;
    std::uint32_t dma_len = 0;
    // AtomicETH
    std::uint64_t swap_add = 0;
    std::uint64_t compare = 0;
    // AETH
    std::uint8_t syndrome = 0;
    std::uint32_t msn = 0;
    // AtomicAckETH
    std::uint64_t orig_rem_data = 0;
    // ImmDt
    std::uint32_t imm = 0;
    // IETH
    std::uint32_t inv_rkey = 0;
    // MDETH (wire/mrc.h); its RETH is va / rkey / dma_len above
    std::uint8_t mrc_flags = 0; ///< MdethFlags
    std::uint16_t mrc_path = 0;
    std::uint32_t mrc_msn = 0;
    std::uint32_t mrc_msg_offset = 0;
    std::uint32_t mrc_msg_length = 0;
    /** SETH / NETH / PETH / EPETH values of an MRC control opcode; null writes zeroes. Not copied:
     *  it must stay valid until the frame is built (the transmit stage: the end of the pass). */
    const MrcCtlFields* mrc_ctl = nullptr;
};

/** Bytes below the BTH for @p path: Ethernet [+ 802.1Q] + IP + UDP. Inline: every packet built
 *  asks (an out-of-line call of its own was 0.7 % of a 64 B WRITE's samples). */
[[nodiscard]] inline std::size_t path_header_length(const PathHeaders& path) noexcept {
    return sizeof(EthHdr) + (path.has_vlan ? sizeof(VlanTag) : 0) +
           (path.ipv6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr)) + sizeof(UdpHdr);
}

/** Bytes of a whole frame for @p path, opcode @p op and @p payload_len payload bytes (pad and ICRC
 * included). */
[[nodiscard]] inline std::size_t frame_length(const PathHeaders& path, Opcode op,
                                              std::size_t payload_len) noexcept {
    return path_header_length(path) + sizeof(Bth) + opcode_info(op).ext_length +
           ((payload_len + 3) & ~std::size_t{3}) + kIcrcSize;
}

/**
 * Builds one frame into @p out: headers, the payload gathered from @p payload in order, the pad
 * (BTH PadCnt set to match, pad bytes zero), and the ICRC. The IPv4 header checksum is computed
 * here. The UDP checksum is 0 on IPv4 (A17.3.2 allows it) and computed on IPv6, where RFC 8200
 * forbids a zero checksum.
 * @return bytes written, or 0 when the opcode is unknown, when @p payload is not empty but the
 * opcode carries no payload, when @p out is too small, or when the frame would exceed 65535 bytes
 * of IP. Thread safety: pure; writes only @p out.
 */
[[nodiscard]] std::size_t build_frame(const PathHeaders& path, const PacketFields& fields,
                                      std::span<const std::span<const std::uint8_t>> payload,
                                      std::span<std::uint8_t> out) noexcept;

/** What build_frame_deferred() leaves for finish_frame(): where the ICRC goes and what it and, on
 *  IPv6, the UDP checksum cover (byte offsets into the frame). */
struct FrameFinish {
    std::uint32_t l3_off = 0;   ///< IP header
    std::uint32_t icrc_off = 0; ///< the ICRC field (after the pad)
    std::uint32_t udp_off = 0;  ///< UDP header
    std::uint32_t udp_len = 0;  ///< UDP length, header to ICRC included
    bool ipv6 = false;
};

/**
 * build_frame() in two steps: everything but the ICRC (and, on IPv6, the UDP checksum, which
 * covers the ICRC) now, those two in finish_frame(). A caller that builds a burst finishes each
 * frame after building the next: the ICRC then reads headers whose small stores have reached the
 * cache, instead of waiting for them (a 16-byte load cannot be forwarded from several narrower
 * stores). Same return value and errors as build_frame(); the frame is not valid until
 * finish_frame(). Thread safety: pure; writes only @p out and @p finish.
 */
[[nodiscard]] std::size_t
build_frame_deferred(const PathHeaders& path, const PacketFields& fields,
                     std::span<const std::span<const std::uint8_t>> payload,
                     std::span<std::uint8_t> out, FrameFinish& finish) noexcept;

/** Completes a frame of build_frame_deferred() at @p frame (its first byte) with @p finish. */
void finish_frame(std::uint8_t* frame, const FrameFinish& finish) noexcept;

/** A frame built for transmission by reference: headers in the caller's buffer, payload left where
 * it is, and the bytes that follow the payload (pad and ICRC) here. */
struct SplitFrame {
    std::size_t header_len = 0;  ///< bytes written to the buffer: Ethernet .. last extension header
    std::size_t payload_len = 0; ///< sum of the payload spans
    std::array<std::uint8_t, 8> trailer{}; ///< pad bytes (zero), then the ICRC
    std::uint8_t trailer_len = 0;          ///< pad + kIcrcSize (4..7)
    [[nodiscard]] std::span<const std::uint8_t> trailer_bytes() const noexcept {
        return {trailer.data(), trailer_len};
    }
};

/**
 * As build_frame(), but the payload is not copied: the headers go into @p out, the pad and the ICRC
 * (computed over headers, payload and pad, continued across the spans) into @p sf.trailer. The
 * frame on the wire is out[0..header_len) ++ payload spans ++ trailer. IPv4 header checksum and
 * IPv6 UDP checksum are computed as build_frame() does (the latter over the spans and the trailer).
 * @return false in the cases where build_frame() returns 0 (@p out need only hold the headers).
 * Thread safety: pure; reads @p payload, writes only @p out and @p sf.
 */
[[nodiscard]] bool build_frame_split(const PathHeaders& path, const PacketFields& fields,
                                     std::span<const std::span<const std::uint8_t>> payload,
                                     std::span<std::uint8_t> out, SplitFrame& sf) noexcept;

/** Convenience overload for one contiguous payload. */
[[nodiscard]] inline std::size_t build_frame(const PathHeaders& path, const PacketFields& fields,
                                             std::span<const std::uint8_t> payload,
                                             std::span<std::uint8_t> out) noexcept {
    return build_frame(path, fields, std::span<const std::span<const std::uint8_t>>(&payload, 1),
                       out);
}

} // namespace droce::wire
