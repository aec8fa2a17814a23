/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * For the fuzz targets: give a frame whose headers parse the ICRC droce computes for it, so that a
 * mutated frame gets past the ICRC check and reaches the rules behind it.
 */
#pragma once

#include <cstdint>
#include <span>

#include "wire/icrc.h"
#include "wire/packet.h"

namespace droce::fuzz {

/**
 * Rewrites the ICRC of @p f in place (the 4 bytes before the end of the IP packet).
 * @param pf what parse_frame(f, pf, {.verify_icrc = false}) returned ok for.
 * @return false (nothing written) when the IP length leaves no room for an ICRC.
 */
inline bool fix_icrc(std::span<std::uint8_t> f, const wire::ParsedFrame& pf) noexcept {
    std::size_t l3_len = 0;
    if (pf.ipv4)
        l3_len = pf.ipv4->total_length.get();
    else if (pf.ipv6)
        l3_len = sizeof(wire::Ipv6Hdr) + pf.ipv6->payload_length.get();
    else
        return false;
    const std::size_t l3_end = pf.l3_offset + l3_len;
    if (l3_end > f.size() || l3_len < 4) return false;
    const std::size_t icrc_off = l3_end - 4;
    wire::store_icrc(
        f.data() + icrc_off,
        wire::icrc_compute(f.subspan(pf.l3_offset, icrc_off - pf.l3_offset), pf.ipv6 != nullptr));
    return true;
}

} // namespace droce::fuzz
