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

namespace {
#if defined(__x86_64__)
#define DROCE_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))

/**
 * Folding constants for the reflected zlib polynomial P (0x104C11DB7): a 128-bit lane folded
 * forward over d lanes of 16 bytes is multiplied, low half by x^(128d+32) mod P and high half by
 * x^(128d-32) mod P, each bit-reflected and shifted left by one (the reflected domain's product is
 * one bit short). Computed with a bit-serial x^e mod P (a test checks them against ISA-L through
 * icrc_continue_copy()).
 */
struct FoldK {
    long long hi, lo;
};
constexpr FoldK kFold1{0x0ccaa009e, 0x1751997d0};
constexpr FoldK kFold2{0x15a546366, 0x0f1da05aa};
constexpr FoldK kFold3{0x174359406, 0x03db1ecdc};
constexpr FoldK kFold4{0x1c6e41596, 0x154442bd4};
constexpr FoldK kFold8{0x14a7fe880, 0x1e88ef372};
constexpr FoldK kFold12{0x12e958ac4, 0x1821d8bc0};
constexpr FoldK kFold16{0x1322d1430, 0x11542778a};
/** The Barrett reduction of the last 64 bits: x^64 mod P reflected, then P and its quotient. */
constexpr long long kReduce64 = 0x163cd6124;
constexpr long long kBarrettP = 0x1DB710641, kBarrettMu = 0x1F7011641;

DROCE_FOLD_TARGET inline __m128i fold128(__m128i v, __m128i k) noexcept {
    return _mm_xor_si128(_mm_clmulepi64_si128(v, k, 0x00), _mm_clmulepi64_si128(v, k, 0x11));
}
/** Each 128-bit lane of @p v folded forward (fold128 per lane) and XORed into @p d. */
DROCE_FOLD_TARGET inline __m512i fold512(__m512i v, __m512i k, __m512i d) noexcept {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(v, k, 0x00),
                                     _mm512_clmulepi64_epi128(v, k, 0x11), d, 0x96);
}
DROCE_FOLD_TARGET inline __m512i load(const std::uint8_t* p) noexcept {
    return _mm512_loadu_si512(p);
}
DROCE_FOLD_TARGET inline void store(std::uint8_t* p, __m512i v) noexcept {
    _mm512_storeu_si512(p, v);
}
/** 128-bit lane @p i of @p v (the zeroing form: GCC 12's plain extract warns of its undefined
 *  pass-through). */
template <int i>
DROCE_FOLD_TARGET inline __m128i lane(__m512i v) noexcept {
    return _mm512_maskz_extracti32x4_epi32(0xf, v, i);
}
DROCE_FOLD_TARGET inline __m512i k512(FoldK k) noexcept {
    return _mm512_set_epi64(k.hi, k.lo, k.hi, k.lo, k.hi, k.lo, k.hi, k.lo);
}

/**
 * The one-pass kernel, for n >= 256: the first 256 bytes start four 512-bit accumulators (the
 * running CRC, inverted, XORed into the first 4 bytes), each further 256 folds them forward by
 * 256 bytes; the four then fold into one lane, the leftover 16-byte blocks follow, and a Barrett
 * reduction gives the 32-bit CRC. Bytes past the last whole 16 are left to the caller
 * (@p done_out). Ends with vzeroupper (see clear_upper_vector_state).
 */
DROCE_FOLD_TARGET std::uint32_t copy_fold(std::uint32_t crc, std::uint8_t* dst,
                                          const std::uint8_t* src, std::size_t n,
                                          std::size_t* done_out) noexcept {
    const std::size_t all = n;
    __m512i x0 = load(src), x1 = load(src + 64), x2 = load(src + 128), x3 = load(src + 192);
    store(dst, x0);
    store(dst + 64, x1);
    store(dst + 128, x2);
    store(dst + 192, x3);
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
    src += 256;
    dst += 256;
    n -= 256;
    const __m512i k16 = k512(kFold16);
    while (n >= 256) {
        const __m512i d0 = load(src), d1 = load(src + 64), d2 = load(src + 128),
                      d3 = load(src + 192);
        store(dst, d0);
        store(dst + 64, d1);
        store(dst + 128, d2);
        store(dst + 192, d3);
        x0 = fold512(x0, k16, d0);
        x1 = fold512(x1, k16, d1);
        x2 = fold512(x2, k16, d2);
        x3 = fold512(x3, k16, d3);
        src += 256;
        dst += 256;
        n -= 256;
    }
    __m512i x = fold512(x0, k512(kFold12), x3);
    x = fold512(x1, k512(kFold8), x);
    x = fold512(x2, k512(kFold4), x);
    const __m128i k1 = _mm_set_epi64x(kFold1.hi, kFold1.lo);
    __m128i r = lane<3>(x);
    r = _mm_xor_si128(r, fold128(lane<0>(x), _mm_set_epi64x(kFold3.hi, kFold3.lo)));
    r = _mm_xor_si128(r, fold128(lane<1>(x), _mm_set_epi64x(kFold2.hi, kFold2.lo)));
    r = _mm_xor_si128(r, fold128(lane<2>(x), k1));
    while (n >= 16) {
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), d);
        r = _mm_xor_si128(fold128(r, k1), d);
        src += 16;
        dst += 16;
        n -= 16;
    }
    // 128 bits to 64, to 32 (x^64 mod P), then Barrett.
    const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
    r = _mm_xor_si128(_mm_clmulepi64_si128(r, k1, 0x10), _mm_srli_si128(r, 8));
    __m128i t = _mm_and_si128(r, low32);
    r = _mm_xor_si128(_mm_srli_si128(r, 4),
                      _mm_clmulepi64_si128(t, _mm_set_epi64x(0, kReduce64), 0x00));
    const __m128i barrett = _mm_set_epi64x(kBarrettMu, kBarrettP);
    t = _mm_clmulepi64_si128(_mm_and_si128(r, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    const auto c = static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(r, t), 1));
    _mm256_zeroupper();
    *done_out = all - n;
    return ~c;
}
#undef DROCE_FOLD_TARGET

const bool kCpuHasFold512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
}();
#endif
} // namespace

bool icrc_copy_is_one_pass() noexcept {
#if defined(__x86_64__)
    return kCpuHasFold512;
#else
    return false;
#endif
}

std::uint32_t icrc_continue_copy(std::uint32_t icrc, std::uint8_t* dst, const std::uint8_t* src,
                                 std::size_t n) noexcept {
    std::size_t done = 0;
#if defined(__x86_64__)
    if (kCpuHasFold512 && n >= 256) icrc = copy_fold(icrc, dst, src, n, &done);
#endif
    if (done == n) return icrc;
    std::memcpy(dst + done, src + done, n - done);
    return crc_continue(icrc, dst + done, n - done);
}

} // namespace droce::wire
