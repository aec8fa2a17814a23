/* SPDX-License-Identifier: BSD-3-Clause */
#include "eal.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "common/say_once.h"
#include "dpdk/diagnose.h"

namespace droce::dpdk {
namespace {

std::atomic<bool> g_eal_up{false};
/** The runtime directory of this process's EAL (empty: none, or --in-memory / --no-shconf). */
std::string g_runtime_dir;
/** This process's --file-prefix (hugepage files are named PREFIXmap_N). */
std::string g_file_prefix;
/**
 * The directory above g_runtime_dir (/tmp/dpdk, $XDG_RUNTIME_DIR/dpdk) when this process's EAL
 * made it, not as root: removed with the runtime directory when that leaves it empty. DPDK makes
 * it 0700 and keeps it: a shared /tmp/dpdk then belonged to the first user who ran droce, and no
 * other user's EAL could make its own runtime directory in it. Empty otherwise (/var/run/dpdk is
 * root's and stays).
 */
std::string g_made_runtime_base;

/**
 * What release_files_from_signal() removes, in fixed buffers written once by eal_init() before
 * g_eal_up is set and only read afterwards: a signal handler may read them (no allocation, no
 * lock). Paths that do not fit are left out (the ordinary release_files_on_exit() still has them).
 */
struct SignalReleasePlan {
    static constexpr std::size_t kPath = 512;
    static constexpr std::size_t kMaxMounts = 8;
    char runtime_dir[kPath] = {};
    char runtime_base[kPath] = {};  // g_made_runtime_base
    char hugepage_stem[kPath] = {}; // PREFIXmap_
    char mounts[kMaxMounts][kPath] = {};
    std::size_t num_mounts = 0;
    /** Socket files of this process's memif servers (socket-abstract=no), added as they come up:
     *  each path is written before num_memif_sockets publishes it. */
    static constexpr std::size_t kMaxMemifSockets = 8;
    char memif_sockets[kMaxMemifSockets][kPath] = {};
    /** Device and inode of each socket file as bound: one that another server bound later at the
     *  same path (after this port closed) is not this process's to remove. */
    dev_t memif_dev[kMaxMemifSockets] = {};
    ino_t memif_ino[kMaxMemifSockets] = {};
    std::atomic<std::size_t> num_memif_sockets{0};
};
SignalReleasePlan g_signal_plan;

/** Copies @p s with its terminator into @p out (kPath bytes); false when it does not fit. */
bool copy_path(const std::string& s, char (&out)[SignalReleasePlan::kPath]) noexcept {
    if (s.size() + 1 > sizeof out) return false;
    std::memcpy(out, s.c_str(), s.size() + 1);
    return true;
}

void plan_signal_release() noexcept {
    SignalReleasePlan& p = g_signal_plan;
    if (!copy_path(g_runtime_dir, p.runtime_dir)) p.runtime_dir[0] = '\0';
    if (!copy_path(g_made_runtime_base, p.runtime_base)) p.runtime_base[0] = '\0';
    if (!copy_path(g_file_prefix + "map_", p.hugepage_stem)) p.hugepage_stem[0] = '\0';
    p.num_mounts = 0;
    std::FILE* m = std::fopen("/proc/mounts", "r");
    if (!m) return;
    char dev[256], dir[512], type[64];
    while (p.num_mounts < SignalReleasePlan::kMaxMounts &&
           std::fscanf(m, "%255s %511s %63s %*[^\n]", dev, dir, type) == 3)
        if (std::strcmp(type, "hugetlbfs") == 0 && copy_path(dir, p.mounts[p.num_mounts]))
            ++p.num_mounts;
    std::fclose(m);
}

/** One linux_dirent64 record (getdents64(2)); opendir/readdir may allocate, getdents64 does not. */
struct LinuxDirent64 {
    std::uint64_t d_ino;
    std::int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/**
 * Unlinks the entries of directory @p dir whose names @p match accepts; async-signal-safe
 * (open, getdents64, unlinkat, close only).
 */
template <class Pred>
void unlink_matching(const char* dir, Pred match) noexcept {
    const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    alignas(8) char buf[4096];
    for (;;) {
        const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            const auto* e = reinterpret_cast<const LinuxDirent64*>(buf + off);
            if (match(e->d_name)) (void)::unlinkat(fd, e->d_name, 0);
            off += e->d_reclen;
        }
    }
    ::close(fd);
}

bool starts_with(const char* s, const char* prefix) noexcept {
    return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

constexpr std::string_view kRingPairPrefix = "droce_ringpair";
constexpr std::size_t kRingPairNameMax = 12; // "net_ring_rp_" + name + "_a" fits RTE_RING_NAMESIZE

std::string errno_text(int e) {
    return std::string(rte_strerror(e)) + " (errno " + std::to_string(e) + ")";
}

bool valid_pair_name(const std::string& name) {
    if (name.empty() || name.size() > kRingPairNameMax) return false;
    for (const char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    return true;
}

rte_ring* find_or_create_ring(const std::string& ring_name, unsigned size, std::string* err) {
    if (rte_ring* r = rte_ring_lookup(ring_name.c_str())) return r;
    // One producer (the transmitting port's engine thread), one consumer (the receiving one's).
    rte_ring* r = rte_ring_create(ring_name.c_str(), size, static_cast<int>(rte_socket_id()),
                                  RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (!r) *err = "rte_ring_create(" + ring_name + ") failed: " + errno_text(rte_errno);
    return r;
}

/** Parses `droce_ringpair,name=N,end=a|b[,size=S]`. */
std::string probe_ring_pair(const std::string& devargs, std::uint16_t* port_id) {
    std::string name;
    char end = 0;
    unsigned size = 1024;
    std::size_t pos = kRingPairPrefix.size();
    while (pos < devargs.size()) {
        if (devargs[pos] != ',')
            return "devargs \"" + devargs + "\": expected ',' after " +
                   std::string(kRingPairPrefix);
        const std::size_t next = devargs.find(',', pos + 1);
        const std::string kv =
            devargs.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
        pos = next == std::string::npos ? devargs.size() : next;
        const std::size_t eq = kv.find('=');
        if (eq == std::string::npos)
            return "devargs \"" + devargs + "\": \"" + kv + "\" is not key=value";
        const std::string key = kv.substr(0, eq);
        const std::string val = kv.substr(eq + 1);
        if (key == "name") {
            name = val;
        } else if (key == "end") {
            if (val != "a" && val != "b") return "devargs \"" + devargs + "\": end must be a or b";
            end = val[0];
        } else if (key == "size") {
            unsigned long v = 0;
            if (val.empty() || val.size() > 6) return "devargs \"" + devargs + "\": bad size";
            for (const char c : val) {
                if (c < '0' || c > '9') return "devargs \"" + devargs + "\": bad size";
                v = v * 10 + static_cast<unsigned>(c - '0');
            }
            size = static_cast<unsigned>(v);
        } else {
            return "devargs \"" + devargs + "\": unknown key \"" + key + "\" (name, end, size)";
        }
    }
    if (name.empty() || end == 0) return "devargs \"" + devargs + "\": name= and end= are required";
    return create_ring_pair_end(name, end, size, port_id);
}

/** Unlinks the memif server socket files this process bound (async-signal-safe). */
void unlink_memif_sockets() noexcept {
    const SignalReleasePlan& p = g_signal_plan;
    const std::size_t n = p.num_memif_sockets.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
        struct stat st {};
        if (::lstat(p.memif_sockets[i], &st) == 0 && st.st_dev == p.memif_dev[i] &&
            st.st_ino == p.memif_ino[i])
            (void)::unlink(p.memif_sockets[i]);
    }
}

/** A memif server port of @p devargs came up: its socket file (if not abstract) goes at exit. */
void plan_memif_socket_release(const std::string& devargs) noexcept {
    std::string path;
    bool abstract = true, client = false;
    if (!memif_socket_of(devargs, &path, &abstract, &client) || abstract || client) return;
    // Absolute: the program may change its directory before it exits.
    if (path.empty()) return;
    if (path[0] != '/') {
        char cwd[SignalReleasePlan::kPath];
        if (!::getcwd(cwd, sizeof cwd)) return;
        path = std::string(cwd) + "/" + path;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    SignalReleasePlan& p = g_signal_plan;
    const std::size_t n = p.num_memif_sockets.load(std::memory_order_relaxed);
    if (n >= SignalReleasePlan::kMaxMemifSockets || !copy_path(path, p.memif_sockets[n])) return;
    p.memif_dev[n] = st.st_dev;
    p.memif_ino[n] = st.st_ino;
    p.num_memif_sockets.store(n + 1, std::memory_order_release);
}

} // namespace

std::vector<std::string> split_args(const std::string& s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
            ++i;
        std::size_t j = i;
        while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j])))
            ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::vector<std::string> no_huge_args(const std::vector<std::string>& args) {
    for (const std::string& a : args)
        if (a == "--no-huge") return args;
    std::vector<std::string> out;
    bool has_m = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--single-file-segments" || a == "--huge-unlink" || a == "--in-memory" ||
            a.rfind("--huge-dir=", 0) == 0 || a.rfind("--socket-mem=", 0) == 0 ||
            a.rfind("--socket-limit=", 0) == 0)
            continue;
        if (a == "--huge-dir" || a == "--socket-mem" || a == "--socket-limit") {
            ++i; // and its value
            continue;
        }
        if (a.rfind("-m", 0) == 0) has_m = true; // "-m N" or "-mN"
        out.push_back(a);
    }
    out.insert(out.begin(), "--no-huge");
    if (!has_m) out.insert(out.begin() + 1, {"-m", "256"});
    return out;
}

