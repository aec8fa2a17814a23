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

#include <array>
#include <cstdint>
#include <optional>

#include "byteorder.h"

namespace droce::wire {

enum class AethKind : std::uint8_t { ack = 0, rnr_nak = 1, reserved = 2, nak = 3 };

// clang-format off
#define DROCE_NAK_CODES(X)                                                                          \
    X(psn_sequence_error, 0) X(invalid_request, 1) X(remote_access_error, 2)                        \
    X(remote_operational_error, 3) X(invalid_rd_request, 4)
// clang-format on
/** NAK codes carried in the low 5 bits of a NAK syndrome (IBTA table 46). */
enum class NakCode : std::uint8_t {
#define DROCE_NAK_X(name, value) name = value,
    DROCE_NAK_CODES(DROCE_NAK_X)
#undef DROCE_NAK_X
};

/** Credit-count value meaning "end-to-end credits are not in use" (§9.7.7.2). */
inline constexpr std::uint8_t kAethCreditsInvalid = 0x1f;

constexpr std::uint8_t make_syndrome(AethKind kind, std::uint8_t low5) noexcept {
    return static_cast<std::uint8_t>((static_cast<unsigned>(kind) << 5) | (low5 & 0x1fu));
}

struct Aeth {
    std::uint8_t syndrome;
    Be24 msn_be; ///< message sequence number (24 bits) of the last completed message

    [[nodiscard]] constexpr AethKind kind() const noexcept {
        return static_cast<AethKind>(syndrome >> 5);
    }
    /** Credit count, RNR timer code or NAK code, depending on kind(). */
    [[nodiscard]] constexpr std::uint8_t value() const noexcept { return syndrome & 0x1fu; }
    [[nodiscard]] constexpr std::uint32_t msn() const noexcept { return msn_be.get(); }
    constexpr void set_msn(std::uint32_t m) noexcept { msn_be.set(m & 0xffffffu); }
};
static_assert(sizeof(Aeth) == 4);

/** Short name of a syndrome for traces: "ACK credits=31", "RNR NAK timer=14", "NAK
 * remote_access_error". */
const char* aeth_kind_name(AethKind kind) noexcept;
const char* nak_code_name(std::uint8_t code) noexcept;

// The low five bits of an AETH syndrome are logarithmic codes (IBTA §9.7.7.2 credit count,
// §9.7.5.2.8 / table 45 minimum RNR timer), given here as numbers.

/**
 * Receive WQEs (credits) announced by an ACK's credit count @p code (0..30); std::nullopt for
 * 31, which says end-to-end credits are not in use, or for a value that does not fit 5 bits.
 */
[[nodiscard]] constexpr std::optional<std::uint32_t> aeth_credits(std::uint8_t code) noexcept {
    // Codes 0..4 count one by one; from there on the step alternates ×1.5 and ×4/3, i.e. the
    // values 4·2^k and 6·2^k.
    constexpr std::array<std::uint32_t, 31> kCredits = {
        0,    1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
        48,   64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    };
    if (code >= kCredits.size()) return std::nullopt;
    return kCredits[code];
}

/**
 * Minimum RNR NAK timer, in microseconds, encoded by @p code (0..31). Code 0 is the longest,
 * 655.36 ms; codes 1..31 run from 0.01 ms to 491.52 ms. Returns 0 for a code above 31.
 */
[[nodiscard]] constexpr std::uint32_t rnr_timer_usec(std::uint8_t code) noexcept {
    constexpr std::array<std::uint32_t, 32> kUsec = {
        655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,    320,
        480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
        20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
    };
    return code < kUsec.size() ? kUsec[code] : 0;
}

static_assert(aeth_credits(5) == 6u && aeth_credits(30) == 32768u && !aeth_credits(31));
static_assert(rnr_timer_usec(0) == 655360 && rnr_timer_usec(14) == 1280 &&
              rnr_timer_usec(31) == 491520);

} // namespace droce::wire
