/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Devices and contexts of droce's libibverbs: the device list (from the droce config), open/close
 * (the runtime and its engine threads), query_device(_ex), query_port, GIDs, P_Keys, asynchronous
 * events, and the quiescence guard every control verb uses.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/say_once.h"
#include "config/default_path.h"
#include "dpdk/eal.h"
#include "provider.h"
#include "rc/params.h"
#include "telemetry/telemetry.h"

#if !defined(DROCE_DEFAULT_CONFIG) || !defined(DROCE_BUILD_DEFAULT_CONFIG) ||                      \
    !defined(DROCE_BUILD_LIBDIR)
#error "meson passes DROCE_DEFAULT_CONFIG, DROCE_BUILD_DEFAULT_CONFIG and DROCE_BUILD_LIBDIR"
#endif

namespace droce::verbs {

Provider& provider() noexcept {
    // Deliberately leaked: perftest and others exit without closing; destroying the runtime from a
    // static destructor would race with DPDK's own teardown.
    static Provider* p = new Provider;
    return *p;
}

VContext* open_context(ibv_context* context) noexcept {
    if (!context) return nullptr;
    for (VContext* c : provider().contexts)
        if (&c->vctx.context == context) return c;
    return nullptr;
}

namespace {

constexpr std::uint32_t kVendorId = 0x02d0ce;

std::uint64_t guid_from_mac(const wire::MacAddr& m) noexcept {
    // Modified EUI-64 of the MAC (flip the universal/local bit, insert ff:fe), network order.
    const std::uint8_t g[8] = {
        static_cast<std::uint8_t>(m[0] ^ 2u), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
    std::uint64_t be;
    std::memcpy(&be, g, 8);
    return be;
}

/** Set by ibv_get_device_guid: a program that lists devices with their GUIDs (ibv_devices). */
std::atomic<bool> g_guid_asked{false};
/** Set when ibv_open_device found the device but could not bring droce up: its reason is on
 *  stderr already, so the exit hint (which would blame the device name) stays silent. */
std::atomic<bool> g_open_failed{false};

/**
 * At exit, when the program listed droce's devices and opened none, or opened one, asked for no
 * QP and has librdmacm loaded: a verbs program that gives up there prints only its own words ("IB
 * device X not found", "rdma_create_event_channel failed"), which do not say droce. One line on
 * stderr names the likely cause: a device name the config does not have, or rdma_cm. Not for a
 * program that lists devices to show them (ibv_devices asks their GUIDs), unless it has librdmacm
 * loaded (rping: librdmacm asks the GUIDs).
 */
void hint_if_nothing_opened() {
    std::fflush(stdout); // the program's buffered output first (see stop_all_engines_at_exit)
    Provider& p = provider();
    if (!p.mu.try_lock()) return;
    const bool opened = p.runtime != nullptr;
    std::string names;
    for (const auto& d : p.devices)
        names += (names.empty() ? "" : ", ") + d->cfg.name;
    const std::string config = p.config_path;
    p.mu.unlock();
    if (opened) {
        // perftest -R opens the device, then fails in librdmacm before any QP exists.
        if (!g_qp_attempted.load(std::memory_order_relaxed) &&
            dlopen("librdmacm.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr)
            std::fprintf(stderr,
                         "droce: the program opened a droce device and created no QP: if it "
                         "connects with rdma_cm (perftest -R, rping), it cannot run on droce, "
                         "which has no rdma_cm; exchange QP information out of band instead "
                         "(README: Unsupported)\n");
        return;
    }
    if (names.empty() || g_open_failed.load(std::memory_order_relaxed)) return;
    const bool rdmacm = dlopen("librdmacm.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr;
    if (g_guid_asked.load(std::memory_order_relaxed)) {
        // librdmacm lists the devices and asks their GUIDs when it starts, then rping and the
        // other rdma_cm programs fail without a verbs call ("failed to create RDMA CM event
        // channel"). ibv_devices, which also asks GUIDs, has no librdmacm.
        if (rdmacm)
            std::fprintf(stderr,
                         "droce: the program looked for RDMA devices through librdmacm and "
                         "opened none: a program that connects with rdma_cm (rping, ucmatose, "
                         "perftest -R) cannot run on droce, which has no rdma_cm; exchange QP "
                         "information out of band instead (README: Unsupported)\n");
        return;
    }
    std::fprintf(stderr,
                 "droce: the program listed droce's devices (%s, from %s) and opened none: a "
                 "device name it did not find takes one of these (ibv_devices lists them; "
                 "DROCE_CONFIG picks the config); a program that connects with rdma_cm "
                 "(perftest -R, rping) cannot run on droce, which has no rdma_cm (README: "
                 "Unsupported)\n",
                 names.c_str(), config.c_str());
}

/**
 * A malformed DROCE_* variable: names it, its value and what it takes on stderr, and keeps the exit
 * hint quiet (it would blame the device name). @return NULL with errno EINVAL.
 */
ibv_context* refuse_env(const char* name, const char* value, const char* takes) {
    // Once per variable and value: ibv_devinfo opens every device, each open is refused alike.
    static std::mutex told_mu;
    static std::vector<std::string> told;
    bool first = false;
    try {
        std::lock_guard lock(told_mu);
        std::string key = std::string(name) + '=' + value;
        if (std::find(told.begin(), told.end(), key) == told.end()) {
            told.push_back(std::move(key));
            first = true;
        }
    } catch (...) {
        first = true; // out of memory: say it again rather than not at all
    }
    if (first) std::fprintf(stderr, "droce: %s=%s is not %s\n", name, value, takes);
    g_open_failed.store(true, std::memory_order_relaxed);
    return fail<ibv_context>(EINVAL);
}

void stop_all_engines_at_exit() {
    // Runs from exit(): the application may not have closed its contexts (perftest does not). Stop
    // the engine threads so nothing polls ports while the process tears down, and the captures so
    // their files are complete; leave the rest.
    Provider& p = provider();
    if (!p.mu.try_lock()) return; // a control verb is running on another thread: leave it
    // exit() flushes stdio after the atexit handlers: the program's buffered output (perftest's
    // table, written to a pipe or file) would otherwise come after droce's lines below.
    std::fflush(stdout);
    if (p.runtime) {
        // ACKs held for a next request (the ACK hold, lib/rc) would otherwise never leave: the
        // peer's last WRITE or SEND, complete here, would end in RETRY_EXC_ERR there.
        p.runtime->send_held_acks();
        p.runtime->stop_engines();
        p.runtime->stop_capture();       // DROCE_CAPTURE: write what the rings hold, close the file
        p.runtime->leave_shared_ports(); // share = yes: the other processes keep their slots
    }
    p.mu.unlock();
    // The EAL stays up (ports are not closed here), but its files need not outlive the process:
    // the runtime directory and hugepage files go now, their mappings at exit.
    dpdk::release_files_on_exit();
}

/** The signals that end a process by default and that users send to stop a program. */
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

/**
 * The handler release_files_on_stop_signals() installs: the EAL's files go (hugepage files,
 * runtime directory; async-signal-safe), then the signal ends the process as it would have
 * without droce (SA_RESETHAND put the default back; the signal, raised again, is delivered once
 * this returns), so the program's exit status is unchanged.
 */
void release_files_then_die(int sig) {
    const int saved_errno = errno;
    dpdk::release_files_from_signal();
    telemetry::remove_socket_dir_on_signal(); // a process without the EAL: its telemetry socket
    (void)raise(sig);
    errno = saved_errno;
}

/**
 * An application stopped by Ctrl-C or SIGTERM never reaches exit(), so stop_all_engines_at_exit()
 * does not run and DPDK's hugepage files and runtime directory would stay until the next start on
 * the config cleaned them (README: Nothing left behind). For each stop signal the application
 * left at its default disposition, a handler that removes them before the signal ends the
 * process; a signal the application handles, or ignores, stays its own (it then exits through
 * exit() or not at all). Later handlers the application installs replace droce's. Once per
 * process, at the runtime's bring-up.
 */
void release_files_on_stop_signals() {
    for (int sig : kStopSignals) {
        struct sigaction old {};
        if (sigaction(sig, nullptr, &old) != 0) continue;
        if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
        struct sigaction sa {};
        sa.sa_handler = release_files_then_die;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        (void)sigaction(sig, &sa, nullptr);
    }
}

} // namespace

bool parse_progress_mode(const char* s, ProgressMode* out) noexcept {
    if (std::strcmp(s, "auto") == 0) {
        *out = ProgressMode::automatic;
    } else if (std::strcmp(s, "thread") == 0) {
        *out = ProgressMode::thread;
    } else if (std::strcmp(s, "app") == 0) {
        *out = ProgressMode::app;
    } else {
        return false;
    }
    return true;
}

int load_devices(Provider& p) {
    if (p.listed) return 0;
    const char* env = std::getenv("DROCE_CONFIG");
    if (env && *env) {
        p.config_path = env;
    } else {
        // The build tree's copy defaults to the source tree's config, an installed copy to
        // <sysconfdir>/droce: which one this is shows in the file it was loaded from.
        Dl_info self{};
        const bool found = dladdr(reinterpret_cast<void*>(&load_devices), &self) != 0;
        p.config_path = default_config_path(found ? self.dli_fname : nullptr, DROCE_BUILD_LIBDIR,
                                            DROCE_BUILD_DEFAULT_CONFIG, DROCE_DEFAULT_CONFIG);
    }
    std::string err;
    auto file = load_config(p.config_path, &err);
    if (!file) {
        std::fprintf(stderr, "droce: %s\n", err.c_str());
        return ENODEV;
    }
    for (unsigned i = 0; i < file->devices.size(); ++i) {
        auto d = std::make_unique<VDevice>();
        d->index = i;
        d->cfg = file->devices[i];
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        std::snprintf(d->dev.name, sizeof d->dev.name, "%s", d->cfg.name.c_str());
        std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%u", i);
        // No sysfs behind droce devices; the paths name what they would be so tools print
        // something.
        std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path,
                      "/sys/class/infiniband_verbs/uverbs%u", i);
        std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s",
                      d->cfg.name.c_str());
        d->guid_be = guid_from_mac(d->cfg.ports[0].mac);
        p.devices.push_back(std::move(d));
    }
    p.listed = true;
    return 0;
}

ControlGuard::ControlGuard(Device* dev) : lock_(provider().mu) {
    Provider& p = provider();
    if (dev) {
        quiesced_.push_back(dev);
    } else if (p.runtime) {
        for (unsigned i = 0; i < p.runtime->num_devices(); ++i)
            quiesced_.push_back(&p.runtime->device(i));
    }
    for (Device* d : quiesced_)
        d->begin_control();
}

ControlGuard::~ControlGuard() {
    for (Device* d : quiesced_)
        d->end_control();
}

void post_async_event(Device* dev, const AsyncRecord& rec) noexcept {
    // The context list only changes under ControlGuard() of every device, i.e. between passes.
    for (VContext* c : provider().contexts) {
        if (c->dev != dev || c->async_wfd < 0) continue;
        [[maybe_unused]] ssize_t r = write(c->async_wfd, &rec, sizeof rec);
    }
}

void post_context_event(VContext* ctx, const AsyncRecord& rec) noexcept {
    if (ctx->async_wfd < 0) return;
    [[maybe_unused]] ssize_t r = write(ctx->async_wfd, &rec, sizeof rec);
}

namespace {

VContext* ctx_of(ibv_context* c) noexcept {
    return vctx_of(c);
}

bool port_ok(VContext* c, unsigned port_num) noexcept {
    return port_num >= 1 && port_num <= c->dev->num_ports();
}

int query_port_impl(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
    VContext* c = ctx_of(context);
    if (!attr || !port_ok(c, port_num)) return EINVAL;
    ibv_port_attr a{};
    const unsigned p = port_num - 1u;
    // A port whose link has not come up yet (a memif server waiting for its client) reports ACTIVE
    // with phys_state Polling, so that a server can start before its peer (perftest's server checks
    // for ACTIVE first); frames wait in the engine until the link is up. A link that was up and
    // went down reports DOWN (and raised IBV_EVENT_PORT_ERR).
    const bool up = c->dev->port(p).driver && c->dev->port(p).driver->link_up();
    const bool lost = c->vdev->link_lost[p].load(std::memory_order_relaxed);
    // A port the MRC controller disabled (mrc_ctl_modify_port, Device::set_port_admin) is DOWN
    // whatever its link, as the OCP controller API requires.
    const bool admin_up = c->dev->port_admin_up(p);
    a.state = admin_up && (up || !lost) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    const std::uint32_t max_path = provider().runtime->max_path_mtu(c->vdev->index, p);
    // rc::Mtu numbers path MTUs as ibv_mtu does (rc/params.h).
    a.max_mtu = static_cast<ibv_mtu>(rc::mtu_from_bytes(max_path));
    a.active_mtu =
        static_cast<ibv_mtu>(rc::mtu_from_bytes(std::min(max_path, c->vdev->cfg.qp.path_mtu)));
    a.gid_tbl_len = 1;
    a.port_cap_flags = 0;
    a.max_msg_sz = static_cast<uint32_t>(rc::kMaxMsgSize);
    a.bad_pkey_cntr = 0;
    a.qkey_viol_cntr = 0;
    a.pkey_tbl_len = 1;
    a.lid = 0;
    a.sm_lid = 0;
    a.lmc = 0;
    a.max_vl_num = 1;
    a.sm_sl = 0;
    a.subnet_timeout = 0;
    a.init_type_reply = 0;
    a.active_width = 2;  // 4x
    a.active_speed = 32; // EDR lane rate: a nominal figure, droce's real rate depends on the host
    a.phys_state = !admin_up ? 3 : up ? 5 : (lost ? 3 : 2); // Disabled / LinkUp / Polling
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a.flags = 0;
    a.port_cap_flags2 = 0;
    std::memcpy(attr, &a, std::min(attr_len, sizeof a));
    return 0;
}

int query_device_impl(ibv_context* context, ibv_device_attr* a) {
    VContext* c = ctx_of(context);
    std::memset(a, 0, sizeof *a);
    std::snprintf(a->fw_ver, sizeof a->fw_ver, "droce 0.1.0");
    a->node_guid = c->vdev->guid_be;
    a->sys_image_guid = c->vdev->guid_be;
    a->max_mr_size = UINT64_MAX >> 16; // 48-bit virtual addresses
    a->page_size_cap = 4096;
    // droce has no IEEE OUI. 0x02d0ce has the locally-administered bit set in its first octet, so
    // no assigned OUI or CID (Mellanox is 0x02c9) can be equal to it; it is not 0 either, which
    // tools (pyverbs' test_device) take as "no device".
    a->vendor_id = kVendorId;
    a->vendor_part_id = 0;
    // Tools that choose code paths by part id (perftest takes its ibv_wr_* path only for devices it
    // recognises) can be steered for testing; the default is 0, droce's own identity.
    if (const char* part = std::getenv("DROCE_VERBS_VENDOR_PART_ID"); part && *part)
        a->vendor_part_id = static_cast<uint32_t>(std::strtoul(part, nullptr, 0));
    a->hw_ver = 0;
    a->max_qp = static_cast<int>(rc::kMaxQp);
    a->max_qp_wr = static_cast<int>(rc::kMaxQpWr);
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = static_cast<int>(rc::kMaxSge);
    a->max_sge_rd = static_cast<int>(rc::kMaxSge);
    a->max_cq = static_cast<int>(rc::kMaxQp * 2);
    a->max_cqe = static_cast<int>(rc::kMaxCqe);
    a->max_mr = static_cast<int>(rc::kMaxMr);
    a->max_pd = static_cast<int>(rc::kMaxQp);
    a->max_qp_rd_atom = static_cast<int>(rc::kMaxRdAtomic);
    a->max_ee_rd_atom = 0;
    a->max_res_rd_atom = static_cast<int>(rc::kMaxRdAtomic * rc::kMaxQp);
    a->max_qp_init_rd_atom = static_cast<int>(rc::kMaxRdAtomic);
    a->max_ee_init_rd_atom = 0;
    a->atomic_cap = IBV_ATOMIC_HCA;
    a->max_ee = 0;
    a->max_rdd = 0;
    a->max_mw = 0;
    a->max_raw_ipv6_qp = 0;
    a->max_raw_ethy_qp = 0;
    a->max_mcast_grp = 0;
    a->max_mcast_qp_attach = 0;
    a->max_total_mcast_qp_attach = 0;
    a->max_ah = static_cast<int>(rc::kMaxQp);
    a->max_fmr = 0;
    a->max_map_per_fmr = 0;
    a->max_srq = 0;
    a->max_srq_wr = 0;
    a->max_srq_sge = 0;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 15;
    a->phys_port_cnt = static_cast<uint8_t>(c->dev->num_ports());
    return 0;
}

int query_device_ex_impl(ibv_context* context, const ibv_query_device_ex_input* input,
                         ibv_device_attr_ex* attr, size_t attr_size) {
    if (input && input->comp_mask) return EINVAL;
    if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
    ibv_device_attr_ex a{};
    query_device_impl(context, &a.orig_attr);
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    a.max_dm_size = 0;
    a.completion_timestamp_mask = 0;
    a.hca_core_clock = 0;
    // Packet pacing (IBV_QP_RATE_LIMIT, rc/pacer.h): RC QPs, 1 Mb/s to 400 Gb/s in kb/s.
    a.packet_pacing_caps.qp_rate_limit_min = VQp::kRateLimitMinKbps;
    a.packet_pacing_caps.qp_rate_limit_max = VQp::kRateLimitMaxKbps;
    a.packet_pacing_caps.supported_qpts = 1u << IBV_QPT_RC;
    std::memcpy(attr, &a, std::min(attr_size, sizeof a));
    return 0;
}

} // namespace

} // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

// ---------------------------------------------------------------- device list
#undef ibv_get_device_list

/**
 * The droce devices of the config named by $DROCE_CONFIG (else the default: config/demo.ini of the
 * source tree for the build tree's library, <sysconfdir>/droce/demo.ini for an installed one).
 * Reads the file only; the EAL and ports come up at ibv_open_device.
 * @return a NULL-terminated array (free with ibv_free_device_list), empty (not NULL) when the
 * config cannot be read (the reason goes to stderr); NULL with errno ENOMEM.
 */
extern "C" ibv_device** ibv_get_device_list(int* num_devices) {
    Provider& p = provider();
    std::lock_guard<std::mutex> g(p.mu);
    load_devices(p);
    static bool hint_registered = false;
    if (!hint_registered) {
        hint_registered = true;
        std::atexit(hint_if_nothing_opened);
    }
    auto** list = static_cast<ibv_device**>(std::calloc(p.devices.size() + 1, sizeof(ibv_device*)));
    if (!list) return fail<ibv_device*>(ENOMEM);
    for (std::size_t i = 0; i < p.devices.size(); ++i)
        list[i] = &p.devices[i]->dev;
    if (num_devices) *num_devices = static_cast<int>(p.devices.size());
    return list;
}

/** Frees the array; the devices themselves live for the process. */
extern "C" void ibv_free_device_list(ibv_device** list) {
    std::free(list);
}

extern "C" const char* ibv_get_device_name(ibv_device* device) {
    return device ? device->name : nullptr;
}

/** Node GUID in network order: EUI-64 of port 0's MAC. */
extern "C" __be64 ibv_get_device_guid(ibv_device* device) {
    g_guid_asked.store(true, std::memory_order_relaxed);
    return device ? reinterpret_cast<VDevice*>(device)->guid_be : 0;
}

/** Index of the device in the config file. */
extern "C" int ibv_get_device_index(ibv_device* device) {
    return device ? static_cast<int>(reinterpret_cast<VDevice*>(device)->index) : -1;
}

// ---------------------------------------------------------------- open / close

/**
 * Opens a context. The first open in the process brings up the runtime of the whole config (EAL,
 * ports, every device); engine threads run while at least one context is open, unless
 * DROCE_PROGRESS=app (then the application's verb calls alone drive the engine).
 * @return the context, or NULL with errno ENODEV (runtime bring-up failed: the reason is on
 * stderr), EINVAL (not a droce device; DROCE_PROGRESS, DROCE_PROGRESS_PASSES, DROCE_ENGINE_WAKE,
 * DROCE_ENGINE_NICE, DROCE_ENGINE_BACKOFF, DROCE_ENGINE_STEP_ASIDE_US or DROCE_CAPTURE_SNAPLEN
 * malformed, said on stderr),
 * ENOMEM or EMFILE (no pipe for async events).
 */
extern "C" ibv_context* ibv_open_device(ibv_device* device) {
    if (!device) return fail<ibv_context>(EINVAL);
    ControlGuard guard;
    Provider& p = provider();
    VDevice* vd = nullptr;
    for (auto& d : p.devices)
        if (&d->dev == device) vd = d.get();
    if (!vd) return fail<ibv_context>(EINVAL);
    if (!p.runtime) {
        std::string err;
        RuntimeOptions opts;
        // Engine threads alone (DROCE_PROGRESS=thread) run at nice -10 (DROCE_ENGINE_NICE
        // overrides; 0 leaves them alone): an application that spins on memory without calling
        // into the library (ib_write_lat) would otherwise hold the core until the scheduler tick,
        // 4 ms per message on a 2-core host.
        opts.engine.nice = -10;
        // DROCE_PROGRESS=auto|thread|app: who runs the engine (ProgressMode, README: Progress);
        // DROCE_PROGRESS_PASSES=N (1..1024): engine passes one verb call may run.
        if (const char* pm = std::getenv("DROCE_PROGRESS"); pm && *pm) {
            if (!parse_progress_mode(pm, &p.progress))
                return refuse_env("DROCE_PROGRESS", pm, "auto, thread or app");
        }
        if (const char* pp = std::getenv("DROCE_PROGRESS_PASSES"); pp && *pp) {
            std::uint64_t v = 0;
            if (!parse_uint(pp, 1, 1024, &v))
                return refuse_env("DROCE_PROGRESS_PASSES", pp, "a number in 1..1024");
            p.progress_passes = static_cast<unsigned>(v);
        }
        // With application threads driving (auto), the engine threads only serve what no verb
        // call sees (a passive side spinning on memory): a short yield phase, then naps of at most
        // 20 us, instead of 200,000 yields that kept them competing with the application for the
        // core on a host with fewer cores than busy threads (bench/verbs/progress). Engine threads
        // alone (thread) keep the long yield phase: napping without a receive interrupt (droce's
        // memif port has none yet) cost ib_write_lat 10 ms per message there.
        // And at nice 0: at -10 they preempted the application that was about to drive the
        // engine itself (ib_write_lat typical 80 us against 27 us at nice 0, same run).
        if (p.progress == ProgressMode::automatic) {
            opts.engine.spin_polls = kAutoEngineBackoff.spin_polls;
            opts.engine.yield_polls = kAutoEngineBackoff.yield_polls;
            opts.engine.max_sleep_ns = kAutoEngineBackoff.max_sleep_ns;
            opts.engine.nice = kAutoEngineBackoff.nice;
            opts.engine.step_aside_ns = kAutoStepAsideNs;
        }
        // DROCE_ENGINE_WAKE=fifo: the latency mode for hosts with fewer cores than busy threads
        // (README: Progress): engine threads realtime through their naps, and no yield phase once
        // a yield showed a thread spinning on their core (EngineThread::Options).
        if (const char* w = std::getenv("DROCE_ENGINE_WAKE"); w && *w) {
            if (std::strcmp(w, "fifo") == 0) {
                opts.engine.realtime_wake = true;
                opts.engine.shared_core_yield_ns = kSharedCoreYieldNs;
            } else if (std::strcmp(w, "normal") != 0) {
                return refuse_env("DROCE_ENGINE_WAKE", w, "fifo or normal");
            }
        }
        if (const char* n = std::getenv("DROCE_ENGINE_NICE"); n && *n) {
            char* end = nullptr;
            errno = 0;
            const long v = std::strtol(n, &end, 10);
            if (errno != 0 || *end != '\0' || v < -20 || v > 19)
                return refuse_env("DROCE_ENGINE_NICE", n, "a nice value in -20..19");
            opts.engine.nice = static_cast<int>(v);
        }
        // DROCE_ENGINE_BACKOFF=spin,yield,sleep_ns overrides the engine threads' idle back-off
        // (EngineThread::Options; default the runtime's, kAutoEngineBackoff in auto).
        if (const char* bo = std::getenv("DROCE_ENGINE_BACKOFF"); bo && *bo) {
            // Three numbers, nothing else: a value with a typo is refused, not half applied.
            constexpr std::uint64_t kMaxEngineSleepNs = 1'000'000'000;
            std::uint64_t budget[3] = {};
            std::string_view rest(bo);
            bool ok = true;
            for (int i = 0; i < 3 && ok; ++i) {
                const std::size_t comma = i < 2 ? rest.find(',') : rest.size();
                ok = comma != std::string_view::npos &&
                     parse_uint(rest.substr(0, comma), 0, i < 2 ? UINT32_MAX : kMaxEngineSleepNs,
                                &budget[i]);
                if (ok && i < 2) rest.remove_prefix(comma + 1);
            }
            if (!ok)
                return refuse_env("DROCE_ENGINE_BACKOFF", bo,
                                  "spin,yield,sleep_ns (three numbers; sleep at most 1 s)");
            // The budget only: the nice value chosen above stays.
            opts.engine.spin_polls = static_cast<std::uint32_t>(budget[0]);
            opts.engine.yield_polls = static_cast<std::uint32_t>(budget[1]);
            opts.engine.max_sleep_ns = budget[2];
        }
        // DROCE_ENGINE_STEP_ASIDE_US=N: the length of each nap an engine thread takes while its
        // application drives the device busily (EngineThread::Options::step_aside_ns; 0 = never;
        // the default: kAutoStepAsideNs; no effect in thread mode, where nothing drives).
        if (const char* sa = std::getenv("DROCE_ENGINE_STEP_ASIDE_US"); sa && *sa) {
            constexpr std::uint64_t kMaxStepAsideUs = 1'000'000; // 1 s
            std::uint64_t v = 0;
            if (!parse_uint(sa, 0, kMaxStepAsideUs, &v))
                return refuse_env("DROCE_ENGINE_STEP_ASIDE_US", sa, "a number in 0..1000000");
            opts.engine.step_aside_ns = v * 1'000;
        }
        // DROCE_IMPAIR=spec puts an impairment stage (loss, reorder, ECN marking, ...; the syntax
        // of sim::parse_impair_spec) on every port, for programs that cannot ask for one: how a
        // user sees an unmodified application ride out loss (MRC paths going ASSUMED_BAD and back).
        if (const char* im = std::getenv("DROCE_IMPAIR"); im && *im) opts.impair_spec = im;
        // DROCE_CAPTURE=FILE writes every frame of every device to a pcapng file (lib/capture),
        // DROCE_CAPTURE_SNAPLEN=N keeps N bytes of each (64..65535; default whole frames). The
        // runtime lives until exit, so the file is complete once the process exits
        // (stop_all_engines_at_exit stops the capture and reports its counts on stderr).
        if (const char* cf = std::getenv("DROCE_CAPTURE"); cf && *cf) opts.capture_path = cf;
        if (const char* sl = std::getenv("DROCE_CAPTURE_SNAPLEN"); sl && *sl) {
            std::uint64_t v = 0;
            if (!parse_uint(sl, capture::Capture::kMinSnaplen, capture::Capture::kMaxSnaplen, &v)) {
                return refuse_env("DROCE_CAPTURE_SNAPLEN", sl, "a number in 64..65535");
            }
            opts.capture_snaplen = static_cast<std::uint32_t>(v);
        }
        // Telemetry commands that read QP or port state take the provider mutex, as control verbs
        // do, so they never see a QP half-modified (lib/telemetry).
        opts.control_mutex = &p.mu;
        p.runtime = Runtime::create(p.config_path, opts, &err);
        if (!p.runtime) {
            g_open_failed.store(true, std::memory_order_relaxed);
            std::fprintf(stderr, "droce: %s\n", err.c_str());
            // The EAL may be up with a port that failed: its files go now, not at exit only.
            dpdk::release_files_on_exit();
            return fail<ibv_context>(ENODEV);
        }
        for (unsigned i = 0; i < p.runtime->num_devices() && i < p.devices.size(); ++i) {
            Device* dev = &p.runtime->device(i);
            VDevice* vdev = p.devices[i].get();
            dev->on_link_change = [dev, vdev](unsigned port, bool up) {
                if (port < kMaxConfigPorts)
                    vdev->link_lost[port].store(!up, std::memory_order_relaxed);
                AsyncRecord r;
                r.type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
                r.port = port + 1;
                post_async_event(dev, r);
            };
            // A QP that failed by itself (a fatal error of its own, not the application's modify
            // to ERR): IBV_EVENT_QP_FATAL on the async fd of the QP's context (IBTA 11.6.3, as
            // rxe and ConnectX).
            dev->on_qp_fatal = [vdev](rc::Qp& q) {
                const auto it = vdev->qps.find(q.qpn);
                if (it == vdev->qps.end()) return;
                AsyncRecord r;
                r.type = IBV_EVENT_QP_FATAL;
                r.handle = q.qpn;
                post_context_event(vctx_of(it->second->context), r);
            };
        }
        std::atexit(stop_all_engines_at_exit);
        release_files_on_stop_signals();
    }
    if (vd->index >= p.runtime->num_devices()) return fail<ibv_context>(ENODEV);
    auto* c = new (std::nothrow) VContext;
    if (!c) return fail<ibv_context>(ENOMEM);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        delete c;
        return fail<ibv_context>(e);
    }
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    c->vdev = vd;
    c->dev = &p.runtime->device(vd->index);
    c->async_wfd = fds[1];
    c->drive_passes = p.progress == ProgressMode::thread ? 0u : p.progress_passes;
    c->app_only = p.progress == ProgressMode::app;
    if (c->drive_passes) {
        try {
            if (c->app_only)
                for (unsigned i = 0; i < p.runtime->num_devices(); ++i)
                    c->drive_devs.push_back(&p.runtime->device(i));
            else
                c->drive_devs.push_back(c->dev);
            // No engine thread would send a held ACK when its hold ends (rc::kAckHoldNs): a
            // program blocked in its own exchange at the end of a run (perftest's) left its peer's
            // last SEND unacknowledged, and the peer failed with RETRY_EXC_ERR.
            if (c->app_only)
                for (Device* d : c->drive_devs)
                    d->set_ack_hold(false);
        } catch (...) {
            close(fds[0]);
            close(fds[1]);
            delete c;
            return fail<ibv_context>(ENOMEM);
        }
    }
    ibv_context& ic = c->vctx.context;
    ic.device = device;
    ic.cmd_fd = -1;
    ic.async_fd = fds[0];
    ic.num_comp_vectors = 1;
    pthread_mutex_init(&ic.mutex, nullptr);
    ic.abi_compat = __VERBS_ABI_IS_EXTENDED;
    c->vctx.sz = sizeof(verbs_context);
    c->vctx.query_port = query_port_impl;
    c->vctx.query_device_ex = query_device_ex_impl;
    install_cq_ops(*c);
    install_qp_ops(*c);
    p.contexts.push_back(c);
    ++p.open_contexts;
    // Engine threads run while a context is open: the first open starts them (unless the
    // application alone drives the engine).
    if (p.progress != ProgressMode::app && !p.runtime->engines_running())
        p.runtime->start_engines(p.runtime->num_devices() > 1 ? EngineMode::shared
                                                              : EngineMode::per_device);
    return &ic;
}

/**
 * Closes a context. Objects still created on it stay in the device (as with a kernel provider, the
 * application should destroy them first). The last close stops the engine threads; the runtime
 * stays for the next open. @return 0; EINVAL for NULL or a context that is not open (closed
 * already); EBUSY (errno too) while an MRC context
 * made on it (mrc_create_context) is not destroyed: the MRC context's QPs and CQs live on this
 * context's device, and closing under them left them there for good.
 */
extern "C" int ibv_close_device(ibv_context* context) {
    if (!context) return EINVAL;
    VContext* c = vctx_of(context);
    {
        ControlGuard guard;
        Provider& p = provider();
        // Not open (closed already, or never a droce context): refused before anything of it is
        // read (a second close freed it twice).
        if (open_context(context) != c) {
            errno = EINVAL;
            return EINVAL;
        }
        if (c->dependents > 0) {
            errno = EBUSY;
            return EBUSY;
        }
        std::erase(p.contexts, c);
        if (p.open_contexts > 0) --p.open_contexts;
        if (p.open_contexts == 0 && p.runtime) p.runtime->stop_engines();
    }
    close(context->async_fd);
    close(c->async_wfd);
    pthread_mutex_destroy(&context->mutex);
    delete c;
    return 0;
}

// ---------------------------------------------------------------- queries

/** ibv_query_device: droce's limits (rc/params.h). @return 0 or EINVAL. */
extern "C" int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
    if (!context || !device_attr) return EINVAL;
    return query_device_impl(context, device_attr);
}

