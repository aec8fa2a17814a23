/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Which config a droce binary uses when none is named: the source tree's for the build tree's
 * binaries, the installed one (<sysconfdir>/droce) for installed binaries.
 */
#pragma once

#include <string>

namespace droce {

/**
 * The config a droce binary uses when none is named (no DROCE_CONFIG, no -c): @p build_config when
 * the file @p binary lies in the directory @p build_dir, i.e. the binary runs from the meson build
 * tree (the tests and the README's build-tree examples use the source tree's config/ there), else
 * @p installed_config (the copy `meson install` and the Debian package put under
 * <sysconfdir>/droce). Directories are compared by device and inode, so relative paths and
 * symlinks that name the same place match; a build tree that is gone or hidden (the package test
 * mounts over it) does not.
 * @param binary the binary's file (from dladdr() for a library, /proc/self/exe for a program);
 *        null or empty: the installed config.
 * @return one of the two paths, copied. Control path; allocates; re-entrant.
 */
[[nodiscard]] std::string default_config_path(const char* binary, const char* build_dir,
                                              const char* build_config,
                                              const char* installed_config);

} // namespace droce
