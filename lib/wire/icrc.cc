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
 * requests) are folded in registers (icrc_fold_short), or copied whole into the masked buffer to
 * take one ISA-L call instead of two: each ISA-L call has a fixed cost that dominates at these
 * lengths (measured: bench/micro, bench/engine).
 */
constexpr std::size_t kOneShotMax = 256;

/**
 * The masked fields of the covered headers as bytes of 0xff, one table per header layout: IPv4
 * with IHL 5 to 15 (index IHL - 5) and IPv6 (index 11). A 16-byte window anywhere in
 * [0, kMaskSpan) reads in bounds (kMaskSpan + 16 bytes each). What icrc_compute ORs into each
 * 16-byte move (icrc_fold_short folds the moves in registers; the other routes store a copy), so
 * that the copy holds the masked bytes without a byte store after the move: ISA-L then loads each
 * 16 bytes from one store of 16 (forwarded), where byte stores into a moved chunk made its load
 * wait for them to reach the cache (bench/micro BM_Icrc 64 B: 17 ns against ISA-L's own 3.5 ns on a
 * clean buffer; commit message).
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

#if defined(__x86_64__)
__m128i load16(const std::uint8_t* p) noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
#endif

/**
 * Copies @p n >= 16 bytes of @p src to @p dst in 16-byte moves, ORing @p mask into the first
 * kMaskSpan bytes; the last move overlaps the one before when @p n is not a multiple of 16. A
 * plain memcpy of a length known to be at most kOneShotMax became `rep movsq` (GCC, -O2), which
 * starts slowly: 70 % of icrc_compute's own samples once (bench/engine 64 B WRITE).
 */
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

/*
 * The ICRC of a short packet by carry-less multiplication, folded from the masked 16-byte moves
 * while they are in registers: no copy is stored and read back, and four lanes fold at once.
 * ISA-L's path for buffers under 256 bytes folds one 16-byte chunk after another, each waiting
 * for the one before (about 54 cycles for a 64 B WRITE's 128 bytes in bench/engine, 2026-12-06).
 *
 * The method is the folding of Gopal et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction" (Intel, 2009), with the constants derived here from the polynomial.
 * Registers hold the reflected bit order of the CRC: a 16-byte chunk loaded little-endian has the
 * coefficient of x^(127 - i) in bit i (its first bit on the wire is the highest power), and a
 * 64-bit half has x^(63 - i) in bit i. A carry-less product of two reflected halves is then the
 * reflected product times x, which the constants below absorb.
 */

/** CRC-32's polynomial (IEEE 802.3), x^32 + ... + 1, bit k = coefficient of x^k. */
constexpr std::uint64_t kCrc32Poly = 0x104c11db7ull;

/** x^n mod P, bit k = coefficient of x^k. */
constexpr std::uint32_t x_pow_mod(unsigned n) noexcept {
    std::uint64_t r = 1;
    for (unsigned i = 0; i < n; ++i) {
        r <<= 1;
        if (r & (1ull << 32)) r ^= kCrc32Poly;
    }
    return static_cast<std::uint32_t>(r);
}

/** floor(x^64 / P), 33 bits, bit k = coefficient of x^k: Barrett's constant. */
constexpr std::uint64_t barrett_mu() noexcept {
    // Long division of x^64 by P: quotient bit k - 32 for k = 64 down to 32.
    unsigned __int128 rem = static_cast<unsigned __int128>(1) << 64;
    std::uint64_t q = 0;
    for (int k = 64; k >= 32; --k) {
        if ((rem >> k) & 1) {
            q |= 1ull << (k - 32);
            rem ^= static_cast<unsigned __int128>(kCrc32Poly) << (k - 32);
        }
    }
    return q;
}

constexpr std::uint64_t bit_reverse64(std::uint64_t v) noexcept {
    std::uint64_t r = 0;
    for (int i = 0; i < 64; ++i)
        r |= ((v >> i) & 1u) << (63 - i);
    return r;
}

/** A 64-bit reflected half whose polynomial is @p r (deg < 64, bit k = coefficient of x^k). */
constexpr std::uint64_t reflected_half(std::uint64_t r) noexcept {
    return bit_reverse64(r);
}