std::string memif_copy_mode(const std::string& devargs) {
    if (devargs.rfind("net_memif", 0) != 0) return devargs;
    std::string out = devargs;
    const std::string yes = ",zero-copy=yes";
    for (std::size_t pos = out.find(yes); pos != std::string::npos; pos = out.find(yes, pos))
        out.replace(pos, yes.size(), ",zero-copy=no");
    return out;
}

bool eal_args_choose_cores(const std::vector<std::string>& args) noexcept {
    for (const std::string& a : args) {
        // "-l 0-1", "-l0-1", "-c 0x3", "-c3"; "--lcores=...", "--lcores ..."; "--main-lcore=N".
        if (a.size() >= 2 && a[0] == '-' && (a[1] == 'l' || a[1] == 'c')) return true;
        if (a.rfind("--lcores", 0) == 0 || a.rfind("--main-lcore", 0) == 0 ||
            a.rfind("--master-lcore", 0) == 0)
            return true;
    }
    return false;
}

namespace {
/** Set on a thread by register_thread() when it called rte_thread_register (with or without an id
 *  given): unregister_thread() then calls rte_thread_unregister, which also frees what the EAL
 *  set up for the thread (a --trace buffer) when no id was free. */
thread_local bool t_registered = false;
std::atomic<bool> g_said_no_lcore{false};
} // namespace

