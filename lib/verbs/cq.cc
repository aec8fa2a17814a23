/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Completion queues of droce's libibverbs: ibv_create_cq / ibv_create_cq_ex (one object, an
 * ibv_cq_ex whose leading fields are the ibv_cq), ibv_poll_cq and the ibv_start_poll ..
 * ibv_end_poll reader, completion channels and completion events.
 *
 * Completion events: each ibv_comp_channel is a pipe. ibv_req_notify_cq arms the droce CQ
 * (rc::Cq::armed); when the engine pushes a matching CQE it disarms the CQ and calls cq_notify() on
 * the engine thread, which writes a CqEvent (the CQ's address and serial) into the pipe without
 * blocking. The channel's fd (the read end) is readable while events are pending;
 * ibv_get_cq_event reads one, and returns it only while its CQ is alive (a destroyed CQ's unread
 * events are dropped, as the kernel drops them).
 */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/pipe_record.h"
#include "provider.h"
#include "wr_convert.h"

namespace droce::verbs {
namespace {

void cq_notify(void* notify_ctx, rc::Cq&) noexcept {
    auto* cq = static_cast<VCq*>(notify_ctx);
    VChannel* ch = cq->channel;
    if (!ch) return;
    // Non-blocking: with 4096 unread events (64 KiB pipe) further events are dropped rather than
    // stalling the engine; an application that reads its events never gets there.
    const CqEvent ev{cq, cq->serial};
    [[maybe_unused]] ssize_t r = write(ch->wfd, &ev, sizeof ev);
}

/** Serials of VCq (VCq::serial); 0 is never one. */
std::atomic<std::uint64_t> next_cq_serial{1};

/** Copies up to @p num_entries completions of @p cq into @p wc under the CQ's lock. */
int reap(VCq* cq, int num_entries, ibv_wc* wc) noexcept {
    constexpr std::uint32_t kChunk = 16;
    rc::Cqe buf[kChunk];
    int done = 0;
    cq->lock.lock();
    while (done < num_entries) {
        const std::uint32_t want =
            std::min<std::uint32_t>(kChunk, static_cast<std::uint32_t>(num_entries - done));
        const std::uint32_t got = cq->ctx->dev->poll_cq(cq->native, buf, want);
        for (std::uint32_t i = 0; i < got; ++i)
            wc_from_cqe(buf[i], &wc[done + static_cast<int>(i)]);
        done += static_cast<int>(got);
        if (got < want) break;
    }
    cq->lock.unlock();
    return done;
}

/**
 * A completion the engine could not push (the ring was full: an overrun) is lost: IBV_EVENT_CQ_ERR
 * on the CQ's context, once (as rxe; the CQ goes on delivering what it holds). The flag is the
 * engine's; an atomic view reads it.
 */
void report_overrun(VCq* cq) noexcept {
    if (!std::atomic_ref<bool>(cq->native->overflowed).load(std::memory_order_relaxed)) return;
    if (cq->overrun_reported.exchange(true, std::memory_order_relaxed)) return;
    AsyncRecord r;
    r.type = IBV_EVENT_CQ_ERR;
    r.handle = cq->native->cqn;
    post_context_event(cq->ctx, r);
}

/**
 * ibv_poll_cq (context op): copies up to @p num_entries completions into @p wc, oldest first.
 * Any thread; threads polling one CQ are serialised by its spinlock. When the CQ is empty and
 * DROCE_PROGRESS is not thread, the caller runs up to DROCE_PROGRESS_PASSES engine passes itself
 * (when no other thread is running the engine; outside the CQ's lock) and looks again: a program
 * that polls in a loop makes progress with no engine thread. @return how many (0..n); a
 * non-positive @p num_entries returns 0. Never fails: an overrun is reported as
 * IBV_EVENT_CQ_ERR (report_overrun).
 */
int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
    if (num_entries <= 0) return 0;
    VCq* cq = from_ibv<VCq>(ibcq);
    int done = reap(cq, num_entries, wc);
    if (done == 0 && cq->ctx->drive_passes && drive(cq->ctx)) done = reap(cq, num_entries, wc);
    report_overrun(cq); // after the passes this call may have run (DROCE_PROGRESS=app)
    note_poll(static_cast<std::uint32_t>(done));
    return done;
}

/**
 * ibv_req_notify_cq (context op): one completion event for the next CQE (or, with
 * @p solicited_only, the next solicited or error CQE), written to the CQ's channel. Also ends any
 * step aside of the context's engine threads (Device::app_drive_ends(): the program is about to
 * wait for the engine). @return 0.
 */
int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
    VCq* cq = from_ibv<VCq>(ibcq);
    // Arming says the program will wait for an event (in ibv_get_cq_event, or on the channel's fd
    // with its own poll/epoll): its engine threads must not be stepping aside meanwhile.
    end_drive(cq->ctx);
    // Without a channel the arming has no visible effect (no notify hook), as with a kernel
    // provider. release: the arming is published after whatever the application did before (its
    // last poll).
    cq->native->armed.store(solicited_only ? rc::Cq::kArmSolicited : rc::Cq::kArmNext,
                            std::memory_order_release);
    return 0;
}

// ---- ibv_cq_ex reader: start_poll holds the CQ lock until end_poll (or a start_poll that finds
// nothing).
void load_cur(VCq* cq) noexcept {
    cq->cqx.status = static_cast<ibv_wc_status>(cq->cur.status);
    cq->cqx.wr_id = cq->cur.wr_id;
}
/**
 * ibv_start_poll: takes the CQ's lock and reads the oldest completion (cqx->status, wr_id and the
 * read_* functions describe it until the next next_poll / end_poll); an empty CQ drives the
 * engine as ibv_poll_cq does. @return 0 (call ibv_end_poll
 * later), ENOENT (empty: the lock is released, do not call ibv_end_poll), EINVAL (attr->comp_mask).
 */
int start_poll(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) {
    VCq* cq = from_ibv<VCq>(cqx);
    if (attr && attr->comp_mask) return EINVAL;
    report_overrun(cq);
    cq->lock.lock();
    if (cq->ctx->dev->poll_cq(cq->native, &cq->cur, 1) == 0) {
        // Empty: drive the engine as ibv_poll_cq does (outside the lock), then look once more.
        cq->lock.unlock();
        if (cq->ctx->drive_passes == 0 || drive(cq->ctx) == 0) {
            note_poll(0);
            return ENOENT;
        }
        cq->lock.lock();
        if (cq->ctx->dev->poll_cq(cq->native, &cq->cur, 1) == 0) {
            cq->lock.unlock();
            note_poll(0);
            return ENOENT;
        }
    }
    load_cur(cq);
    return 0;
}
int next_poll(ibv_cq_ex* cqx) {
    VCq* cq = from_ibv<VCq>(cqx);
    if (cq->ctx->dev->poll_cq(cq->native, &cq->cur, 1) == 0) return ENOENT;
    load_cur(cq);
    return 0;
}
void end_poll(ibv_cq_ex* cqx) {
    from_ibv<VCq>(cqx)->lock.unlock();
}
ibv_wc_opcode read_opcode(ibv_cq_ex* c) {
    return static_cast<ibv_wc_opcode>(from_ibv<VCq>(c)->cur.opcode);
}
uint32_t read_vendor_err(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.byte_len;
}
__be32 read_imm_data(ibv_cq_ex* c) {
    const rc::Cqe& e = from_ibv<VCq>(c)->cur;
    return (e.wc_flags & rc::kWcWithInv) ? e.imm_data : htobe32(e.imm_data);
}
uint32_t read_qp_num(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.wc_flags;
}
uint32_t read_slid(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.slid;
}
uint8_t read_sl(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* c) {
    return from_ibv<VCq>(c)->cur.dlid_path_bits;
}

/** Supported ibv_create_cq_wc_flags: the standard ones (no timestamps, VLAN, flow tag, TM). */
constexpr std::uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;

VCq* create(ibv_context* context, std::uint32_t cqe, void* cq_context, ibv_comp_channel* channel,
            std::uint32_t comp_vector, std::uint64_t wc_flags, int* err) {
    VContext* c = vctx_of(context);
    if (comp_vector >= static_cast<std::uint32_t>(context->num_comp_vectors)) {
        *err = EINVAL;
        return nullptr;
    }
    if (channel && channel->context != context) {
        *err = EINVAL;
        return nullptr;
    }
    auto* cq = new (std::nothrow) VCq;
    if (!cq) {
        *err = ENOMEM;
        return nullptr;
    }
    {
        ControlGuard guard(c->dev);
        cq->native = c->dev->create_cq(cqe, err);
        if (!cq->native) {
            delete cq;
            return nullptr;
        }
        cq->ctx = c;
        try {
            c->vdev->cqs[cq->native->cqn] = ibv_cq_ex_to_cq(&cq->cqx);
        } catch (...) {
            c->dev->destroy_cq(cq->native);
            delete cq;
            *err = ENOMEM;
            return nullptr;
        }
        if (channel) {
            VChannel* ch = from_ibv<VChannel>(channel);
            cq->serial = next_cq_serial.fetch_add(1, std::memory_order_relaxed);
            try {
                std::lock_guard lock(ch->mu);
                ch->live.emplace_back(cq, cq->serial);
            } catch (...) {
                c->vdev->cqs.erase(cq->native->cqn);
                c->dev->destroy_cq(cq->native);
                delete cq;
                *err = ENOMEM;
                return nullptr;
            }
            cq->channel = ch;
            ++channel->refcnt;
            cq->native->notify_ctx = cq;
            cq->native->notify = cq_notify;
        }
    }
    ibv_cq_ex& x = cq->cqx;
    x.context = context;
    x.channel = channel;
    x.cq_context = cq_context;
    x.handle = cq->native->cqn;
    x.cqe = static_cast<int>(cq->native->ring.capacity());
    pthread_mutex_init(&x.mutex, nullptr);
    pthread_cond_init(&x.cond, nullptr);
    x.comp_events_completed = 0;
    x.async_events_completed = 0;
    cq->wc_flags = wc_flags;
    x.start_poll = start_poll;
    x.next_poll = next_poll;
    x.end_poll = end_poll;
    x.read_opcode = read_opcode;
    x.read_vendor_err = read_vendor_err;
    x.read_byte_len = read_byte_len;
    x.read_imm_data = read_imm_data;
    x.read_qp_num = read_qp_num;
    x.read_src_qp = read_src_qp;
    x.read_wc_flags = read_wc_flags;
    x.read_slid = read_slid;
    x.read_sl = read_sl;
    x.read_dlid_path_bits = read_dlid_path_bits;
    *err = 0;
    return cq;
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* a) {
    if (!context || !a) return fail<ibv_cq_ex>(EINVAL);
    if (a->comp_mask &
        ~static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
        return fail<ibv_cq_ex>(EOPNOTSUPP);
    if (a->wc_flags & ~kSupportedWcFlags) return fail<ibv_cq_ex>(EOPNOTSUPP);
    if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (a->flags & ~static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)))
        return fail<ibv_cq_ex>(EOPNOTSUPP);
    int err = 0;
    VCq* cq = create(context, a->cqe, a->cq_context, a->channel, a->comp_vector, a->wc_flags, &err);
    if (!cq) return fail<ibv_cq_ex>(err);
    return &cq->cqx;
}

} // namespace

