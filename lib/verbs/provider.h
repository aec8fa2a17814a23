/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Internal header of droce's libibverbs.so.1 (lib/verbs): the objects behind the ibv_* handles and
 * the process-wide provider state. Not installed; applications see only rdma-core's verbs.h.
 *
 * Every verbs object is a droce struct whose first member is the libibverbs struct the application
 * holds (ibv_pd, ibv_mr, ibv_cq_ex, ibv_qp_ex, ibv_comp_channel, ibv_ah), so a handle converts back
 * with from_ibv(). The context is a verbs_context (ibv_context its last member, as verbs.h's
 * verbs_get_ctx() requires) placed last in VContext.
 *
 * Thread rules (Device::ControlSection of lib/engine/device.h, applied by the verbs layer):
 *  - Control verbs (open/close, alloc/dealloc, reg/dereg, create/modify/destroy, query) take the
 *    provider mutex and hold a Device::ControlSection (ControlGuard): the engine of the device the
 *    verb touches finishes its pass and waits, a few microseconds; engine threads keep running and
 *    other devices' traffic never stops. Verbs that change provider-wide state (open/close of a
 *    context) hold every device's section.
 *  - post_send (ibv_post_send and the ibv_wr_* batch) takes the QP's send spinlock, post_recv its
 *    receive spinlock, poll_cq (and ibv_start_poll .. ibv_end_poll) the CQ's spinlock: verbs lets
 *    several application threads use one queue, while droce's rings have one producer and one
 *    consumer. The engine side of the rings stays lock-free.
 */
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "engine/device.h"
#include "rc/qp.h"
#include "runtime/runtime.h"

