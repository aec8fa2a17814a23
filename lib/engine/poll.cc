/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The engine pass: receive bursts, loopback, per-QP timers and transmit work, flush; the idle sleep
 * on the doorbell and the timer deadlines that bound it. Engine thread only.
 */
#include "device.h"

#include <algorithm>
#include <array>

#include <poll.h>
#include <sched.h>
#include <unistd.h>

namespace droce {

using rc::QpState;

bool Device::enter_pass() noexcept {
    in_pass_.store(true, std::memory_order_seq_cst);
    if (control_requests_.load(std::memory_order_seq_cst) == 0) return true;
    in_pass_.store(false, std::memory_order_seq_cst);
    if (!engine_turned_away_.load(std::memory_order_relaxed))
        engine_turned_away_.store(true, std::memory_order_relaxed);
    return false;
}

void Device::leave_pass() noexcept {
    in_pass_.store(false, std::memory_order_release);
    // Single writer (the engine): a plain increment, published with release for begin_control().
    passes_.store(passes_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    if (engine_turned_away_.load(std::memory_order_relaxed))
        engine_turned_away_.store(false, std::memory_order_relaxed);
}

void Device::begin_control() noexcept {
    // Fairness: control calls back to back would otherwise keep the engine out for as long as they
    // last (1,000 QP create/modify/destroy calls: milliseconds). An engine that a section turned
    // away gets one pass before the next section starts; bounded, in case no thread polls any more.
    if (engine_turned_away_.load(std::memory_order_relaxed)) {
        const std::uint64_t before = passes_.load(std::memory_order_acquire);
        for (unsigned spins = 0;
             spins < 100'000 && passes_.load(std::memory_order_acquire) == before; ++spins)
            __builtin_ia32_pause();
    }
    control_requests_.fetch_add(1, std::memory_order_seq_cst);
    // The engine may be preempted inside a pass on a host with fewer cores than threads: yield
    // after a short spin rather than hold the core it needs to finish.
    for (unsigned spins = 0; in_pass_.load(std::memory_order_seq_cst); ++spins) {
        if (spins < 1000)
            __builtin_ia32_pause();
        else
            sched_yield();
    }
    // Wake a sleeping engine thread so that it sees new work (a QP in RTS) without waiting for its
    // nap.
    if (asleep_.load(std::memory_order_seq_cst)) ring_doorbell();
}

void Device::end_control() noexcept {
    // release (in a seq_cst RMW): every table change made in the section happens before the
    // engine's next enter_pass() reads 0 here.
    control_requests_.fetch_sub(1, std::memory_order_seq_cst);
}

std::uint32_t Device::take_doorbells() noexcept {
    std::uint32_t rang = 0;
    for (std::uint32_t sw = 0; sw < doorbell_summary_.size(); ++sw) {
        if (doorbell_summary_[sw].load(std::memory_order_relaxed) == 0) continue;
        std::uint64_t words = doorbell_summary_[sw].exchange(0, std::memory_order_acquire);
        while (words) {
            const std::uint32_t w = sw * 64 + static_cast<std::uint32_t>(__builtin_ctzll(words));
            words &= words - 1;
            std::uint64_t bits = doorbell_bits_[w].exchange(0, std::memory_order_acquire);
            while (bits) {
                const std::uint32_t slot =
                    w * 64 + static_cast<std::uint32_t>(__builtin_ctzll(bits));
                bits &= bits - 1;
                if (qps_[slot]) activate(slot); // a destroyed QP's late bit finds an empty slot
                ++rang;
            }
        }
    }
    return rang;
}

bool Device::try_own_poll() noexcept {
    // Test first so that a thread finding the flag taken does not pull its cache line away from
    // the owner with a failed RMW on every call of a polling loop.
    if (poll_owner_.load(std::memory_order_relaxed)) {
        poll_contended_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    // seq_cst (acquire): the previous owner's writes to the engine state (rings' engine sides,
    // active list, timers) happen before this owner's pass; it also orders the sleeper's asleep_
    // increment before its attempt (sleep_until_doorbell).
    if (poll_owner_.exchange(true, std::memory_order_seq_cst)) {
        poll_contended_.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    return true;
}

void Device::release_poll(bool work_left) noexcept {
    // Release: this owner's writes happen before the next owner's acquire. Nothing left behind, no
    // one to wake: that is all (a seq_cst store drains the store buffer, ACK frames' header stores
    // included: 7 % of a busy inline-progress server's core).
    if (!work_left) {
        poll_owner_.store(false, std::memory_order_release);
        return;
    }
    // Counted while still the owner; seq_cst, as the load of stepping_aside_ below (Dekker with
    // step_aside_nap(): either the stepping engine sees the count, or it is seen stepping here).
    releases_with_work_left_.fetch_add(1, std::memory_order_seq_cst);
    // seq_cst: the store precedes the load of asleep_ below, so that a thread that failed to take
    // the flag after raising asleep_ is seen here (Dekker, as for the doorbell).
    poll_owner_.store(false, std::memory_order_seq_cst);
    // A driver that leaves work behind (an application thread that ran its bounded passes and
    // returns) wakes a napping engine thread, which otherwise would find it only when its nap ends,
    // and one that stepped aside for it (the application may not come back for it soon).
    if (asleep_.load(std::memory_order_seq_cst) || stepping_aside_.load(std::memory_order_seq_cst))
        ring_doorbell();
}

bool Device::work_left() const noexcept {
    if (loopback_.size() > 0) return true;
    const std::uint64_t nap_until = nap_deadline_ns_.load(std::memory_order_relaxed);
    // Active QPs that only wait for their pacers: a napping engine wakes for the release by itself
    // (its nap ends there), unless the release is earlier than the time it naps until. Rung every
    // time, an application polling its CQ woke the napping engine thread on every call.
    if (!active_.empty()) {
        const std::uint64_t release = pacer_release_ns();
        if (release == 0 || release < nap_until) return true;
    }
    // A doorbell rung after this owner's pass took the doorbells, by a poster that found the flag
    // taken and left its WQEs to the owner.
    for (const auto& sw : doorbell_summary_)
        if (sw.load(std::memory_order_relaxed) != 0) return true;
    // A timer armed by this pass, earlier than the deadline a napping engine chose.
    const std::uint64_t d = timers_.next_deadline_ns();
    return d != 0 && d < nap_until;
}

std::uint32_t Device::poll() noexcept {
    if (!try_own_poll()) return 0; // another thread runs the engine now
    const std::uint32_t work = pass();
    release_poll(work_left());
    return work;
}

std::uint32_t Device::progress(unsigned max_passes) noexcept {
    if (!try_own_poll()) return 0;
    std::uint32_t work = 0;
    for (unsigned i = 0; i < max_passes; ++i) {
        const std::uint32_t w = pass();
        work += w;
        if (w == 0) break;
    }
    release_poll(work_left());
    return work;
}

void Device::prefetch_qps_of(std::span<PktBuf* const> bufs) noexcept {
    std::uint32_t last = wire::kNoDestQp;
    for (PktBuf* buf : bufs) {
        const std::uint32_t qpn = wire::peek_dest_qp(buf->frame());
        if (qpn == last) continue; // a burst holds runs of frames for one QP
        last = qpn;
        if (const rc::Qp* qp = qp_by_num(qpn)) rc::qp_prefetch(*qp);
    }
}

std::uint32_t Device::pass() noexcept {
    if (!enter_pass()) return 0; // a control section is open: stay between passes
    // One writer at a time (the owner): a plain increment, no locked RMW per pass.
    passes_run_.store(passes_run_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    ctx_.prev_pass_start_ns = last_pass_start_ns_;
    last_pass_start_ns_ = clock_->now_ns();
    ctx_.pass_start_ns = last_pass_start_ns_;
    open_tx_stage();
    std::uint32_t work = 0;
    bool wait_release = false;
    // Control-rate work: link state and neighbour resolution need not run on every pass.
    if ((polls_++ & 255u) == 0) {
        check_links();
        if (paths_pending_) resolve_paths();
    }
    // 1. Events: frames (they activate the QPs they are for), looped-back frames, doorbells,
    // timers.
    std::array<PktBuf*, kBurst> bufs{};
    for (unsigned p = 0; p < ports_.size(); ++p) {
        PortDriver* drv = ports_[p].driver;
        const std::uint16_t n = drv->rx_burst(bufs.data(), kBurst);
        if (ctx_.prefetch_qp_state) prefetch_qps_of(std::span(bufs.data(), n));
        // Runs of short frames are taken apart together before any is acted on; a larger frame
        // alone, so that its payload, read by the ICRC, is still in L1 when the transport places
        // it (whole bursts of 4 KiB frames taken apart first cost 64 KiB WRITEs 2 - 3 %).
        for (std::uint16_t i = 0; i < n;) {
            std::uint16_t end = i;
            do {
                rx_verdict_[end] = wire::parse_frame(bufs[end]->frame(), rx_parsed_[end]);
            } while (bufs[end++]->frame().size() <= kRxShortFrame && end < n &&
                     bufs[end]->frame().size() <= kRxShortFrame);
            for (; i < end; ++i)
                receive_parsed(*bufs[i], rx_parsed_[i], rx_verdict_[i], false);
        }
        if (n) drv->free_bulk(bufs.data(), n);
        work += n;
    }
    work += drain_loopback(kBurst);
    take_doorbells();
    if (!timers_.empty()) {
        const std::uint64_t now = clock_->now_ns();
        for (std::uint32_t slot; (slot = timers_.pop_due(now)) != TimerHeap::kNone;) {
            rc::Qp& qp = *qps_[slot]; // destroy_qp cancels a QP's timer: the slot is live
            qp.transport->timer(qp, ctx_);
            activate(slot);
        }
    }
    // 2. The active QPs: flush, reap, responder output, requester; then leave the list when done.
    // Who goes first turns every pass, as a NIC's send arbiter does: when a port's stage fills in a
    // pass, the QPs late in the list would otherwise find it full every time and starve (seen: of
    // two QPs sharing a shaped port, the second sent nothing while the first had data).
    if (active_.size() > 1) std::rotate(active_.begin(), active_.begin() + 1, active_.end());
    // Whether every QP that stays active only waits for its pacer, and for how long (the earliest
    // release): the engine may then nap (pacer_release_ns()).
    std::uint64_t pacer_release = UINT64_MAX;
    const std::uint64_t nap_worthy = last_pass_start_ns_ + kPacerNapMinNs;
    for (std::uint32_t i = 0; i < active_.size();) {
        const std::uint32_t slot = active_[i];
        rc::Qp& qp = *qps_[slot];
        // The QP visited next is active_[i + 1] while this one stays; one that leaves hands its
        // place to the last (below).
        if (ctx_.prefetch_qp_state && i + 1 < active_.size())
            rc::qp_prefetch(*qps_[active_[i + 1]]);
        work += qp.transport->run(qp, ctx_, kBurst, &wait_release);
        sync_timer(qp);
        // A QP that failed by itself (in receive, a timer or its run) is active this pass: report
        // it once (IBV_EVENT_QP_FATAL).
        if (qp.state == QpState::err && !err_seen_[slot]) [[unlikely]] {
            err_seen_[slot] = 1;
            if (on_qp_fatal) on_qp_fatal(qp);
        }
        if (qp.transport->has_work(qp)) {
            const rc::Pacer& pc = qp.pacer;
            if (pacer_release != 0) {
                if (pc.held && pc.rate_mbps > 0 && pc.next_send_ns >= nap_worthy)
                    pacer_release = std::min(pacer_release, pc.next_send_ns);
                else
                    pacer_release = 0; // this QP has other work: no nap
            }
            ++i;
            continue;
        }
        active_flag_[slot] = 0;
        active_[i] = active_.back();
        active_.pop_back();
        if (ctx_.prefetch_qp_state && i < active_.size()) rc::qp_prefetch(*qps_[active_[i]]);
    }
    // A timer due sooner (DCQCN's alpha update comes every microsecond with ConnectX's profile)
    // keeps the engine spinning: a nap per timer would hand the core away at every one of them.
    if (const std::uint64_t t = timers_.next_deadline_ns(); t != 0 && t < nap_worthy)
        pacer_release = 0;
    pacer_release_ns_.store(
        active_.empty() || loopback_.size() > 0 || pacer_release == UINT64_MAX ? 0 : pacer_release,
        std::memory_order_relaxed);
    // PMDs free sent mbufs lazily (memif zero-copy only in its next tx burst). A completion waits
    // for a release: when this pass had nothing else to do, ask the ports (an empty memif burst may
    // cost an eventfd write, so not while traffic flows: the next real burst frees them anyway),
    // and count it as work so that the engine keeps polling instead of sleeping on the doorbell.
    build_staged();
    const bool reclaim = wait_release && work == 0;
    for (unsigned p = 0; p < ports_.size(); ++p) {
        if (reclaim && tx_[p].count == 0) ports_[p].driver->tx_reclaim();
        flush_tx(p);
    }
    if (step_aside_watched_.load(std::memory_order_relaxed)) publish_step_aside_state();
    leave_pass();
    return work + (wait_release ? 1u : 0u);
}

void Device::publish_step_aside_state() noexcept {
    if (silent_writes_.load(std::memory_order_relaxed) != ctx_.silent_writes)
        silent_writes_.store(ctx_.silent_writes, std::memory_order_relaxed);
    // What a stepping-aside engine thread must wake for (step_aside_nap()): the next timer, or the
    // next pacer release of a QP that only waits for it.
    std::uint64_t due = timers_.next_deadline_ns();
    if (const std::uint64_t r = pacer_release_ns_.load(std::memory_order_relaxed);
        r != 0 && (due == 0 || r < due))
        due = r;
    if (next_due_ns_.load(std::memory_order_relaxed) != due)
        next_due_ns_.store(due, std::memory_order_relaxed);
}

Device::NapLook Device::look_before_nap(bool long_when_no_receiver) noexcept {
    NapLook l;
    asleep_.fetch_add(1, std::memory_order_seq_cst);
    // The look at the engine state needs the poll flag. Another thread driving the engine now
    // (an application in ibv_poll_cq) wakes us when it leaves work behind (release_poll): nap on
    // the doorbell only, briefly, without touching the ports it is polling.
    l.owner = try_own_poll();
    if (!l.owner) return l;
    // The QP list is read under the handshake (a control section may be changing it); the nap is
    // taken outside it, so control sections never wait for a sleeping engine.
    if (!enter_pass()) {
        release_poll(false);
        l.owner = false;
        l.work = true; // a control section is waiting: not an idle nap
        return l;
    }
    // Looped-back frames, active QPs (unless they only wait for their pacers), or a doorbell rung
    // since the last pass: no sleep.
    const std::uint64_t pacer_release = pacer_release_ns();
    l.work = loopback_.size() > 0 || (!active_.empty() && pacer_release == 0);
    for (const auto& sw : doorbell_summary_)
        if (sw.load(std::memory_order_seq_cst) != 0) l.work = true;
    l.deadline_ns = l.work ? 0 : timers_.next_deadline_ns();
    if (!l.work && pacer_release != 0 && (l.deadline_ns == 0 || pacer_release < l.deadline_ns))
        l.deadline_ns = pacer_release;
    // No QP can receive, and no MRC endpoint probe went out or came in lately (a probe is
    // answered, and a reply timed, by the engine with no QP on either side).
    l.may_nap_long = long_when_no_receiver && receiving_qps() == 0 &&
                     clock_->now_ns() >= ep_active_until_ns_.load(std::memory_order_relaxed);
    leave_pass();
    // Ports with a receive interrupt: armed before the last look, so a frame arriving after it
    // makes its descriptor readable; one already waiting cancels the nap. Only the owner arms
    // (the driver's arm and its rx_burst belong to one thread at a time).
    for (; !l.work && l.armed < irq_ports_.size(); ++l.armed)
        if (!ports_[irq_ports_[l.armed]].driver->rx_interrupt_arm()) l.work = true;
    nap_deadline_ns_.store(l.deadline_ns ? l.deadline_ns : UINT64_MAX, std::memory_order_relaxed);
    release_poll(false);
    return l;
}

void Device::end_nap(const NapLook& l) noexcept {
    if (l.armed) {
        // Disarming touches the driver: wait for the flag (at most one pass of another driver).
        nap_deadline_ns_.store(0, std::memory_order_relaxed);
        for (unsigned spins = 0; !try_own_poll(); ++spins) {
            if (spins < 1000)
                __builtin_ia32_pause();
            else
                sched_yield();
        }
        for (unsigned i = 0; i < l.armed; ++i)
            ports_[irq_ports_[i]].driver->rx_interrupt_disarm();
        release_poll(false);
    } else if (l.owner) {
        nap_deadline_ns_.store(0, std::memory_order_relaxed);
    }
    asleep_.fetch_sub(1, std::memory_order_seq_cst);
}

bool Device::sleep_until_doorbell(std::uint64_t max_ns, int extra_fd,
                                  bool long_when_no_receiver) noexcept {
    Device* const self = this;
    return sleep_until_any_doorbell(std::span<Device* const>(&self, 1), max_ns, extra_fd,
                                    long_when_no_receiver);
}

namespace {
thread_local bool t_naps_end_on_time = false; ///< Device::naps_end_on_time()
} // namespace

void Device::naps_end_on_time() noexcept {
    t_naps_end_on_time = true;
}

bool Device::sleep_until_any_doorbell(std::span<Device* const> devs, std::uint64_t max_ns,
                                      int extra_fd, bool long_when_no_receiver) noexcept {
    if (devs.size() > kMaxNapDevices) devs = devs.first(kMaxNapDevices);
    std::array<NapLook, kMaxNapDevices> looks{};
    bool work = false;
    bool all_may_nap_long = long_when_no_receiver;
    std::uint64_t deadline = 0; // the earliest timer of any device (0: none)
    for (std::size_t d = 0; d < devs.size(); ++d) {
        // Each device raises its asleep_ just before its own look and keeps it until the nap
        // ends: a poster of any of them after its look rings its doorbell, in the poll set below.
        NapLook& l = looks[d];
        l = devs[d]->look_before_nap(long_when_no_receiver);
        work = work || l.work;
        if (!l.owner) max_ns = std::min<std::uint64_t>(max_ns, kBusyNapNs);
        all_may_nap_long = all_may_nap_long && l.owner && l.may_nap_long;
        if (l.deadline_ns && (!deadline || l.deadline_ns < deadline)) deadline = l.deadline_ns;
    }
    // The long nap only when no device served has a QP that can receive.
    if (all_may_nap_long) max_ns = std::max(max_ns, kNoReceiverNapNs);
    bool woken = false;
    // Also with no doorbell at all (its eventfd failed: EMFILE): a nap of the timeout alone, where
    // it used to skip the nap and have its caller poll without rest.
    if (!work && !devs.empty()) {
        std::uint64_t wait = max_ns;
        const std::uint64_t now = devs[0]->clock_->now_ns();
        if (deadline) wait = deadline > now ? std::min(wait, deadline - now) : 0;
        // The nap ends by itself at now + wait at the latest: a timer armed later than that needs
        // no doorbell (work_left()), the napping engine finds it when it wakes. A held ACK's timer
        // (rc::kAckHoldNs) armed by every ping an application thread receives rang the doorbell on
        // every ibv_poll_cq that returned it, a write(2) on the application's path.
        for (std::size_t d = 0; d < devs.size() && t_naps_end_on_time; ++d) {
            if (!looks[d].owner) continue;
            std::atomic<std::uint64_t>& nd = devs[d]->nap_deadline_ns_;
            if (now + wait < nd.load(std::memory_order_relaxed))
                nd.store(now + wait, std::memory_order_relaxed);
        }
        if (wait > 0) {
            // A copy on the stack: several threads may nap at once (an engine thread and
            // application threads waiting in ibv_get_cq_event); the receive interrupts only for
            // the owner that armed them.
            std::array<pollfd, 1 + kMaxNapDevices * kMaxWakeFds> fds{};
            std::size_t n = 0;
            if (extra_fd >= 0) fds[n++] = {extra_fd, POLLIN, 0};
            for (std::size_t d = 0; d < devs.size(); ++d) {
                if (devs[d]->doorbell_fd_ >= 0) fds[n++] = {devs[d]->doorbell_fd_, POLLIN, 0};
                for (unsigned i = 0; i < looks[d].armed; ++i)
                    fds[n++] = devs[d]->wake_fds_[i + 1];
            }
            timespec ts{static_cast<time_t>(wait / 1'000'000'000u),
                        static_cast<long>(wait % 1'000'000'000u)};
            woken = ppoll(fds.data(), n, &ts, nullptr) > 0;
            for (Device* dev : devs) {
                if (dev->doorbell_fd_ < 0) continue;
                std::uint64_t drained;
                [[maybe_unused]] ssize_t r = read(dev->doorbell_fd_, &drained, sizeof drained);
            }
        }
    }
    for (std::size_t d = 0; d < devs.size(); ++d)
        devs[d]->end_nap(looks[d]);
    return woken || work;
}

void Device::app_drive_ends() noexcept {
    app_drives_at_end_.store(app_drives_.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
    // seq_cst (Dekker with step_aside_nap()): either the engine sees the end and does not nap, or
    // the end sees the engine napping and wakes it.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (stepping_aside_.load(std::memory_order_relaxed)) ring_doorbell();
}

bool Device::step_aside_nap(std::uint64_t ns, std::uint64_t left_work_seen) noexcept {
    stepping_aside_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // No later than the next timer or pacer release the last pass left (a deadline armed by a
    // pass during the nap is run by the application's passes while it polls; if it stopped, the
    // deadline waits for the nap's end).
    if (const std::uint64_t due = next_due_ns_.load(std::memory_order_relaxed); due != 0) {
        const std::uint64_t now = clock_->now_ns();
        ns = due > now ? std::min(ns, due - now) : 0;
    }
    // A nap shorter than a wake-up's cost is not worth taking (a DCQCN timer every microsecond).
    const bool drove_since_end =
        static_cast<std::int64_t>(app_drives_.load(std::memory_order_relaxed) -
                                  app_drives_at_end_.load(std::memory_order_relaxed)) >=
        static_cast<std::int64_t>(kStepAsideMinDrivesSinceEnd);
    bool napped = false;
    if (drove_since_end && ns >= kPacerNapMinNs &&
        releases_with_work_left_.load(std::memory_order_relaxed) == left_work_seen) {
        pollfd fd{doorbell_fd_, POLLIN, 0};
        timespec ts{static_cast<time_t>(ns / 1'000'000'000u),
                    static_cast<long>(ns % 1'000'000'000u)};
        // With no doorbell (its eventfd failed) a nap of the timeout alone: ppoll ignores fd -1.
        napped = true;
        if (ppoll(&fd, 1, &ts, nullptr) > 0 && doorbell_fd_ >= 0) {
            std::uint64_t drained;
            [[maybe_unused]] ssize_t r = read(doorbell_fd_, &drained, sizeof drained);
        }
    }
    stepping_aside_.store(false, std::memory_order_relaxed);
    return napped;
}

std::uint64_t Device::next_deadline_ns() const noexcept {
    return timers_.next_deadline_ns();
}

} // namespace droce
