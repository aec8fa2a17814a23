/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Invariant CRC of a RoCEv2 packet, IBTA Annex A17.3.3 (IPv4 and IPv6).
 *
 * The ICRC is the CRC-32 of zlib/Ethernet (reflected polynomial 0xEDB88320, inverted result) over
 *   8 bytes of 0xFF (standing in for the IB LRH), then
 *   the IP header with the variant fields set to all ones (IPv4: TOS, TTL, header checksum; IPv6:
 *   traffic class, flow label, hop limit; the version nibble is kept), then
 *   the UDP header with its checksum set to all ones, then
 *   the BTH with its FECN/BECN/reserved byte (byte 4) set to all ones, then
 *   everything after the BTH up to the ICRC: extension headers, payload and pad.
 * It is stored on the wire least significant byte first. droce computes it with ISA-L's
 * crc32_gzip_refl, or, for packets up to 256 bytes and the headers of longer ones (as many bytes
 * as leave whole 256-byte blocks), by its own four-lane carry-less fold: with 512-bit
 * VPCLMULQDQ and masked loads on a CPU with AVX-512 (F, BW, VL) and VPCLMULQDQ, else with
 * PCLMULQDQ and AVX. Past a longer packet's head, ISA-L, or on a CPU with 256-bit VPCLMULQDQ and
 * AVX2 but not AVX-512 (AMD Zen 3) droce's own eight-chunk 256-bit fold, which ISA-L 2.30 lacks.
 * Generation and verification both call icrc_compute().
 */
#pragma once

#include <cstdint>
#include <span>

namespace droce::wire {

/**
 * Computes the ICRC of one packet.
 *
 * @param l3  the bytes from the first byte of the IP header up to (not including) the ICRC field.
 *            Must hold a whole IP header (IPv4 IHL × 4 bytes, or 40 for IPv6), a UDP header and a
 * BTH.
 * @param ipv6 true if @p l3 starts with an IPv6 header, false for IPv4.
 * @return the ICRC as a host integer; store it with store_icrc(). Returns 0 if @p l3 is too short
 *         to hold the covered headers (callers check lengths first; parse_frame() always does).
 * Thread safety: pure function.
 */
[[nodiscard]] std::uint32_t icrc_compute(std::span<const std::uint8_t> l3, bool ipv6) noexcept;

/**
 * Continues an ICRC over more bytes of the same packet: icrc_compute(a ++ b) ==
 * icrc_continue(icrc_compute(a), b) for any @p a that holds the covered headers. This is how a
 * frame whose payload lives in other buffers (transmit by reference) gets its ICRC without a copy.
 * Thread safety: pure function.
 */
[[nodiscard]] std::uint32_t icrc_continue(std::uint32_t icrc,
                                          std::span<const std::uint8_t> more) noexcept;

namespace detail {
/**
 * icrc_compute() as on a CPU without PCLMULQDQ and AVX: ISA-L for every length. The same result;
 * for tests that check the route this CPU does not take.
 */
[[nodiscard]] std::uint32_t icrc_compute_isal(std::span<const std::uint8_t> l3, bool ipv6) noexcept;
/**
 * icrc_compute() as on a CPU with PCLMULQDQ and AVX but not AVX-512's VPCLMULQDQ: packets up to
 * 256 bytes by the 128-bit fold (ISA-L where the CPU lacks even that). The same result; for tests.
 */
[[nodiscard]] std::uint32_t icrc_compute_fold128(std::span<const std::uint8_t> l3,
                                                 bool ipv6) noexcept;
/**
 * icrc_compute() as on a CPU with 256-bit VPCLMULQDQ and AVX2 but not AVX-512 (AMD Zen 3): the
 * 128-bit fold up to 256 bytes, and past a longer packet's head whole 128-byte blocks by the
 * 256-bit fold. Where this CPU lacks VPCLMULQDQ (icrc_has_fold256() false): ISA-L past the head.
 * The same result; for tests.
 */
[[nodiscard]] std::uint32_t icrc_compute_fold256(std::span<const std::uint8_t> l3,
                                                 bool ipv6) noexcept;
/** Whether this CPU can take the 256-bit fold (AVX2 and VPCLMULQDQ); for tests to say so. */
[[nodiscard]] bool icrc_has_fold256() noexcept;
/** icrc_continue() by ISA-L alone (every CPU's result is the same); for tests. */
[[nodiscard]] std::uint32_t icrc_continue_isal(std::uint32_t icrc,
                                               std::span<const std::uint8_t> more) noexcept;
} // namespace detail

/** Writes @p icrc to @p dst (4 bytes) in wire order, least significant byte first. */
inline void store_icrc(std::uint8_t* dst, std::uint32_t icrc) noexcept {
    for (int i = 0; i < 4; ++i)
        dst[i] = static_cast<std::uint8_t>(icrc >> (8 * i));
}
/** Reads a wire-order ICRC from @p src (4 bytes). */
[[nodiscard]] inline std::uint32_t load_icrc(const std::uint8_t* src) noexcept {
    return static_cast<std::uint32_t>(src[0]) | static_cast<std::uint32_t>(src[1]) << 8 |
           static_cast<std::uint32_t>(src[2]) << 16 | static_cast<std::uint32_t>(src[3]) << 24;
}

} // namespace droce::wire
