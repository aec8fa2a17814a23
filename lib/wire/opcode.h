/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The BTH opcode table (IBTA Vol 1 §9.2.1, table 39; CNP from Annex A17.9.3).
 *
 * One constexpr table says, for every opcode droce knows, which extension headers follow the BTH
 * (in the IBTA order DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, then the CNP body),
 * whether it is a request or a response, its place in a message (first / middle / last / only),
 * whether it consumes a receive WQE and whether it makes the responder generate a completion.
 * Header sizes and payload offsets are derived from it. Names are produced from the enumerator by
 * the preprocessor, never typed by hand.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace droce::wire {

/** Properties of an opcode, combined as a bit set. A distinct type: it cannot be compared with an
 * Opcode. */
enum class OpFlags : std::uint32_t {
    none = 0,
    deth = 1u << 0,
    reth = 1u << 1,
    atomic_eth = 1u << 2,
    aeth = 1u << 3,
    atomic_ack_eth = 1u << 4,
    immdt = 1u << 5,
    ieth = 1u << 6,
    cnp = 1u << 7,
    payload = 1u << 8,   ///< may carry payload bytes
    request = 1u << 9,   ///< sent by a requester
    response = 1u << 10, ///< sent by a responder
    first = 1u << 11,
    middle = 1u << 12,
    last = 1u << 13,
    only = first | last,  ///< an ONLY packet is both the first and the last of its message
    recv_wqe = 1u << 14,  ///< consumes (or continues to fill) a receive WQE at the responder
    completes = 1u << 15, ///< the responder generates a completion when this packet is placed
    send = 1u << 16,
    write = 1u << 17,
    read = 1u << 18,
    atomic = 1u << 19,
    // MRC extension headers (wire/mrc.h), after the RETH / before the ImmDt
    mdeth = 1u << 20,
    seth = 1u << 21,
    neth = 1u << 22,
    peth = 1u << 23,
    epeth = 1u << 24,
};

constexpr OpFlags operator|(OpFlags a, OpFlags b) noexcept {
    return static_cast<OpFlags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr OpFlags operator&(OpFlags a, OpFlags b) noexcept {
    return static_cast<OpFlags>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
/** True when every flag of @p want is set in @p have. */
constexpr bool has(OpFlags have, OpFlags want) noexcept {
    return (have & want) == want;
}

// clang-format off
/**
 * X(name, value, flags). The name is the IBTA opcode name with the transport as prefix.
 * RC and UC share the SEND / RDMA WRITE shapes; UC requests are never acknowledged. MRC_* are
 * droce's MRC opcodes in the manufacturer-specific range (wire/mrc.h explains the format); an MRC
 * data packet's message place is in its MDETH, not in first/middle/last opcodes.
 */
#define DROCE_OPCODES(X)                                                                              \
    X(RC_SEND_FIRST,                      0x00, request | payload | first | recv_wqe | send)                         \
    X(RC_SEND_MIDDLE,                     0x01, request | payload | middle | recv_wqe | send)                        \
    X(RC_SEND_LAST,                       0x02, request | payload | last | recv_wqe | completes | send)              \
    X(RC_SEND_LAST_WITH_IMMEDIATE,        0x03, request | payload | last | immdt | recv_wqe | completes | send)      \
    X(RC_SEND_ONLY,                       0x04, request | payload | only | recv_wqe | completes | send)              \
    X(RC_SEND_ONLY_WITH_IMMEDIATE,        0x05, request | payload | only | immdt | recv_wqe | completes | send)      \
    X(RC_RDMA_WRITE_FIRST,                0x06, request | payload | first | reth | write)                            \
    X(RC_RDMA_WRITE_MIDDLE,               0x07, request | payload | middle | write)                                  \
    X(RC_RDMA_WRITE_LAST,                 0x08, request | payload | last | write)                                    \
    X(RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,  0x09, request | payload | last | immdt | recv_wqe | completes | write)     \
    X(RC_RDMA_WRITE_ONLY,                 0x0a, request | payload | only | reth | write)                             \
    X(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,  0x0b, request | payload | only | reth | immdt | recv_wqe | completes | write) \
    X(RC_RDMA_READ_REQUEST,               0x0c, request | only | reth | read)                                        \
    X(RC_RDMA_READ_RESPONSE_FIRST,        0x0d, response | payload | first | aeth | read)                            \
    X(RC_RDMA_READ_RESPONSE_MIDDLE,       0x0e, response | payload | middle | read)                                  \
    X(RC_RDMA_READ_RESPONSE_LAST,         0x0f, response | payload | last | aeth | read)                             \
    X(RC_RDMA_READ_RESPONSE_ONLY,         0x10, response | payload | only | aeth | read)                             \
    X(RC_ACKNOWLEDGE,                     0x11, response | only | aeth)                                              \
    X(RC_ATOMIC_ACKNOWLEDGE,              0x12, response | only | aeth | atomic_ack_eth | atomic)                    \
    X(RC_COMPARE_SWAP,                    0x13, request | only | atomic_eth | atomic)                                \
    X(RC_FETCH_ADD,                       0x14, request | only | atomic_eth | atomic)                                \
    X(RC_SEND_LAST_WITH_INVALIDATE,       0x16, request | payload | last | ieth | recv_wqe | completes | send)       \
    X(RC_SEND_ONLY_WITH_INVALIDATE,       0x17, request | payload | only | ieth | recv_wqe | completes | send)       \
    X(UC_SEND_FIRST,                      0x20, request | payload | first | recv_wqe | send)                         \
    X(UC_SEND_MIDDLE,                     0x21, request | payload | middle | recv_wqe | send)                        \
    X(UC_SEND_LAST,                       0x22, request | payload | last | recv_wqe | completes | send)              \
    X(UC_SEND_LAST_WITH_IMMEDIATE,        0x23, request | payload | last | immdt | recv_wqe | completes | send)      \
    X(UC_SEND_ONLY,                       0x24, request | payload | only | recv_wqe | completes | send)              \
    X(UC_SEND_ONLY_WITH_IMMEDIATE,        0x25, request | payload | only | immdt | recv_wqe | completes | send)      \
    X(UC_RDMA_WRITE_FIRST,                0x26, request | payload | first | reth | write)                            \
    X(UC_RDMA_WRITE_MIDDLE,               0x27, request | payload | middle | write)                                  \
    X(UC_RDMA_WRITE_LAST,                 0x28, request | payload | last | write)                                    \
    X(UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,  0x29, request | payload | last | immdt | recv_wqe | completes | write)     \
    X(UC_RDMA_WRITE_ONLY,                 0x2a, request | payload | only | reth | write)                             \
    X(UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,  0x2b, request | payload | only | reth | immdt | recv_wqe | completes | write) \
    X(UD_SEND_ONLY,                       0x64, request | payload | only | deth | recv_wqe | completes | send)      \
    X(UD_SEND_ONLY_WITH_IMMEDIATE,        0x65, request | payload | only | deth | immdt | recv_wqe | completes | send) \
    X(CNP,                                0x81, cnp)                                                                 \
    X(MRC_WRITE,                          0xc0, request | payload | reth | mdeth | write)                            \
    X(MRC_WRITE_LAST_WITH_IMMEDIATE,      0xc1, request | payload | reth | mdeth | immdt | write)                    \
    X(MRC_SACK,                           0xc2, response | only | seth)                                              \
    X(MRC_NACK,                           0xc3, response | only | neth)                                              \
    X(MRC_PROBE,                          0xc4, request | only | peth)                                               \
    X(MRC_PROBE_REPLY,                    0xc5, response | only | peth)                                              \
    X(MRC_PORT_STATUS,                    0xc6, request | only | epeth)
// clang-format on

enum class Opcode : std::uint8_t {
#define DROCE_OPCODE_ENUM(name, value, flags) name = value,
    DROCE_OPCODES(DROCE_OPCODE_ENUM)
#undef DROCE_OPCODE_ENUM
};

/** Static facts about one opcode. */
struct OpcodeInfo {
    std::string_view name; ///< the enumerator's name, e.g. "RC_RDMA_WRITE_ONLY"; empty if unknown
    OpFlags flags = OpFlags::none;
    std::uint8_t ext_length = 0; ///< bytes of extension headers after the BTH, in IBTA order
    bool known = false;

    [[nodiscard]] constexpr bool is(OpFlags f) const noexcept { return has(flags, f); }
};

namespace detail {
constexpr std::uint8_t ext_length_of(OpFlags f) noexcept {
    std::uint8_t n = 0;
    if (has(f, OpFlags::deth)) n += 8;
    if (has(f, OpFlags::reth)) n += 16;
    if (has(f, OpFlags::atomic_eth)) n += 28;
    if (has(f, OpFlags::aeth)) n += 4;
    if (has(f, OpFlags::atomic_ack_eth)) n += 8;
    if (has(f, OpFlags::immdt)) n += 4;
    if (has(f, OpFlags::ieth)) n += 4;
    if (has(f, OpFlags::cnp)) n += 16;
    if (has(f, OpFlags::mdeth)) n += 16;
    if (has(f, OpFlags::seth)) n += 48;
    if (has(f, OpFlags::neth)) n += 12;
    if (has(f, OpFlags::peth)) n += 16;
    if (has(f, OpFlags::epeth)) n += 8;
    return n;
}

constexpr std::array<OpcodeInfo, 256> make_opcode_table() noexcept {
    std::array<OpcodeInfo, 256> t{};
    using enum OpFlags;
#define DROCE_OPCODE_ROW(oname, value, oflags)                                                     \
    t[value] = OpcodeInfo{#oname, oflags, ext_length_of(oflags), true};
    DROCE_OPCODES(DROCE_OPCODE_ROW)
#undef DROCE_OPCODE_ROW
    return t;
}
} // namespace detail

/** The table, indexed by the opcode byte. Unknown opcodes have known == false. */
inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

/** All opcodes in the table, in numeric order. */
inline constexpr Opcode kAllOpcodes[] = {
#define DROCE_OPCODE_LIST(name, value, flags) Opcode::name,
    DROCE_OPCODES(DROCE_OPCODE_LIST)
#undef DROCE_OPCODE_LIST
};

[[nodiscard]] constexpr const OpcodeInfo& opcode_info(Opcode op) noexcept {
    return kOpcodeTable[static_cast<std::uint8_t>(op)];
}
[[nodiscard]] constexpr std::string_view to_string(Opcode op) noexcept {
    return opcode_info(op).known ? opcode_info(op).name : std::string_view("UNKNOWN");
}

/** Transport service of an opcode, from its top three bits (IBTA table 38). mrc: droce's MRC
 * opcodes, in the first manufacturer-specific range (0xC0..0xDF). */
enum class Transport : std::uint8_t { rc = 0, uc = 1, rd = 2, ud = 3, cnp = 4, mrc = 6 };
[[nodiscard]] constexpr Transport transport_of(Opcode op) noexcept {
    return static_cast<Transport>(static_cast<std::uint8_t>(op) >> 5);
}

// Spot checks that the table agrees with IBTA table 39.
static_assert(opcode_info(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).ext_length == 20);
static_assert(opcode_info(Opcode::RC_ATOMIC_ACKNOWLEDGE).ext_length == 12);
static_assert(opcode_info(Opcode::RC_COMPARE_SWAP).ext_length == 28);
static_assert(opcode_info(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).ext_length == 0);
static_assert(opcode_info(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE).ext_length == 12);
static_assert(opcode_info(Opcode::CNP).ext_length == 16);
static_assert(!kOpcodeTable[0x15].known);
static_assert(opcode_info(Opcode::MRC_WRITE_LAST_WITH_IMMEDIATE).ext_length == 36);
static_assert(opcode_info(Opcode::MRC_SACK).ext_length == 48);
static_assert(transport_of(Opcode::MRC_PORT_STATUS) == Transport::mrc);
static_assert(to_string(Opcode::RC_ACKNOWLEDGE) == "RC_ACKNOWLEDGE");

} // namespace droce::wire
