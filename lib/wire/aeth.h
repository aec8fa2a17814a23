/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * ACK Extended Transport Header, IBTA Vol 1 §9.3.5 (4 bytes): syndrome and MSN.
 *
 * Syndrome bits 7:5 say what kind of acknowledgement this is (table 45): 000 ACK (bits 4:0 are the
 * credit count, 11111 = credits not given), 001 RNR NAK (bits 4:0 = encoded minimum RNR timer),
 * 011 NAK (bits 4:0 = NAK code, table 46).
 */
#pragma once

#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

enum class AethKind : std::uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };

/** NAK codes carried in the low 5 bits of a NAK syndrome (IBTA table 46). */
enum class NakCode : std::uint8_t {
    psn_sequence_error = 0,
    invalid_request = 1,
    remote_access_error = 2,
    remote_operational_error = 3,
    invalid_rd_request = 4,
};

/** Credit-count value meaning "end-to-end credits are not in use" (§9.7.7.2). */
inline constexpr std::uint8_t kAethCreditsInvalid = 0x1f;

constexpr std::uint8_t make_syndrome(AethKind kind, std::uint8_t low5) noexcept {
    return static_cast<std::uint8_t>((static_cast<unsigned>(kind) << 5) | (low5 & 0x1fu));
}

struct Aeth {
    std::uint8_t syndrome;
    Be24 msn_be; ///< message sequence number (24 bits) of the last completed message

    [[nodiscard]] constexpr AethKind kind() const noexcept { return static_cast<AethKind>(syndrome >> 5); }
    /** Credit count, RNR timer code or NAK code, depending on kind(). */
    [[nodiscard]] constexpr std::uint8_t value() const noexcept { return syndrome & 0x1fu; }
    [[nodiscard]] constexpr std::uint32_t msn() const noexcept { return msn_be.get(); }
    constexpr void set_msn(std::uint32_t m) noexcept { msn_be.set(m & 0xffffffu); }
};
static_assert(sizeof(Aeth) == 4);

/** Short name of a syndrome for traces: "ACK credits=31", "RNR NAK timer=14", "NAK remote_access_error". */
const char* aeth_kind_name(AethKind kind) noexcept;
const char* nak_code_name(std::uint8_t code) noexcept;

} // namespace droce::wire