void install_cq_ops(VContext& c) noexcept {
    c.vctx.context.ops.poll_cq = poll_cq;
    c.vctx.context.ops.req_notify_cq = req_notify_cq;
    c.vctx.create_cq_ex = create_cq_ex;
}

} // namespace droce::verbs

using namespace droce;
using namespace droce::verbs;

/**
 * ibv_create_cq. @param cqe minimum depth (1..65536; the CQ may be deeper, cq->cqe says how deep)
 * @return the CQ, or NULL with errno EINVAL (cqe out of range, comp_vector >= 1, channel of another
 *         context) or ENOMEM.
 */
extern "C" ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                 ibv_comp_channel* channel, int comp_vector) {
    if (!context || cqe <= 0 || comp_vector < 0) return fail<ibv_cq>(EINVAL);
    int err = 0;
    VCq* cq = create(context, static_cast<std::uint32_t>(cqe), cq_context, channel,
                     static_cast<std::uint32_t>(comp_vector), IBV_WC_STANDARD_FLAGS, &err);
    if (!cq) return fail<ibv_cq>(err);
    return ibv_cq_ex_to_cq(&cq->cqx);
}

/**
 * Destroys @p ibcq. Its completion events not yet read from its channel are dropped; as
 * rdma-core's, the call waits until the events ibv_get_cq_event returned for it are acknowledged
 * (ibv_ack_cq_events).
 * @return 0, EINVAL (NULL), EBUSY (a QP still uses it).
 */