struct _compat_ibv_port_attr;
#undef ibv_query_port
/** The pre-1.1 entry point (verbs.h inlines a call to the context's query_port instead). */
extern "C" int ibv_query_port(ibv_context* context, uint8_t port_num,
                              _compat_ibv_port_attr* port_attr) {
    if (!context || !port_attr) return EINVAL;
    // The compat struct is ibv_port_attr up to and including link_layer.
    return query_port_impl(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                           offsetof(ibv_port_attr, link_layer) + sizeof(uint8_t));
}

namespace {

/**
 * A GID index other than 0 on a port that exists: the program asked for the index a ConnectX or
 * rxe gives RoCE v2 over IPv4 (perftest -x 3, ibv_rc_pingpong -g 3) and prints only that it could
 * not read the GID or set up its connection. Says once on stderr which index droce has.
 */
void tell_gid_index(uint32_t index) noexcept {
    static std::atomic<bool> told{false};
    (void)say_once(told,
                   "GID index %u does not exist: a droce port has one GID, index 0 (its address, "
                   "RoCE v2; ibv_devinfo -v shows it): perftest -x 0, ibv_rc_pingpong -g 0",
                   index);
}

} // namespace

/**
 * GID 0 of each port: the port's address, IPv4-mapped for IPv4 (RoCEv2).
 * @return 0, or -1 with errno EINVAL (no such port or index), as the man page says.
 */
