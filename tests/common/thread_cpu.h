/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * CPU time of this process's threads by name, from /proc/self/task (for tests that check that an
 * idle thread sleeps). Linux only; test code.
 */
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace droce::test {

/**
 * CPU seconds (user + system, clock-tick resolution) used so far by the threads of this process
 * whose name (comm) is @p name; -1 if /proc/self/task cannot be read.
 */
inline double thread_cpu_seconds(const char* name) {
    DIR* d = opendir("/proc/self/task");
    if (!d) return -1;
    double total = 0;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string dir = std::string("/proc/self/task/") + e->d_name;
        char comm[32] = {};
        std::FILE* f = std::fopen((dir + "/comm").c_str(), "r");
        if (!f) continue;
        const bool named = std::fgets(comm, sizeof comm, f) != nullptr &&
                           std::strncmp(comm, name, std::strlen(name)) == 0 &&
                           (comm[std::strlen(name)] == '\n' || comm[std::strlen(name)] == 0);
        std::fclose(f);
        if (!named) continue;
        char line[1024] = {};
        f = std::fopen((dir + "/stat").c_str(), "r");
        if (!f) continue;
        const bool got = std::fgets(line, sizeof line, f) != nullptr;
        std::fclose(f);
        // After the parenthesised name: state is field 3, utime 14, stime 15.
        const char* close = got ? std::strrchr(line, ')') : nullptr;
        unsigned long utime = 0, stime = 0;
        if (close && std::sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                                 &utime, &stime) == 2)
            total += static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
    closedir(d);
    return total;
}

} // namespace droce::test