extern "C" int ibv_destroy_cq(ibv_cq* ibcq) {
    if (!ibcq) return EINVAL;
    VCq* cq = from_ibv<VCq>(ibcq);
    {
        ControlGuard guard(cq->ctx->dev);
        const std::uint32_t cqn = cq->native->cqn;
        if (int e = cq->ctx->dev->destroy_cq(cq->native); e != 0) return e;
        cq->ctx->vdev->cqs.erase(cqn);
        if (cq->channel) {
            std::lock_guard lock(cq->channel->mu);
            std::erase_if(cq->channel->live, [cq](const auto& e) { return e.first == cq; });
            --cq->channel->ch.refcnt;
        }
    }
    pthread_mutex_lock(&cq->cqx.mutex);
    while (cq->cqx.comp_events_completed < cq->events_reported)
        pthread_cond_wait(&cq->cqx.cond, &cq->cqx.mutex);
    pthread_mutex_unlock(&cq->cqx.mutex);
    pthread_mutex_destroy(&cq->cqx.mutex);
    pthread_cond_destroy(&cq->cqx.cond);
    delete cq;
    return 0;
}

/** Not supported: droce CQ rings have a fixed size. @return EOPNOTSUPP. */
extern "C" int ibv_resize_cq(ibv_cq* cq, int cqe) {
    DROCE_UNSUPPORTED("ibv_resize_cq");
    (void)cq;
    (void)cqe;
    return EOPNOTSUPP;
}