namespace droce::verbs {

/** A test-and-test-and-set spinlock for the application side of one queue (short critical
 * sections). */
class SpinLock {
  public:
    void lock() noexcept {
        for (;;) {
            // acquire: the holder's writes to the queue's producer/consumer state are visible to
            // us.
            if (!locked_.exchange(true, std::memory_order_acquire)) return;
            while (locked_.load(std::memory_order_relaxed))
                __builtin_ia32_pause();
        }
    }
    // release: our writes to the queue state happen before the next holder's acquire.
    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  private:
    std::atomic<bool> locked_{false};
};

/** One device of the config, as ibv_get_device_list reports it. Lives for the whole process. */
struct VDevice {
    ibv_device dev{};          ///< what the application holds (first member)
    unsigned index = 0;        ///< index in the config file = Runtime device index
    DeviceConfig cfg;          ///< from the config, read without the EAL
    std::uint64_t guid_be = 0; ///< node GUID (EUI-64 of port 0's MAC), network order
    /** Per port: the link was up and went down (set from Device::on_link_change on the engine
     *  thread, read by ibv_query_port). A link that has not come up yet is not "lost". */
    std::atomic<bool> link_lost[kMaxConfigPorts] = {};
    /** The verbs QPs of this device by QPN, for IBV_EVENT_QP_FATAL (Device::on_qp_fatal, engine
     *  thread, inside a pass; ibv_get_async_event under the provider mutex). Changed only inside a
     *  ControlGuard of the device (provider mutex held, engine between passes), so the engine
     *  reads it without a lock. */
    std::unordered_map<std::uint32_t, ibv_qp*> qps;
    /** The verbs CQs of this device by CQN, for IBV_EVENT_CQ_ERR; as qps (changed inside a
     *  ControlGuard, read under the provider mutex). */
    std::unordered_map<std::uint32_t, ibv_cq*> cqs;
};

struct VContext;

/** An asynchronous event as it travels through the context's async pipe. */
struct AsyncRecord {
    std::uint32_t type = 0; ///< enum ibv_event_type
    std::uint32_t port = 0; ///< 1-based port for port events
    /** QP events: the QPN; CQ events: the CQN. The object is looked up when the event is read
     *  (ibv_get_async_event), so an event of an object destroyed meanwhile names nothing. */
    std::uint32_t handle = 0;
};

/**
 * Who drives the engine of the verbs library's devices (DROCE_PROGRESS, read at the first
 * ibv_open_device of the process; README: Progress).
 */
enum class ProgressMode : std::uint8_t {
    /** Engine threads run (they spin, yield, then nap on the doorbell and receive interrupts),
     *  and ibv_post_send, an empty ibv_poll_cq and a waiting ibv_get_cq_event also run engine
     *  passes on the application thread whenever no other thread is running one. The default. */
    automatic,
    thread, ///< engine threads only: the verbs never run the engine (droce before progress modes)
    /** No engine thread: only the application's verb calls move traffic. For programs that poll a
     *  CQ or wait in ibv_get_cq_event; a side that waits on memory alone never progresses. */
    app,
};

/** Engine threads with ProgressMode::automatic: spin 20 idle passes, yield 2,000, then nap at most
 *  20 us at a time, at nice 0 (chosen by bench/verbs/progress; DROCE_ENGINE_BACKOFF and
 *  DROCE_ENGINE_NICE override). */
inline constexpr EngineThread::Options kAutoEngineBackoff{20, 2'000, 20'000, 0};

/** The step-aside nap of engine threads with ProgressMode::automatic (ns;
 *  EngineThread::Options::step_aside_ns): 5 ms, on by default since 2026-12-06 (evening);
 *  DROCE_ENGINE_STEP_ASIDE_US=0 turns it off. CQ-polling programs gain from it (ib_send_lat's
 *  25 us placements and ib_read_lat's 40 us p99 go); ib_write_lat's 2 - 4 ms stalls came as often
 *  with it as without in alternating rounds, and the runs that stalled had taken no step-aside
 *  nap (README, Progress: the 2026-12-06 reason to keep it off did not hold). */
inline constexpr std::uint64_t kAutoStepAsideNs = 5'000'000;

/** DROCE_ENGINE_WAKE=fifo: a yield that kept an engine thread off its core this long (ns) means
 *  an application spins there (EngineThread::Options::shared_core_yield_ns). A yield to a thread
 *  that also yields or sleeps returns in a few microseconds; to a spinner, after its slice
 *  (1.4 - 4 ms on kernel 6.18). */
inline constexpr std::uint64_t kSharedCoreYieldNs = 30'000;

/** Parses a DROCE_PROGRESS value ("auto", "thread", "app"). @return false when it is none. */
bool parse_progress_mode(const char* s, ProgressMode* out) noexcept;

struct VContext {
    VDevice* vdev = nullptr;
    Device* dev = nullptr; ///< the runtime's device
    /** Engine passes a verb call may run on the application thread (ProgressMode::automatic and
     *  app: DROCE_PROGRESS_PASSES), 0 = never (ProgressMode::thread). Fixed at open. */
    unsigned drive_passes = 0;
    /** No engine thread runs (ProgressMode::app): a waiting ibv_get_cq_event must keep driving. */
    bool app_only = false;
    /** The devices a verb call of this context drives: its own; with ProgressMode::app every
     *  device of the runtime (a program that joins two devices of one process, as config/demo.ini
     *  does, polls only one CQ at a time). Fixed at open. */
    std::vector<Device*> drive_devs;
    int async_wfd =
        -1; ///< write end of the async event pipe (non-blocking); read end = context.async_fd
    /** Objects of droce's libraries above the verbs layer made on this context and still alive
     *  (lib_mrc's MRC contexts: droce_verbs_context_depend): ibv_close_device refuses with EBUSY
     *  while any is. Changed under provider().mu. */
    unsigned dependents = 0;
    verbs_context vctx{}; ///< must be last: ibv_context is the last member of verbs_context
};

struct VPd {
    ibv_pd pd{};
    mem::Pd* native = nullptr;
};

struct VMr {
    ibv_mr mr{};
    mem::Mr* native = nullptr;
    unsigned access = 0; ///< ibv_access_flags it was registered with (ibv_rereg_mr keeps them)
};

struct VCq;

/**
 * A completion channel: a pipe of CqEvent records (the engine thread writes one when an armed CQ
 * gets a completion; ibv_get_cq_event reads them) and the CQs attached to it.
 */
struct VChannel {
    ibv_comp_channel ch{};
    int wfd = -1; ///< write end (non-blocking), written by the engine thread; read end = ch.fd
    /** The live CQs attached, each with its serial: an event read for a CQ not in it (destroyed
     *  since the event was written; its memory may be another CQ's now) is dropped, as the kernel
     *  drops a destroyed CQ's unread events. Guarded by mu (control path and ibv_get_cq_event). */
    std::mutex mu;
    std::vector<std::pair<const VCq*, std::uint64_t>> live;
};

/** What the pipe of a VChannel carries per completion event (16 bytes: one atomic pipe write). */
struct CqEvent {
    VCq* cq;
    std::uint64_t serial; ///< VCq::serial when the event was written
};

struct VCq {
    ibv_cq_ex cqx{};
    rc::Cq* native = nullptr;
    VContext* ctx = nullptr;
    VChannel* channel = nullptr;
    std::uint64_t wc_flags = 0; ///< ibv_create_cq_wc_flags asked at create_cq_ex
    SpinLock lock;              ///< consumer side of the CQ ring
    rc::Cqe cur;                ///< ibv_start_poll / ibv_next_poll: the completion being read
    /** IBV_EVENT_CQ_ERR was posted for this CQ's overrun (once, as rxe). */
    std::atomic<bool> overrun_reported{false};
    /** Unique per CQ created in the process: tells this CQ's events from those of a destroyed CQ
     *  that had the same address. */
    std::uint64_t serial = 0;
    /** Completion events ibv_get_cq_event returned for this CQ (guarded by cqx.mutex):
     *  ibv_destroy_cq waits until ibv_ack_cq_events has counted as many, as rdma-core's does. */
    std::uint32_t events_reported = 0;
};

struct VQp {
    ibv_qp_ex qpx{};
    rc::Qp* native = nullptr;
    VContext* ctx = nullptr;
    SpinLock sq_lock;
    SpinLock rq_lock;
    /** ibv_wr_* batch between wr_start and wr_complete (capacity max_send_wr), guarded by sq_lock.
     */
    std::unique_ptr<rc::SendWqe[]> batch;
    std::uint32_t batch_cap = 0;
    std::uint32_t batch_n = 0;
    int batch_err = 0;                      ///< first error of the batch (reported by wr_complete)
    std::unique_ptr<rc::SendWqe[]> scratch; ///< ibv_post_send conversion buffer (kScratch WQEs)
    static constexpr std::uint32_t kScratch = 16;
    /** ibv_qp_attr.timeout as the application last set it (ibv_query_qp reports it), when the
     *  engine runs a longer one (kMinAckTimeout); 0xff: the engine's is the one set. */
    std::uint8_t timeout_set = 0xff;
    /**
     * The shortest local ACK timeout a verbs QP runs, as a timeout code: 10 = 4.096 us x 2^10 =
     * 4.2 ms. Linux rxe never arms its retransmit timer for less than one jiffy (4 ms at Debian's
     * HZ = 250; rxe_qp_from_attr), and droce's responder, a thread of another process, can wait a
     * scheduler slice on a busy host where a NIC or rxe's softirq answers at once: ib_write_bw
     * -u 4 (65 us) and -u 1 ended in RETRY_EXC_ERR here. A code of 1 - 9 runs as 10; 0 (no timer)
     * and 10 - 31 as set.
     */
    static constexpr std::uint8_t kMinAckTimeout = 10;
    /**
     * IBV_QP_RATE_LIMIT's range in kb/s (0 = no limit), as ibv_query_device_ex reports it in
     * packet_pacing_caps: 1 Mb/s to 400 Gb/s (rc/pacer.h). A rate outside it is EINVAL, as mlx5
     * refuses one outside its caps.
     */
    static constexpr std::uint32_t kRateLimitMinKbps = 1'000;
    static constexpr std::uint32_t kRateLimitMaxKbps = 400'000'000;
};

struct VAh {
    ibv_ah ah{};
    ibv_ah_attr attr{};
};

/** Converts a libibverbs handle to the droce object that contains it (the handle is its first
 * member). */
template <typename V, typename H>
inline V* from_ibv(H* h) noexcept {
    return reinterpret_cast<V*>(h);
}
inline VContext* vctx_of(ibv_context* c) noexcept {
    return reinterpret_cast<VContext*>(reinterpret_cast<char*>(c) - offsetof(VContext, vctx) -
                                       offsetof(verbs_context, context));
}

/** Process-wide state: the device list (from the config) and the runtime (after the first open). */
struct Provider {
    std::mutex mu;       ///< serialises every control verb
    bool listed = false; ///< devices read from the config
    std::string config_path;
    std::vector<std::unique_ptr<VDevice>> devices;
    std::unique_ptr<Runtime> runtime; ///< created at the first ibv_open_device, never destroyed
    unsigned open_contexts = 0;       ///< engines run while this is > 0
    ProgressMode progress = ProgressMode::automatic; ///< DROCE_PROGRESS, set at the first open
    unsigned progress_passes = 4;                    ///< DROCE_PROGRESS_PASSES
    std::vector<VContext*> contexts;                 ///< open contexts (for async events)
};

/**
 * Writes @p rec to @p ctx's async pipe (non-blocking: an event the pipe has no room for is lost, as
 * ibv_get_async_event's reader fell that far behind). Any thread, no lock: the context lives while
 * its objects do.
 */
void post_context_event(VContext* ctx, const AsyncRecord& rec) noexcept;

/** The provider singleton (never destroyed, so nothing runs at exit in an order we do not control).
 */
Provider& provider() noexcept;

/** The open context whose ibv_context is @p context, or nullptr (null, closed already, or not a
 *  droce context): compares addresses only, never reads @p context. Caller holds provider().mu. */
VContext* open_context(ibv_context* context) noexcept;

/** Reads the config into provider().devices once. Caller holds provider().mu. @return 0 or errno.
 */
int load_devices(Provider& p);

/**
 * Holds the provider mutex and a Device::ControlSection for the guard's lifetime: of @p dev only,
 * or of every device of the runtime when @p dev is null (provider-wide state such as the context
 * list, which engine threads read when they post async events).
 */
class ControlGuard {
  public:
    explicit ControlGuard(Device* dev = nullptr);
    ~ControlGuard();
    ControlGuard(const ControlGuard&) = delete;
    ControlGuard& operator=(const ControlGuard&) = delete;

