/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Test helper for the two-process system tests (memif, netns/af_packet): brings up port 0 of a
 * droce config exactly as the engine would (config -> eal_init -> probe_port -> EthPort) and either
 * pings (sends numbered frames of EtherType 0x88b5 to the first static neighbour and checks each
 * echo byte for byte) or echoes (swaps the MACs of every 0x88b5 frame and sends it back).
 *
 *   dpdk-port-ping --config FILE --role ping|echo [--count N] [--size BYTES] [--timeout-ms MS]
 *                  [--until-link-down 1] [--rounds N] [--expect-mapped-in 1]
 * --until-link-down 1 (echo): echo until the link goes down (the peer left), then tear the port
 * down at once. The peer's leaving runs net_memif's disconnect on the EAL interrupt thread, so
 * the port's close meets it there: the teardown race of issue 17, made likely instead of rare.
 * --rounds N: the port's whole life (probe, create, link up, ping or echo, destroy) N times in one
 * process, each creation retried until the peer listens (a memif client started between the
 * server's rounds fails to start).
 * --expect-mapped-in 1 (ping, net_memif): before pinging, wait (2 s at most) for every page of the
 * process's memif regions to be resident (EthPort maps them in when the link comes up); fail if
 * not. Exit status: 0 all frames echoed intact (ping) / at least N frames echoed (echo; with
 * --until-link-down also the link seen going down), in every round; 1 failure; 2 usage.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "dpdk/diagnose.h"
#include "dpdk/eal.h"
#include "dpdk/eth_port.h"

namespace {

using droce::PktBuf;
using droce::dpdk::EthPort;

constexpr std::uint8_t kTypeHi = 0x88, kTypeLo = 0xb5;

std::uint64_t now_ms() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000u +
           static_cast<std::uint64_t>(ts.tv_nsec) / 1000000u;
}

std::uint8_t pattern(std::uint32_t seq, std::uint32_t i) {
    return static_cast<std::uint8_t>(seq * 7u + i * 13u);
}

bool send_one(EthPort& port, PktBuf* b, std::uint64_t deadline) {
    while (now_ms() < deadline) {
        if (port.tx_burst(&b, 1) == 1) return true;
    }
    port.free_bulk(&b, 1);
    return false;
}

int ping(EthPort& port, const droce::wire::MacAddr& dst, unsigned count, unsigned size,
         unsigned timeout_ms) {
    const std::uint64_t deadline = now_ms() + timeout_ms;
    for (unsigned seq = 0; seq < count; ++seq) {
        bool ok = false;
        for (int attempt = 0; attempt < 20 && !ok && now_ms() < deadline; ++attempt) {
            PktBuf* b = nullptr;
            if (port.alloc_bulk(&b, 1) != 1) {
                std::fprintf(stderr, "ping: no mbuf\n");
                return 1;
            }
            std::memcpy(b->data, dst.data(), 6);
            std::memcpy(b->data + 6, port.mac().data(), 6);
            b->data[12] = kTypeHi;
            b->data[13] = kTypeLo;
            std::memcpy(b->data + 14, &seq, 4);
            for (unsigned i = 18; i < size; ++i)
                b->data[i] = pattern(seq, i);
            b->len = size;
            if (!send_one(port, b, deadline)) break;
            const std::uint64_t wait_until = now_ms() + 200;
            while (!ok && now_ms() < wait_until) {
                PktBuf* rx[32];
                const std::uint16_t n = port.rx_burst(rx, 32);
                for (std::uint16_t k = 0; k < n; ++k) {
                    const PktBuf* r = rx[k];
                    std::uint32_t got = 0;
                    if (r->len < 18 || r->data[12] != kTypeHi || r->data[13] != kTypeLo) continue;
                    std::memcpy(&got, r->data + 14, 4);
                    if (got != seq) continue;
                    bool same = r->len == size && std::memcmp(r->data, port.mac().data(), 6) == 0;
                    for (unsigned i = 18; same && i < size; ++i)
                        same = r->data[i] == pattern(seq, i);
                    if (!same) {
                        std::fprintf(stderr, "ping: echo of frame %u differs (len %u)\n", seq,
                                     r->len);
                        port.free_bulk(rx, n);
                        return 1;
                    }
                    ok = true;
                }
                port.free_bulk(rx, n);
            }
        }
        if (!ok) {
            std::fprintf(stderr, "ping: no echo for frame %u of %u\n", seq, count);
            return 1;
        }
    }
    std::printf("ping: %u frames of %u bytes echoed intact\n", count, size);
    return 0;
}

int echo(EthPort& port, unsigned count, unsigned timeout_ms, bool until_link_down) {
    const std::uint64_t deadline = now_ms() + timeout_ms;
    std::uint64_t last = 0;
    unsigned echoed = 0;
    bool went_down = false;
    bool last_echoed = false; // the frame numbered count - 1 went back
    while (now_ms() < deadline) {
        if (until_link_down) {
            if (!port.link_up()) {
                went_down = true;
                break;
            }
            // No more bursts once the pinger has all it asked for: a burst that runs while the
            // interrupt thread unmaps the rings on the peer's leaving is a different net_memif
            // race (see drivers/dpdk/README.md), not the teardown this mode is for.
            if (last_echoed) continue;
        } else if (echoed >= count && now_ms() - last > 1500) {
            break; // the pinger is done (or retrying)
        }
        PktBuf* rx[32];
        PktBuf* tx[32];
        std::uint16_t ntx = 0;
        const std::uint16_t n = port.rx_burst(rx, 32);
        for (std::uint16_t k = 0; k < n; ++k) {
            PktBuf* r = rx[k];
            if (r->len < 18 || r->data[12] != kTypeHi || r->data[13] != kTypeLo) {
                port.free_bulk(&r, 1);
                continue;
            }
            std::uint32_t seq = 0;
            std::memcpy(&seq, r->data + 14, 4);
            if (count > 0 && seq == count - 1) last_echoed = true;
            std::uint8_t tmp[6];
            std::memcpy(tmp, r->data, 6);
            std::memcpy(r->data, r->data + 6, 6);
            std::memcpy(r->data + 6, tmp, 6);
            tx[ntx++] = r;
        }
        if (ntx) {
            const std::uint16_t sent = port.tx_burst(tx, ntx);
            if (sent < ntx) port.free_bulk(tx + sent, static_cast<std::uint16_t>(ntx - sent));
            echoed += sent;
            last = now_ms();
        }
    }
    std::printf("echo: %u frames echoed%s\n", echoed,
                went_down ? ", link went down" : (until_link_down ? ", link stayed up" : ""));
    return echoed >= count && went_down == until_link_down ? 0 : 1;
}

/** The socket file of a memif client's devargs (role=client, socket-abstract=no), else "". */
std::string memif_client_socket_file(const std::string& devargs) {
    if (devargs.rfind("net_memif", 0) != 0 || devargs.find("role=client") == std::string::npos ||
        devargs.find("socket-abstract=no") == std::string::npos)
        return {};
    const std::size_t at = devargs.find("socket=");
    if (at == std::string::npos) return {};
    const std::size_t from = at + 7;
    return devargs.substr(from, devargs.find(',', from) - from);
}

/** The inode of @p path, 0 when it does not exist. */
ino_t inode_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

/** Sizes (KiB) of this process's net_memif regions (the PMD's memfds "memif_region_N"): mapped,
 *  and resident (/proc/self/smaps Size and Rss). */
struct MemifRegionKib {
    std::uint64_t size = 0, rss = 0;
};
MemifRegionKib memif_region_kib() {
    MemifRegionKib k;
    std::FILE* f = std::fopen("/proc/self/smaps", "re");
    if (!f) return k;
    char line[512];
    bool in_region = false;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long v = 0;
        if (std::strchr(line, '-') && std::strchr(line, '-') < std::strchr(line, ' '))
            in_region = std::strstr(line, "/memfd:memif_region_") != nullptr; // a mapping's line
        else if (in_region && std::sscanf(line, "Size: %llu kB", &v) == 1)
            k.size += v;
        else if (in_region && std::sscanf(line, "Rss: %llu kB", &v) == 1)
            k.rss += v;
    }
    std::fclose(f);
    return k;
}

