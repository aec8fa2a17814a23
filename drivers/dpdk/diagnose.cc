/* SPDX-License-Identifier: BSD-3-Clause */
#include "diagnose.h"

#include "common/socket_holder.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace droce::dpdk {
namespace {

bool has_arg(const std::vector<std::string>& args, const char* name) {
    for (const std::string& a : args)
        if (a == name || a.rfind(std::string(name) + "=", 0) == 0) return true;
    return false;
}

/** The value of `--key=value` or `--key value`, empty when absent. */
std::string arg_value(const std::vector<std::string>& args, const std::string& key) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i].rfind(key + "=", 0) == 0) return args[i].substr(key.size() + 1);
        if (args[i] == key && i + 1 < args.size()) return args[i + 1];
    }
    return {};
}

/** The value of @p key in comma-separated devargs, or @p dflt. */
std::string devarg(const std::string& devargs, const std::string& key, const std::string& dflt) {
    std::size_t pos = devargs.find(',');
    while (pos != std::string::npos) {
        const std::size_t next = devargs.find(',', pos + 1);
        const std::string kv =
            devargs.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
        if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
        pos = next;
    }
    return dflt;
}

/** Sum of free_hugepages over every hugepage size the kernel offers. */
unsigned long free_hugepages() {
    unsigned long sum = 0;
    DIR* d = opendir("/sys/kernel/mm/hugepages");
    if (!d) return 0;
    while (dirent* e = readdir(d)) {
        if (std::strncmp(e->d_name, "hugepages-", 10) != 0) continue;
        std::ifstream f(std::string("/sys/kernel/mm/hugepages/") + e->d_name + "/free_hugepages");
        unsigned long n = 0;
        if (f >> n) sum += n;
    }
    closedir(d);
    return sum;
}

bool hugetlbfs_mounted() {
    std::ifstream f("/proc/mounts");
    std::string dev, dir, type;
    std::string rest;
    while (f >> dev >> dir >> type) {
        std::getline(f, rest);
        if (type == "hugetlbfs") return true;
    }
    return false;
}

/** The default hugepage size in kB and its free pages, from /proc/meminfo (0 and 0 when none). */
void default_hugepages(unsigned long* size_kb, unsigned long* free) {
    *size_kb = 0;
    *free = 0;
    std::ifstream f("/proc/meminfo");
    std::string key;
    unsigned long v = 0;
    std::string rest;
    while (f >> key >> v) {
        std::getline(f, rest);
        if (key == "HugePages_Free:") *free = v;
        if (key == "Hugepagesize:") *size_kb = v;
    }
}

/** A hugetlbfs mount this process may create files in (@p want: that directory only); its path,
 *  or empty when there is none. */
std::string writable_hugetlbfs(const std::string& want) {
    std::ifstream f("/proc/mounts");
    std::string dev, dir, type, rest;
    while (f >> dev >> dir >> type) {
        std::getline(f, rest);
        if (type != "hugetlbfs" || (!want.empty() && dir != want)) continue;
        if (access(dir.c_str(), W_OK) == 0) return dir;
    }
    return {};
}

/**
 * Hugepages of @p page_kb held by DPDK hugepage files (`*map_*`) in hugetlbfs mount @p dir that
 * no process holds: what the next rte_eal_init frees before it reserves. DPDK keeps a process's
 * hugepage files after it ends (for a secondary process to attach) and a primary process clears
 * every such file it can lock at start (eal_hugepage_info.c; a live process holds a lock on its
 * files), of any prefix. A process killed before its clean-up, or a DPDK application that does
 * not clean up (testpmd), leaves them.
 */
unsigned long reclaimable_hugepages(const std::string& dir, unsigned long page_kb) {
    DIR* d = opendir(dir.c_str());
    if (!d || page_kb == 0) {
        if (d) closedir(d);
        return 0;
    }
    // A DPDK process starting holds the directory exclusively while it clears it: count nothing
    // then (it takes what it frees). Held shared here, the probe below cannot make a starting
    // process skip a file it would clear.
    if (flock(dirfd(d), LOCK_SH | LOCK_NB) != 0) {
        closedir(d);
        return 0;
    }
    unsigned long pages = 0;
    while (const dirent* e = readdir(d)) {
        if (fnmatch("*map_*", e->d_name, 0) != 0) continue;
        const int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st {};
        // The pages the file holds (st_blocks, 512 B units), not its size: a hugetlbfs file may be
        // sparse (ftruncate allocates nothing; a --single-file-segments process punches a hole
        // for each segment it frees). A regular file of one name only: unlinking one of its names
        // frees nothing.
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_nlink == 1)
            pages += static_cast<unsigned long>(st.st_blocks) / 2 / page_kb;
        close(fd); // drops the lock: the file stays for the EAL to clear
    }
    closedir(d); // drops the directory's lock
    return pages;
}

} // namespace

std::string file_prefix_of(const std::vector<std::string>& eal_args) {
    const std::string p = arg_value(eal_args, "--file-prefix");
    return p.empty() ? "rte" : p;
}

