/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc: versions, device query, MRC contexts and asynchronous events (OCP MRC 1.0 application
 * API, include/mrc.h).
 *
 * Asynchronous events. Each MRC context has a pipe. lib_mrc hooks each device once (the first
 * context on it): Device::on_link_change (chained after the verbs layer's own hook, which keeps
 * feeding ibv_get_async_event) writes IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR into the pipe of
 * every MRC context of the device; Device::on_qp_fatal writes IBV_EVENT_QP_FATAL with the QPN when
 * an MRC QP fails by itself; mrc_poll_cq writes IBV_EVENT_CQ_ERR with the CQ number when it finds
 * its CQ overrun. mrc_get_async_event maps QPN and CQ number back to the context's objects when it
 * reads the record, so an event of an object destroyed meanwhile is dropped, never handed out as a
 * dangling pointer.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_set>

#include "common/pipe_record.h"
#include "internal.h"
#include "rc/params.h"

using namespace droce;
using namespace droce::mrcapi;

namespace droce::mrcapi {

const VerbsPrivate& verbs_private() noexcept {
    static const VerbsPrivate vp = [] {
        VerbsPrivate v;
        // The libibverbs.so.1 the process has loaded (the program links it); else the default
        // search order.
        void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!h) h = dlopen("libibverbs.so.1", RTLD_NOW);
        if (!h) return v;
        const auto find = [h](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
                dlvsym(h, name, "DROCE_PRIVATE_1"));
        };
        find(v.device, "droce_verbs_device");
        find(v.device_config, "droce_verbs_device_config");
        find(v.pd, "droce_verbs_pd");
        find(v.control_begin, "droce_verbs_control_begin");
        find(v.control_end, "droce_verbs_control_end");
        find(v.context_depend, "droce_verbs_context_depend");
        if (!v.ok()) v = VerbsPrivate{};
        return v; // the handle stays open: the library is in use for the process's lifetime
    }();
    return vp;
}

Control::Control(ibv_context* ctx) noexcept
    : ctx_(ctx), ok_(verbs_private().ok() && verbs_private().control_begin(ctx) == 0) {}

Control::~Control() {
    if (ok_) verbs_private().control_end(ctx_);
}

namespace {

/** Devices lib_mrc has hooked, never freed (the hooks point at them). Touched only with the verbs
 *  provider mutex held (inside a Control), so no lock of its own. */
std::vector<DeviceEntry*>& device_entries() noexcept {
    static auto* v = new std::vector<DeviceEntry*>;
    return *v;
}

/** Every live object lib_mrc handed out, contexts included (handle_add). */
std::mutex& handles_mu() noexcept {
    static auto* m = new std::mutex;
    return *m;
}
std::unordered_set<const void*>& live_handles() noexcept {
    static auto* s = new std::unordered_set<const void*>;
    return *s;
}
} // namespace

bool handle_add(const void* h) noexcept {
    std::lock_guard<std::mutex> g(handles_mu());
    try {
        live_handles().insert(h);
    } catch (const std::bad_alloc&) {
        return false;
    }
    return true;
}

void handle_drop(const void* h) noexcept {
    std::lock_guard<std::mutex> g(handles_mu());
    live_handles().erase(h);
}

bool handle_is_live(const void* h) noexcept {
    std::lock_guard<std::mutex> g(handles_mu());
    return live_handles().contains(h);
}

bool context_is_live(mrc_context* c) noexcept {
    return handle_is_live(c);
}

DeviceEntry* find_entry(Device* dev) noexcept {
    for (DeviceEntry* e : device_entries())
        if (e->dev == dev) return e;
    return nullptr;
}