void register_thread() noexcept {
    if (!eal_initialized() || rte_lcore_id() != LCORE_ID_ANY) return;
    t_registered = true;
    if (rte_thread_register() == 0) return;
    // No id free (ENOMEM: an EAL that took every CPU of a large host as its lcores), or DPDK
    // multi-process in use (EINVAL: a secondary attached first). The thread runs uncached.
    (void)say_once(g_said_no_lcore,
                   "engine thread without a DPDK lcore id (%s): its mbufs bypass the mempool "
                   "caches (slower, correct)",
                   rte_strerror(rte_errno));
}

void unregister_thread() noexcept {
    if (!t_registered) return;
    t_registered = false;
    const unsigned lcore = rte_lcore_id();
    if (lcore == LCORE_ID_ANY || rte_eal_lcore_role(lcore) != ROLE_NON_EAL) {
        rte_thread_unregister(); // no id was given: frees only the thread's EAL state
        return;
    }
    rte_mempool_walk(
        [](rte_mempool* mp, void*) {
            if (rte_mempool_cache* c = rte_mempool_default_cache(mp, rte_lcore_id()))
                rte_mempool_cache_flush(c, mp);
        },
        nullptr);
    rte_thread_unregister();
}

namespace {
/** The thread ids of this process, sorted (from /proc/self/task), or nothing when they cannot be
 *  read. */
std::optional<std::vector<pid_t>> process_thread_ids() {
    DIR* d = opendir("/proc/self/task");
    if (!d) return std::nullopt;
    std::vector<pid_t> tids;
    while (const dirent* e = readdir(d)) {
        char* end = nullptr;
        const long t = std::strtol(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && t > 0) tids.push_back(static_cast<pid_t>(t));
    }
    closedir(d);
    std::sort(tids.begin(), tids.end());
    return tids;
}

/**
 * Gives @p cpus to the threads rte_eal_init started that DPDK pinned where it put its control
 * threads (the main lcore's CPUs): the interrupt thread (memif's connection handshake, link-state
 * events), multi-process, telemetry. @p before: the process's threads before rte_eal_init, which
 * keep their affinity; so do threads pinned anywhere else (a worker or service lcore's thread).
 */
void unpin_eal_control_threads(const std::vector<pid_t>& before, const cpu_set_t& cpus) noexcept {
    const rte_cpuset_t main_cpus = rte_lcore_cpuset(rte_get_main_lcore());
    if (CPU_EQUAL(&main_cpus, &cpus)) return;
    const auto now = process_thread_ids();
    if (!now) return;
    for (const pid_t tid : *now) {
        if (std::binary_search(before.begin(), before.end(), tid)) continue;
        cpu_set_t has;
        CPU_ZERO(&has);
        if (sched_getaffinity(tid, sizeof has, &has) == 0 && CPU_EQUAL(&has, &main_cpus))
            (void)sched_setaffinity(tid, sizeof cpus, &cpus);
    }
}
} // namespace

