/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * droce configuration files: .ini text read with DPDK's rte_cfgfile (runtime
 * settings live in config/). The format is documented in config/demo.ini and summarised here.
 *
 *  - Comments start with '#' and run to the end of the line. Lines are `[section]`, `key = value`,
 *    blank, or comment; anything else is refused. Backslashes are refused (rte_cfgfile gives them a
 *    meaning droce does not want). Lines are at most 320 bytes, keys 63, values 255, files 1 MiB.
 *  - One device per file: [device], [port0]..[port3], optional [qp] and [neighbors].
 *    Several devices in one file (one process, e.g. two devices joined by an in-process ring pair):
 *    [device0], [device0.port0].., [device0.qp], [device0.neighbors], [device1], [device1.port0]
 * ... The two forms do not mix. Devices are numbered 0..3 and ports 0..3 without gaps.
 *  - [device]  name (required: 1..63 of [A-Za-z0-9_.-]), eal (EAL arguments, one string split on
 *    whitespace; only the first device of a file may set it: one process, one EAL), hugepages
 *    (auto | off, first device only; see HugepageMode; default: the eal line as written), clock
 * (tsc | virtual, default tsc), dcqcn (off | nvidia | paper), capture (a pcapng file: capture every
 * frame, no whitespace), capture_snaplen (64..65535 bytes kept per frame, default whole frames).
 *  - [portN]   driver (dpdk | uring, default dpdk), ip (required: IPv4 or IPv6 address with
 *    /prefix), mtu (IP MTU in bytes, 576..9600; default 1500 on dpdk, the interface's on uring).
 *    driver = dpdk: devargs (required: PMD devargs, no whitespace), mac (required:
 *    xx:xx:xx:xx:xx:xx, unicast, not zero). driver = uring (kernel UDP sockets, drivers/uring):
 *    the address is bound, so it must be this host's; interface (its MTU and link state; default:
 *    the interface holding the address or its subnet), udp_port (receive port, 1..65535, default
 *    4791), peer_udp_port (destination port, default udp_port: another value only for tests on
 *    one address), recv_mode (auto | multishot | batched | packet, default auto; packet: an
 *    AF_PACKET socket that sees the whole IP header, needs CAP_NET_RAW), share (yes | no, default
 *    no: yes lets processes of one user share ip:udp_port, steered by BTH destination QP; not with
 *    packet), send_zc (auto | on | off, default auto = off: io_uring SENDMSG_ZC for datagrams of
 *    send_zc_min bytes or more, 0..65535, default 4096; see drivers/uring/README.md), taskrun
 *    (auto | signal | coop, default auto: the runtime's choice; coop for a thread that polls, see
 *    drivers/uring TaskRun), gso (auto | on | off, default auto: UDP GSO sends of several frames
 *    towards each peer that answers it takes them, a droce uring port in socket receive mode;
 *    on: towards every peer; see drivers/uring UringPortConfig::gso), mac
 *    (optional: the MAC the engine sees, never sent; default derived from the address). Keys of
 *    the other driver are refused. A file whose ports are all uring needs no EAL (lib/runtime
 *    does not start it).
 *  - [qp]      defaults for new QPs: path_mtu (256|512|1024|2048|4096, default 1024; must fit every
 * port's mtu with RoCE headers), timeout (0..31, default 14), retry_cnt (0..7, default 7),
 * rnr_retry (0..7, default 7 = infinite), min_rnr_timer (0..31, default 12), max_rd_atomic (0..16,
 * default 1).
 *  - [neighbors] static overrides of neighbour resolution: `ip = mac`, one per line.
 *
 * Errors name the file, the line and the key: `config/x.ini:7: [port0] mac: "02:00:zz" is not a MAC
 * address`. Unknown sections and keys, duplicates, missing required keys and sections are refused.
 * Parsing never crashes on hostile input: the text is checked line by line before rte_cfgfile sees
 * it.
 *
 * Thread rules: the functions are re-entrant (no global state) and control path; they allocate.
 * They do not need the DPDK EAL (rte_cfgfile works before rte_eal_init, so a config can carry the
 * EAL arguments).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wire/eth.h"
#include "wire/ipv6.h"

namespace droce {

inline constexpr unsigned kMaxConfigPorts = 4;
inline constexpr unsigned kMaxConfigDevices = 4;

/** An interface address: IPv4 stored IPv4-mapped (::ffff:a.b.c.d), i.e. as its RoCEv2 GID. */
struct IpAddr {
    wire::Ipv6Addr addr{};
    bool ipv4 = false;
};

/** Which driver runs a port (`driver` key). */
enum class PortDriverKind : std::uint8_t {
    dpdk,  ///< a DPDK ethdev (drivers/dpdk): devargs, mac
    uring, ///< kernel UDP sockets through io_uring (drivers/uring): no EAL, no root
};
[[nodiscard]] const char* to_string(PortDriverKind k) noexcept;

struct PortConfig {
    PortDriverKind driver = PortDriverKind::dpdk;
    std::string devargs; ///< PMD devargs, handed to droce::dpdk::probe_port(); empty on uring
    wire::MacAddr mac{}; ///< uring: zero unless set (the driver derives one)
    IpAddr ip;           ///< the port's address = its GID
    std::uint8_t prefix_len = 0; ///< 0..32 (IPv4) or 0..128 (IPv6)
    /** IP MTU in bytes; 0 on a uring port without `mtu`: the interface's (known at bring-up). */
    std::uint32_t mtu = 1500;
    // ---- driver = uring only ----
    std::string interface;           ///< empty: the interface holding ip
    std::uint16_t udp_port = 4791;   ///< receive port
    std::uint16_t peer_udp_port = 0; ///< destination port; 0 = udp_port
    std::string recv_mode = "auto";  ///< auto | multishot | batched | packet
    /** `share = yes`: several processes (of one user) share ip:udp_port, each datagram steered to
     *  the process whose QPs it is for (drivers/uring README, "Several processes on one port"). */
    bool share = false;

    /** auto | on | off: zero-copy sends (drivers/uring SendZc). */
    std::string send_zc = "auto";
    /** Smallest UDP payload sent zero-copy, bytes. */
    std::uint32_t send_zc_min = 4096;
    /** auto | signal | coop: how the kernel hands the port's completions to the engine
     *  (drivers/uring TaskRun; auto: RuntimeOptions::uring_taskrun). */
    std::string taskrun = "auto";
    /** auto | on | off: UDP GSO sends (drivers/uring UringPortConfig::gso, Gso). */
    std::string gso = "auto";
    /** The port's line rate in Mb/s (`line_rate_gbps`), where DCQCN starts and the pacer's ceiling
     *  when DCQCN is on; 0 = unknown (DCQCN starts at 100 Gb/s and paces only below it). */
    double line_rate_mbps = 0;
};

/** Defaults for new QPs (ibv_modify_qp attribute names and units). */
struct QpDefaults {
    std::uint32_t path_mtu = 1024; ///< bytes
    std::uint8_t timeout = 14;     ///< local ACK timeout 4.096 us × 2^timeout; 0 = none
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;      ///< 7 = retry forever
    std::uint8_t min_rnr_timer = 12; ///< IBTA table 45 code (12 = 0.64 ms)
    std::uint8_t max_rd_atomic = 1;
};

struct Neighbor {
    IpAddr ip;
    wire::MacAddr mac{};
};

/**
 * What the `hugepages` key asks of the EAL line (resolved by lib/runtime when the EAL starts).
 * The fallback is copy mode: dpdk::no_huge_args() on the eal line (--no-huge, -m kept) and
 * dpdk::memif_copy_mode() on every net_memif devargs (zero-copy=no).
 */
enum class HugepageMode : std::uint8_t {
    as_written,    ///< no key: the eal line as it is (hugepages unless it says --no-huge)
    auto_fallback, ///< `auto`: the eal line (which must ask for hugepages) when the host can give
                   ///< them, else the fallback with one line on stderr saying why
    off,           ///< `off`: the fallback, always, silently
};

enum class ClockKind : std::uint8_t { tsc, virtual_clock };
[[nodiscard]] const char* to_string(ClockKind k) noexcept;

struct DeviceConfig {
    std::string name;
    std::vector<std::string> eal;                      ///< EAL arguments (argv[1..])
    HugepageMode hugepages = HugepageMode::as_written; ///< `hugepages`; devices[0] only
    ClockKind clock = ClockKind::tsc;
    std::vector<PortConfig> ports; ///< 1..4, index = droce port index
    QpDefaults qp;
    std::vector<Neighbor> neighbors;
    /** DCQCN for the device's QPs: "off" (default), "nvidia" (ConnectX defaults) or "paper"
     *  (SIGCOMM'15), the profiles of cc/dcqcn.h. */
    std::string dcqcn = "off";
    /** Live capture of every frame the device sends and receives to this pcapng file (relative
     *  to the working directory; created or truncated); empty = none. Devices of one file that
     *  name the same file share it (lib/capture). */
    std::string capture;
    /** Bytes kept per captured frame, 64..65535; 0 (the default) = whole frames. */
    std::uint32_t capture_snaplen = 0;
};

/** Everything in one file. */
struct ConfigFile {
    std::string path;
    std::vector<DeviceConfig> devices; ///< 1..4; devices[0] carries the EAL arguments
};

/**
 * Reads and checks a config file.
 * @return the devices, or nullopt with *err = one line "path:line: [section] key: reason" (or
 *         "path: reason" when no line applies: unreadable file, too big, missing [device]).
 */
[[nodiscard]] std::optional<ConfigFile> load_config(const std::string& path, std::string* err);

/** load_config() for a file that must hold exactly one device. */
[[nodiscard]] std::optional<DeviceConfig> load_device_config(const std::string& path,
                                                             std::string* err);

// ---- value parsers (used by the loader; also for command lines) ----
/** "02:00:00:00:00:01" (hex digits, either case, exactly 6 pairs). */
[[nodiscard]] bool parse_mac(std::string_view s, wire::MacAddr* out) noexcept;
/** An IPv4 dotted quad or an IPv6 address (inet_pton rules), no prefix. */
[[nodiscard]] bool parse_ip(std::string_view s, IpAddr* out) noexcept;
/** An address with a mandatory /prefix. */
[[nodiscard]] bool parse_ip_prefix(std::string_view s, IpAddr* out,
                                   std::uint8_t* prefix_len) noexcept;
/** Decimal digits only, value in lo..hi. */
[[nodiscard]] bool parse_uint(std::string_view s, std::uint64_t lo, std::uint64_t hi,
                              std::uint64_t* out) noexcept;
[[nodiscard]] std::string to_string(const wire::MacAddr& mac);
[[nodiscard]] std::string to_string(const IpAddr& ip);

} // namespace droce
