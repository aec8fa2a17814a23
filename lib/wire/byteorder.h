/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Big-endian field storage for wire headers.
 *
 * Every wire header in droce is a struct of these types, so it has alignment 1, no padding, and
 * the same layout on every host. A field is read and written only through get()/set(), which swap
 * bytes; there are no endian-dependent bitfields anywhere in lib/wire.
 */
#pragma once

#include <cstddef>
#include <cstdint>

namespace droce::wire {

/**
 * An unsigned integer of N bytes (1..8) stored most significant byte first.
 * get() returns the host value; set() stores the low N*8 bits of its argument.
 */
template <std::size_t N>
struct BeUint {
    static_assert(N >= 1 && N <= 8);
    using Value = std::conditional_t<(N <= 2), std::uint16_t,
                                     std::conditional_t<(N <= 4), std::uint32_t, std::uint64_t>>;
    std::uint8_t bytes[N];

    [[nodiscard]] constexpr Value get() const noexcept {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < N; ++i)
            v = (v << 8) | bytes[i];
        return static_cast<Value>(v);
    }
    constexpr void set(std::uint64_t v) noexcept {
        for (std::size_t i = N; i-- > 0;) {
            bytes[i] = static_cast<std::uint8_t>(v);
            v >>= 8;
        }
    }
};

using Be16 = BeUint<2>;
using Be24 = BeUint<3>;
using Be32 = BeUint<4>;
using Be64 = BeUint<8>;

static_assert(sizeof(Be16) == 2 && alignof(Be16) == 1);
static_assert(sizeof(Be24) == 3 && alignof(Be24) == 1);
static_assert(sizeof(Be32) == 4 && alignof(Be32) == 1);
static_assert(sizeof(Be64) == 8 && alignof(Be64) == 1);

/** Mask of the low @p bits bits, for accessors that keep a value inside its field. */
constexpr std::uint32_t low_bits(unsigned bits) noexcept {
    return bits >= 32 ? 0xffffffffu : ((1u << bits) - 1u);
}

} // namespace droce::wire