bool eal_initialized() noexcept {
    return g_eal_up.load(std::memory_order_acquire);
}

std::string eal_init(const std::vector<std::string>& args) {
    if (eal_initialized()) return "EAL already initialised (once per process)";
    // rte_eal_init keeps pointers into argv (e.g. for --file-prefix) and may reorder it: the
    // strings live for the whole process.
    static std::vector<std::string> storage;
    static std::vector<char*> argv;
    storage.clear();
    storage.emplace_back("droce");
    storage.insert(storage.end(), args.begin(), args.end());
    argv.clear();
    for (auto& a : storage)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    // What DPDK would report as "Success (errno 0)" (a second primary on one file prefix) or as
    // EACCES (no hugepages): said with its cause before the EAL tries.
    if (std::string why = eal_obstacle(args); !why.empty()) return why;
    // DPDK pins the calling thread to its first lcore; when it chose the lcores itself (from this
    // thread's CPUs), that pinned the application's thread, and the engine threads started from
    // it, to CPU 0: both processes of a perftest pair ran their four busy threads on one CPU of
    // two (ib_write_lat typical 26 us, 99th percentile 4 ms). Given back below.
    cpu_set_t cpus_before;
    const bool restore_cpus =
        !eal_args_choose_cores(args) &&
        pthread_getaffinity_np(pthread_self(), sizeof cpus_before, &cpus_before) == 0;
    const auto threads_before =
        restore_cpus ? process_thread_ids() : std::optional<std::vector<pid_t>>{};
    const std::string runtime_dir = runtime_dir_made_by(args);
    const std::string runtime_base = runtime_dir.substr(0, runtime_dir.rfind('/'));
    const bool base_was_there = access(runtime_base.c_str(), F_OK) == 0;
    const int ret = rte_eal_init(static_cast<int>(storage.size()), argv.data());
    if (restore_cpus) {
        (void)pthread_setaffinity_np(pthread_self(), sizeof cpus_before, &cpus_before);
        // The control threads rte_eal_init started (the interrupt thread, which runs memif's
        // connection handshake and link-state events; multi-process; telemetry) were pinned too:
        // with every CPU an lcore, DPDK 22.11 puts them on the main lcore's CPU. There a busy
        // engine thread of another process held CPU 0 for seconds while a restarted memif peer's
        // handshake waited on its interrupt thread (test peer-kill, about 1 run in 10: S could
        // not send to the restarted P for over a second). They get the caller's CPUs back, as the
        // caller did; threads the application had before are left as they were (and all of them
        // when they could not be listed).
        if (ret >= 0 && threads_before) unpin_eal_control_threads(*threads_before, cpus_before);
    }
    if (ret < 0) {
        const int e = rte_errno;
        if (e == EALREADY) {
            g_eal_up.store(true, std::memory_order_release);
            return "EAL already initialised (once per process)";
        }
        // The lock may have been taken between the check and rte_eal_init: look again.
        if (std::string why = eal_obstacle(args); !why.empty()) return why;
        if (e == 0)
            return "rte_eal_init failed without a reason (DPDK's log above says which step); the "
                   "EAL arguments were: " +
                   [&] {
                       std::string a;
                       for (const std::string& s : args)
                           a += (a.empty() ? "" : " ") + s;
                       return a;
                   }();
        return "rte_eal_init failed: " + errno_text(e);
    }
    // Made also without shared files (--no-shconf): an empty directory left in /var/run/dpdk by
    // every run on demo.ini otherwise (issue "A user's first hour").
    g_runtime_dir = runtime_dir;
    if (!base_was_there && geteuid() != 0) g_made_runtime_base = runtime_base;
    g_file_prefix = file_prefix_of(args);
    plan_signal_release();
    g_eal_up.store(true, std::memory_order_release);
    return {};
}