extern "C" int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
    if (!context || !gid || !port_ok(vctx_of(context), port_num) || index != 0) {
        if (context && gid && port_ok(vctx_of(context), port_num) && index > 0)
            tell_gid_index(static_cast<uint32_t>(index));
        errno = EINVAL;
        return -1;
    }
    VContext* c = vctx_of(context);
    std::memcpy(gid->raw, c->dev->port(port_num - 1u).gid.data(), 16);
    return 0;
}

/** The GID entry with its type (always RoCE v2). @return 0, EINVAL, ENODATA (no such index). */
extern "C" int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                 ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
    if (!context || !entry || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
    VContext* c = vctx_of(context);
    if (!port_ok(c, port_num)) return EINVAL;
    if (gid_index != 0) {
        tell_gid_index(gid_index);
        return ENODATA;
    }
    ibv_gid_entry e{};
    std::memcpy(e.gid.raw, c->dev->port(port_num - 1u).gid.data(), 16);
    e.gid_index = 0;
    e.port_num = port_num;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = 0;
    std::memcpy(entry, &e, sizeof e);
    return 0;
}

/** Every port's GID. @return entries written, or -EINVAL (bad arguments, max_entries too small). */
extern "C" ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                        size_t max_entries, uint32_t flags, size_t entry_size) {
    if (!context || !entries || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
    VContext* c = vctx_of(context);
    const unsigned n = c->dev->num_ports();
    if (max_entries < n) return -EINVAL;
    for (unsigned p = 1; p <= n; ++p) {
        auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) +
                                                   (p - 1) * entry_size);
        _ibv_query_gid_ex(context, p, 0, e, 0, sizeof(ibv_gid_entry));
    }
    return n;
}

