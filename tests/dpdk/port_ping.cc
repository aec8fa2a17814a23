/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Test helper for the two-process system tests (memif, netns/af_packet): brings up port 0 of a
 * droce config exactly as the engine would (config -> eal_init -> probe_port -> EthPort) and either
 * pings (sends numbered frames of EtherType 0x88b5 to the first static neighbour and checks each
 * echo byte for byte) or echoes (swaps the MACs of every 0x88b5 frame and sends it back).
 *
 *   dpdk-port-ping --config FILE --role ping|echo [--count N] [--size BYTES] [--timeout-ms MS]
 * Exit status: 0 all frames echoed intact (ping) / at least N frames echoed (echo); 1 failure; 2
 * usage.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include <rte_eal.h>

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

int echo(EthPort& port, unsigned count, unsigned timeout_ms) {
    const std::uint64_t deadline = now_ms() + timeout_ms;
    std::uint64_t last = 0;
    unsigned echoed = 0;
    while (now_ms() < deadline) {
        if (echoed >= count && now_ms() - last > 1500) break; // the pinger is done (or retrying)
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
    std::printf("echo: %u frames echoed\n", echoed);
    return echoed >= count ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    std::string config, role;
    unsigned count = 100, size = 64, timeout_ms = 20000;
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
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (config.empty() || (role != "ping" && role != "echo") || size < 18) {
        std::fprintf(stderr,
                     "usage: %s --config FILE --role ping|echo [--count N] [--size B>=18] "
                     "[--timeout-ms MS]\n",
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
    const droce::PortConfig& pc = dev->ports[0];
    droce::dpdk::EthPortConfig ec;
    if (err = droce::dpdk::probe_port(pc.devargs, &ec.port_id); !err.empty()) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
    }
    ec.mtu = pc.mtu;
    ec.mac = pc.mac;
    auto port = EthPort::create(ec, &err);
    if (!port) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
    }
    if (size > port->max_frame()) {
        std::fprintf(stderr, "size %u > max frame %u\n", size, port->max_frame());
        return 2;
    }
    std::printf("%s: %s port %u (%s) mac %s mtu %u (ethdev %u) lsc %d cksum-offload %d\n",
                role.c_str(), dev->name.c_str(), ec.port_id, port->driver_name().c_str(),
                droce::to_string(port->mac()).c_str(), port->mtu(), port->pmd_mtu(),
                port->lsc_interrupt(), port->ipv4_cksum_offload());
    const std::uint64_t up_deadline = now_ms() + timeout_ms;
    while (!port->link_up() && now_ms() < up_deadline) {
    }
    std::printf("%s: link %s\n", role.c_str(), port->link_up() ? "up" : "down");
    int rc = 1;
    if (role == "ping") {
        droce::wire::MacAddr dst{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        if (!dev->neighbors.empty()) dst = dev->neighbors[0].mac;
        rc = ping(*port, dst, count, size, timeout_ms);
    } else {
        rc = echo(*port, count, timeout_ms);
    }
    port.reset();
    rte_eal_cleanup();
    return rc;
}