std::string runtime_dir_for(const std::vector<std::string>& eal_args) {
    if (has_arg(eal_args, "--in-memory") || has_arg(eal_args, "--no-shconf")) return {};
    return runtime_dir_made_by(eal_args);
}

std::string runtime_dir_made_by(const std::vector<std::string>& eal_args) {
    std::string base = "/var/run";
    if (geteuid() != 0) {
        const char* xdg = std::getenv("XDG_RUNTIME_DIR");
        base = xdg && *xdg ? xdg : "/tmp";
    }
    return base + "/dpdk/" + file_prefix_of(eal_args);
}

bool runtime_dir_holder(const std::string& runtime_dir, Holder* who) {
    if (runtime_dir.empty()) return false;
    const int fd = ::open((runtime_dir + "/config").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    // The primary holds a write lock over a range inside the file (DPDK 22.11: the memsegs field
    // of rte_mem_config); asking whether a read lock of the whole file would conflict returns the
    // holder without taking anything.
    struct flock fl {};
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0; // to the end of the file
    const bool locked = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    ::close(fd);
    if (!locked) return false;
    who->pid = fl.l_pid;
    who->comm = process_comm(fl.l_pid);
    return true;
}

std::string eal_obstacle(const std::vector<std::string>& eal_args) {
    const std::string dir = runtime_dir_for(eal_args);
    Holder h;
    if (runtime_dir_holder(dir, &h))
        return "the DPDK file prefix \"" + file_prefix_of(eal_args) + "\" (runtime directory " +
               dir + ") is in use by " + to_string(h) +
               ": another process runs on this config; stop it, or give this process a config "
               "of its own (another --file-prefix in the eal line and, for a memif server, "
               "another socket= in the devargs)";
    if (!has_arg(eal_args, "--no-huge") && !has_arg(eal_args, "--huge-dir")) {
        if (!hugetlbfs_mounted())
            return "the config's eal line asks for hugepages (no --no-huge) but no hugetlbfs is "
                   "mounted: as root, echo 512 > /proc/sys/vm/nr_hugepages; mkdir -p "
                   "/dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages (or put --no-huge -m "
                   "256 in the eal line)";
        if (free_hugepages() == 0)
            return "the config's eal line asks for hugepages (no --no-huge) but the host has no "
                   "free hugepage: as root, echo 512 > /proc/sys/vm/nr_hugepages (or put --no-huge "
                   "-m 256 in the eal line)";
    }
    return {};
}

bool memif_socket_of(const std::string& devargs, std::string* path, bool* abstract, bool* client) {
    if (devargs.rfind("net_memif", 0) != 0) return false;
    *path = devarg(devargs, "socket", "/run/memif.sock");
    *abstract = devarg(devargs, "socket-abstract", "yes") != "no";
    const std::string role = devarg(devargs, "role", "server");
    *client = role == "client" || role == "slave";
    return true;
}

bool unix_listener(const std::string& path, bool abstract, Holder* who) {
    // /proc/net/unix: Num RefCount Protocol Flags Type St Inode Path. A listening socket has
    // __SO_ACCEPTCON (0x10000) in Flags; an abstract name shows as '@' + name, its trailing NULs as
    // '@' too (memif binds the whole sun_path).
    std::ifstream f("/proc/net/unix");
    std::string line;
    std::getline(f, line); // header
    unsigned long inode = 0;
    const std::string want = (abstract ? "@" : "") + path;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string num, ref, proto, flags, type, st, ino, p;
        if (!(ls >> num >> ref >> proto >> flags >> type >> st >> ino >> p)) continue;
        if (p.compare(0, want.size(), want) != 0) continue;
        if (p.find_first_not_of('@', want.size()) != std::string::npos) continue;
        if ((std::strtoul(flags.c_str(), nullptr, 16) & 0x10000u) == 0) continue;
        inode = std::strtoul(ino.c_str(), nullptr, 10);
        break;
    }
    if (inode == 0) return false;
    // Listening, but maybe in a process /proc does not show us: pid 0 then.
    if (who && !find_socket_holder(inode, who)) *who = Holder{};
    return true;
}

std::string memif_obstacle(const std::string& devargs) {
    std::string path;
    bool abstract = true, client = false;
    if (!memif_socket_of(devargs, &path, &abstract, &client)) return {};
    Holder h;
    const bool listening = unix_listener(path, abstract, &h);
    const std::string where = "memif socket " + path + (abstract ? " (abstract namespace)" : "");
    if (client && !listening)
        return "no droce server is listening on " + where +
               ": start the server first (the config with role=server and this socket), then "
               "this client";
    if (!client && listening)
        return where + " is in use by " + (h.pid ? to_string(h) : std::string("another process")) +
               ": stop it, or give this server another socket= in the devargs (the client's too)";
    return {};
}

