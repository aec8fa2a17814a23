/* SPDX-License-Identifier: BSD-3-Clause */
#include "icrc.h"

#include <array>
#include <cstring>

#include <isa-l/crc.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bth.h"
#include "ipv4.h"
#include "ipv6.h"
#include "udp.h"

namespace droce::wire {

namespace {
constexpr std::size_t kMaxIpv4Header = 60;
constexpr std::size_t kMaskedPrefixMax = kMaxIpv4Header + sizeof(UdpHdr) + sizeof(Bth);

#if defined(__x86_64__)
/**
 * ISA-L 2.30's AVX-512 CRC (crc32_gzip_refl_by16_10, what crc32_gzip_refl picks on AVX-512 CPUs)
 * returns with the upper halves of the vector registers dirty: it ends without vzeroupper. droce
 * is built for baseline x86-64, so its SSE code after each call (inlined copies, struct moves)
 * ran in the SSE/AVX transition state until some glibc AVX routine cleared it: on this Xeon an
 * ICRC of a 64 B frame copied to the stack took 120 ns instead of 15 (bench/micro BM_ParseFrame,
 * and a standalone test of the same copy + call with and without vzeroupper).
 */
__attribute__((target("avx"))) void clear_upper_vector_state() noexcept {
    _mm256_zeroupper();
}
const bool kCpuHasAvx = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
}();
#endif

std::uint32_t crc_continue(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept {
    // crc32_gzip_refl takes and returns the finished (inverted) CRC, like zlib's crc32(), so
    // consecutive calls continue one CRC across buffers.
    const std::uint32_t c = crc32_gzip_refl(crc, const_cast<std::uint8_t*>(p), n);
#if defined(__x86_64__)
    if (kCpuHasAvx) clear_upper_vector_state();
#endif
    return c;
}

/**
 * Packets up to this many bytes from the IP header on (ACKs, small WRITEs and SENDs, READ
 * requests) are copied whole into the masked buffer and take one CRC call instead of two: each
 * ISA-L call has a fixed cost that dominates at these lengths (measured: bench/micro,
 * bench/engine).
 */
constexpr std::size_t kOneShotMax = 256;

/**
 * The masked fields of the covered headers as bytes of 0xff, one table per header layout: IPv4
 * with IHL 5 to 15 (index IHL - 5) and IPv6 (index 11). A 16-byte window anywhere in
 * [0, kMaskSpan) reads in bounds (kMaskSpan + 16 bytes each). What icrc_compute ORs into each
 * 16-byte move of its copy, so that the copy holds the masked bytes without a byte store after
 * the move: ISA-L then loads each 16 bytes from one store of 16 (forwarded), where byte stores
 * into a moved chunk made its load wait for them to reach the cache (bench/micro BM_Icrc 64 B:
 * 17 ns against ISA-L's own 3.5 ns on a clean buffer; commit message).
 */
constexpr std::size_t kMaskSpan = 96; // >= kMaskedPrefixMax (60 + 8 + 12), a multiple of 16
static_assert(kMaskSpan >= kMaskedPrefixMax && kMaskSpan % 16 == 0);
using MaskTable = std::array<std::uint8_t, kMaskSpan + 16>;
constexpr MaskTable mask_table(std::size_t ip_len, bool ipv6) {
    MaskTable m{};
    if (ipv6) {
        m[0] = 0x0f;               // traffic class (high nibble) — the version nibble stays
        m[1] = m[2] = m[3] = 0xff; // rest of traffic class and the flow label
        m[7] = 0xff;               // hop limit
    } else {
        m[1] = 0xff;          // TOS
        m[8] = 0xff;          // TTL
        m[10] = m[11] = 0xff; // header checksum
    }
    m[ip_len + 6] = m[ip_len + 7] = 0xff;  // UDP checksum
    m[ip_len + sizeof(UdpHdr) + 4] = 0xff; // BTH FECN, BECN, resv6
    return m;
}
constexpr std::array<MaskTable, 12> kMasks = [] {
    std::array<MaskTable, 12> t{};
    for (std::size_t ihl = 5; ihl <= 15; ++ihl)
        t[ihl - 5] = mask_table(ihl * 4, false);
    t[11] = mask_table(sizeof(Ipv6Hdr), true);
    return t;
}();

/**
 * Copies @p n >= 16 bytes of @p src to @p dst in 16-byte moves, ORing @p mask into the first
 * kMaskSpan bytes; the last move overlaps the one before when @p n is not a multiple of 16. A
 * plain memcpy of a length known to be at most kOneShotMax became `rep movsq` (GCC, -O2), which
 * starts slowly: 70 % of icrc_compute's own samples once (bench/engine 64 B WRITE).
 */
#if defined(__x86_64__)
__m128i load16(const std::uint8_t* p) noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
#endif

void copy_masked(std::uint8_t* dst, const std::uint8_t* src, std::size_t n,
                 const std::uint8_t* mask) noexcept {
#if defined(__x86_64__)
    const auto move = [&](std::size_t at) {
        __m128i v = load16(src + at);
        if (at < kMaskSpan) v = _mm_or_si128(v, load16(mask + at));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at), v);
    };
#else
    const auto move = [&](std::size_t at) {
        std::memcpy(dst + at, src + at, 16);
        if (at < kMaskSpan)
            for (std::size_t i = 0; i < 16; ++i)
                dst[at + i] |= mask[at + i];
    };
#endif
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        move(i);
    if (i < n) move(n - 16);
}

