/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce-trace's formatter: one captured frame in, one line of text or one JSON object out.
 *
 * decode_frame() sorts a frame into one of three kinds:
 *  - roce: a RoCEv2 packet (UDP destination port 4791) that wire::parse_frame() accepted;
 *  - rejected: a RoCEv2 packet that parse_frame() refused; it is shown with every header parsing
 *    reached and the reject reason;
 *  - skipped: anything else (ARP, TCP, other UDP, RoCE v1, non-Ethernet link types ...), named by
 *    its protocol.
 * format_text() and format_json() render a decoded frame; trace_explain.h adds the sentences of
 * `--explain`.
 *
 * Field names are IBTA's (Vol 1 ch. 9), lower-cased with underscores, and the text line uses the
 * same names as the JSON, so one vocabulary serves both. droce's MRC packets (opcodes 0xC0-0xC6,
 * lib/wire/mrc.h) are decoded too: their MDETH, SETH, NETH, PETH and EPETH with the field names of
 * wire/mrc.h, the path (entropy value index and UDP source port) and, when the capture says which
 * interface a frame was seen on, the plane. JSON numbers: every field of 32 bits or
 * fewer is a JSON number; 64-bit fields (virtual addresses, atomic operands) are "0x%016x" strings
 * because most JSON readers keep only 53 bits of an integer.
 *
 * Nothing here is on a datapath: these functions allocate and may throw std::bad_alloc.
 * All functions are pure (no shared state) and safe to call from several threads at once.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/packet.h"

