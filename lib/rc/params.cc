/* SPDX-License-Identifier: BSD-3-Clause */
#include "params.h"

namespace droce::rc {

std::uint64_t rnr_timer_ns(std::uint8_t code) noexcept {
    // IBTA Vol 1 table 45, in microseconds.
    static constexpr std::uint32_t kUs[32] = {
        655360, 10,    20,    30,    40,    60,    80,     120,    160,    240,    320,
        480,    640,   960,   1280,  1920,  2560,  3840,   5120,   7680,   10240,  15360,
        20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
    };
    return static_cast<std::uint64_t>(kUs[code & 31u]) * 1000u;
}

} // namespace droce::rc
