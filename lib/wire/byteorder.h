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

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

    // At run time the 2-, 3-, 4- and 8-byte fields are one load (or store) and a byte swap: GCC
    // at -O2 leaves the byte loop below as a loop, and every header field of every packet goes
    // through here (bench/engine: 64 B WRITE message rate, commit message).
    [[nodiscard]] constexpr Value get() const noexcept {
        if constexpr (kSwapByLoad) {
            if (!std::is_constant_evaluated()) {
                if constexpr (N == 1) {
                    return bytes[0];
                } else if constexpr (N == 2) {
                    return __builtin_bswap16(load<std::uint16_t>(0));
                } else if constexpr (N == 3) {
                    return static_cast<std::uint32_t>(__builtin_bswap16(load<std::uint16_t>(0)))
                               << 8 |
                           bytes[2];
                } else if constexpr (N == 4) {
                    return __builtin_bswap32(load<std::uint32_t>(0));
                } else if constexpr (N == 8) {
                    return __builtin_bswap64(load<std::uint64_t>(0));
                }
            }
        }
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < N; ++i)
            v = (v << 8) | bytes[i];
        return static_cast<Value>(v);
    }
    constexpr void set(std::uint64_t v) noexcept {
        if constexpr (kSwapByLoad) {
            if (!std::is_constant_evaluated()) {
                if constexpr (N == 1) {
                    bytes[0] = static_cast<std::uint8_t>(v);
                    return;
                } else if constexpr (N == 2) {
                    store(__builtin_bswap16(static_cast<std::uint16_t>(v)));
                    return;
                } else if constexpr (N == 3) {
                    bytes[0] = static_cast<std::uint8_t>(v >> 16);
                    bytes[1] = static_cast<std::uint8_t>(v >> 8);
                    bytes[2] = static_cast<std::uint8_t>(v);
                    return;
                } else if constexpr (N == 4) {
                    store(__builtin_bswap32(static_cast<std::uint32_t>(v)));
                    return;
                } else if constexpr (N == 8) {
                    store(__builtin_bswap64(v));
                    return;
                }
            }
        }
        for (std::size_t i = N; i-- > 0;) {
            bytes[i] = static_cast<std::uint8_t>(v);
            v >>= 8;
        }
    }

  private:
    static constexpr bool kSwapByLoad = std::endian::native == std::endian::little;
    template <typename T>
    [[nodiscard]] T load(std::size_t at) const noexcept {
        T t;
        std::memcpy(&t, bytes + at, sizeof t);
        return t;
    }
    template <typename T>
    void store(T t) noexcept {
        std::memcpy(bytes, &t, sizeof t);
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