bool remove_stale_memif_socket(const std::string& devargs) {
    std::string path;
    bool abstract = true, client = false;
    if (!memif_socket_of(devargs, &path, &abstract, &client) || abstract || client) return false;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
    sockaddr_un sa{};
    if (path.size() >= sizeof sa.sun_path) return false;
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    // A listener this network namespace shows is live: leave it untouched (a probe connection is a
    // risk for it, below).
    if (unix_listener(path, false, nullptr)) return false;
    // Otherwise connect: refused means no process in any network namespace listens on the file.
    // memif's control socket is SOCK_SEQPACKET. Non-blocking: a live server whose backlog is full
    // answers EAGAIN (left alone), not a hang.
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return false;
    const bool refused =
        connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno == ECONNREFUSED;
    if (!refused) {
        // A live server accepts and sends its HELLO. Close only after it arrived (or a second
        // passed): DPDK 22.11's memif, when that first send fails because the peer already left,
        // closes the connection's fd with its interrupt callback still registered, and its
        // interrupt thread then panics ("Error adding fd ... epoll_ctl, Bad file descriptor").
        pollfd pfd{fd, POLLIN, 0};
        if (poll(&pfd, 1, 1000) == 1) {
            char hello[128];
            (void)recv(fd, hello, sizeof hello, MSG_DONTWAIT);
        }
    }
    close(fd);
    return refused && unlink(path.c_str()) == 0;
}

std::string pci_obstacle(const std::string& devargs, const std::string& sysfs_root) {
    std::string addr = devargs.substr(0, devargs.find(','));
    // DDDD:BB:DD.F, hexadecimal: what rte_dev_probe takes for a PCI device.
    static const char kShape[] = "xxxx:xx:xx.x";
    if (addr.size() != sizeof kShape - 1) return {};
    for (std::size_t i = 0; i < addr.size(); ++i)
        if (kShape[i] == 'x' ? !std::isxdigit(static_cast<unsigned char>(addr[i]))
                             : addr[i] != kShape[i])
            return {};
    // DPDK takes hex digits in either case; sysfs names devices in lower case.
    for (char& c : addr)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string dev = sysfs_root + "/bus/pci/devices/" + addr;
    const std::string advice = " (README: Two hosts, or a real NIC; droce doctor lists the NICs)";
    if (access(dev.c_str(), F_OK) != 0)
        return "no PCI device " + addr +
               " on this host: put a NIC's PCI address in the devargs "
               "and the eal line's -a" +
               advice;
    char link[256];
    ssize_t n = readlink((dev + "/driver").c_str(), link, sizeof link - 1);
    if (n <= 0)
        return "PCI device " + addr +
               " has no driver: bind it to vfio-pci (dpdk-devbind.py -b "
               "vfio-pci " +
               addr + ")" + advice;
    link[n] = '\0';
    const std::string driver = std::strrchr(link, '/') ? std::strrchr(link, '/') + 1 : link;
    if (driver == "vfio-pci") {
        n = readlink((dev + "/iommu_group").c_str(), link, sizeof link - 1);
        if (n <= 0) return {};
        link[n] = '\0';
        const std::string group = std::strrchr(link, '/') ? std::strrchr(link, '/') + 1 : link;
        const std::string node = "/dev/vfio/" + group;
        // The holder: a process other than this one with the group's node open.
        Holder h;
        (void)find_fd_holder(node, &h, getpid());
        if (h.pid)
            return "PCI device " + addr + " (vfio-pci, IOMMU group " + group + ") is in use by " +
                   to_string(h) + ": one process owns a PCI NIC; stop it" + advice;
        return {};
    }
    if (driver == "uio_pci_generic" || driver == "igb_uio" || driver == "mlx5_core" ||
        driver == "mlx4_core")
        return {};
    std::string ifname;
    if (DIR* net = opendir((dev + "/net").c_str())) {
        while (dirent* e = readdir(net))
            if (e->d_name[0] != '.') ifname = e->d_name;
        closedir(net);
    }
    return "PCI device " + addr + " is bound to the kernel driver " + driver +
           (ifname.empty() ? "" : " (interface " + ifname + ")") +
           ", which DPDK cannot share: bind it to vfio-pci (dpdk-devbind.py -b vfio-pci " + addr +
           "; the interface leaves the kernel), or use net_af_xdp on the interface" + advice;
}

std::string hugepage_shortfall(const std::vector<std::string>& eal_args) {
    const std::string dir = arg_value(eal_args, "--huge-dir");
    const std::string mount = writable_hugetlbfs(dir);
    if (mount.empty())
        return dir.empty() ? "no hugetlbfs is mounted (or none this user may write)"
                           : "--huge-dir " + dir + " is not a hugetlbfs mount this user may write";
    unsigned long size_kb = 0, free = 0;
    default_hugepages(&size_kb, &free);
    free += reclaimable_hugepages(mount, size_kb);
    unsigned long need = 1;
    if (const std::string m = arg_value(eal_args, "-m"); !m.empty() && size_kb > 0)
        need = (std::strtoul(m.c_str(), nullptr, 10) * 1024 + size_kb - 1) / size_kb;
    if (size_kb == 0 || free < need)
        return std::to_string(need) + " free " + std::to_string(size_kb) +
               " kB hugepages are needed" +
               (arg_value(eal_args, "-m").empty() ? "" : " for -m " + arg_value(eal_args, "-m")) +
               " and " + std::to_string(free) + " are free";
    return {};
}

} // namespace droce::dpdk