/**
 * Constants to fold a 128-bit accumulator @p d bits forward (so that it lines up with a chunk d
 * bits later): its first half (x^64 higher) times x^(64 + d), its second times x^d. Each product
 * gains an x from the reflected multiply, hence x^(63 + d) and x^(d - 1).
 */
struct FoldConstants {
    std::uint64_t first, second;
};
constexpr FoldConstants fold_constants(unsigned d) noexcept {
    return {reflected_half(x_pow_mod(63 + d)), reflected_half(x_pow_mod(d - 1))};
}
constexpr FoldConstants kFold128 = fold_constants(128);
constexpr FoldConstants kFold256 = fold_constants(256);
constexpr FoldConstants kFold384 = fold_constants(384);
constexpr FoldConstants kFold512 = fold_constants(512);
/** The last 128 bits times x^32 (the CRC's own shift): first half times x^96 (x^95, as above). */
constexpr std::uint64_t kReduce96 = reflected_half(x_pow_mod(95));
/** The 96-bit remainder's top 32 bits times x^64. */
constexpr std::uint64_t kReduce64 = reflected_half(x_pow_mod(63));
constexpr std::uint64_t kBarrettMu = reflected_half(barrett_mu());
constexpr std::uint64_t kPolyReflected = reflected_half(kCrc32Poly);

/**
 * The 16 bytes the first chunk of a folded ICRC is XORed with when its data starts @p s bytes in
 * (s = 0 .. 15). The stand-in's 8 bytes of 0xff start the stream, with the CRC's initial value
 * (all ones) XORed into its first four: so, with the accumulator starting at zero, the stream is
 * 00 00 00 00 ff ff ff ff then the data, and zeros in front of it change nothing. When the data
 * starts fewer than 8 bytes in, the chunk holds only the stand-in's last s bytes, and the CRC
 * state the first 8 - s left (from the initial value: ~crc32_of_ones(8 - s)) is XORed into the
 * chunk's first four bytes instead.
 */
using Chunk = std::array<std::uint8_t, 16>;
constexpr std::array<Chunk, 16> kFoldPrefix = [] {
    std::array<Chunk, 16> t{};
    constexpr std::array<std::uint8_t, 8> stream = {0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    for (std::size_t s = 0; s < 16; ++s) {
        Chunk c{};
        if (s >= 8) {
            for (std::size_t i = 0; i < 8; ++i)
                c[s - 8 + i] = stream[i];
        } else {
            const std::uint32_t state = ~crc32_of_ones(8 - s);
            for (std::size_t i = 0; i < s; ++i)
                c[i] = 0xff;
            for (std::size_t i = 0; i < 4; ++i)
                c[i] ^= static_cast<std::uint8_t>(state >> (8 * i));
        }
        t[s] = c;
    }
    return t;
}();

const bool kCpuHasClmul = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") != 0 && __builtin_cpu_supports("avx") != 0;
}();

#define DROCE_CLMUL_TARGET __attribute__((target("avx,pclmul"), always_inline)) inline

DROCE_CLMUL_TARGET __m128i fold(__m128i acc, FoldConstants k) noexcept {
    const __m128i kk =
        _mm_set_epi64x(static_cast<long long>(k.second), static_cast<long long>(k.first));
    return _mm_xor_si128(_mm_clmulepi64_si128(acc, kk, 0x00), _mm_clmulepi64_si128(acc, kk, 0x11));
}