namespace {

/** The entry of @p dev, hooked on first use. Inside a Control of a context of @p dev. */
DeviceEntry* entry_of(Device* dev) {
    for (DeviceEntry* e : device_entries())
        if (e->dev == dev) return e;
    auto* e = new DeviceEntry;
    e->dev = dev;
    device_entries().push_back(e);
    // Chained after the verbs layer's hook, which still feeds ibv_get_async_event. The engine is
    // between passes (the control section): replacing the hooks is safe.
    auto prev_link = dev->on_link_change;
    dev->on_link_change = [prev_link, e](unsigned port, bool up) {
        if (prev_link) prev_link(port, up);
        AsyncRecord r;
        r.type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
        r.port = port + 1;
        post_to_contexts(*e, r);
    };
    auto prev_fatal = dev->on_qp_fatal;
    dev->on_qp_fatal = [prev_fatal, e](rc::Qp& qp) {
        if (prev_fatal) prev_fatal(qp);
        if (!mrc::is_mrc(qp)) return; // RC QPs of the verbs layer: not MRC events
        AsyncRecord r;
        r.type = IBV_EVENT_QP_FATAL;
        r.handle = qp.qpn;
        post_to_contexts(*e, r);
    };
    return e;
}

constexpr std::uint32_t kMaxQpHints = rc::kMaxQp;

void fill_device_attr(mrc_device_attr* attr) noexcept {
    std::memset(attr, 0, sizeof *attr);
    attr->mrc_protocol_version = MRC_PROTOCOL_VERSION_1;
    attr->wimm_attr.max_wimm = static_cast<std::uint16_t>(mrc::kMaxWimm);
    attr->wimm_attr.max_wimm_dest = static_cast<std::uint16_t>(mrc::kMaxWimm);
    attr->mpr_attr.max_mpr = static_cast<std::uint8_t>(mrc::kMaxMpr);
    attr->mpr_attr.mpr_resolution = 1;
    attr->qp_attr.max_qp_hint = kMaxQpHints;
    attr->cap = MRC_DEVICE_CAP_TRIM_NACK; // no dynamic MPR, no service time
}

int query_device(ibv_context* context, mrc_context* mcontext, mrc_device_attr* attr,
                 int* supported) noexcept {
    if (!context || !attr || !supported) return fail_neg(EINVAL);
    if (mcontext && (!context_is_live(mcontext) || mcontext->ibv != context))
        return fail_neg(EINVAL);
    if (!verbs_private().ok() || !verbs_private().device(context)) {
        // Not an open droce context: no MRC here.
        std::memset(attr, 0, sizeof *attr);
        *supported = 0;
        return 0;
    }
    fill_device_attr(attr);
    *supported = 1;
    return 0;
}

} // namespace

void post_async(mrc_context* ctx, const AsyncRecord& r) noexcept {
    if (ctx->async_wfd < 0) return;
    // Non-blocking: a context whose application never reads events loses the newest ones once the
    // pipe is full rather than stalling the engine.
    [[maybe_unused]] ssize_t n = write(ctx->async_wfd, &r, sizeof r);
}

void post_to_contexts(const DeviceEntry& e, const AsyncRecord& r) noexcept {
    for (mrc_context* c : e.contexts)
        post_async(c, r);
}

} // namespace droce::mrcapi

// ------------------------------------------------------------------ versions, device

extern "C" void mrc_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                                  uint32_t* vendor_version,
                                  uint32_t* last_supported_vendor_version) {
    if (current_version) *current_version = MRC_API_CURRENT_VERSION;
    if (last_supported_version) *last_supported_version = MRC_API_LAST_SUPPORTED_VERSION;
    if (vendor_version) *vendor_version = MRC_VENDOR_API_CURRENT_VERSION;
    if (last_supported_vendor_version)
        *last_supported_vendor_version = MRC_VENDOR_API_LAST_SUPPORTED_VERSION;
}

extern "C" int mrc_query_device(ibv_context* context, mrc_device_attr* attr, int* supported) {
    return query_device(context, nullptr, attr, supported);
}

extern "C" int mrc_query_device_ex(ibv_context* context, mrc_context* mcontext,
                                   mrc_device_attr* attr, int* supported) {
    return query_device(context, mcontext, attr, supported);
}

// ------------------------------------------------------------------ contexts