/**
 * One port's life: probe, create, wait for the link, ping or echo, destroy. With @p retry the
 * creation is tried again every 20 ms until @p timeout_ms (a memif client whose server is
 * between two rounds fails to start).
 */
int session(const droce::DeviceConfig& dev, const std::string& role, unsigned count, unsigned size,
            unsigned timeout_ms, bool until_link_down, bool retry, bool expect_mapped_in,
            ino_t* server_inode) {
    const droce::PortConfig& pc = dev.ports[0];
    // A memif client of the next round waits for the server's next socket file: connected to
    // the last one (still there while that server closes its port), it would wait forever, as
    // DPDK 22.11 leaves a closed server's listener open but never accepts on it again. And it
    // starts again when the link stays down: a client that connects between the server's probe
    // and its start is refused ("ID 0 not found").
    const std::string sock = memif_client_socket_file(pc.devargs);
    droce::dpdk::EthPortConfig ec;
    ec.mtu = pc.mtu;
    ec.mac = pc.mac;
    std::string err;
    std::unique_ptr<EthPort> port;
    const std::uint64_t create_deadline = now_ms() + timeout_ms;
    for (;;) {
        while (!sock.empty() && *server_inode != 0 && inode_of(sock) == *server_inode &&
               now_ms() < create_deadline)
            usleep(5'000);
        err = droce::dpdk::probe_port(pc.devargs, &ec.port_id);
        if (err.empty()) port = EthPort::create(ec, &err);
        if (port && !sock.empty() && retry) {
            const std::uint64_t up_by = now_ms() + 1000;
            while (!port->link_up() && now_ms() < up_by)
                usleep(1'000);
            if (!port->link_up()) {
                port.reset();
                err = "memif link not up 1 s after the start";
            }
        }
        if (port || !retry || now_ms() >= create_deadline) break;
        usleep(20'000);
    }
    if (!port) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
    }
    if (!sock.empty()) *server_inode = inode_of(sock);
    if (size > port->max_frame()) {
        std::fprintf(stderr, "size %u > max frame %u\n", size, port->max_frame());
        return 2;
    }
    std::printf("%s: %s port %u (%s) mac %s mtu %u (ethdev %u) lsc %d cksum-offload %d\n",
                role.c_str(), dev.name.c_str(), ec.port_id, port->driver_name().c_str(),
                droce::to_string(port->mac()).c_str(), port->mtu(), port->pmd_mtu(),
                port->lsc_interrupt(), port->ipv4_cksum_offload());
    const std::uint64_t up_deadline = now_ms() + timeout_ms;
    while (!port->link_up() && now_ms() < up_deadline) {
    }
    std::printf("%s: link %s\n", role.c_str(), port->link_up() ? "up" : "down");
    if (role == "ping" && expect_mapped_in) {
        // The port maps in its memif regions once the link is up (EthPort: on this project's VM
        // host each first touch of a page cost the datapath 12 - 17 us), before the first frame.
        MemifRegionKib k = memif_region_kib();
        for (const std::uint64_t by = now_ms() + 2000;
             (k.size == 0 || k.rss < k.size) && now_ms() < by; k = memif_region_kib())
            usleep(1'000);
        std::printf("ping: memif regions %llu KiB, resident %llu KiB\n",
                    static_cast<unsigned long long>(k.size),
                    static_cast<unsigned long long>(k.rss));
        if (k.size == 0 || k.rss < k.size) {
            std::fprintf(stderr, "ping: the memif regions were not mapped in\n");
            return 1;
        }
    }
    if (role == "ping") {
        droce::wire::MacAddr dst{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        if (!dev.neighbors.empty()) dst = dev.neighbors[0].mac;
        return ping(*port, dst, count, size, timeout_ms);
    }
    return echo(*port, count, timeout_ms, until_link_down);
}

} // namespace

int main(int argc, char** argv) {
    // Line-buffered even into a file: the scripts wait for the port line to start the peer.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::string config, role;
    unsigned count = 100, size = 64, timeout_ms = 20000;
    bool until_link_down = false;
    unsigned rounds = 1;
    bool expect_mapped_in = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--config")
            config = v;
        else if (k == "--role")
            role = v;
        else if (k == "--count")
            count = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
        else if (k == "--size")
            size = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
        else if (k == "--timeout-ms")
            timeout_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
        else if (k == "--rounds")
            rounds = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
        else if (k == "--until-link-down")
            until_link_down = std::strcmp(v, "0") != 0;
        else if (k == "--expect-mapped-in")
            expect_mapped_in = std::strcmp(v, "0") != 0;
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (config.empty() || (role != "ping" && role != "echo") || size < 18 || rounds == 0) {
        std::fprintf(
            stderr,
            "usage: %s --config FILE --role ping|echo [--count N] [--size B>=18] "
            "[--timeout-ms MS] [--until-link-down 1] [--rounds N] [--expect-mapped-in 1]\n",
            argv[0]);
        return 2;
    }
    std::string err;
    auto dev = droce::load_device_config(config, &err);
    if (!dev) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
    }
    // `hugepages = auto | off` as lib/runtime resolves it (without its stderr line).
    if (dev->hugepages == droce::HugepageMode::off ||
        (dev->hugepages == droce::HugepageMode::auto_fallback &&
         !droce::dpdk::hugepage_shortfall(dev->eal).empty())) {
        dev->eal = droce::dpdk::no_huge_args(dev->eal);
        dev->ports[0].devargs = droce::dpdk::memif_copy_mode(dev->ports[0].devargs);
    }
    if (err = droce::dpdk::eal_init(dev->eal); !err.empty()) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
    }
    int rc = 0;
    ino_t server_inode = 0;
    for (unsigned round = 1; round <= rounds && rc == 0; ++round)
        rc = session(*dev, role, count, size, timeout_ms, until_link_down, rounds > 1,
                     expect_mapped_in, &server_inode);
    // As the tools do, not rte_eal_cleanup(): that unmaps DPDK memory while the EAL interrupt
    // thread still runs, and net_memif (22.11) leaves a server's listener registered there with
    // its handle in that memory; the thread's next pass read it and died (issue 17).
    droce::dpdk::eal_release();
    return rc;
}
