/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * What droce says to a user whose program printed only its own error: one line on stderr, once per
 * process for each call site (a refused verb, an unsupported one, a degraded thread). Programs call
 * a failing verb again and again (ibv_devinfo opens every device; perftest retries), and one line
 * says why as well as a hundred. Control path: it formats and writes to stderr.
 */
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace droce {

/**
 * Writes "droce: ", @p fmt formatted as printf does (at most 1 KiB), and a newline to stderr,
 * unless
 * @p said is already set; sets it. Thread-safe: the flag is exchanged atomically, so two threads
 * failing alike print one line. @p said is the call site's (a function-local static).
 * @return whether the line was written now.
 */
[[gnu::format(printf, 2, 3)]] inline bool say_once(std::atomic<bool>& said, const char* fmt,
                                                   ...) noexcept {
    if (said.exchange(true, std::memory_order_relaxed)) return false;
    char line[1024];
    std::va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "droce: %s\n", line);
    return true;
}

} // namespace droce
