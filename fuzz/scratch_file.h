/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The file a fuzz target whose code under test reads a path (the config loader, droce-trace's
 * capture reader) writes each input to: one per process, on tmpfs (/dev/shm) when there is one
 * (the file is written and read again for every input), else in /tmp; removed at exit.
 */
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

/** The scratch file's path (made on the first call; @p tag names it: droce-fuzz-TAG-XXXXXX). */
inline const std::string& scratch_path(const char* tag) {
    static const std::string path = [tag] {
        std::string shm = std::string("/dev/shm/droce-fuzz-") + tag + "-XXXXXX";
        std::string tmp = std::string("/tmp/droce-fuzz-") + tag + "-XXXXXX";
        std::string* name = &shm;
        int fd = mkstemp(shm.data());
        if (fd < 0) {
            name = &tmp;
            fd = mkstemp(tmp.data());
        }
        if (fd < 0) std::abort();
        close(fd);
        return *name;
    }();
    static const bool removed_at_exit = std::atexit([] { unlink(path.c_str()); }) == 0;
    (void)removed_at_exit;
    return path;
}

/** Writes @p size bytes at @p data as the whole scratch file; aborts when it cannot. */
inline const std::string& write_scratch(const char* tag, const std::uint8_t* data,
                                        std::size_t size) {
    const std::string& path = scratch_path(tag);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

} // namespace fuzz