/** rdma-core private: GID type as sysfs names it (1 = RoCE v2). @return 0 or EINVAL. */
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  uint32_t* type) {
    if (!context || !type) return EINVAL;
    if (!port_ok(vctx_of(context), port_num) || index != 0) return EINVAL;
    *type = 1; // IBV_GID_TYPE_SYSFS_ROCE_V2
    return 0;
}

/** One P_Key, the default 0xffff, at index 0. @return 0, or -1 with errno EINVAL (no such port or
 *  index), as the man page says. */
extern "C" int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
    if (!context || !pkey || !port_ok(vctx_of(context), port_num) || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = 0xffff;
    return 0;
}

/** Index of @p pkey: 0 for the default P_Key (full or limited membership), else -1 with errno
 * ENOENT. */
extern "C" int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
    if (!context || !port_ok(vctx_of(context), port_num)) {
        errno = EINVAL;
        return -1;
    }
    if ((be16toh(pkey) & 0x7fff) == 0x7fff) return 0;
    errno = ENOENT;
    return -1;
}

// ---------------------------------------------------------------- async events

/**
 * Blocks (unless the application made context->async_fd non-blocking) until an asynchronous event
 * arrives: IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR when a port's link changes,
 * IBV_EVENT_QP_FATAL when a QP failed by itself, IBV_EVENT_CQ_ERR when a CQ overran. A QP or CQ
 * event whose object was destroyed before it was read is dropped, never handed out with a freed
 * pointer: rdma-core makes ibv_destroy_qp / _cq wait until such events are acknowledged; droce
 * does not, so a program that never reads events cannot hang in destroy. (A reader that polled
 * the fd and finds only dropped events then waits for the next one, or gets EAGAIN on a
 * non-blocking fd.)
 * @return 0, or -1 with errno (EAGAIN on a non-blocking fd with nothing pending, EINVAL).
 */
