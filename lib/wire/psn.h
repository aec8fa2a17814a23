/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Packet Sequence Number: a 24-bit serial number (IBTA Vol 1 §9.7.1).
 *
 * PSNs wrap from 0xFFFFFF to 0. Comparison is serial arithmetic: a is before b when (b - a) mod
 * 2^24 lies in (0, 2^23). A Psn is its own type so that it cannot be mixed with a plain integer, an
 * MSN or a QPN by accident.
 */
#pragma once

#include <cstdint>

namespace droce::wire {

class Psn {
  public:
    static constexpr std::uint32_t kMask = 0xffffff;

    constexpr Psn() noexcept = default;
    /** Keeps the low 24 bits of @p v. */
    constexpr explicit Psn(std::uint32_t v) noexcept : value_(v & kMask) {}

    [[nodiscard]] constexpr std::uint32_t value() const noexcept { return value_; }

    /** Signed serial distance from @p from to this PSN, in [-2^23, 2^23). */
    [[nodiscard]] constexpr std::int32_t distance_from(Psn from) const noexcept {
        // Shifting the 24-bit difference into the top of a 32-bit word makes the sign bit the
        // serial-arithmetic "ahead/behind" bit.
        return static_cast<std::int32_t>((value_ - from.value_) << 8) >> 8;
    }

    constexpr Psn operator+(std::uint32_t n) const noexcept { return Psn(value_ + n); }
    constexpr Psn operator-(std::uint32_t n) const noexcept { return Psn(value_ - n); }
    constexpr Psn& operator+=(std::uint32_t n) noexcept { return *this = *this + n; }
    constexpr Psn& operator++() noexcept { return *this += 1; }

    friend constexpr bool operator==(Psn a, Psn b) noexcept { return a.value_ == b.value_; }
    friend constexpr bool operator<(Psn a, Psn b) noexcept { return a.distance_from(b) < 0; }
    friend constexpr bool operator>(Psn a, Psn b) noexcept { return a.distance_from(b) > 0; }
    friend constexpr bool operator<=(Psn a, Psn b) noexcept { return a.distance_from(b) <= 0; }
    friend constexpr bool operator>=(Psn a, Psn b) noexcept { return a.distance_from(b) >= 0; }

  private:
    std::uint32_t value_ = 0;
};

static_assert(Psn(0xffffff) + 1 == Psn(0));
static_assert(Psn(0xfffffe) < Psn(1));
static_assert(Psn(1).distance_from(Psn(0xfffffe)) == 3);

} // namespace droce::wire
