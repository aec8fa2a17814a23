/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc: completion channels and completion queues (OCP MRC 1.0 application API).
 *
 * A CQ is a native rc::Cq of the context's device (Device::create_cq); mrc_poll_cq reads its ring
 * (Device::poll_cq) and converts each completion to struct ibv_wc, as the verbs layer does.
 * Completion events use the native arming (rc::Cq::armed, rc::Cq::notify): mrc_req_notify_cq arms
 * the CQ; when the engine pushes a matching completion it disarms it and calls the hook here on
 * the engine thread, which writes the CQ's number (4 bytes) into the channel's pipe without
 * blocking. mrc_get_cq_event reads one and maps the number back to the CQ (an event of a CQ
 * destroyed meanwhile is dropped). mrc_destroy_cq waits until every event it handed out for the
 * CQ is acknowledged (mrc_ack_cq_events), as the API asks.
 */
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/pipe_record.h"
#include "internal.h"

using namespace droce;
using namespace droce::mrcapi;

namespace droce::mrcapi {

namespace {

/** Engine thread: an armed CQ got a matching completion. */
void cq_notify(void* notify_ctx, rc::Cq&) noexcept {
    auto* cq = static_cast<mrc_cq*>(notify_ctx);
    // Non-blocking: with 16384 unread events (64 KiB pipe) further ones are dropped rather than
    // stalling the engine; an application that reads its events never gets there.
    [[maybe_unused]] ssize_t r = write(cq->channel->wfd, &cq->cqn, sizeof cq->cqn);
}

} // namespace

void purge_cq(mrc_cq* cq, std::uint32_t qpn) noexcept {
    // Inside a control section: the engine (the ring's producer) is between passes, so this thread
    // may act as producer; the CQ's lock keeps pollers out.
    rc::Cq& c = *cq->native;
    cq->lock.lock();
    std::vector<rc::Cqe> keep;
    const std::uint32_t n = c.ring.ready();
    for (std::uint32_t i = 0; i < n; ++i) {
        const rc::Cqe& e = c.ring.slot(c.ring.consumer_index() + i);
        if (e.qp_num != qpn) keep.push_back(e);
    }
    c.ring.release(n);
    for (const rc::Cqe& e : keep) {
        c.ring.producer_slot() = e;
        c.ring.publish();
    }
    cq->lock.unlock();
}

} // namespace droce::mrcapi

// ------------------------------------------------------------------ completion channels

extern "C" int mrc_create_comp_channel(mrc_context* mrc_ctx, mrc_comp_channel** channel) {
    if (!mrc_ctx || !channel || !context_is_live(mrc_ctx)) return fail_errno(EINVAL);
    auto* ch = new (std::nothrow) mrc_comp_channel;
    if (!ch) return fail_errno(ENOMEM);
    int fds[2];
    if (!handle_add(ch)) {
        delete ch;
        return fail_errno(ENOMEM);
    }
    if (pipe2(fds, O_CLOEXEC) != 0) {
        const int e = errno;
        handle_drop(ch);
        delete ch;
        return fail_errno(e);
    }
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    ch->ctx = mrc_ctx;
    ch->rfd = fds[0];
    ch->wfd = fds[1];
    {
        std::lock_guard<std::mutex> g(mrc_ctx->mu);
        mrc_ctx->channels.push_back(ch);
    }
    *channel = ch;
    return 0;
}

extern "C" int mrc_get_comp_channel_fd(mrc_comp_channel* channel, int* fd) {
    if (!channel || !fd) return fail_neg(EINVAL);
    *fd = channel->rfd;
    return 0;
}

extern "C" int mrc_destroy_comp_channel(mrc_comp_channel* channel) {
    if (!channel || !handle_is_live(channel)) return fail_errno(EINVAL);
    {
        std::lock_guard<std::mutex> g(channel->mu);
        if (!channel->cqs.empty()) return fail_errno(EBUSY);
    }
    handle_drop(channel);
    {
        std::lock_guard<std::mutex> g(channel->ctx->mu);
        std::erase(channel->ctx->channels, channel);
    }
    close(channel->rfd);
    close(channel->wfd);
    delete channel;
    return 0;
}

// ------------------------------------------------------------------ completion queues

extern "C" mrc_cq* mrc_create_cq(mrc_context* mrc_ctx, int cqe, void* cq_context,
                                 mrc_comp_channel* channel, int comp_vector) {
    if (!mrc_ctx || !context_is_live(mrc_ctx) || cqe <= 0 || comp_vector < 0 ||
        comp_vector >= mrc_ctx->ibv->num_comp_vectors)
        return fail<mrc_cq>(EINVAL);
    if (channel && (!handle_is_live(channel) || channel->ctx != mrc_ctx))
        return fail<mrc_cq>(EINVAL);
    auto* cq = new (std::nothrow) mrc_cq;
    if (!cq) return fail<mrc_cq>(ENOMEM);
    if (!handle_add(cq)) {
        delete cq;
        return fail<mrc_cq>(ENOMEM);
    }
    cq->ctx = mrc_ctx;
    cq->cq_context = cq_context;
    cq->channel = channel;
    int err = 0;
    {
        Control ctl(mrc_ctx->ibv);
        if (!ctl.ok()) {
            handle_drop(cq);
            delete cq;
            return fail<mrc_cq>(EINVAL);
        }
        cq->native = mrc_ctx->dev->create_cq(static_cast<std::uint32_t>(cqe), &err);
        if (cq->native) {
            cq->cqn = cq->native->cqn;
            if (channel) {
                cq->native->notify_ctx = cq;
                cq->native->notify = cq_notify;
            }
        }
    }
    if (!cq->native) {
        handle_drop(cq);
        delete cq;
        return fail<mrc_cq>(err);
    }
    if (channel) {
        std::lock_guard<std::mutex> g(channel->mu);
        channel->cqs.push_back(cq);
    }
    std::lock_guard<std::mutex> g(mrc_ctx->mu);
    mrc_ctx->cqs.push_back(cq);
    return cq;
}