extern "C" int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
    if (!context || !event) {
        errno = EINVAL;
        return -1;
    }
    AsyncRecord r;
    ibv_qp* qp = nullptr;
    ibv_cq* cq = nullptr;
    for (;;) {
        ssize_t n = read(context->async_fd, &r, sizeof r);
        if (n != static_cast<ssize_t>(sizeof r)) {
            if (n >= 0) errno = EIO;
            return -1;
        }
        if (r.type != IBV_EVENT_QP_FATAL && r.type != IBV_EVENT_CQ_ERR) break;
        Provider& p = provider();
        std::lock_guard<std::mutex> g(p.mu);
        VDevice* vd = vctx_of(context)->vdev;
        if (r.type == IBV_EVENT_QP_FATAL) {
            const auto it = vd->qps.find(r.handle);
            if (it != vd->qps.end() && it->second->context == context) {
                qp = it->second;
                break;
            }
        } else {
            const auto it = vd->cqs.find(r.handle);
            if (it != vd->cqs.end() && it->second->context == context) {
                cq = it->second;
                break;
            }
        }
    }
    event->event_type = static_cast<ibv_event_type>(r.type);
    switch (event->event_type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
        event->element.port_num = static_cast<int>(r.port);
        break;
    case IBV_EVENT_CQ_ERR:
        event->element.cq = cq;
        break;
    default:
        event->element.qp = qp;
        break;
    }
    return 0;
}

/** Acknowledges an event (nothing to release in droce). */
extern "C" void ibv_ack_async_event(ibv_async_event* event) {
    (void)event;
}
