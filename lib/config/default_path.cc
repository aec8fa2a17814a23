/* SPDX-License-Identifier: BSD-3-Clause */
#include "config/default_path.h"

#include <sys/stat.h>

#include <filesystem>

namespace droce {

std::string default_config_path(const char* binary, const char* build_dir, const char* build_config,
                                const char* installed_config) {
    if (binary == nullptr || *binary == '\0') return installed_config;
    const std::string parent = std::filesystem::path(binary).parent_path().string();
    const char* dir = parent.empty() ? "." : parent.c_str(); // a bare file name: the cwd
    struct stat a {};
    struct stat b {};
    if (::stat(dir, &a) != 0 || ::stat(build_dir, &b) != 0) return installed_config;
    return (a.st_dev == b.st_dev && a.st_ino == b.st_ino) ? build_config : installed_config;
}

} // namespace droce
