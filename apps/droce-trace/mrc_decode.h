/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Reading droce's MRC extension headers (lib/wire/mrc.h) for droce-trace: names of the flag bits,
 * NACK reasons and endpoint operations, the PSNs a SACK bitmap reports, plane lists of a port mask.
 *
 * All functions are pure and thread safe; the ones returning strings or vectors allocate.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wire/mrc.h"
#include "wire/psn.h"

namespace droce::trace {

/** UDP source port of MRC path 0 when a QP keeps the default (mrc::MrcAttr::ev_base). */
inline constexpr std::uint16_t kDefaultEvBase = 0xc000;

/** An inclusive range of PSNs, first to last in serial order (last may be below first across the
 *  24-bit wrap). */
struct PsnRange {
    std::uint32_t first = 0;
    std::uint32_t last = 0;
    [[nodiscard]] std::uint32_t count() const noexcept {
        return ((last - first) & wire::Psn::kMask) + 1;
    }
    bool operator==(const PsnRange&) const = default;
};

/** The MDETH flags as words: "first,last,retransmit"; "none" when 0; unknown bits as hex. */
[[nodiscard]] std::string mdeth_flags_text(std::uint8_t flags);

/** The SETH flags as words: "ecn_echo"; "none" when 0; unknown bits as hex. */
[[nodiscard]] std::string seth_flags_text(std::uint8_t flags);

/** Name of a NETH reason: "trimmed", "mpr_exceeded", "wimm_exceeded", "remote_access",
 *  "invalid_request", or "unknown". */
[[nodiscard]] const char* nack_reason_name(std::uint8_t reason) noexcept;

/** Name of an EPETH operation: "port_status" or "unknown". */
[[nodiscard]] const char* endpoint_op_name(std::uint8_t op) noexcept;

/** Every PSN whose bit is set in @p seth's bitmap (PSN sack_base + i for bit i), as ranges in
 *  bitmap order. */
[[nodiscard]] std::vector<PsnRange> sack_ranges(const wire::Seth& seth);

/** The ranges of @p ranges from PSN @p from on (serial order), cut where @p from falls inside one.
 */
[[nodiscard]] std::vector<PsnRange> ranges_from(const std::vector<PsnRange>& ranges,
                                                std::uint32_t from);

/**
 * PSNs the bitmap of @p seth covers that are at or past the cumulative PSN, before the last PSN it
 * reports received, and not reported: the holes the requester must still fill.
 */
[[nodiscard]] std::vector<PsnRange> sack_holes(const wire::Seth& seth);

/** "1200-1263,1300", or "none" for no range. */
[[nodiscard]] std::string format_ranges(const std::vector<PsnRange>& ranges);

/** The planes (bit i = plane i, 0-based) set in @p mask, compactly: "0,1,3-5", or "none". */
[[nodiscard]] std::string plane_list(std::uint8_t mask);

} // namespace droce::trace
