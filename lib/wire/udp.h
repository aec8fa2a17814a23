/* SPDX-License-Identifier: BSD-3-Clause */
/** @file UDP header (RFC 768) and the RoCEv2 port. */
#pragma once

#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

/** IANA UDP destination port of RoCEv2 (IBTA Annex A17.2.1). */
inline constexpr std::uint16_t kRoceV2Port = 4791;

/** UDP header, 8 bytes. */
struct UdpHdr {
    Be16 src_port; ///< carries flow entropy in RoCEv2 (see udp_sport.h)
    Be16 dst_port;
    Be16 length;   ///< bytes, header included
    Be16 checksum; ///< 0 on IPv4 RoCEv2 (A17.3.2); masked out of the ICRC
};
static_assert(sizeof(UdpHdr) == 8);

} // namespace droce::wire