namespace droce::trace {

/** pcap link type of Ethernet captures (DLT_EN10MB / LINKTYPE_ETHERNET). */
inline constexpr int kLinkTypeEthernet = 1;

/** One captured frame as the capture reader hands it over. The bytes are borrowed, not owned. */
struct RawFrame {
    std::uint64_t index = 0; ///< 1-based position in the capture (Wireshark's frame number)
    int link_type = kLinkTypeEthernet;   ///< pcap DLT_* value of the capture file
    std::span<const std::uint8_t> bytes; ///< the captured bytes (may be fewer than wire_length)
    std::uint32_t wire_length = 0;       ///< the frame's length on the wire, in bytes
    /** The interface the frame was seen on, when the source says: the engine port of a PktBuf
     *  (PktBuf::port) or a pcapng interface id. A port of an MRC device is a plane. Unknown for
     *  classic pcap files. */
    std::optional<std::uint32_t> interface;
    /** When the frame was captured, in ns since the Unix epoch (0 when the source has none). */
    std::int64_t ts_ns = 0;
    /** pcapng interface id of the frame (Enhanced Packet Block), unset for classic pcap. */
    std::optional<std::uint32_t> if_id;
    /** Direction from the pcapng epb_flags (bits 0-1): 0 unknown, 1 inbound, 2 outbound. droce's
     *  live capture (lib/capture) sets it on every frame, from the capturing port's side. */
    std::uint8_t direction = 0;
    /** Set by split_gso_send(): this frame is segment gso_segment (1-based) of gso_segments cut
     *  from one captured UDP GSO send (index is the captured frame's); 0 otherwise. */
    std::uint16_t gso_segment = 0;
    std::uint16_t gso_segments = 0;
};

/**
 * A UDP GSO send captured before the kernel cut it (droce's uring ports group equal frames to a
 * peer into one sendmsg with UDP_SEGMENT: drivers/uring/README.md, UDP GSO; on lo or a veth a
 * capture sees one datagram of up to 64 KiB): when @p raw is such a datagram to UDP 4791 whose
 * payload splits into RoCE packets of one size (the last may be shorter), each with the same
 * destination QP, the next PSN and a good ICRC over its own IP and UDP header (lengths as the
 * kernel writes them when it cuts), returns those packets as whole frames (the captured frame's
 * Ethernet and IP header, lengths and checksums rewritten; the IPv4 ID kept, as the sender's ICRC
 * assumed, where the kernel numbers the pieces it cuts) in order; otherwise nothing. Packets of
 * up to a 4096-byte path MTU are looked for. The
 * caller owns the bytes; a RawFrame over each (gso_segment set) decodes like any frame.
 */
[[nodiscard]] std::vector<std::vector<std::uint8_t>> split_gso_send(const RawFrame& raw);

/** RawFrame::direction values (pcapng epb_flags bits 0-1). */
inline constexpr std::uint8_t kDirUnknown = 0;
inline constexpr std::uint8_t kDirInbound = 1;
inline constexpr std::uint8_t kDirOutbound = 2;

/** How droce-trace treats a frame. */
enum class FrameKind : std::uint8_t {
    roce,     ///< an accepted RoCEv2 packet
    rejected, ///< a RoCEv2 packet (UDP destination port 4791) that parse_frame() rejected
    skipped,  ///< not RoCEv2
};

/** What a skipped frame is; selects its explanation. */
enum class SkipKind : std::uint8_t {
    none,              ///< not skipped
    link_type,         ///< the capture is not Ethernet (ERF, InfiniBand, Linux cooked ...)
    truncated,         ///< too short to name its protocol
    ieee8023,          ///< 802.3 length field instead of an EtherType (LLC: STP and friends)
    arp,               ///< EtherType 0x0806
    roce_v1,           ///< EtherType 0x8915: IB GRH directly over Ethernet
    mac_control,       ///< EtherType 0x8808: PAUSE and priority flow control
    lldp,              ///< EtherType 0x88cc
    unknown_ethertype, ///< any other EtherType
    ip_fragment,       ///< an IP fragment that is not the first one
    icmp,              ///< IPv4 ICMP
    icmpv6,            ///< IPv6 ICMP
    tcp,               ///< TCP segment
    udp,               ///< UDP datagram not addressed to port 4791
    other_ip,          ///< another IP protocol (IGMP, ESP, SCTP ...)
    /** To port 4791 but droce's own probe between uring ports (TVer 15, which no RoCE receiver
     *  takes: drivers/uring, a shared port's slot probes and Gso::automatic's GSO probe and
     *  answer). */
    droce_probe,
};

/**
 * A decoded frame. Holds pointers into RawFrame::bytes (through @ref parsed): valid only while
 * those bytes are.
 */
struct DecodedFrame {
    RawFrame raw;
    FrameKind kind = FrameKind::skipped;
    /** parse_frame()'s verdict: ok for roce, the reason for rejected; for skipped, informative
     * only. */
    wire::RejectReason reason = wire::RejectReason::ok;
    /** Headers found. For skipped IP frames the IP header is set, so addresses can be shown. */
    wire::ParsedFrame parsed;
    SkipKind skip = SkipKind::none;
    /** For skipped frames: the protocol, e.g. "ARP", "TCP port 9000", "link type ERF". */
    std::string what;
    std::optional<std::uint16_t> src_port; ///< TCP/UDP ports of a skipped frame, when visible
    std::optional<std::uint16_t> dst_port;
    std::uint16_t ether_type = 0; ///< innermost EtherType seen (0 when none)
};

/**
 * Decodes one frame: runs wire::parse_frame() (with ICRC verification) on Ethernet frames and
 * classifies what is not RoCEv2. RoCEv2 is recognised by UDP destination port 4791 alone,
 * whatever the source port.
 * @param raw the frame; its bytes must outlive the result.
 * @return the decoded frame (never fails: anything unrecognised is skipped with a name).
 */
[[nodiscard]] DecodedFrame decode_frame(const RawFrame& raw);

/**
 * Formats one line (no trailing newline):
 *   index, [plane=N for an MRC packet, if=N for another frame, when the interface is known],
 *   [802.1Q tag], IP source > destination, [ECN], UDP ports, opcode name, dest_qp, psn,
 *   ack_req, [se, fecn, becn, p_key when not default], each extension header with its fields,
 *   payload and pad lengths [and trimmed=1 for an MRC WRITE shorter than its RETH length], then
 *   "ICRC ok" or "ICRC BAD ..." and, for rejected frames, "rejected <reason> (<description>)";
 *   skipped frames end in "skipped (<what>)".
 * MRC headers: "MDETH path= msn= msg_offset= msg_length= flags=first,last,retransmit",
 * "SETH path= cum_psn= sack_base= mpr_dest=N (N*128 PSNs) port_mask=0x.. (planes up ..)
 * [flags=ecn_echo] sacked=<PSN ranges>", "NETH reason=<name> path= psn= cum_psn=",
 * "PETH path= seq= timestamp_ns=", "EPETH op=port_status port_mask=0x.. (planes up ..; down ..)
 * seq="; a version other than wire::kMrcVersion shows as version=N.
 */
[[nodiscard]] std::string format_text(const DecodedFrame& frame);

/**
 * Formats one JSON object for the frame (JSON Lines when dumped one per line); keys keep the
 * order below. Keys:
 * "index", "length", ["interface"], "status" ("ok", "rejected", "skipped"), "eth", "vlan", "ip",
 * "udp", the BTH fields at top level ("opcode", "opcode_value", "se", "m", "pad_count", "tver",
 * "p_key", "fecn", "becn", "dest_qp", "ack_req", "psn"), one object per extension header ("deth",
 * "reth", "atomic_eth", "aeth", "atomic_ack_eth", "ieth", "cnp", and for MRC "mdeth", "seth",
 * "neth", "peth", "epeth" plus "mrc" {path, udp_src_port, ev_base, plane, trimmed}), "imm_data",
 * "payload_length", "icrc"
 * ("ok"/"bad"), "icrc_value" (the CRC as a number), "icrc_wire_bytes" (hex, as on the wire),
 * "reject" and "reject_description" for rejected frames, "skipped" (and ports) for skipped ones.
 * @param explain add an "explain" array of {"header", "text"} objects (see trace_explain.h).
 */
[[nodiscard]] nlohmann::ordered_json format_json(const DecodedFrame& frame, bool explain = false);

/** Name of a pcap link type (pcap_datalink_val_to_name), or "DLT <n>" when libpcap has none. */
[[nodiscard]] std::string link_type_name(int link_type);

/**
 * The opcode table entry of @p bth's opcode, or nullptr if droce does not know the opcode. Unlike
 * ParsedFrame::info it is available for frames rejected before the opcode check (e.g. bad TVer).
 */
[[nodiscard]] const wire::OpcodeInfo* known_opcode(const wire::Bth& bth) noexcept;

/** True when @p frame is a RoCEv2 packet (accepted or rejected) whose BTH opcode is one of
 *  droce's MRC opcodes (wire::Transport::mrc and in the opcode table). */
[[nodiscard]] bool is_mrc(const DecodedFrame& frame) noexcept;

/** "0x" followed by @p digits lower-case hex digits of @p v. */
[[nodiscard]] std::string hex(std::uint64_t v, int digits);

/** Name of an IP ECN codepoint: "Not-ECT", "ECT(1)", "ECT(0)", "CE". */
[[nodiscard]] const char* ecn_name(unsigned ecn) noexcept;

} // namespace droce::trace
