/* SPDX-License-Identifier: BSD-3-Clause */
// libFuzzer target: the config loader (lib/config, over DPDK's rte_cfgfile) on any file contents.
// The input is written to a private temporary file (the loader reads a path, as the tools do) and
// loaded; a config it accepts must carry 1..4 devices, and every reject must say why in one line.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.h"

namespace {

/** One temporary file per process, rewritten for each input. */
const std::string& scratch_path() {
    static const std::string path = [] {
        // tmpfs when there is one: the file is written and read twice for every input.
        char shm[] = "/dev/shm/droce-fuzz-config-XXXXXX";
        char tmp[] = "/tmp/droce-fuzz-config-XXXXXX";
        char* tmpl = shm;
        int fd = mkstemp(shm);
        if (fd < 0) {
            tmpl = tmp;
            fd = mkstemp(tmp);
        }
        if (fd < 0) std::abort();
        close(fd);
        std::atexit([] { unlink(scratch_path().c_str()); });
        return std::string(tmpl);
    }();
    return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& path = scratch_path();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    std::string err;
    const auto cfg = droce::load_config(path, &err);
    if (cfg) {
        if (cfg->devices.empty() || cfg->devices.size() > 4) std::abort();
    } else if (err.empty() || err.find('\n') != std::string::npos) {
        std::abort();
    }
    return 0;
}
