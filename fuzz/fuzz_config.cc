/* SPDX-License-Identifier: BSD-3-Clause */
// libFuzzer target: the config loader (lib/config, over DPDK's rte_cfgfile) on any file contents.
// The input is written to a private temporary file (the loader reads a path, as the tools do) and
// loaded; a config it accepts must carry 1..4 devices, and every reject must say why in one line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "scratch_file.h"

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& path = fuzz::write_scratch("config", data, size);
    std::string err;
    const auto cfg = droce::load_config(path, &err);
    if (cfg) {
        if (cfg->devices.empty() || cfg->devices.size() > 4) std::abort();
    } else if (err.empty() || err.find('\n') != std::string::npos) {
        std::abort();
    }
    return 0;
}
