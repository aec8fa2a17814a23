/* SPDX-License-Identifier: BSD-3-Clause */
#include "runtime/runtime.h"

#include "cc/dcqcn.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <rte_eal.h>
#include <rte_log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dpdk/diagnose.h"
#include "dpdk/eal.h"
#include "dpdk/eth_port.h"
#include "sim/impair.h"
#include "uring/uring_port.h"
#include "wire/icmpv6.h"

namespace droce {

namespace {

std::string port_prefix(const DeviceConfig& d, unsigned p) {
    const PortConfig& pc = d.ports[p];
    const std::string what =
        pc.driver == PortDriverKind::uring
            ? "uring " + to_string(pc.ip) + " udp " + std::to_string(pc.udp_port)
            : pc.devargs;
    return "device " + d.name + " port" + std::to_string(p) + " (" + what + "): ";
}

/** Largest RoCE path MTU that fits the IP MTU of @p pc with IP, UDP, BTH, RETH and ICRC headers. */
std::uint32_t path_mtu_cap(const PortConfig& pc) noexcept {
    const std::uint32_t headers = (pc.ip.ipv4 ? 20u : 40u) + 8u + 12u + 16u + 4u;
    std::uint32_t m = 4096;
    while (m > 256 && m + headers > pc.mtu)
        m /= 2;
    return m;
}

// ---- drivers/uring: kernel UDP sockets (no EAL) ----

/** True when some port of the devices @p which is a DPDK port: only then is the EAL started. */
bool needs_eal(const ConfigFile& file, const std::vector<unsigned>& which) {
    for (unsigned i : which)
        for (const PortConfig& pc : file.devices[i].ports)
            if (pc.driver == PortDriverKind::dpdk) return true;
    return false;
}

/**
 * Brings up uring port @p p of @p dc. The port's MTU (the interface's, unless the config set one)
 * is written back to @p pc, so that max_path_mtu() and the [qp] path_mtu check see it. A shared
 * port takes steering slot @p share_slot (-1: any free one).
 * @return the port, or nullptr with *err = the driver's reason or "path_mtu does not fit".
 */
std::unique_ptr<uring::UringPort> make_uring_port(const DeviceConfig& dc, unsigned p,
                                                  PortConfig& pc, int share_slot, bool coop_default,
                                                  std::string* err) {
    uring::UringPortConfig uc;
    uc.port_index = static_cast<std::uint8_t>(p);
    uc.addr = pc.ip.addr;
    uc.ipv4 = pc.ip.ipv4;
    uc.interface = pc.interface;
    uc.udp_port = pc.udp_port;
    uc.peer_udp_port = pc.peer_udp_port;
    uc.mtu = pc.mtu;
    uc.mac = pc.mac;
    uc.share = pc.share;
    uc.share_slot = share_slot;
    uc.recv_mode = pc.recv_mode == "multishot" ? uring::RecvMode::multishot
                   : pc.recv_mode == "batched" ? uring::RecvMode::batched
                   : pc.recv_mode == "packet"  ? uring::RecvMode::packet
                                               : uring::RecvMode::automatic;
    uc.send_zc = pc.send_zc == "on"    ? uring::SendZc::on
                 : pc.send_zc == "off" ? uring::SendZc::off
                                       : uring::SendZc::automatic;
    uc.send_zc_min = pc.send_zc_min;
    uc.gso = pc.gso == "on"    ? uring::Gso::on
             : pc.gso == "off" ? uring::Gso::off
                               : uring::Gso::automatic;
    // DROCE_URING_RX_INTERRUPT=off: no receive interrupt, the engine's nap bounds the receive
    // latency as before it had one. For benchmarks comparing both in one run (bench/uring/run).
    if (const char* irq = std::getenv("DROCE_URING_RX_INTERRUPT");
        irq && std::strcmp(irq, "off") == 0)
        uc.rx_interrupt = false;
    // taskrun: the config's, else the owner's (RuntimeOptions::uring_coop_taskrun);
    // DROCE_URING_TASKRUN=signal|coop overrides both (bench/uring compares them in one run).
    bool coop = pc.taskrun == "coop" || (pc.taskrun == "auto" && coop_default);
    if (const char* tr = std::getenv("DROCE_URING_TASKRUN"); tr && *tr) {
        if (std::strcmp(tr, "coop") == 0 || std::strcmp(tr, "signal") == 0)
            coop = std::strcmp(tr, "coop") == 0;
        else
            std::fprintf(stderr, "droce: DROCE_URING_TASKRUN=%s is not signal or coop: ignored\n",
                         tr);
    }
    uc.taskrun = coop ? uring::TaskRun::coop : uring::TaskRun::signal;
    auto port = uring::UringPort::create(uc, err);
    if (!port) return nullptr;
    if (!port->config_note().empty())
        std::fprintf(stderr, "droce: device %s port%u: %s\n", dc.name.c_str(), p,
                     port->config_note().c_str());
    pc.mtu = port->mtu();
    pc.mac = port->mac();
    const std::uint32_t need = dc.qp.path_mtu + (pc.ip.ipv4 ? 20u : 40u) + 8u + 12u + 16u + 4u + 4u;
    if (pc.mtu < need) {
        *err = "interface " + port->interface() + " MTU " + std::to_string(pc.mtu) +
               " is too small for path_mtu " + std::to_string(dc.qp.path_mtu) +
               " (needs >= " + std::to_string(need) + ")";
        return nullptr;
    }
    return port;
}

/**
 * DPDK's reason @p dpdk_err for a port that did not come up, with the cause in front where the
 * host shows one (a memif client with no server listening: rte_eth_dev_start's EPERM; a memif
 * server socket held by another process: a failed probe; a PCI address with no device, no driver,
 * a kernel driver DPDK cannot share, or a vfio group another process holds). DPDK's words stay,
 * after the cause.
 */
std::string explain_port_failure(const std::string& devargs, const std::string& dpdk_err) {
    std::string why = dpdk::memif_obstacle(devargs);
    if (why.empty()) why = dpdk::pci_obstacle(devargs);
    return why.empty() ? dpdk_err : why + " (DPDK: " + dpdk_err + ")";
}

/**
 * Settles the config's `hugepages` key (config.h HugepageMode) into @p file before the EAL starts:
 * on the copy-mode fallback the eal line gets --no-huge and every net_memif port zero-copy=no, so
 * that what follows sees a plain config. auto falls back when the host lacks the hugepages (or,
 * the EAL being up already in this process, when it runs without them) and says so in one line on
 * stderr, because the user asked for the fast mode and gets the slow one.
 */
void resolve_hugepages(const std::string& config_path, ConfigFile& file) {
    DeviceConfig& d0 = file.devices[0];
    std::string why;
    if (d0.hugepages == HugepageMode::as_written) return;
    if (d0.hugepages == HugepageMode::auto_fallback) {
        if (dpdk::eal_initialized())
            why = rte_eal_has_hugepages() ? "" : "this process's EAL runs without hugepages";
        else
            why = dpdk::hugepage_shortfall(d0.eal);
        if (why.empty()) return;
    }
    d0.eal = dpdk::no_huge_args(d0.eal);
    bool memif = false;
    for (DeviceConfig& d : file.devices)
        for (PortConfig& pc : d.ports) {
            if (pc.driver != PortDriverKind::dpdk) continue;
            const std::string copy = dpdk::memif_copy_mode(pc.devargs);
            // The server side is copy mode either way (zero-copy is the client's option): say so
            // too.
            memif = memif || pc.devargs.rfind("net_memif", 0) == 0;
            pc.devargs = copy;
        }
    if (why.empty()) return; // off: asked for, nothing to say
    std::string m;
    for (std::size_t i = 0; i + 1 < d0.eal.size(); ++i)
        if (d0.eal[i] == "-m") m = " -m " + d0.eal[i + 1];
    std::fprintf(stderr,
                 "droce: %s: hugepages = auto, but %s: running %swith --no-huge%s, slower "
                 "(README: Fast by default, for the hugepages to reserve)\n",
                 config_path.c_str(), why.c_str(), memif ? "memif in copy mode " : "", m.c_str());
}

bool has_log_level(const std::vector<std::string>& args) {
    return std::any_of(args.begin(), args.end(),
                       [](const std::string& a) { return a.rfind("--log-level", 0) == 0; });
}

} // namespace

Runtime::Runtime() : clock_(Clock::tsc()) {}

std::unique_ptr<Runtime> Runtime::create(const std::string& config_path, const RuntimeOptions& opts,
                                         std::string* err) {
    std::string e;
    auto file = load_config(config_path, &e);
    if (!file) {
        *err = e;
        return nullptr;
    }
    std::vector<unsigned> which = opts.devices;
    if (which.empty())
        for (unsigned i = 0; i < file->devices.size(); ++i)
            which.push_back(i);
    for (unsigned i : which) {
        if (i >= file->devices.size()) {
            *err = config_path + ": no device " + std::to_string(i) + " (the file has " +
                   std::to_string(file->devices.size()) + ")";
            return nullptr;
        }
        if (file->devices[i].clock == ClockKind::virtual_clock) {
            *err = config_path + ": device " + file->devices[i].name +
                   ": clock = virtual is for tests that advance time by hand; use clock = tsc";
            return nullptr;
        }
    }
    sim::ImpairConfig ic;
    if (!opts.impair_spec.empty()) {
        if (e = sim::parse_impair_spec(opts.impair_spec, ic); !e.empty()) {
            *err = "impairment spec \"" + opts.impair_spec + "\": " + e;
            return nullptr;
        }
    }
    if (needs_eal(*file, which)) resolve_hugepages(config_path, *file);
    if (!dpdk::eal_initialized() && needs_eal(*file, which)) {
        // DPDK logs to stdout by default; apps keep stdout for their own output (tables, JSON).
        rte_openlog_stream(stderr);
        std::vector<std::string> eal = file->devices[0].eal;
        if (opts.eal_log_level > 0 && !has_log_level(eal))
            eal.push_back("--log-level=" + std::to_string(opts.eal_log_level));
        if (e = dpdk::eal_init(eal); !e.empty()) {
            *err = config_path + ": EAL: " + e;
            return nullptr;
        }
    }

    std::unique_ptr<Runtime> rt(new Runtime());
    rt->file_ = *file;
    rt->engine_opts_ = opts.engine;
    if (dpdk::eal_initialized() && !rt->engine_opts_.on_thread_start) {
        // Engine threads get lcore ids of their own, so that DPDK's mempool caches serve them.
        rt->engine_opts_.on_thread_start = &dpdk::register_thread;
        rt->engine_opts_.on_thread_exit = &dpdk::unregister_thread;
    }
    rt->capture_ring_slots_ = opts.capture_ring_slots;
    for (unsigned i : which) {
        DeviceSlot slot;
        slot.cfg = file->devices[i];
        const DeviceConfig& dc = slot.cfg;
        std::vector<PortSpec> specs;
        // Shared uring ports (share = yes) are created under the host-wide join lock, so that no
        // other process takes this process's slot in one group while it joins another.
        std::unique_ptr<uring::ShareJoinLock> join;
        if (std::any_of(dc.ports.begin(), dc.ports.end(), [](const PortConfig& pc) {
                return pc.driver == PortDriverKind::uring && pc.share;
            })) {
            join = std::make_unique<uring::ShareJoinLock>(10'000, &e);
            if (!join->held()) {
                *err = config_path + ": device " + dc.name + ": " + e;
                return nullptr;
            }
        }
        int share_slot = -1; // the slot of the first shared port: the others take the same
        for (unsigned p = 0; p < dc.ports.size(); ++p) {
            PortConfig& pc = slot.cfg.ports[p];
            PortDriver* drv = nullptr;
            wire::MacAddr mac{};
            if (pc.driver == PortDriverKind::uring) {
                auto up = make_uring_port(dc, p, pc, share_slot, opts.uring_coop_taskrun, &e);
                if (!up) {
                    *err = port_prefix(dc, p) + e;
                    return nullptr;
                }
                if (up->shared() && share_slot < 0) share_slot = up->steering_slot();
                drv = up.get();
                mac = up->mac();
                slot.eth.push_back(nullptr);
                slot.uring.push_back(std::move(up));
            } else {
                dpdk::EthPortConfig ec;
                if (e = dpdk::probe_port(pc.devargs, &ec.port_id); !e.empty()) {
                    *err = port_prefix(dc, p) + explain_port_failure(pc.devargs, e);
                    return nullptr;
                }
                ec.port_index = static_cast<std::uint8_t>(p);
                ec.mtu = pc.mtu;
                ec.mac = pc.mac;
                if (!pc.ip.ipv4) {
                    // The neighbour responder answers Neighbor Solicitations for the port's address
                    // (its solicited-node group) and reads unsolicited advertisements (all-nodes).
                    ec.multicast = {
                        wire::ipv6_multicast_mac(wire::solicited_node_address(pc.ip.addr)),
                        wire::ipv6_multicast_mac(wire::kIpv6AllNodes)};
                }
                auto eth = dpdk::EthPort::create(ec, &e);
                if (!eth) {
                    *err = port_prefix(dc, p) + explain_port_failure(pc.devargs, e);
                    return nullptr;
                }
                drv = eth.get();
                mac = eth->mac(); // pc.mac, which the port now receives
                slot.eth.push_back(std::move(eth));
                slot.uring.push_back(nullptr);
            }
            if (!opts.impair_spec.empty() && !(p < 32 && (ic.port_mask >> p) & 1u)) {
                slot.stages.push_back(nullptr); // a port the spec leaves alone (ports=)
            } else if (!opts.impair_spec.empty()) {
                sim::ImpairConfig pic = ic;
                pic.seed =
                    ic.seed + 7919u * (i * kMaxConfigPorts + p); // independent draws per port
                try {
                    slot.stages.push_back(
                        std::make_unique<sim::ImpairedPort>(*drv, &rt->clock_, pic));
                } catch (const std::exception& ex) {
                    *err = port_prefix(dc, p) + "impairment stage: " + ex.what();
                    return nullptr;
                }
                drv = slot.stages.back().get();
            }
            if (opts.tx_shaper) {
                slot.shapers.push_back(
                    std::make_unique<TxShaper>(*drv, rt->clock_, opts.tx_rate_gbps));
                drv = slot.shapers.back().get();
            }
            specs.push_back(PortSpec{drv, mac, pc.ip.addr, 4096});
            specs.back().mtu = path_mtu_cap(pc);
            specs.back().line_rate_mbps = pc.line_rate_mbps;
            specs.back().l3 = pc.driver == PortDriverKind::uring; // the kernel routes
        }
        slot.dev = std::make_unique<Device>(dc.name, rt->clock_, specs);
        join.reset();       // the slots are known: others may join
        if (share_slot > 0) // a fresh device has no QP: cannot fail
            (void)slot.dev->set_qpn_steering_slot(static_cast<std::uint8_t>(share_slot));
        if (dc.dcqcn != "off") slot.dev->set_dcqcn(cc::profile_by_name(dc.dcqcn));
        // A uring port's own counters (GSO sends, zero-copy, socket drops, ...) beside the
        // device's: droce-stat and telemetry list them as "port<N>/uring". The device is
        // destroyed before its ports (DeviceSlot's member order), so the block never outlives them.
        for (unsigned p = 0; p < slot.uring.size(); ++p)
            if (slot.uring[p])
                slot.dev->counter_registry().add("port" + std::to_string(p + 1) + "/uring",
                                                 uring::kPortCounterNames,
                                                 slot.uring[p]->counter_cells());
        // DROCE_TX_BYREF_MIN=BYTES|off: smallest payload sent by reference (zero-copy) where a port
        // can; "off" copies everything. For benchmarks comparing both in one run (bench/e2e/run).
        if (const char* zc = std::getenv("DROCE_TX_BYREF_MIN"); zc && *zc) {
            const bool off = std::strcmp(zc, "off") == 0;
            const auto min =
                off ? UINT32_MAX : static_cast<std::uint32_t>(std::strtoul(zc, nullptr, 10));
            for (unsigned p = 0; p < specs.size(); ++p)
                slot.dev->set_tx_by_reference(p, min);
        }
        for (const Neighbor& n : dc.neighbors) {
            if (!slot.dev->add_static_neighbor(n.ip.addr, n.mac)) {
                *err = config_path + ": device " + dc.name + ": neighbour table full at " +
                       to_string(n.ip);
                return nullptr;
            }
        }
        rt->devices_.push_back(std::move(slot));
    }
    // Live capture: RuntimeOptions::capture_path for every device, else the config's files (the
    // devices naming one file share it; its snap length is the first such device's).
    std::vector<std::pair<std::string, std::vector<unsigned>>> files;
    for (unsigned i = 0; i < rt->devices_.size(); ++i) {
        const std::string& f =
            opts.capture_path.empty() ? rt->devices_[i].cfg.capture : opts.capture_path;
        if (f.empty()) continue;
        auto it = std::find_if(files.begin(), files.end(), [&](auto& x) { return x.first == f; });
        if (it == files.end())
            files.push_back({f, {i}});
        else
            it->second.push_back(i);
    }
    for (const auto& [f, devs] : files) {
        capture::CaptureOptions co;
        co.snaplen = opts.capture_snaplen ? opts.capture_snaplen
                                          : rt->devices_[devs.front()].cfg.capture_snaplen;
        co.ring_slots = opts.capture_ring_slots;
        if (e = rt->start_capture(f, co, devs); !e.empty()) {
            *err = e;
            return nullptr;
        }
    }
    if (opts.telemetry) {
        telemetry::Source src;
        for (auto& slot : rt->devices_) {
            telemetry::DeviceEntry de;
            de.dev = slot.dev.get();
            for (auto& eth : slot.eth) // null for a uring port: no ethdev behind it
                de.ethdev.push_back(eth ? eth->port_id() : -1);
            src.devices.push_back(std::move(de));
        }
        src.control_mutex = opts.control_mutex;
        Runtime* self = rt.get();
        src.capture_start = [self](const std::string& path, std::uint32_t snaplen) {
            capture::CaptureOptions co;
            co.snaplen = snaplen;
            co.ring_slots = self->capture_ring_slots_;
            return self->start_capture(path, co);
        };
        src.capture_stop = [self] {
            (void)self->stop_capture(false);
            return self->capture_status();
        };
        src.capture_status = [self] { return self->capture_status(); };
        // An observer: a process without it still runs, so a refusal is reported, not fatal.
        rt->telemetry_id_ = telemetry::attach(std::move(src), &e);
        if (!rt->telemetry_id_) std::fprintf(stderr, "droce: telemetry: %s\n", e.c_str());
        // A process whose ports are all uring has no EAL, hence no telemetry socket of its own.
        if (rt->telemetry_id_ && !dpdk::eal_initialized() &&
            !telemetry::open_socket_without_eal(nullptr, &e))
            std::fprintf(stderr, "droce: telemetry: %s (droce-stat cannot reach this process)\n",
                         e.c_str());
    }
    return rt;
}

telemetry::CaptureStatus Runtime::capture_status() const {
    std::lock_guard g(capture_mu_);
    if (captures_.empty()) return last_capture_;
    telemetry::CaptureStatus s;
    s.running = true;
    s.snaplen = captures_.front()->snaplen();
    for (const auto& c : captures_) {
        const capture::CaptureStats st = c->stats();
        s.file += (s.file.empty() ? "" : " ") + c->path();
        s.stats.frames += st.frames;
        s.stats.dropped += st.dropped;
        s.stats.truncated += st.truncated;
        s.stats.bytes += st.bytes;
        if (!s.stats.error) s.stats.error = st.error;
    }
    return s;
}

std::string Runtime::start_capture(const std::string& path, const capture::CaptureOptions& opts,
                                   const std::vector<unsigned>& devices) {
    std::lock_guard g(capture_mu_);
    std::vector<Device*> devs;
    for (unsigned i = 0; i < devices_.size(); ++i)
        if (devices.empty() || std::find(devices.begin(), devices.end(), i) != devices.end())
            devs.push_back(devices_[i].dev.get());
    for (unsigned i : devices)
        if (i >= devices_.size()) return "capture " + path + ": no device " + std::to_string(i);
    for (const auto& c : captures_)
        for (Device* d : devs)
            for (const Device* cd : c->devices())
                if (cd == d)
                    return "capture " + path + ": device " + d->name() + " is captured to " +
                           c->path() + " already";
    std::string err;
    auto c = capture::Capture::start(path, devs, opts, &err);
    if (!c) return err;
    captures_.push_back(std::move(c));
    return "";
}

capture::CaptureStats Runtime::stop_capture(bool report) noexcept {
    std::lock_guard g(capture_mu_);
    capture::CaptureStats sum;
    if (captures_.empty()) return sum;
    telemetry::CaptureStatus last;
    last.snaplen = captures_.front()->snaplen();
    for (auto& c : captures_) {
        last.file += (last.file.empty() ? "" : " ") + c->path();
        const capture::CaptureStats st = c->stop();
        if (report) std::fprintf(stderr, "droce: %s\n", capture::describe(c->path(), st).c_str());
        sum.frames += st.frames;
        sum.dropped += st.dropped;
        sum.truncated += st.truncated;
        sum.bytes += st.bytes;
        if (!sum.error) sum.error = st.error;
    }
    captures_.clear();
    last.stats = sum;
    last_capture_ = std::move(last);
    return sum;
}

Runtime::~Runtime() {
    // First: from here on no telemetry command reaches the devices.
    telemetry::detach(telemetry_id_);
    stop_engines();
    (void)stop_capture();
    // Devices first: they stop referencing the ports. Then give back frames still sitting in rx
    // queues (a ring-pair peer's ring holds mbufs of the other port's pool), then the stages, then
    // the EthPorts.
    for (auto& s : devices_)
        s.dev.reset();
    for (auto& s : devices_)
        for (auto& eth : s.eth) {
            if (!eth) continue; // a uring port: the kernel holds nothing of another port
            PktBuf* bufs[64];
            for (int round = 0; round < 64; ++round) {
                const std::uint16_t n = eth->rx_burst(bufs, 64);
                if (n == 0) break;
                eth->free_bulk(bufs, n);
            }
        }
    for (auto& s : devices_)
        s.shapers.clear();
    for (auto& s : devices_)
        s.stages.clear();
    for (auto& s : devices_)
        s.eth.clear();
    for (auto& s : devices_)
        s.uring.clear();
}

dpdk::EthPort* Runtime::eth_port(unsigned dev, unsigned port) noexcept {
    return devices_[dev].eth[port].get();
}

uring::UringPort* Runtime::uring_port(unsigned dev, unsigned port) noexcept {
    return devices_[dev].uring[port].get();
}

sim::ImpairedPort* Runtime::impair_stage(unsigned dev, unsigned port) noexcept {
    auto& st = devices_[dev].stages;
    return port < st.size() ? st[port].get() : nullptr;
}

TxShaper* Runtime::shaper(unsigned dev, unsigned port) noexcept {
    auto& sh = devices_[dev].shapers;
    return port < sh.size() ? sh[port].get() : nullptr;
}

std::uint32_t Runtime::max_path_mtu(unsigned dev, unsigned port) const noexcept {
    return path_mtu_cap(devices_[dev].cfg.ports[port]);
}

bool Runtime::start_engines(EngineMode mode) {
    if (engines_running()) return false;
    if (mode == EngineMode::shared) {
        shared_stop_.store(false, std::memory_order_relaxed);
        try {
            shared_devices_.clear();
            for (auto& s : devices_)
                shared_devices_.push_back(s.dev.get());
            shared_ = std::thread([this] { shared_loop(); });
        } catch (...) {
            return false;
        }
        return true;
    }
    for (auto& s : devices_) {
        threads_.push_back(std::make_unique<EngineThread>(*s.dev, engine_opts_));
        if (!threads_.back()->start()) {
            stop_engines();
            return false;
        }
    }
    return true;
}

void Runtime::send_held_acks() noexcept {
    for (auto& d : devices_)
        d.dev->send_held_acks();
}

void Runtime::stop_engines() noexcept {
    for (auto& t : threads_)
        t->stop();
    threads_.clear();
    if (shared_.joinable()) {
        shared_stop_.store(true, std::memory_order_relaxed);
        if (!devices_.empty()) devices_[0].dev->ring_doorbell(); // out of its nap at once
        shared_.join();
    }
}

void Runtime::leave_shared_ports() noexcept {
    for (auto& d : devices_)
        for (auto& u : d.uring)
            if (u) u->leave_share_group();
}

void Runtime::shared_loop() noexcept {
    // One thread for every device: spin while there is work or was recently, then yield, then nap
    // as an EngineThread does (engine_opts_), on every device's doorbell, receive interrupts and
    // timers at once. It used to nap on the first device's only: a post to another device in
    // thread progress mode waited out the nap (max_sleep_ns). It used to yield for ever before
    // that: a process of demo.ini's two devices used a whole core while idle.
    pthread_setname_np(pthread_self(), EngineThread::kThreadName);
    if (engine_opts_.on_thread_start) engine_opts_.on_thread_start();
    EngineThread::apply_nice(engine_opts_.nice);
    // naps of tens of us (engine_thread.cc)
    if (prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0) Device::naps_end_on_time();
    EngineThread::IdleBackoff backoff(engine_opts_);
    while (!shared_stop_.load(std::memory_order_relaxed)) {
        std::uint32_t work = 0;
        bool pacer_wait = false;
        for (auto& s : devices_) {
            work += s.dev->poll();
            pacer_wait = pacer_wait || s.dev->pacer_release_ns() != 0;
        }
        if (work) {
            backoff.worked();
            continue;
        }
        // Woken: poll busily again; slept its time out: nap again unless work comes. Paced QPs
        // alone waiting on some device (the others idle, or this pass would have found work): the
        // nap at once.
        const auto nap = [&] {
            return Device::sleep_until_any_doorbell(shared_devices_, engine_opts_.max_sleep_ns);
        };
        backoff.rest(nap, pacer_wait);
    }
    backoff.worked();
    if (engine_opts_.on_thread_exit) engine_opts_.on_thread_exit();
}

} // namespace droce
