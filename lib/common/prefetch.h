/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Cache prefetch hints for the datapath. With thousands of busy QPs a QP's state is out of every
 * cache when the engine or a poster comes back to it, and each of its lines is a miss; asked for
 * together, the misses overlap instead of each load waiting for the one before it.
 */
#pragma once

namespace droce {

/** Asks for @p line in the exclusive state, for a store soon. __builtin_prefetch(p, 1) emits
 *  PREFETCHW only when the target has PRFCHW, which the project's x86-64 baseline lacks: it becomes
 *  a read prefetch, and each store still waits for the line to be upgraded. (0F 0D is a NOP where
 *  not supported.) Never faults, whatever @p line is. */
inline void prefetch_for_write(const void* line) noexcept {
#if defined(__x86_64__)
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(line)));
#else
    __builtin_prefetch(line, 1, 3);
#endif
}

/** Asks for @p line for reading, into every cache level. Never faults. */
inline void prefetch_for_read(const void* line) noexcept {
    __builtin_prefetch(line, 0, 3);
}

} // namespace droce