extern "C" int mrc_poll_cq(mrc_cq* cq, int num_entries, ibv_wc* wc) {
    // An EV event CQ holds EV events, read with mrc_ctl_poll_ev_event.
    if (!cq || !cq->native || (num_entries > 0 && !wc)) return fail_neg(EINVAL);
    if (num_entries <= 0) return 0;
    constexpr std::uint32_t kChunk = 16;
    rc::Cqe buf[kChunk];
    int done = 0;
    cq->lock.lock();
    // A completion the engine could not push (ring full) is lost: the CQ is in error from then on
    // (IBV_EVENT_CQ_ERR, reported once). The flag is the engine's; an atomic view reads it.
    if (std::atomic_ref<bool>(cq->native->overflowed).load(std::memory_order_relaxed)) {
        const bool first = !cq->overflow_reported;
        cq->overflow_reported = true;
        cq->lock.unlock();
        if (first) {
            AsyncRecord r;
            r.type = IBV_EVENT_CQ_ERR;
            r.handle = cq->cqn;
            post_async(cq->ctx, r);
        }
        return fail_neg(EOVERFLOW);
    }
    while (done < num_entries) {
        const std::uint32_t want =
            std::min<std::uint32_t>(kChunk, static_cast<std::uint32_t>(num_entries - done));
        const std::uint32_t got = cq->ctx->dev->poll_cq(cq->native, buf, want);
        for (std::uint32_t i = 0; i < got; ++i)
            verbs::wc_from_cqe(buf[i], &wc[done + static_cast<int>(i)]);
        done += static_cast<int>(got);
        if (got < want) break;
    }
    cq->lock.unlock();
    note_poll(static_cast<std::uint32_t>(done));
    return done;
}

extern "C" int mrc_destroy_cq(mrc_cq* cq) {
    if (!cq || !handle_is_live(cq)) return fail_errno(EINVAL);
    if (cq->qp_refs.load(std::memory_order_acquire) > 0) return fail_errno(EBUSY);
    {
        // Every completion event handed out must be acknowledged first.
        std::unique_lock<std::mutex> g(cq->ev_mu);
        cq->ev_cv.wait(g, [cq] { return cq->events_acked >= cq->events_got; });
    }
    mrc_context* ctx = cq->ctx;
    if (cq->ev_events) {
        destroy_ev_event_cq(cq);
    } else {
        Control ctl(ctx->ibv);
        if (!ctl.ok()) return fail_errno(EINVAL);
        if (const int e = ctx->dev->destroy_cq(cq->native); e != 0) return fail_errno(e);
    }
    if (cq->channel) {
        std::lock_guard<std::mutex> g(cq->channel->mu);
        std::erase(cq->channel->cqs, cq);
    }
    {
        std::lock_guard<std::mutex> g(ctx->mu);
        std::erase(ctx->cqs, cq);
    }
    handle_drop(cq);
    delete cq;
    return 0;
}

extern "C" int mrc_req_notify_cq(mrc_cq* cq, int solicited_only) {
    if (!cq) return fail_errno(EINVAL);
    if (cq->ev_events) { // an EV event CQ: the next event queued rings the channel
        cq->ev_events->armed.store(true, std::memory_order_release);
        return 0;
    }
    // Without a channel the arming has no visible effect (no hook), as with verbs. release: the
    // arming is published after whatever the application did before (its last poll).
    cq->native->armed.store(solicited_only ? rc::Cq::kArmSolicited : rc::Cq::kArmNext,
                            std::memory_order_release);
    return 0;
}

extern "C" int mrc_get_cq_event(mrc_comp_channel* channel, mrc_cq** cq, void** cq_context) {
    if (!channel || !cq || !cq_context) return fail_neg(EINVAL);
    for (;;) {
        std::uint32_t cqn = 0;
        if (read_pipe_record(channel->rfd, &cqn, sizeof cqn) != 0) return -1;
        std::lock_guard<std::mutex> g(channel->mu);
        for (mrc_cq* c : channel->cqs) {
            if (c->cqn != cqn) continue;
            {
                std::lock_guard<std::mutex> eg(c->ev_mu);
                ++c->events_got;
            }
            *cq = c;
            *cq_context = c->cq_context;
            return 0;
        }
        // The CQ was destroyed after the event was written: drop it, read the next.
    }
}

extern "C" void mrc_ack_cq_events(mrc_cq* cq, unsigned int nevents) {
    if (!cq) return;
    std::lock_guard<std::mutex> g(cq->ev_mu);
    cq->events_acked += nevents;
    cq->ev_cv.notify_all();
}
