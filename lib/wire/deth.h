/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Datagram Extended Transport Header, IBTA Vol 1 §9.3.2 (8 bytes; UD). */
#pragma once

#include <cstdint>

#include "byteorder.h"

namespace droce::wire {

struct Deth {
    Be32 qkey;
    std::uint8_t reserved;
    Be24 src_qp_be; ///< the sender's QP number

    [[nodiscard]] constexpr std::uint32_t src_qp() const noexcept { return src_qp_be.get(); }
    constexpr void set_src_qp(std::uint32_t qpn) noexcept { src_qp_be.set(qpn & 0xffffffu); }
};
static_assert(sizeof(Deth) == 8);

} // namespace droce::wire
