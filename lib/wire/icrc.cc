/* SPDX-License-Identifier: BSD-3-Clause */
#include "icrc.h"

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
 * Copies @p n >= 16 bytes in 16-byte moves, the last one overlapping. A plain memcpy of a length
 * known to be at most kOneShotMax became `rep movsq` (GCC, -O2), which starts slowly on the AMD
 * cores here: 70 % of icrc_compute's own samples (bench/engine 64 B WRITE, commit message).
 */
void copy_at_least_16(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) noexcept {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        std::memcpy(dst + i, src + i, 16);
    if (i < n) std::memcpy(dst + n - 16, src + n - 16, 16);
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
    // is copied whole, so that one CRC call covers it.
    static_assert(kOneShotMax >= kMaskedPrefixMax);
    alignas(64) std::uint8_t masked[kOneShotMax];
    const bool one_shot = l3.size() <= kOneShotMax;
    copy_at_least_16(masked, l3.data(), one_shot ? l3.size() : prefix);
    if (ipv6) {
        masked[0] |= 0x0f; // traffic class (high nibble) — the version nibble stays
        masked[1] = masked[2] = masked[3] = 0xff; // rest of traffic class and the flow label
        masked[7] = 0xff;                         // hop limit
    } else {
        masked[1] = 0xff;               // TOS
        masked[8] = 0xff;               // TTL
        masked[10] = masked[11] = 0xff; // header checksum
    }
    masked[ip_len + 6] = masked[ip_len + 7] = 0xff; // UDP checksum
    masked[ip_len + sizeof(UdpHdr) + 4] = 0xff;     // BTH FECN, BECN, resv6

    if (one_shot) return crc_continue(kLrhStandInCrc, masked, l3.size());
    const std::uint32_t crc = crc_continue(kLrhStandInCrc, masked, prefix);
    return crc_continue(crc, l3.data() + prefix, l3.size() - prefix);
}

std::uint32_t icrc_continue(std::uint32_t icrc, std::span<const std::uint8_t> more) noexcept {
    return more.empty() ? icrc : crc_continue(icrc, more.data(), more.size());
}

} // namespace droce::wire
