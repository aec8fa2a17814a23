/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Connecting an RC QP: the RESET -> INIT -> RTR -> RTS sequence every user of the native API
 * (tests, benches, droce-perf) runs once it knows its peer's QPN, PSN and address. A control call:
 * it may wait for the engine like modify_qp (device.h, thread rules).
 */
#pragma once

#include <cstdint>

#include "engine/device.h"
#include "rc/types.h"

namespace droce {

/**
 * What connect_rc() gives a QP, in ibv_qp_attr's terms. The defaults are rc::QpAttr's, so a field
 * left alone is what modify_qp would get from a default rc::QpAttr.
 */
struct RcConnectParams {
    // INIT
    std::uint8_t port_num = 1;         ///< 1-based port of the QP
    std::uint32_t qp_access_flags = 0; ///< remote operations the QP accepts (rc::kAccessRemote*)
    // RTR
    rc::Mtu path_mtu = rc::Mtu::mtu1024; ///< at most the port's MTU
    std::uint32_t dest_qp_num = 0;       ///< the peer's QPN (24 bits)
    std::uint32_t rq_psn = 0;            ///< first PSN expected from the peer: its sq_psn (24 bits)
    std::uint8_t max_dest_rd_atomic = 1; ///< peer READ / atomic requests served at once (≤ 16)
    std::uint8_t min_rnr_timer = 0;      ///< RNR NAK timer code this QP asks for (IBTA table 45)
    rc::AddressVector ah_attr; ///< the peer: dgid; dmac all zero lets the engine resolve it
    // RTS
    std::uint32_t sq_psn = 0;       ///< first PSN this QP sends (24 bits)
    std::uint8_t timeout = 14;      ///< local ACK timeout: 4.096 us × 2^timeout; 0 = none (≤ 31)
    std::uint8_t retry_cnt = 7;     ///< retries after a local ACK timeout or NAK (≤ 7)
    std::uint8_t rnr_retry = 7;     ///< retries after an RNR NAK; 7 = without limit
    std::uint8_t max_rd_atomic = 1; ///< READ / atomic requests in flight (≤ 16)
};

/**
 * Brings @p qp, in RESET, to RTS with @p p (P_Key index 0): three Device::modify_qp calls with the
 * attribute masks IBTA requires of an RC QP for RESET -> INIT, INIT -> RTR and RTR -> RTS
 * (§11.2.4.2).
 * @param refused if not null and a transition is refused, receives the state it aimed at (init,
 *        rtr or rts); the QP stays in the state before it.
 * @return 0, or the errno of the refused transition (EINVAL, as modify_qp).
 */
int connect_rc(Device& dev, rc::Qp* qp, const RcConnectParams& p,
               rc::QpState* refused = nullptr) noexcept;

} // namespace droce