/** The finished CRC (inverted, as zlib returns it) of the stream that @p acc's 128 bits end. */
DROCE_CLMUL_TARGET std::uint32_t reduce(__m128i acc) noexcept {
    // acc * x^32 mod P: the first half times x^96 onto the second half times x^32 (96 bits) ...
    const __m128i k96 = _mm_cvtsi64_si128(static_cast<long long>(kReduce96));
    const __m128i second = _mm_and_si128(_mm_srli_si128(acc, 4), _mm_set_epi32(0, -1, -1, 0));
    const __m128i s = _mm_xor_si128(_mm_clmulepi64_si128(acc, k96, 0x00), second); // bits 32..127
    // ... its top 32 bits (bits 32 .. 63) times x^64 onto the rest: T, 64 bits in the second half
    const __m128i k64 = _mm_cvtsi64_si128(static_cast<long long>(kReduce64));
    const __m128i t = _mm_xor_si128(_mm_clmulepi64_si128(s, k64, 0x00), s);
    // ... then Barrett: q = floor(floor(T / x^32) * mu / x^32), T mod P = T + q * P. T's low 32
    // coefficients, multiplied by mu with the rest, land in bits 63 and up (lower powers), clear
    // of the bits that hold q (31 .. 62).
    const __m128i mu_p =
        _mm_set_epi64x(static_cast<long long>(kPolyReflected), static_cast<long long>(kBarrettMu));
    const __m128i q = _mm_and_si128(_mm_clmulepi64_si128(t, mu_p, 0x01),
                                    _mm_set_epi64x(0, 0x7fffffff80000000ll)); // q * x, reflected
    const __m128i qp = _mm_clmulepi64_si128(q, mu_p, 0x10);                   // q * P * x^2
    const __m128i r = _mm_xor_si128(_mm_srli_epi64(t, 32), _mm_srli_epi64(qp, 30));
    return ~static_cast<std::uint32_t>(_mm_extract_epi32(r, 2));
}

/**
 * icrc_compute() of a packet of @p n <= kOneShotMax bytes at @p src: the masked moves of
 * copy_masked() with the data shifted up by s = (16 - n % 16) % 16, folded as they are made. At
 * least one chunk (n >= 16: callers pass whole headers).
 */
__attribute__((target("avx,pclmul"))) std::uint32_t
icrc_fold_short(const std::uint8_t* src, std::size_t n, const std::uint8_t* mask) noexcept {
    const std::size_t s = (16 - n % 16) % 16;
    const std::size_t chunks = (n + s) / 16;
    const auto chunk = [&](std::size_t k) -> __m128i {
        const std::size_t from = 16 * k - s; // k >= 1
        __m128i v = load16(src + from);
        if (from < kMaskSpan) v = _mm_or_si128(v, load16(mask + from));
        return v;
    };
    // The first chunk: the data's first 16 - s bytes moved up by s (a byte shift by a variable
    // count, from two 64-bit shifts), the stand-in (or its state) below them.
    const __m128i x = _mm_or_si128(load16(src), load16(mask));
    __m128i first;
    if (s >= 8) {
        first =
            _mm_sll_epi64(_mm_slli_si128(x, 8), _mm_cvtsi32_si128(static_cast<int>(8 * (s - 8))));
    } else {
        const __m128i up = _mm_sll_epi64(x, _mm_cvtsi32_si128(static_cast<int>(8 * s)));
        const __m128i carry =
            _mm_srl_epi64(_mm_slli_si128(x, 8), _mm_cvtsi32_si128(static_cast<int>(64 - 8 * s)));
        first = _mm_or_si128(up, carry); // s = 0: x and nothing (a shift by 64 clears)
    }
    first = _mm_xor_si128(first, load16(kFoldPrefix[s].data()));

    __m128i acc;
    std::size_t k;
    if (chunks >= 4) {
        __m128i a0 = first, a1 = chunk(1), a2 = chunk(2), a3 = chunk(3);
        for (k = 4; k + 4 <= chunks; k += 4) {
            a0 = _mm_xor_si128(fold(a0, kFold512), chunk(k));
            a1 = _mm_xor_si128(fold(a1, kFold512), chunk(k + 1));
            a2 = _mm_xor_si128(fold(a2, kFold512), chunk(k + 2));
            a3 = _mm_xor_si128(fold(a3, kFold512), chunk(k + 3));
        }
        acc = _mm_xor_si128(_mm_xor_si128(fold(a0, kFold384), fold(a1, kFold256)),
                            _mm_xor_si128(fold(a2, kFold128), a3));
    } else {
        acc = first;
        k = 1;
    }
    for (; k < chunks; ++k)
        acc = _mm_xor_si128(fold(acc, kFold128), chunk(k));
    return reduce(acc);
}

