/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce's MRC (Multipath Reliable Connection) wire format, version 1: the extension headers that
 * follow the BTH of an MRC packet.
 *
 * Why these choices:
 *  - UDP destination port 4791 and an ordinary BTH, so Wireshark decodes the base header of every
 *    MRC packet and droce's receive filter and steering work unchanged. The opcodes are in the BTH
 *    range IBTA reserves for manufacturer-specific opcodes (0xC0..0xFF, transport bits 110/111,
 *    IBTA Vol 1 §9.2.1 table 38): a standard RoCE NIC or Linux rxe drops them as unknown opcodes
 *    instead of taking them for RC, and a second UDP port would lose Wireshark's BTH decoding.
 *  - Every data packet carries its placement (a RETH with the VA of its own first byte, the rkey
 *    and its own payload length) and its place in the message (MDETH), so the responder places
 *    it on arrival in any order (OCP MRC: "each packet placed immediately regardless of order").
 *  - A packet whose payload is shorter than its RETH length was trimmed by a switch: the
 *    responder needs no DSCP convention to recognise it (the sim fabric also sets a DSCP).
 *  - Each MRC extension header starts with a version byte (kMrcVersion); a receiver drops
 *    versions it does not know (counted), so the format can change without silent misreads.
 *
 * Opcodes and their headers (after the BTH; BTH.PSN is the packet's PSN where it has one):
 *  - MRC_WRITE (0xC0): RETH, MDETH, payload.
 *  - MRC_WRITE_LAST_WITH_IMMEDIATE (0xC1): RETH, MDETH, ImmDt, payload: the last packet of an
 *    RDMA WRITE with immediate.
 *  - MRC_SACK (0xC2): SETH. Cumulative PSN plus a 256-bit bitmap of PSNs received beyond it.
 *  - MRC_NACK (0xC3): NETH. One PSN the responder could not accept, with the reason.
 *  - MRC_PROBE (0xC4) / MRC_PROBE_REPLY (0xC5): PETH. A path probe and its echo: to a QP's
 *    peer QP (a QP's own path probes), or to kMrcEndpointQpn (connectionless EV probes).
 *  - MRC_PORT_STATUS (0xC6): EPETH. The sender's port (plane) status mask (OCP MRC endpoint
 *    operation PORT_STATUS_UPDATE).
 * All multi-byte fields are big-endian. Every MRC packet ends with the ICRC as any RoCEv2 packet.
 */
#pragma once

#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

/** Version of droce's MRC wire format carried in every MRC extension header. */
inline constexpr std::uint8_t kMrcVersion = 1;
/** MPR (maximum PSN range) unit: PSNs per MPR step (OCP MRC mrc_qp_attr.mpr). */
inline constexpr std::uint32_t kMprUnit = 128;
/** Bits of the SACK bitmap. */
inline constexpr std::uint32_t kSackBits = 256;
/**
 * Destination QP of connectionless MRC endpoint operations (OCP MRC controller API, mrc_ctl.h
 * endpoint operations: MRC_CTL_EP_OP_EV_PROBE): QP1, the endpoint's management QP, as
 * connectionless CM MADs are (IBTA Vol 1 chapter 12: CM MADs go to QP1, the GSI), never a data QP
 * (from rc::kFirstQpn). An EV probe is MRC_PROBE to QP1 and its answer MRC_PROBE_REPLY to QP1, both
 * with the PETH: PETH.path = the caller's req_id, PETH.seq = a nonce, PETH.timestamp_ns = the
 * prober's clock when sent; the responder echoes all three, and sends the reply from the probe's
 * destination address back to its source with the same UDP source port (the EV), flow label and
 * traffic class, so that the reply's RTT measures that EV's path.
 */
inline constexpr std::uint32_t kMrcEndpointQpn = 1;
/**
 * QP1 carrying a steering slot in its top byte (Device::set_qpn_steering_slot): processes that
 * share one UDP port are told apart by that byte, and an EV probe goes to the prober's slot's QP1
 * so that its reply, which echoes the destination QP, is steered back to the prober. Any member
 * answers a probe, whatever its slot. Slot 0 is plain kMrcEndpointQpn.
 */
[[nodiscard]] constexpr std::uint32_t mrc_endpoint_qpn(std::uint8_t slot) noexcept {
    return static_cast<std::uint32_t>(slot) << 16 | kMrcEndpointQpn;
}
/** An endpoint QP (QP1 of any steering slot): the low 16 bits are 1. Data QPNs never are (they
 *  start at rc::kFirstQpn in every slot). */
[[nodiscard]] constexpr bool is_mrc_endpoint_qpn(std::uint32_t qpn) noexcept {
    return (qpn & 0xffffu) == kMrcEndpointQpn;
}

/** MDETH flags. */
enum MdethFlags : std::uint8_t {
    kMdethFirst = 1u << 0,      ///< first packet of its message
    kMdethLast = 1u << 1,       ///< last packet of its message
    kMdethRetransmit = 1u << 2, ///< a retransmission (informational: traces, counters)
};

/** MRC Data Extension Transport Header (16 bytes), after the RETH of MRC_WRITE*. */
struct Mdeth {
    std::uint8_t version; ///< kMrcVersion
    std::uint8_t flags;   ///< MdethFlags
    Be16 path;            ///< the requester's path (entropy value index) the packet left on
    Be32 msn;             ///< message sequence number of its message (requester's count, from 0)
    Be32 msg_offset;      ///< byte offset of the packet's payload in its message
    Be32 msg_length;      ///< bytes of the whole message (the responder's byte_len)
};
static_assert(sizeof(Mdeth) == 16);

/** SETH flags. */
enum SethFlags : std::uint8_t {
    kSethEcnEcho = 1u << 0, ///< a packet on SETH.path arrived marked CE since the last SACK
};

/** SACK Extension Transport Header (48 bytes). */
struct Seth {
    std::uint8_t version; ///< kMrcVersion
    std::uint8_t flags;   ///< SethFlags
    Be16 path;    ///< the requester path this SACK reports on: the CE-marked one with kSethEcnEcho
    Be32 cum_psn; ///< low 24 bits: next PSN expected; every PSN before it arrived
    Be32 sack_base;         ///< low 24 bits: PSN of bitmap bit 0
    std::uint8_t mpr_dest;  ///< the responder's MPR in kMprUnit PSNs (its tracker window)
    std::uint8_t port_mask; ///< the responder's ports (planes) that are up: bit i = port i + 1
    Be16 reserved;
    /** Bit i of word i/64 (LSB first): PSN sack_base + i arrived. Bits of PSNs before cum_psn
     *  are all set (cumulative: everything before it counts as arrived), sent or not. */
    Be64 bitmap[kSackBits / 64];
};
static_assert(sizeof(Seth) == 48);

/** Why a responder refused a packet (NETH.reason). */
enum class NackReason : std::uint8_t {
    trimmed = 1,         ///< payload cut by a switch: retransmit now (congestion, not loss)
    mpr_exceeded = 2,    ///< PSN beyond the responder's MPR window: retransmit later
    wimm_exceeded = 3,   ///< max_wimm_dest immediates held (receives ran out): retry later
    remote_access = 4,   ///< rkey, bounds or access rights refused: fatal (REM_ACCESS_ERR)
    invalid_request = 5, ///< malformed request: fatal (REM_INV_REQ_ERR)
};

/** NACK Extension Transport Header (12 bytes). */
struct Neth {
    std::uint8_t version; ///< kMrcVersion
    std::uint8_t reason;  ///< NackReason
    Be16 path;            ///< the requester path of the refused packet
    Be32 psn;             ///< low 24 bits: the refused PSN
    Be32 cum_psn;         ///< low 24 bits: the responder's cumulative PSN
};
static_assert(sizeof(Neth) == 12);

/** Probe Extension Transport Header (16 bytes), MRC_PROBE and MRC_PROBE_REPLY. */
struct Peth {
    std::uint8_t version; ///< kMrcVersion
    std::uint8_t reserved;
    Be16 path;         ///< the prober's path being tested (echoed)
    Be32 seq;          ///< the prober's probe number (echoed)
    Be64 timestamp_ns; ///< the prober's clock when sent (echoed): the reply gives the RTT
};
static_assert(sizeof(Peth) == 16);

/** Endpoint operations (EPETH.op), after the OCP MRC controller's endpoint operations. */
enum class EndpointOp : std::uint8_t {
    port_status = 1, ///< EPETH.port_mask is the sender's set of ports that are up
};

/** Endpoint-operation Extension Transport Header (8 bytes), MRC_PORT_STATUS. */
struct Epeth {
    std::uint8_t version;   ///< kMrcVersion
    std::uint8_t op;        ///< EndpointOp
    std::uint8_t port_mask; ///< bit i = the sender's port i + 1 is up (OCP: 1-based port mask)
    std::uint8_t reserved;
    Be32 seq; ///< sender's count of port status messages: a receiver ignores older ones
};
static_assert(sizeof(Epeth) == 8);

/**
 * Values of an MRC control header (SETH, NETH, PETH or EPETH, by opcode) for build_frame, host
 * order. PacketFields points at one (PacketFields::mrc_ctl); MDETH values are in PacketFields.
 */
struct MrcCtlFields {
    std::uint8_t flags = 0; ///< SethFlags
    std::uint16_t path = 0;
    std::uint32_t cum_psn = 0;                 ///< SETH, NETH
    std::uint32_t sack_base = 0;               ///< SETH
    std::uint8_t mpr_dest = 0;                 ///< SETH
    std::uint8_t port_mask = 0;                ///< SETH, EPETH
    std::uint64_t bitmap[kSackBits / 64] = {}; ///< SETH
    std::uint8_t reason = 0;                   ///< NETH: NackReason
    std::uint32_t nack_psn = 0;                ///< NETH
    std::uint32_t seq = 0;                     ///< PETH, EPETH
    std::uint64_t timestamp_ns = 0;            ///< PETH
    std::uint8_t op = 0;                       ///< EPETH: EndpointOp
};

} // namespace droce::wire
