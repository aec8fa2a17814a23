/* SPDX-License-Identifier: BSD-3-Clause */
/** @file Base Transport Header, IBTA Vol 1 §9.2 (12 bytes, present in every RoCEv2 packet). */
#pragma once

#include <cstdint>

#include "byteorder.h"
#include "opcode.h"
#include "psn.h"

namespace droce::wire {

/** The only BTH transport header version defined by IBTA (TVer, §9.2.5). */
inline constexpr std::uint8_t kBthTver = 0;
/** The default partition key, full membership (§10.9.1). */
inline constexpr std::uint16_t kDefaultPkey = 0xffff;

struct Bth {
    std::uint8_t opcode_byte;
    std::uint8_t flags; ///< SE (bit 7), MigReq (bit 6), PadCnt (bits 5:4), TVer (bits 3:0)
    Be16 pkey;
    std::uint8_t
        fecn_becn; ///< FECN (bit 7), BECN (bit 6), reserved (5:0); all masked out of the ICRC
    Be24 dest_qp_be;
    std::uint8_t ackreq_byte; ///< AckReq (bit 7), reserved (6:0)
    Be24 psn_be;

    [[nodiscard]] constexpr Opcode opcode() const noexcept {
        return static_cast<Opcode>(opcode_byte);
    }
    constexpr void set_opcode(Opcode op) noexcept { opcode_byte = static_cast<std::uint8_t>(op); }
    [[nodiscard]] constexpr bool se() const noexcept { return flags & 0x80u; }
    [[nodiscard]] constexpr bool mig_req() const noexcept { return flags & 0x40u; }
    /** Bytes of pad (0..3) between the payload and the ICRC. */
    [[nodiscard]] constexpr unsigned pad_count() const noexcept { return (flags >> 4) & 3u; }
    [[nodiscard]] constexpr unsigned tver() const noexcept { return flags & 0xfu; }
    constexpr void set_flags(bool se, bool mig_req, unsigned pad, unsigned tver) noexcept {
        flags = static_cast<std::uint8_t>((se ? 0x80u : 0u) | (mig_req ? 0x40u : 0u) |
                                          ((pad & 3u) << 4) | (tver & 0xfu));
    }
    [[nodiscard]] constexpr bool fecn() const noexcept { return fecn_becn & 0x80u; }
    [[nodiscard]] constexpr bool becn() const noexcept { return fecn_becn & 0x40u; }
    constexpr void set_fecn_becn(bool fecn, bool becn) noexcept {
        fecn_becn = static_cast<std::uint8_t>((fecn ? 0x80u : 0u) | (becn ? 0x40u : 0u));
    }
    /** Destination QP number (24 bits). */
    [[nodiscard]] constexpr std::uint32_t dest_qp() const noexcept { return dest_qp_be.get(); }
    constexpr void set_dest_qp(std::uint32_t qpn) noexcept { dest_qp_be.set(qpn & 0xffffffu); }
    [[nodiscard]] constexpr bool ack_req() const noexcept { return ackreq_byte & 0x80u; }
    constexpr void set_ack_req(bool a) noexcept { ackreq_byte = a ? 0x80u : 0u; }
    [[nodiscard]] constexpr Psn psn() const noexcept { return Psn(psn_be.get()); }
    constexpr void set_psn(Psn p) noexcept { psn_be.set(p.value()); }
};
static_assert(sizeof(Bth) == 12);

} // namespace droce::wire