/**
 * What icrc_fold_zmm ORs into its 64-byte blocks, one table per header layout (as kMasks): the
 * stand-in's four bytes of 0xff at [68, 72), then the packet's masked fields from 72 on. A block
 * whose stream starts the data t bytes in reads its 64 bytes at 72 - t (t in [8, 72): in bounds).
 */
constexpr std::size_t kZmmOrBase = 72;
constexpr std::size_t kZmmOrSpan = kZmmOrBase - 8 + 64 * 4 + 64; // t = 8, the fifth block's end
using ZmmOrTable = std::array<std::uint8_t, kZmmOrSpan>;
constexpr std::array<ZmmOrTable, 12> kZmmOr = [] {
    std::array<ZmmOrTable, 12> t{};
    for (std::size_t l = 0; l < 12; ++l) {
        for (std::size_t i = kZmmOrBase - 4; i < kZmmOrBase; ++i)
            t[l][i] = 0xff;
        for (std::size_t m = 0; m < kMaskSpan; ++m)
            t[l][kZmmOrBase + m] = kMasks[l][m];
    }
    return t;
}();

const bool kCpuHasZmmClmul = [] {
    __builtin_cpu_init();
    return kCpuHasClmul && __builtin_cpu_supports("avx512f") != 0 &&
           __builtin_cpu_supports("avx512bw") != 0 && __builtin_cpu_supports("avx512vl") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0;
}();

#define DROCE_ZMM_TARGET                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,avx"), always_inline)) inline

/** Fold constants for each 128-bit lane, lane 0 (the block's first chunk) first. */
DROCE_ZMM_TARGET __m512i lane_constants(FoldConstants a, FoldConstants b, FoldConstants c,
                                        FoldConstants d) noexcept {
    return _mm512_set_epi64(static_cast<long long>(d.second), static_cast<long long>(d.first),
                            static_cast<long long>(c.second), static_cast<long long>(c.first),
                            static_cast<long long>(b.second), static_cast<long long>(b.first),
                            static_cast<long long>(a.second), static_cast<long long>(a.first));
}

/** fold() in each of the four lanes, each with its own constants. */
DROCE_ZMM_TARGET __m512i fold4(__m512i acc, __m512i k) noexcept {
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(acc, k, 0x00),
                            _mm512_clmulepi64_epi128(acc, k, 0x11));
}

/**
 * Block @p j (bytes [64j, 64j + 64)) of the stream whose data (@p src) starts @p t bytes in: the
 * packet's bytes there, by a masked load (positions before t are not read), ORed with @p ors.
 */
DROCE_ZMM_TARGET __m512i stream_block(const std::uint8_t* src, std::size_t t,
                                      const std::uint8_t* ors, std::size_t j) noexcept {
    const std::size_t at = 64 * j;
    const __mmask64 k = at >= t ? ~__mmask64{0} : at + 64 <= t ? 0 : ~__mmask64{0} << (t - at);
    const __m512i v = _mm512_maskz_loadu_epi8(k, src + at - t);
    return _mm512_or_si512(v, _mm512_loadu_si512(ors + at));
}

/**
 * icrc_fold_short() with four lanes of 512-bit carry-less multiplies (VPCLMULQDQ): one instruction
 * folds four 16-byte chunks, where the 128-bit route issues four, and the packet is read in 64-byte
 * blocks by masked loads (AVX-512BW), which neither read nor fault on the bytes masked off. The
 * stream (the stand-in, then the packet) is laid out to end on a block boundary: zeros in front,
 * which change nothing, as in icrc_fold_short. @p n <= kOneShotMax, @p layout indexes kZmmOr.
 */
__attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul,avx"))) std::uint32_t
icrc_fold_zmm(const std::uint8_t* src, std::size_t n, std::size_t layout) noexcept {
    const std::size_t blocks = (n + 8 + 63) / 64;
    const std::size_t t = 64 * blocks - n; // where the data starts in the stream, in [8, 72)
    const std::uint8_t* ors = kZmmOr[layout].data() + kZmmOrBase - t;
    __m512i acc = stream_block(src, t, ors, 0);
    const __m512i k512 = lane_constants(kFold512, kFold512, kFold512, kFold512);
    for (std::size_t j = 1; j < blocks; ++j)
        acc = _mm512_xor_si512(fold4(acc, k512), stream_block(src, t, ors, j));
    // The last block's four chunks onto its last: the first 384 bits forward, the second 256, the
    // third 128 (the fourth lane's constants are zero: its product is nothing), then its own.
    const __m512i shifted =
        fold4(acc, lane_constants(kFold384, kFold256, kFold128, FoldConstants{0, 0}));
    const __m512i sum = _mm512_xor_si512(shifted, _mm512_maskz_mov_epi64(0xc0, acc));
    // The lanes by zero-masked extracts: GCC 12 builds the unmasked ones, and the 512-to-256 cast,
    // on an "undefined" register that -Wuninitialized then reports (-Werror in CI).
    const __m128i lanes01 = _mm_xor_si128(_mm512_maskz_extracti32x4_epi32(0xf, sum, 0),
                                          _mm512_maskz_extracti32x4_epi32(0xf, sum, 1));
    const __m128i lanes23 = _mm_xor_si128(_mm512_maskz_extracti32x4_epi32(0xf, sum, 2),
                                          _mm512_maskz_extracti32x4_epi32(0xf, sum, 3));
    return reduce(_mm_xor_si128(lanes01, lanes23));
}

const bool kCpuHasYmmClmul = [] {
    __builtin_cpu_init();
    return kCpuHasClmul && __builtin_cpu_supports("avx2") != 0 &&
           __builtin_cpu_supports("vpclmulqdq") != 0;
}();

#define DROCE_YMM_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,avx"), always_inline)) inline

/** Fold constants for each 128-bit lane of a 256-bit register, lane 0 (the earlier chunk) first. */
DROCE_YMM_TARGET __m256i lane_constants(FoldConstants a, FoldConstants b) noexcept {
    return _mm256_set_epi64x(static_cast<long long>(b.second), static_cast<long long>(b.first),
                             static_cast<long long>(a.second), static_cast<long long>(a.first));
}

/** fold() in each of the two lanes, each with its own constants. */
DROCE_YMM_TARGET __m256i fold2(__m256i acc, __m256i k) noexcept {
    return _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, k, 0x00),
                            _mm256_clmulepi64_epi128(acc, k, 0x11));
}

DROCE_YMM_TARGET __m256i load32(const std::uint8_t* p) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

/** Bytes a block of crc_fold_ymm: four 256-bit accumulators, eight 16-byte chunks in flight. */
constexpr std::size_t kYmmBlock = 128;
constexpr FoldConstants kFold640 = fold_constants(640);
constexpr FoldConstants kFold768 = fold_constants(768);
constexpr FoldConstants kFold896 = fold_constants(896);
constexpr FoldConstants kFold1024 = fold_constants(1024);

/**
 * crc32_gzip_refl(@p crc, @p p, @p n) for @p n a non-zero multiple of kYmmBlock, by the fold of
 * icrc_fold_short with 256-bit VPCLMULQDQ (VEX-encoded: AVX2 CPUs that have it, such as AMD Zen 3,
 * which lack AVX-512): one instruction folds two chunks, and eight chunks are in flight, enough
 * to cover the multiply's latency. ISA-L 2.30 has a wide fold only for AVX-512 and takes its
 * 128-bit one (crc32_gzip_refl_by8) on these CPUs: 4 KiB in about 1070 TSC cycles on a Zen 3,
 * where this takes about 450 (a standalone loop over 4 KiB buffers, 2026-12-07).
 *
 * The CRC state so far (the inverse of @p crc) is XORed into the first four bytes: what a CRC
 * register holds is what it would be had the stream started with those bits.
 */