const std::string& eal_runtime_dir() noexcept {
    return g_runtime_dir;
}

void remove_runtime_dir(const std::string& dir) noexcept {
    if (dir.empty()) return;
    // Only the files a primary EAL makes (config, hugepage_info, fbarray_*, mp_socket*), not
    // whatever else someone keeps there; then the directory if that emptied it.
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
            const std::string n = e->d_name;
            if (n == "config" || n == "hugepage_info" || n.rfind("fbarray_", 0) == 0 ||
                n.rfind("mp_socket", 0) == 0 || n == "dpdk_telemetry.v2" ||
                n.rfind("dpdk_telemetry", 0) == 0)
                (void)unlink((dir + "/" + n).c_str());
        }
        closedir(d);
    }
    (void)rmdir(dir.c_str());
}

void release_files_on_exit() noexcept {
    if (!eal_initialized()) return;
    remove_runtime_dir(g_runtime_dir);
    if (!g_made_runtime_base.empty()) (void)rmdir(g_made_runtime_base.c_str()); // unless not empty
    // A memif server that was not closed (a verbs program exits without closing its device)
    // leaves its socket file; net_memif removes it only when the port is closed.
    unlink_memif_sockets();
    // The mappings stay until the process exits; unlinking the files now lets the kernel take
    // the pages back then instead of keeping them in hugetlbfs.
    std::FILE* m = std::fopen("/proc/mounts", "r");
    if (!m) return;
    char dev[256], dir[512], type[64];
    while (std::fscanf(m, "%255s %511s %63s %*[^\n]", dev, dir, type) == 3) {
        if (std::strcmp(type, "hugetlbfs") != 0) continue;
        DIR* d = opendir(dir);
        if (!d) continue;
        const std::string stem = g_file_prefix + "map_";
        while (dirent* e = readdir(d))
            if (std::strncmp(e->d_name, stem.c_str(), stem.size()) == 0)
                (void)unlink((std::string(dir) + "/" + e->d_name).c_str());
        closedir(d);
    }
    std::fclose(m);
}

void release_files_from_signal() noexcept {
    if (!g_eal_up.load(std::memory_order_acquire)) return;
    const SignalReleasePlan& p = g_signal_plan;
    unlink_memif_sockets();
    if (p.runtime_dir[0]) {
        // The same names remove_runtime_dir() removes.
        unlink_matching(p.runtime_dir, [](const char* n) {
            return std::strcmp(n, "config") == 0 || std::strcmp(n, "hugepage_info") == 0 ||
                   starts_with(n, "fbarray_") || starts_with(n, "mp_socket") ||
                   starts_with(n, "dpdk_telemetry");
        });
        (void)::rmdir(p.runtime_dir);
        if (p.runtime_base[0]) (void)::rmdir(p.runtime_base);
    }
    if (p.hugepage_stem[0])
        for (std::size_t i = 0; i < p.num_mounts; ++i)
            unlink_matching(p.mounts[i],
                            [&p](const char* n) { return starts_with(n, p.hugepage_stem); });
}

