/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * The engine pass: receive bursts, loopback, per-QP timers and transmit work, flush; the idle sleep
 * on the doorbell and the timer deadlines that bound it. Engine thread only.
 */
#include "device.h"

#include <algorithm>

#include <poll.h>
#include <unistd.h>

namespace droce {

using rc::QpState;

std::uint32_t Device::poll() noexcept {
    std::uint32_t work = 0;
    bool wait_release = false;
    // Control-rate work: link state and neighbour resolution need not run on every pass.
    if ((polls_++ & 255u) == 0) {
        check_links();
        resolve_paths();
    }
    std::array<PktBuf*, kBurst> bufs{};
    for (unsigned p = 0; p < ports_.size(); ++p) {
        PortDriver* drv = ports_[p].driver;
        const std::uint16_t n = drv->rx_burst(bufs.data(), kBurst);
        for (std::uint16_t i = 0; i < n; ++i)
            receive(*bufs[i], false);
        if (n) drv->free_bulk(bufs.data(), n);
        work += n;
    }
    work += drain_loopback(kBurst);
    for (rc::Qp* qp : live_qps_) {
        if (qp->state == QpState::reset) continue;
        if (qp->state == QpState::err) {
            // WQEs posted after the QP failed are flushed here, once each.
            if (qp->sq.ready() || qp->rq.ready()) {
                rc::qp_enter_error(*qp, ctx_);
                if (qp->sq.ready()) wait_release = true; // held payload: completes once released
                ++work;
            }
            continue;
        }
        rc::completer_timers(*qp, ctx_);
        if (qp->state == QpState::err) continue;
        // Acknowledged WQEs whose payload a driver held: complete them once released.
        if (qp->sq.consumer_index() != qp->comp.acked_wqe && rc::completer_reap(*qp)) wait_release = true;
        rc::responder_run(*qp, ctx_, kBurst);
        work += rc::requester_run(*qp, ctx_, kBurst);
    }
    // PMDs free sent mbufs lazily (memif zero-copy only in its next tx burst). A completion waits
    // for a release: when this pass had nothing else to do, ask the ports (an empty memif burst may
    // cost an eventfd write, so not while traffic flows: the next real burst frees them anyway), and
    // count it as work so that the engine keeps polling instead of sleeping on the doorbell.
    const bool reclaim = wait_release && work == 0;
    for (unsigned p = 0; p < ports_.size(); ++p) {
        if (reclaim && tx_[p].count == 0) ports_[p].driver->tx_reclaim();
        flush_tx(p);
    }
    return work + (wait_release ? 1u : 0u);
}

void Device::sleep_until_doorbell(std::uint64_t max_ns) noexcept {
    asleep_.store(true, std::memory_order_seq_cst);
    bool work = loopback_.size() > 0; // looped-back frames or WQEs not yet started by the requester
    for (const rc::Qp* qp : live_qps_)
        if (qp->state != QpState::reset && qp->sq.producer_index() != qp->req.next_wqe) work = true;
    if (!work && doorbell_fd_ >= 0) {
        std::uint64_t wait = max_ns;
        const std::uint64_t deadline = next_deadline_ns();
        const std::uint64_t now = clock_->now_ns();
        if (deadline) wait = deadline > now ? std::min(wait, deadline - now) : 0;
        if (wait > 0) {
            pollfd pfd{doorbell_fd_, POLLIN, 0};
            timespec ts{static_cast<time_t>(wait / 1'000'000'000u), static_cast<long>(wait % 1'000'000'000u)};
            ppoll(&pfd, 1, &ts, nullptr);
            std::uint64_t drained;
            [[maybe_unused]] ssize_t r = read(doorbell_fd_, &drained, sizeof drained);
        }
    }
    asleep_.store(false, std::memory_order_seq_cst);
}

std::uint64_t Device::next_deadline_ns() const noexcept {
    std::uint64_t best = 0;
    for (const rc::Qp* qp : live_qps_) {
        const std::uint64_t d = rc::completer_next_deadline(*qp);
        if (d && (best == 0 || d < best)) best = d;
    }
    return best;
}

} // namespace droce
