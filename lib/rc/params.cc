/* SPDX-License-Identifier: BSD-3-Clause */
#include "params.h"

#include "wire/aeth.h"

namespace droce::rc {

std::uint64_t rnr_timer_ns(std::uint8_t code) noexcept {
    return static_cast<std::uint64_t>(wire::rnr_timer_usec(code & 31u)) * 1000u;
}

} // namespace droce::rc