__attribute__((target("avx2,vpclmulqdq,pclmul,avx"))) std::uint32_t
crc_fold_ymm(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept {
    __m256i a0 = load32(p), a1 = load32(p + 32), a2 = load32(p + 64), a3 = load32(p + 96);
    a0 = _mm256_xor_si256(a0, _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(~crc))));
    const __m256i k1024 = lane_constants(kFold1024, kFold1024);
    for (std::size_t at = kYmmBlock; at < n; at += kYmmBlock) {
        a0 = _mm256_xor_si256(fold2(a0, k1024), load32(p + at));
        a1 = _mm256_xor_si256(fold2(a1, k1024), load32(p + at + 32));
        a2 = _mm256_xor_si256(fold2(a2, k1024), load32(p + at + 64));
        a3 = _mm256_xor_si256(fold2(a3, k1024), load32(p + at + 96));
    }
    // The last block's eight chunks onto its last: chunk c forward by (7 - c) x 128 bits (the
    // eighth lane's constants are zero: its product is nothing; it is XORed in as it is).
    __m256i sum = _mm256_blend_epi32(_mm256_setzero_si256(), a3, 0xf0);
    sum = _mm256_xor_si256(sum, fold2(a0, lane_constants(kFold896, kFold768)));
    sum = _mm256_xor_si256(sum, fold2(a1, lane_constants(kFold640, kFold512)));
    sum = _mm256_xor_si256(sum, fold2(a2, lane_constants(kFold384, kFold256)));
    sum = _mm256_xor_si256(sum, fold2(a3, lane_constants(kFold128, FoldConstants{0, 0})));
    return reduce(_mm_xor_si128(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1)));
}
#endif

/**
 * Shortest run crc_continue_by folds itself on the 256-bit route; below it ISA-L's fixed cost is
 * the smaller (the fold's final reduction is about a dozen dependent multiplies).
 */
constexpr std::size_t kYmmMin = 2 * 128;

/** How the bytes past a packet's head (and icrc_continue's) are taken. */
enum class LongRoute { isal, fold_ymm };

/** crc_continue() by @p route: whole 128-byte blocks by crc_fold_ymm, what is left by ISA-L. */
std::uint32_t crc_continue_by(std::uint32_t crc, const std::uint8_t* p, std::size_t n,
                              LongRoute route) noexcept {
#if defined(__x86_64__)
    if (route == LongRoute::fold_ymm && n >= kYmmMin) {
        const std::size_t folded = n & ~(kYmmBlock - 1);
        crc = crc_fold_ymm(crc, p, folded);
        return folded == n ? crc : crc_continue(crc, p + folded, n - folded);
    }
#else
    (void)route;
#endif
    return crc_continue(crc, p, n);
}
} // namespace

namespace {
/**
 * The CRC (finished) of the stand-in and the first @p n <= kOneShotMax bytes at @p src, masked by
 * @p mask: a masked copy, then one ISA-L call. Not inlined: its 64-byte aligned buffer on the
 * stack made every icrc_compute_by call realign its frame, on the routes that never use it
 * (bench/engine/instr).
 */
[[gnu::noinline]] std::uint32_t icrc_head_isal(const std::uint8_t* src, std::size_t n,
                                               const std::uint8_t* mask) noexcept {
    static_assert(kOneShotMax >= kMaskSpan);
    alignas(64) std::uint8_t masked[kOneShotMax + 16];
    copy_masked(masked, src, n, mask);
    return crc_continue(kLrhStandInCrc, masked, n);
}

/** How icrc_compute_by computes up to kOneShotMax bytes: a short packet, or a longer one's
 *  headers (ISA-L does the rest of those on every route). */
enum class ShortRoute { isal, fold_xmm, fold_zmm };

std::uint32_t icrc_compute_by(std::span<const std::uint8_t> l3, bool ipv6, ShortRoute route,
                              LongRoute long_route) noexcept {
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

    // The packet itself is never written: its variant fields are masked in registers or in a
    // copy. A short packet is folded from its masked loads in registers (icrc_fold_zmm,
    // icrc_fold_short) or, on a CPU without PCLMULQDQ and AVX, copied whole (masked 16-byte moves,
    // which ISA-L's loads then match) for one ISA-L call (icrc_head_isal). A longer one has its
    // headers taken the same way, and the rest is continued in place.
    const std::size_t layout = ipv6 ? 11 : ip_len / 4 - 5;
    const std::uint8_t* mask = kMasks[layout].data();
    // The CRC (finished) of the stand-in and the packet's first n <= kOneShotMax bytes, masked.
    const auto fold_head = [&](std::size_t n) -> std::uint32_t {
#if defined(__x86_64__)
        if (route == ShortRoute::fold_zmm) return icrc_fold_zmm(l3.data(), n, layout);
        if (route == ShortRoute::fold_xmm) return icrc_fold_short(l3.data(), n, mask);
#endif
        return icrc_head_isal(l3.data(), n, mask);
    };
    if (l3.size() <= kOneShotMax) return fold_head(l3.size());
    // ISA-L folds 256 bytes a loop and what is left over 16 bytes at a time, each waiting for the
    // last: the headers are taken so that the rest is whole 256-byte blocks where they can be (a
    // 4 KiB WRITE MIDDLE's rest was 15 blocks and 248 bytes: 15 serial folds a packet).
    std::size_t head = prefix + (l3.size() - prefix) % 256;
    if (head > kOneShotMax) head = (prefix + 15) & ~std::size_t{15}; // <= kMaskSpan < l3.size()
    return crc_continue_by(fold_head(head), l3.data() + head, l3.size() - head, long_route);
}
} // namespace