  private:
    std::unique_lock<std::mutex> lock_;
    std::vector<Device*> quiesced_; ///< devices whose control section this guard holds
};

/** Writes an async event into every open context of @p dev (engine thread or control path). */
void post_async_event(Device* dev, const AsyncRecord& rec) noexcept;

/**
 * Application-driven progress (ProgressMode): runs up to c->drive_passes engine passes on each of
 * c->drive_devs whose engine no other thread is running now, and marks each device as driven by
 * the application (Device::note_app_drive(): an engine thread steps aside meanwhile, when
 * DROCE_ENGINE_STEP_ASIDE_US says so). Datapath: no lock, no allocation.
 * @return units of work done (0: idle, or every engine was busy on another thread).
 */
inline std::uint32_t drive(const VContext* c) noexcept {
    std::uint32_t work = 0;
    for (Device* d : c->drive_devs) {
        d->note_app_drive();
        work += d->progress(c->drive_passes);
    }
    return work;
}

/** The application stops driving @p c's devices and will wait for an event
 *  (Device::app_drive_ends() on each of c->drive_devs: their engine threads stop stepping aside).
 */
inline void end_drive(const VContext* c) noexcept {
    for (Device* d : c->drive_devs)
        d->app_drive_ends();
}

/** Fills ibv_context_ops and the verbs_context ops of a new context (cq.cc / qp.cc provide them).
 */
void install_cq_ops(VContext& c) noexcept;
void install_qp_ops(VContext& c) noexcept;

/**
 * Tells the user, once per process for each @p what, that droce does not support it: one line on
 * stderr, "droce: WHAT is not supported (README: Unsupported)". The caller then returns its errno
 * (EOPNOTSUPP) as a hardware provider would; the line is what says why, since programs print only
 * their own message. @p said: a flag of the call site (DROCE_UNSUPPORTED makes one). Thread-safe
 * (the flag is exchanged atomically); control path only.
 */
void say_unsupported(std::atomic<bool>& said, const char* what) noexcept;

/** Set when the program asked for a QP, made or not (the exit hint about rdma_cm reads it): a
 * failed ibv_create_qp said why itself (a UC or UD QP, a refused cap), so the exit hint does not
 * blame rdma_cm (hint_if_nothing_opened). */
inline std::atomic<bool> g_qp_attempted{false};

/** say_unsupported() with a flag of its own at this call site. */
#define DROCE_UNSUPPORTED(what)                                                                    \
    do {                                                                                           \
        static std::atomic<bool> droce_said_{false};                                               \
        ::droce::verbs::say_unsupported(droce_said_, what);                                        \
    } while (0)

/** Sets errno to @p err and returns nullptr (the verbs convention for creators). */
template <typename T>
inline T* fail(int err) noexcept {
    errno = err;
    return nullptr;
}

} // namespace droce::verbs