void eal_release() noexcept {
    // Not rte_eal_cleanup(): it unmaps DPDK memory while the interrupt thread keeps running, and
    // in DPDK 22.11 an interrupt source can outlive its port's close with its handle in that
    // memory; the thread then walked it after the unmap (seen here: eal-intr-thread segfault in
    // rte_intr_fd_get, once in a few hugepage runs). The mappings end with the process anyway; the
    // files are what outlives it, and those go here.
    release_files_on_exit();
}

std::string create_ring_pair_end(const std::string& name, char end, unsigned ring_size,
                                 std::uint16_t* port_id) {
    if (!eal_initialized()) return "EAL not initialised: call eal_init() first";
    if (!valid_pair_name(name))
        return "ring pair name \"" + name + "\" must be 1.." + std::to_string(kRingPairNameMax) +
               " of [A-Za-z0-9_]";
    if (end != 'a' && end != 'b') return "ring pair end must be 'a' or 'b'";
    if (ring_size < 2 || ring_size > 65536 || (ring_size & (ring_size - 1)) != 0)
        return "ring pair size " + std::to_string(ring_size) + " is not a power of two in 2..65536";
    const std::string eth_name = "rp_" + name + "_" + end;
    std::uint16_t existing = 0;
    if (rte_eth_dev_get_port_by_name(("net_ring_" + eth_name).c_str(), &existing) == 0)
        return "ring pair end " + name + "/" + end + " already exists (port " +
               std::to_string(existing) + ")";
    std::string err;
    rte_ring* ab = find_or_create_ring("rp_" + name + "_ab", ring_size, &err);
    if (!ab) return err;
    rte_ring* ba = find_or_create_ring("rp_" + name + "_ba", ring_size, &err);
    if (!ba) return err;
    rte_ring* rx = end == 'a' ? ba : ab;
    rte_ring* tx = end == 'a' ? ab : ba;
    const int pid = rte_eth_from_rings(eth_name.c_str(), &rx, 1, &tx, 1, rte_socket_id());
    if (pid < 0) return "rte_eth_from_rings(" + eth_name + ") failed: " + errno_text(rte_errno);
    *port_id = static_cast<std::uint16_t>(pid);
    return {};
}

std::string probe_port(const std::string& devargs, std::uint16_t* port_id) {
    if (!eal_initialized()) return "EAL not initialised: call eal_init() first";
    if (devargs.compare(0, kRingPairPrefix.size(), kRingPairPrefix) == 0)
        return probe_ring_pair(devargs, port_id);

    rte_devargs da{};
    const int pr = rte_devargs_parse(&da, devargs.c_str());
    if (pr < 0) {
        rte_devargs_reset(&da);
        return "devargs \"" + devargs + "\": no bus or driver knows this device (" +
               errno_text(-pr) + ")";
    }
    const std::string name = da.name;
    rte_devargs_reset(&da);

    std::uint16_t pid = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0) {
        // A memif server killed with SIGKILL left its socket file: the next start takes it back.
        if (remove_stale_memif_socket(devargs))
            std::fprintf(stderr,
                         "droce: removed the stale memif socket of %s (its server was "
                         "killed; nobody listened on it)\n",
                         devargs.c_str());
        const int r = rte_dev_probe(devargs.c_str());
        if (r < 0 && r != -EEXIST)
            return "rte_dev_probe(\"" + devargs + "\") failed: " + errno_text(-r);
        if (r == 0) plan_memif_socket_release(devargs);
        if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0) {
            // A PCI function may name its ports differently from the device: match by device.
            bool found = false;
            for (std::uint16_t p = 0; p < RTE_MAX_ETHPORTS; ++p) {
                if (!rte_eth_dev_is_valid_port(p)) continue;
                rte_eth_dev_info info{};
                if (rte_eth_dev_info_get(p, &info) == 0 && info.device &&
                    name == rte_dev_name(info.device)) {
                    pid = p;
                    found = true;
                    break;
                }
            }
            if (!found)
                return "devargs \"" + devargs + "\": device probed but it has no ethdev port";
        }
    }
    *port_id = pid;
    return {};
}

} // namespace droce::dpdk
