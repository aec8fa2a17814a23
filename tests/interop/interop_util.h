/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Running outside tools (tshark, Debian's python3 with scapy) from the interop tests: a scratch
 * directory per test, a shell command with its output and exit status, and small text helpers.
 */
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace droce::interop {

/** A fresh directory under the test temp dir, removed with the object. */
class ScratchDir {
  public:
    ScratchDir() {
        std::string tmpl =
            (std::filesystem::temp_directory_path() / "droce-interop-XXXXXX").string();
        if (char* p = mkdtemp(tmpl.data())) path_ = p;
    }
    ~ScratchDir() {
        std::error_code ec;
        if (!path_.empty() && !std::getenv("DROCE_KEEP_SCRATCH"))
            std::filesystem::remove_all(path_, ec);
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    [[nodiscard]] bool ok() const { return !path_.empty(); }
    [[nodiscard]] std::string file(const std::string& name) const {
        return (path_ / name).string();
    }

  private:
    std::filesystem::path path_;
};

struct CommandResult {
    int status = -1; ///< exit status, or -1 if it did not run or was killed
    std::string out; ///< standard output
};

/** Runs @p cmd with /bin/sh; standard error goes where the command line sends it. */
inline CommandResult run_command(const std::string& cmd) {
    CommandResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        r.out.append(buf, n);
    const int st = pclose(p);
    if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
    return r;
}

/** Single-quotes @p s for /bin/sh. */
inline std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'')
            q += "'\\''";
        else
            q += c;
    }
    return q + "'";
}

inline std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> v;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep))
        v.push_back(cur);
    if (!s.empty() && s.back() == sep) v.emplace_back();
    return v;
}

inline std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> v = split(s, '\n');
    while (!v.empty() && v.back().empty())
        v.pop_back();
    return v;
}

inline std::string hex(std::uint64_t v, int digits) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%0*llx", digits, static_cast<unsigned long long>(v));
    return b;
}

inline std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
    std::string s;
    char b[3];
    for (std::size_t i = 0; i < n; ++i) {
        std::snprintf(b, sizeof b, "%02x", p[i]);
        s += b;
    }
    return s;
}

} // namespace droce::interop
