/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Decoding the low five bits of an AETH syndrome (IBTA Vol 1 §9.3.5, §9.7.5.2.8, §9.7.7.2).
 *
 * For an ACK they are an encoded credit count (end-to-end flow control: how many receive WQEs the
 * responder has), for an RNR NAK an encoded minimum RNR timer. Both encodings are logarithmic
 * tables in the specification, reproduced here as numbers.
 *
 * These are wire facts; they belong in lib/wire/aeth.h, and live here until that header takes them.
 */
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace droce::trace {

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

} // namespace droce::trace