#if defined(__x86_64__)
namespace {
/** This CPU's routes (after kCpuHasClmul, kCpuHasZmmClmul and kCpuHasYmmClmul: same unit, defined
 *  earlier). A call from another unit's static initialisation before this one's finds them zero:
 *  ISA-L, whose result is the same. An AVX-512 CPU keeps ISA-L for the long part: its own
 *  512-bit fold (crc32_gzip_refl_by16_10) is there the wider one. */
const ShortRoute kShortRoute = kCpuHasZmmClmul ? ShortRoute::fold_zmm
                               : kCpuHasClmul  ? ShortRoute::fold_xmm
                                               : ShortRoute::isal;
const LongRoute kLongRoute =
    kCpuHasYmmClmul && !kCpuHasZmmClmul ? LongRoute::fold_ymm : LongRoute::isal;
} // namespace
#else
namespace {
constexpr ShortRoute kShortRoute = ShortRoute::isal;
constexpr LongRoute kLongRoute = LongRoute::isal;
} // namespace
#endif

std::uint32_t icrc_compute(std::span<const std::uint8_t> l3, bool ipv6) noexcept {
    return icrc_compute_by(l3, ipv6, kShortRoute, kLongRoute);
}

std::uint32_t detail::icrc_compute_isal(std::span<const std::uint8_t> l3, bool ipv6) noexcept {
    return icrc_compute_by(l3, ipv6, ShortRoute::isal, LongRoute::isal);
}

std::uint32_t detail::icrc_compute_fold128(std::span<const std::uint8_t> l3, bool ipv6) noexcept {
#if defined(__x86_64__)
    return icrc_compute_by(l3, ipv6, kCpuHasClmul ? ShortRoute::fold_xmm : ShortRoute::isal,
                           LongRoute::isal);
#else
    return icrc_compute_by(l3, ipv6, ShortRoute::isal, LongRoute::isal);
#endif
}

std::uint32_t detail::icrc_compute_fold256(std::span<const std::uint8_t> l3, bool ipv6) noexcept {
#if defined(__x86_64__)
    return icrc_compute_by(l3, ipv6, kCpuHasClmul ? ShortRoute::fold_xmm : ShortRoute::isal,
                           kCpuHasYmmClmul ? LongRoute::fold_ymm : LongRoute::isal);
#else
    return icrc_compute_by(l3, ipv6, ShortRoute::isal, LongRoute::isal);
#endif
}

bool detail::icrc_has_fold256() noexcept {
#if defined(__x86_64__)
    return kCpuHasYmmClmul;
#else
    return false;
#endif
}

std::uint32_t icrc_continue(std::uint32_t icrc, std::span<const std::uint8_t> more) noexcept {
    return more.empty() ? icrc : crc_continue_by(icrc, more.data(), more.size(), kLongRoute);
}

std::uint32_t detail::icrc_continue_isal(std::uint32_t icrc,
                                         std::span<const std::uint8_t> more) noexcept {
    return more.empty() ? icrc : crc_continue(icrc, more.data(), more.size());
}

} // namespace droce::wire