/** CRC-32 (reflected, zlib's) of @p n bytes of 0xff, bit by bit: for constants only. */
constexpr std::uint32_t crc32_of_ones(std::size_t n) noexcept {
    std::uint32_t c = 0xffffffffu;
    for (std::size_t i = 0; i < n; ++i) {
        c ^= 0xffu;
        for (int b = 0; b < 8; ++b)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}
/**
 * CRC of the 8 bytes of 0xff that stand in for the LRH (Annex A17.3.3): the same for every packet,
 * so each ICRC starts from it (a compile-time constant: no static initialisation order to mind).
 */
constexpr std::uint32_t kLrhStandInCrc = crc32_of_ones(8);
static_assert(crc32_of_ones(1) == 0xff000000u && kLrhStandInCrc == 0x2144df1cu,
              "zlib.crc32(b'\\xff' * n)");

#if defined(__x86_64__)
/** crc32_of_ones(k) for k = 0 .. 8: where an ICRC starts when 8 - k of the stand-in's bytes are in
 *  the buffer. */
constexpr std::array<std::uint32_t, 9> kOnesCrc = [] {
    std::array<std::uint32_t, 9> t{};
    for (std::size_t k = 0; k <= 8; ++k)
        t[k] = crc32_of_ones(k);
    return t;
}();
/** 16 bytes of 0xff then 16 of 0: a 16-byte load at 16 - j has 0xff in its j low bytes. */
alignas(16) constexpr std::array<std::uint8_t, 32> kOnesThenZeros = [] {
    std::array<std::uint8_t, 32> t{};
    for (std::size_t i = 0; i < 16; ++i)
        t[i] = 0xff;
    return t;
}();

/**
 * The masked copy of a short packet whose length @p n leaves 8 - 15 bytes over a multiple of 16
 * (an ACK, a 64 B WRITE or SEND, a READ request, a CNP): the last @p j = 16 - n % 16 bytes of the
 * LRH stand-in go in front of it, so that the copy (n + j bytes into @p dst) is whole 16-byte
 * moves, none overlapping another. With an overlapping last move (copy_masked) the load ISA-L
 * makes of the 16 bytes before it spans two stores and waits for both to reach the cache. The
 * CRC then starts from kOnesCrc[8 - j].
 */
void copy_masked_after_ones(std::uint8_t* dst, const std::uint8_t* src, std::size_t n,
                            std::size_t j, const std::uint8_t* mask) noexcept {
    // The first 16 bytes moved up by j (a byte shift by a variable count, from two 64-bit
    // shifts), the j bytes below them 0xff.
    const __m128i x = _mm_or_si128(load16(src), load16(mask));
    const __m128i up = _mm_sll_epi64(x, _mm_cvtsi32_si128(static_cast<int>(8 * j)));
    const __m128i carry =
        _mm_srl_epi64(_mm_slli_si128(x, 8), _mm_cvtsi32_si128(static_cast<int>(64 - 8 * j)));
    const __m128i first =
        _mm_or_si128(_mm_or_si128(up, carry), load16(kOnesThenZeros.data() + 16 - j));
    _mm_store_si128(reinterpret_cast<__m128i*>(dst), first);
    for (std::size_t at = 16; at < n + j; at += 16) {
        const std::size_t from = at - j;
        __m128i v = load16(src + from);
        if (from < kMaskSpan) v = _mm_or_si128(v, load16(mask + from));
        _mm_store_si128(reinterpret_cast<__m128i*>(dst + at), v);
    }
}
#endif
} // namespace

std::uint32_t icrc_compute(std::span<const std::uint8_t> l3, bool ipv6) noexcept {
    std::size_t ip_len;
    if (ipv6) {
        ip_len = sizeof(Ipv6Hdr);
    } else {
        if (l3.empty()) return 0;
        ip_len = (l3[0] & 0xfu) * 4u;
        if (ip_len < sizeof(Ipv4Hdr)) return 0;
    }
    const std::size_t prefix = ip_len + sizeof(UdpHdr) + sizeof(Bth);
    if (l3.size() < prefix) return 0;

    // The variant fields are masked in a copy: the packet itself is never written. A short packet
    // is copied whole, so that one CRC call covers it; a longer one has its headers copied in
    // whole 16-byte moves (the moves ISA-L's loads then match) and the rest read in place.
    static_assert(kOneShotMax >= kMaskSpan);
    alignas(64) std::uint8_t masked[kOneShotMax + 16];
    const std::uint8_t* mask = kMasks[ipv6 ? 11 : ip_len / 4 - 5].data();
#if defined(__x86_64__)
    if (l3.size() <= kOneShotMax && l3.size() % 16 >= 8) {
        const std::size_t j = 16 - l3.size() % 16;
        copy_masked_after_ones(masked, l3.data(), l3.size(), j, mask);
        return crc_continue(kOnesCrc[8 - j], masked, l3.size() + j);
    }
#endif
    if (l3.size() <= kOneShotMax) {
        copy_masked(masked, l3.data(), l3.size(), mask);
        return crc_continue(kLrhStandInCrc, masked, l3.size());
    }
    const std::size_t head = (prefix + 15) & ~std::size_t{15}; // <= kMaskSpan < l3.size()
    copy_masked(masked, l3.data(), head, mask);
    const std::uint32_t crc = crc_continue(kLrhStandInCrc, masked, head);
    return crc_continue(crc, l3.data() + head, l3.size() - head);
}

std::uint32_t icrc_continue(std::uint32_t icrc, std::span<const std::uint8_t> more) noexcept {
    return more.empty() ? icrc : crc_continue(icrc, more.data(), more.size());
}

} // namespace droce::wire
