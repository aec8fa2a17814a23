/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Congestion Notification Packet body, IBTA Annex A17.9.3 (RoCEv2 congestion management).
 *
 * A CNP is BTH (opcode 0x81, BECN set, P_Key 0xFFFF, DestQP = the QP to slow down, PSN 0) followed
 * by 16 reserved bytes and the ICRC. The DCQCN notification point sends it; the reaction point cuts
 * its rate on receipt.
 */
#pragma once

#include <cstdint>

namespace droce::wire {

struct CnpBody {
    std::uint8_t reserved[16];
};
static_assert(sizeof(CnpBody) == 16);

} // namespace droce::wire