extern "C" mrc_context* mrc_create_context(ibv_context* vcontext, mrc_context_attr* context_attr) {
    if (!vcontext) return fail<mrc_context>(EINVAL);
    std::uint32_t api = 0, vendor = 0;
    if (context_attr) {
        api = context_attr->mrc_api_version_used;
        vendor = context_attr->mrc_vendor_api_version_used;
        // 0 (not stated) and MRC_API_VER_LATEST mean the current version; anything newer than
        // what droce implements is refused (every older one is still supported).
        const auto latest = static_cast<std::uint32_t>(MRC_API_VER_LATEST);
        if (api == latest) api = MRC_API_CURRENT_VERSION;
        if (vendor == latest) vendor = MRC_VENDOR_API_CURRENT_VERSION;
        if (api > static_cast<std::uint32_t>(MRC_API_CURRENT_VERSION) ||
            vendor > static_cast<std::uint32_t>(MRC_VENDOR_API_CURRENT_VERSION))
            return fail<mrc_context>(EINVAL);
    }
    // Not droce's libibverbs: no MRC device at all.
    if (!verbs_private().ok()) return fail<mrc_context>(ENODEV);
    Device* dev = verbs_private().device(vcontext);
    const DeviceConfig* cfg = verbs_private().device_config(vcontext);
    if (!dev || !cfg) return fail<mrc_context>(EINVAL); // not an open droce context
    auto* c = new (std::nothrow) mrc_context;
    if (!c) return fail<mrc_context>(ENOMEM);
    if (!handle_add(c)) {
        delete c;
        return fail<mrc_context>(ENOMEM);
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        const int e = errno;
        handle_drop(c);
        delete c;
        return fail<mrc_context>(e);
    }
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    c->ibv = vcontext;
    c->dev = dev;
    c->cfg = cfg;
    c->api_version = api;
    c->vendor_version = vendor;
    c->async_rfd = fds[0];
    c->async_wfd = fds[1];
    {
        Control ctl(vcontext);
        // The verbs context must outlive this one: ibv_close_device is refused (EBUSY) until
        // mrc_destroy_context.
        if (!ctl.ok() || verbs_private().context_depend(vcontext, 1) != 0) {
            close(fds[0]);
            close(fds[1]);
            handle_drop(c);
            delete c;
            return fail<mrc_context>(EINVAL);
        }
        c->entry = entry_of(dev);
        c->entry->contexts.push_back(c);
    }
    start_control_server(vcontext->device);
    return c;
}

extern "C" int mrc_destroy_context(mrc_context* mrc_ctx) {
    if (!mrc_ctx || !context_is_live(mrc_ctx)) return fail_neg(EINVAL);
    handle_drop(mrc_ctx);
    // What the application left behind goes with the context (the context tracks its objects so
    // that it can clean up).
    destroy_context_objects(mrc_ctx);
    {
        // The verbs context is still open: ibv_close_device refuses while this context lives.
        Control ctl(mrc_ctx->ibv);
        std::erase(mrc_ctx->entry->contexts, mrc_ctx);
        if (ctl.ok()) (void)verbs_private().context_depend(mrc_ctx->ibv, -1);
    }
    close(mrc_ctx->async_rfd);
    close(mrc_ctx->async_wfd);
    delete mrc_ctx;
    return 0;
}

// ------------------------------------------------------------------ asynchronous events

extern "C" int mrc_get_async_event(mrc_context* mrc_ctx, mrc_async_event* event) {
    if (!mrc_ctx || !event) return fail_neg(EINVAL);
    for (;;) {
        AsyncRecord r;
        if (read_pipe_record(mrc_ctx->async_rfd, &r, sizeof r) != 0) return -1;
        std::memset(event, 0, sizeof *event);
        event->event_type = static_cast<ibv_event_type>(r.type);
        std::lock_guard<std::mutex> g(mrc_ctx->mu);
        switch (event->event_type) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
            event->element.port_num = static_cast<int>(r.port);
            return 0;
        case IBV_EVENT_CQ_ERR:
            for (mrc_cq* cq : mrc_ctx->cqs)
                if (cq->cqn == r.handle) {
                    event->element.cq = cq;
                    return 0;
                }
            break; // destroyed meanwhile: dropped
        default:
            for (mrc_qp* qp : mrc_ctx->qps)
                if (qp->qpn == r.handle) {
                    event->element.qp = qp;
                    return 0;
                }
            break; // another context's QP, or destroyed meanwhile
        }
    }
}

extern "C" void mrc_ack_async_event(mrc_async_event* event) {
    // Nothing to release: records name objects by number and are resolved when read.
    (void)event;
}
