/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Internal header of lib_mrc (lib/mrcapi): the objects behind the OCP MRC API's opaque handles
 * (struct mrc_context, mrc_cq, mrc_comp_channel, mrc_qp, mrc_qp_hint) and what the source files
 * share. Not installed.
 *
 * How lib_mrc sits on droce:
 *  - Devices, verbs contexts, PDs and MRs are droce's libibverbs.so.1's (lib/verbs). lib_mrc
 * reaches the droce objects behind the verbs handles through its droce-private entry points
 *    (verbs/droce_private.h, found at run time: VerbsPrivate): the Device of an ibv_context, the
 *    mem::Pd of an ibv_pd, the device's config, and control sections.
 *  - CQs, completion channels and MRC QPs are lib_mrc's own, made with the native API on that
 *    Device: Device::create_cq, Device::create_qp(..., mrc::kMrcTransport), mrc::set_attr,
 *    Device::set_remote_planes, Device::modify_qp, post_send / post_recv / poll_cq. The MRC
 *    transport (lib/mrc) is linked into lib_mrc (the verbs library does not carry it); the engine
 *    threads of the verbs library's runtime run it through the QP's transport table.
 *  - lib/engine and lib/rc are linked into lib_mrc as well (static libraries, hidden symbols): the
 *    native calls run lib_mrc's copy of that code on the objects the verbs library's runtime owns.
 *    Both copies come from one build and keep no global state, so either runs on the same objects.
 *
 * Thread rules:
 *  - Control calls (create, modify, destroy, query) hold the verbs layer's control section of the
 *    device (droce_verbs_control_begin/end: the provider mutex, so one control thread at a time in
 *    the process, and the device's engine between passes). No ibv_* call and no droce_verbs_*
 *    accessor other than control_end may be made inside one (the mutex is not recursive).
 *  - mrc_post_send / mrc_post_recv take the QP's send / receive spinlock, mrc_poll_cq the CQ's:
 *    the native rings have one producer and one consumer, the API allows any thread.
 *  - Engine-thread hooks (Device::on_link_change, Device::on_qp_fatal, Cq::notify) only write
 *    records into pipes; the lists they read change only inside the device's control section.
 */
#pragma once

#include <mrc.h>
#include <mrc_ctl.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "config/config.h"
#include "engine/device.h"
#include "mrc/mrc.h"
#include "rc/qp.h"
#include "verbs/droce_private.h"
#include "verbs/wr_convert.h"

namespace droce::mrcapi {

/** A test-and-test-and-set spinlock for one queue's application side (short sections). */
class SpinLock {
  public:
    void lock() noexcept {
        for (;;) {
            if (!locked_.exchange(true, std::memory_order_acquire)) return;
            while (locked_.load(std::memory_order_relaxed))
                __builtin_ia32_pause();
        }
    }
    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  private:
    std::atomic<bool> locked_{false};
};

/**
 * The droce-private entry points of droce's libibverbs.so.1 (verbs/droce_private.h, version node
 * DROCE_PRIVATE_1), looked up when lib_mrc first needs them (dlvsym) rather than linked: a program
 * builds against lib_mrc.so and the system's libibverbs (the OCP example's makefile links
 * -libverbs from pkg-config), and runs with droce's libibverbs.so.1 first on LD_LIBRARY_PATH. With
 * another libibverbs loaded the pointers are null: no device does MRC (mrc_query_device says
 * unsupported, mrc_create_context fails with ENODEV).
 */
struct VerbsPrivate {
    decltype(&droce_verbs_device) device = nullptr;
    decltype(&droce_verbs_device_config) device_config = nullptr;
    decltype(&droce_verbs_pd) pd = nullptr;
    decltype(&droce_verbs_control_begin) control_begin = nullptr;
    decltype(&droce_verbs_control_end) control_end = nullptr;
    decltype(&droce_verbs_context_depend) context_depend = nullptr;
    [[nodiscard]] bool ok() const noexcept {
        return device && device_config && pd && control_begin && control_end && context_depend;
    }
};
/** The entry points (resolved once, thread-safe). */
const VerbsPrivate& verbs_private() noexcept;

/** A control section of the verbs layer on a context's device (droce_verbs_control_begin). */
class Control {
  public:
    explicit Control(ibv_context* ctx) noexcept;
    ~Control();
    Control(const Control&) = delete;
    Control& operator=(const Control&) = delete;
    /** False when the context was not an open droce context (then nothing is held). */
    [[nodiscard]] bool ok() const noexcept { return ok_; }

  private:
    ibv_context* ctx_;
    bool ok_;
};

/** An asynchronous event as it travels through a context's pipe. */
struct AsyncRecord {
    std::uint32_t type = 0;   ///< enum ibv_event_type
    std::uint32_t port = 0;   ///< 1-based, port events
    std::uint32_t handle = 0; ///< QPN (QP events) or CQ number (CQ events)
};

/** An EV format profile (mrc_ctl_modify_ev_fmt_profile). */
struct FmtProfile {
    mrc_ctl_profile_state state = MRC_CTL_PROFILE_INIT;
    mrc_ctl_ev_fmt_mode mode{};
    bool mode_set = false;
    std::vector<std::uint8_t> widths; ///< format field widths, bits
    bool fields_set = false;
};

/** One entry of an EV profile's EV array. */
struct EvSlot {
    std::uint32_t value = 0; ///< the EV (before expansion by the profile's fields)
    std::uint8_t port = 0;   ///< 1-based; 0 = unpopulated
    bool denied = false;
};

/** An EV profile (mrc_ctl_modify_ev_profile). Profile 0 is droce's default (AUTO) path set and has
 *  no entry. */
struct EvProfile {
    mrc_ctl_profile_state state = MRC_CTL_PROFILE_INIT;
    mrc_ctl_ev_mode mode{};
    std::uint64_t fmt_id = 0;
    std::uint32_t count = 0;
    std::uint32_t min_active = 0;
    int event_mask = 0;
    bool mode_set = false, fmt_set = false, count_set = false;
    std::vector<mrc_ctl_ev_field> fields;
    std::vector<EvSlot> evs; ///< count entries once OFFLINE (EXP: unpopulated; GEN: generated)
};

/** A congestion control profile (mrc_ctl_modify_cc_profile). */
struct CcProfile {
    mrc_ctl_profile_state state = MRC_CTL_PROFILE_INIT;
    int algorithm = -1; ///< index into the algorithm table (ctl.cc); -1: not set
    bool algorithm_set = false;
};

/** EV event CQs one device feeds at most. */
inline constexpr std::size_t kMaxEvEventCqs = 8;

/**
 * The controller state of one device in this process (OCP MRC controller API, mrc_ctl.h). droce
 * has no firmware shared by processes: each process that opens the device runs its own engine, so
 * profiles, EV event CQs and port admin states are the calling process's. Changed only inside
 * the device's control section; the engine thread reads ev_cqs (EV events) and nothing else.
 */
struct Controller {
    std::vector<std::pair<std::uint64_t, FmtProfile>> fmt;
    std::vector<std::pair<std::uint64_t, EvProfile>> ev;
    std::vector<std::pair<std::uint64_t, CcProfile>> cc;
    int default_event_mask = 0; ///< profile 0's event mask
    std::array<mrc_cq*, kMaxEvEventCqs> ev_cqs{};
};

/** Per device: the MRC contexts on it, read by the engine hooks lib_mrc installs on the Device. */
struct DeviceEntry {
    Device* dev = nullptr;
    /** Changed only inside the device's control section; read by the engine thread's hooks. */
    std::vector<mrc_context*> contexts;
    Controller ctl;
};

/**
 * The EV events of an EV event CQ (mrc_ctl_create_ev_event_cq): a pipe of EvEventRecord. The
 * engine thread writes (the EV hook) and so does the control path inside a control section (the
 * engine is between passes then): one writer at a time. An event that finds cqe records queued
 * (or the pipe full) is dropped and counted; the next one delivered carries the count
 * (MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT).
 */
struct EvEventQueue {
    struct Record {
        std::uint64_t profile_id;
        mrc_ctl_ev ev;
        std::uint32_t drop_count;
        std::uint32_t state; ///< enum mrc_ctl_ev_state
    };
    int rfd = -1, wfd = -1; ///< both non-blocking
    int capacity = 0;       ///< cqe
    std::atomic<int> queued{0};
    std::uint32_t dropped = 0;      ///< writer side: events lost since the last one queued
    std::atomic<bool> armed{false}; ///< mrc_req_notify_cq
    SpinLock read_lock;             ///< mrc_ctl_poll_ev_event callers
    /** Queues one event (the single writer); rings the CQ's channel when armed. */
    void push(mrc_cq* cq, std::uint64_t profile_id, const mrc_ctl_ev& ev,
              std::uint32_t state) noexcept;
};

/** Applies EV profile @p id (0: droce's default) to @p qp: its paths, min_active, event mask.
 *  Inside a control section; @p qp before RTS. @return 0 or an errno number. */
int apply_ev_profile(mrc_qp* qp, std::uint64_t id) noexcept;
/** Applies CC profile @p id (0: the device's default) to @p qp. Inside a control section.
 *  @return 0 or an errno number. */
int apply_cc_profile(mrc_qp* qp, std::uint64_t id) noexcept;
/** Installs the EV event hook on a new MRC QP. Inside a control section. */
void install_ev_hook(mrc_qp* qp) noexcept;
/** Opens the process's control socket for droce-mrcctl (once; ctl_server.cc), serving the
 *  device @p device. */
void start_control_server(ibv_device* device) noexcept;
/** Detaches an EV event CQ from its device and closes its pipe (mrc_destroy_cq). */
void destroy_ev_event_cq(mrc_cq* cq) noexcept;

/** Writes @p r into the async pipe of every MRC context of @p e (engine thread or control). */
void post_to_contexts(const DeviceEntry& e, const AsyncRecord& r) noexcept;
/** The entry of @p dev if an MRC context was ever made on it, else nullptr. Inside a Control. */
[[nodiscard]] DeviceEntry* find_entry(Device* dev) noexcept;
/** True while @p c is a context mrc_create_context made and nobody destroyed (any thread). */
[[nodiscard]] bool context_is_live(mrc_context* c) noexcept;
/** The objects lib_mrc handed out and nobody destroyed yet (QPs, CQs, QP hints, completion
 *  channels, and the contexts themselves), so that a call on a destroyed one returns EINVAL
 *  instead of reading freed memory (a second mrc_destroy_qp on the same handle did). Checked by
 *  the control calls (create, destroy, modify, query), not by the datapath (post, poll), which
 * takes no lock: a post on a destroyed QP is as undefined as with libibverbs, and so are two
 * threads destroying one object at once. Any thread; one mutex. */
/** Records @p h as live. @return false if memory ran out (the caller undoes the create). */
[[nodiscard]] bool handle_add(const void* h) noexcept;
/** Takes @p h out of the live set (its destroy succeeded). */
void handle_drop(const void* h) noexcept;
/** True while @p h is live. */
[[nodiscard]] bool handle_is_live(const void* h) noexcept;

/** Writes @p r into @p ctx's async pipe (any thread). */
void post_async(mrc_context* ctx, const AsyncRecord& r) noexcept;

/** Sets errno to @p err and returns nullptr (creators). */
template <typename T>
inline T* fail(int err) noexcept {
    errno = err;
    return nullptr;
}
/** Sets errno to @p err and returns -1 ("-1 on failure, errno set"). */
inline int fail_neg(int err) noexcept {
    errno = err;
    return -1;
}
/** Sets errno to @p err and returns it ("errors like ibv_*": an errno number). */
inline int fail_errno(int err) noexcept {
    if (err != 0) errno = err;
    return err;
}

using verbs::note_poll; // the empty-poll back-off (verbs/wr_convert.h)

/** Removes every completion of QP @p qpn from @p cq (inside a control section). */
void purge_cq(mrc_cq* cq, std::uint32_t qpn) noexcept;

/** Destroys what a context still holds (mrc_destroy_context). Control section not held. */
void destroy_context_objects(mrc_context* ctx) noexcept;

} // namespace droce::mrcapi

/** The MRC context: one verbs context's MRC side, the parent of every other object. */
struct mrc_context {
    ibv_context* ibv = nullptr;
    droce::Device* dev = nullptr;
    const droce::DeviceConfig* cfg = nullptr;
    droce::mrcapi::DeviceEntry* entry = nullptr;
    std::uint32_t api_version = 0;    ///< the application's MRC_API_VER_USED (0: not stated)
    std::uint32_t vendor_version = 0; ///< its MRC_VENDOR_API_VER_USED (0: not stated)
    /** The controller API 1.0.1 is in use on this context (mrc_ctl_query_device_ex was called with
     *  it, as the OCP header asks of 1.0.1 callers): its EV events carry their state. Else the
     *  1.0.0 layout of struct mrc_ctl_ev_event, which has no state field. */
    bool ctl_api_101 = false;
    int async_rfd = -1; ///< read end of the async event pipe (blocking)
    int async_wfd = -1; ///< write end (non-blocking)
    /** The objects of the context, for cleanup and event lookup; guarded by mu. */
    std::mutex mu;
    std::vector<mrc_comp_channel*> channels;
    std::vector<mrc_cq*> cqs;
    std::vector<mrc_qp*> qps;
    std::vector<mrc_qp_hint*> hints;
};

/** A completion channel: a pipe the engine writes a CQ's number into when an armed CQ fires. */
struct mrc_comp_channel {
    mrc_context* ctx = nullptr;
    int rfd =
        -1; ///< read end, mrc_get_comp_channel_fd (blocking unless the application changes it)
    int wfd = -1;             ///< write end (non-blocking), written by the engine thread
    std::mutex mu;            ///< guards cqs
    std::vector<mrc_cq*> cqs; ///< CQs attached, to map an event's CQ number back
};

/** A completion queue: a native rc::Cq of the context's device. */
struct mrc_cq {
    mrc_context* ctx = nullptr;
    droce::rc::Cq* native = nullptr;                        ///< null for an EV event CQ
    std::unique_ptr<droce::mrcapi::EvEventQueue> ev_events; ///< an EV event CQ's queue
    mrc_comp_channel* channel = nullptr;
    void* cq_context = nullptr;
    std::uint32_t cqn = 0;
    droce::mrcapi::SpinLock lock;   ///< consumer side of the ring
    bool overflow_reported = false; ///< IBV_EVENT_CQ_ERR sent (under lock)
    /** Completion events handed out (mrc_get_cq_event) and acknowledged (mrc_ack_cq_events). */
    std::mutex ev_mu;
    std::condition_variable ev_cv;
    std::uint64_t events_got = 0;
    std::uint64_t events_acked = 0;
    std::atomic<int> qp_refs{0}; ///< QPs using it
};

/** A QP hint: stored attributes, no effect on droce beyond mrc_query_qp_hint. */
struct mrc_qp_hint {
    mrc_context* ctx = nullptr;
    mrc_qp_hint_attr attr{};
    std::atomic<int> refs{0}; ///< QPs that name it
};

/** An MRC QP: a native rc::Qp run by the MRC transport. */
struct mrc_qp {
    mrc_context* ctx = nullptr;
    droce::rc::Qp* native = nullptr;
    std::uint32_t qpn = 0;
    mrc_qp_init_attr init{}; ///< as created (cap as granted, protocol version as chosen)
    /** MRC attributes droce keeps beside the transport's (hint, profiles, cap bits, vendor bytes).
     *  Control path (inside a control section). */
    mrc_qp_hint* hint = nullptr;
    std::uint64_t ev_profile_id = 0;
    std::uint64_t cc_profile_id = 0;
    /** What the EV hook (engine thread) needs, set by apply_ev_profile inside a control section:
     *  the profile's event mask, its EV value of each path (empty for profile 0: the UDP source
     *  port is the value) and its format (the port-only UDP format for profile 0). */
    int ctl_event_mask = 0;
    std::vector<std::uint32_t> ctl_ev_values;
    std::uint32_t cap = 0;
    std::uint8_t vendor_cfg[MRC_MAX_VENDOR_CFG_SIZE] = {};
    droce::mrcapi::SpinLock sq_lock;
    droce::mrcapi::SpinLock rq_lock;
    static constexpr std::uint32_t kScratch = 16;
    std::unique_ptr<droce::rc::SendWqe[]> scratch; ///< mrc_post_send conversion buffer
};
