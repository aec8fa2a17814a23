/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Reading one fixed-size record from a pipe whose writers write whole records (at most PIPE_BUF
 * bytes, so each write is atomic): the event pipes of the verbs library's and the MRC API's
 * completion channels and async event queues.
 */
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace droce {

/**
 * Reads one record of @p size bytes from @p fd into @p out, retrying a read interrupted by a
 * signal; blocks unless @p fd is non-blocking. Any thread.
 * @return 0, or -1 with errno: the read's own (EAGAIN on a non-blocking fd with nothing pending,
 *         EBADF, ...), or EIO when the pipe gave a short record or end of file.
 */
inline int read_pipe_record(int fd, void* out, std::size_t size) noexcept {
    ssize_t n;
    do {
        n = ::read(fd, out, size);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(size)) return 0;
    if (n >= 0) errno = EIO;
    return -1;
}

} // namespace droce
