/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * UDP source port of a RoCEv2 QP: the flow entropy a switch hashes on.
 *
 * droce follows the rule Linux uses for every RoCE device (rdma_get_udp_sport() in
 * include/rdma/ib_verbs.h): with no flow label given, one is derived from the product of the two
 * QP numbers folded to 20 bits; the port is then 0xC000 | the 14-bit fold of that label. The rule
 * is symmetric, so both ends of a connection pick the same port. Example: lqpn 0x11, rqpn 0x12 →
 * flow label 0x132 → port 0xC132.
 */
#pragma once

#include <cstdint>

namespace droce::wire {

/** Flow label (20 bits) derived from the local and remote QP numbers (24 bits each). */
[[nodiscard]] constexpr std::uint32_t flow_label_from_qpns(std::uint32_t lqpn,
                                                           std::uint32_t rqpn) noexcept {
    std::uint64_t v = static_cast<std::uint64_t>(lqpn) * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    return static_cast<std::uint32_t>(v & 0xfffff);
}

/**
 * UDP source port for a QP.
 * @param flow_label the GRH flow label (20 bits), or 0 to derive it from the QP numbers.
 * @return a port in 0xC000..0xFFFF.
 */
[[nodiscard]] constexpr std::uint16_t rdma_udp_sport(std::uint32_t flow_label, std::uint32_t lqpn,
                                                     std::uint32_t rqpn) noexcept {
    std::uint32_t fl = flow_label ? (flow_label & 0xfffff) : flow_label_from_qpns(lqpn, rqpn);
    return static_cast<std::uint16_t>(((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14)) | 0xc000);
}

static_assert(rdma_udp_sport(0, 0x11, 0x12) == 0xc132);

} // namespace droce::wire