/**
 * A completion channel: fd becomes readable when an armed CQ attached to it gets a completion.
 * @return the channel, or NULL with errno EINVAL, ENOMEM, EMFILE.
 */
extern "C" ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
    if (!context) return fail<ibv_comp_channel>(EINVAL);
    auto* ch = new (std::nothrow) VChannel;
    if (!ch) return fail<ibv_comp_channel>(ENOMEM);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        delete ch;
        return fail<ibv_comp_channel>(e);
    }
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    ch->ch.context = context;
    ch->ch.fd = fds[0];
    ch->ch.refcnt = 0;
    ch->wfd = fds[1];
    return &ch->ch;
}

/** @return 0, EINVAL (NULL), EBUSY (CQs still attached). */
extern "C" int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    if (!channel) return EINVAL;
    if (channel->refcnt) return EBUSY;
    VChannel* ch = from_ibv<VChannel>(channel);
    close(ch->ch.fd);
    close(ch->wfd);
    delete ch;
    return 0;
}

namespace {

/**
 * Until an event is pending on @p channel: runs engine passes of @p c's device on this thread
 * (when no other thread runs them), kWaitSpins rounds; then, with engine threads running
 * (DROCE_PROGRESS=auto), leaves the rest to them (the caller's read blocks; the engine threads'
 * step aside ends first: Device::app_drive_ends()); with none (app), naps on the channel, the
 * doorbell and the ports' receive interrupts and drives again on each wake-up. A non-blocking
 * channel gets one round (its read then says EAGAIN, the step aside ended, or returns the
 * event).
 */
void wait_driving(ibv_comp_channel* channel, VContext* c) noexcept {
    // Spin rounds before handing over to the engine threads or napping: about 10 to 50 us of
    // passes, the time a peer on the same host takes to answer.
    constexpr unsigned kWaitSpins = 64;
    constexpr std::uint64_t kAppNapNs = 100'000;
    const int flags = fcntl(channel->fd, F_GETFL);
    const bool nonblocking = flags >= 0 && (flags & O_NONBLOCK);
    for (unsigned round = 0;; ++round) {
        drive(c);
        pollfd pfd{channel->fd, POLLIN, 0};
        if (poll(&pfd, 1, 0) > 0) return;
        if (nonblocking) {
            // EAGAIN next: the caller waits elsewhere (its own poll/epoll on the fd).
            end_drive(c);
            return;
        }
        if (round < kWaitSpins) continue;
        if (!c->app_only) {
            // The caller's read blocks: its engine threads must not wait out a step aside.
            end_drive(c);
            return;
        }
        c->dev->sleep_until_doorbell(kAppNapNs, channel->fd);
    }
}

} // namespace

/**
 * Waits for a completion event on @p channel (blocks unless channel->fd was made non-blocking).
 * Unless DROCE_PROGRESS=thread, the waiting thread first drives the engine itself (wait_driving);
 * with DROCE_PROGRESS=app it never blocks without driving, so a program that waits here progresses
 * with no engine thread. (A program that waits on channel->fd with its own poll/epoll needs an
 * engine thread: DROCE_PROGRESS=auto or thread.)
 * Events of a CQ destroyed since they were raised are dropped (the call waits for the next).
 * @return 0 with *cq and *cq_context set, or -1 with errno (EAGAIN when non-blocking and none
 * pending).
 */
extern "C" int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    if (!channel || !cq || !cq_context) {
        errno = EINVAL;
        return -1;
    }
    VContext* c = vctx_of(channel->context);
    VChannel* ch = from_ibv<VChannel>(channel);
    for (;;) {
        if (c->drive_passes) wait_driving(channel, c);
        CqEvent ev{};
        if (read_pipe_record(channel->fd, &ev, sizeof ev) != 0) return -1;
        std::lock_guard lock(ch->mu);
        const bool alive = std::any_of(ch->live.begin(), ch->live.end(), [&](const auto& e) {
            return e.first == ev.cq && e.second == ev.serial;
        });
        if (!alive) continue; // its CQ was destroyed: never dereferenced
        pthread_mutex_lock(&ev.cq->cqx.mutex);
        ++ev.cq->events_reported;
        pthread_mutex_unlock(&ev.cq->cqx.mutex);
        *cq = ibv_cq_ex_to_cq(&ev.cq->cqx);
        *cq_context = ev.cq->cqx.cq_context;
        return 0;
    }
}

/** Counts @p nevents events of @p cq as acknowledged. */
extern "C" void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    if (!cq) return;
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
