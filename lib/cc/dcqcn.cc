/* SPDX-License-Identifier: BSD-3-Clause */
#include "dcqcn.h"

#include <algorithm>
#include <cmath>

namespace droce::cc {

DcqcnProfile nvidia_profile() noexcept {
    return DcqcnProfile{};
}

DcqcnProfile paper_profile() noexcept {
    DcqcnProfile p;
    p.name = "paper";
    p.rpg_time_reset_us = 55;            // T = 55 us
    p.rpg_byte_reset = 156'250;          // B = 10 MB (64-byte units): the timer drives increases
    p.rpg_threshold = 5;                 // F = 5
    p.rpg_ai_rate_mbps = 40;             // R_AI at 40 Gb/s
    p.rpg_hai_rate_mbps = 200;           // R_HAI (the authors' simulation sample)
    p.rpg_min_dec_fac = 50;              // alpha/2 <= 1/2: never binding
    p.rate_reduce_monitor_period_us = 0; // every CNP reduces (CNPs are 50 us apart anyway)
    p.dce_tcp_g = 1020;                  // g = 1/256
    p.dce_tcp_rtt_us = 55;               // alpha decays every K = 55 us without a CNP
    p.initial_alpha_value = 1024;        // alpha starts at 1
    p.clamp_tgt_rate = true;             // RT = RC on every CNP
    p.min_time_between_cnps_us = 50;     // N = 50 us
    return p;
}

const DcqcnProfile* profile_by_name(std::string_view name) noexcept {
    static const DcqcnProfile kNvidia = nvidia_profile();
    static const DcqcnProfile kPaper = paper_profile();
    if (name == kNvidia.name) return &kNvidia;
    if (name == kPaper.name) return &kPaper;
    return nullptr;
}

std::string_view to_string(RpEvent e) noexcept {
    switch (e) {
    case RpEvent::none:
        return "none";
    case RpEvent::decrease:
        return "decrease";
    case RpEvent::fast_recovery:
        return "fast_recovery";
    case RpEvent::additive_increase:
        return "additive_increase";
    case RpEvent::hyper_increase:
        return "hyper_increase";
    }
    return "?";
}

void DcqcnRp::init(const DcqcnProfile& profile, double line_rate_mbps) noexcept {
    *this = DcqcnRp{};
    p_ = profile;
    line_ = line_rate_mbps;
    max_rate_ = p_.rpg_max_rate_mbps != 0 ? std::min<double>(line_, p_.rpg_max_rate_mbps) : line_;
    rc_ = rt_ = max_rate_;
}

bool DcqcnRp::on_cnp(std::uint64_t now_ns) noexcept {
    cnp_in_period_ = true;
    if (!active_) {
        active_ = true;
        alpha_ = std::min(1.0, p_.initial_alpha_value / 1024.0);
        next_alpha_ns_ = now_ns + std::max<std::uint64_t>(1, p_.dce_tcp_rtt_us) * 1000;
        if (p_.rate_to_set_on_first_cnp_mbps != 0)
            rc_ = rt_ = std::min<double>(max_rate_, p_.rate_to_set_on_first_cnp_mbps);
    }
    if (reduced_once_ && now_ns - last_reduce_ns_ < p_.rate_reduce_monitor_period_us * 1000ull)
        return false;
    if (p_.clamp_tgt_rate || (p_.clamp_tgt_rate_after_time_inc && time_inc_since_cnp_) ||
        !reduced_once_)
        rt_ = rc_;
    const double floor_dec = rc_ * p_.rpg_min_dec_fac / 100.0;
    rc_ = std::max({rc_ * (1.0 - alpha_ / 2.0), floor_dec, double(p_.rpg_min_rate_mbps)});
    rc_ = std::min(rc_, max_rate_);
    t_stage_ = b_stage_ = 0;
    bytes_ = 0;
    next_inc_ns_ = now_ns + std::max<std::uint64_t>(1, p_.rpg_time_reset_us) * 1000;
    time_inc_since_cnp_ = false;
    last_reduce_ns_ = now_ns;
    reduced_once_ = true;
    last_ = RpEvent::decrease;
    return true;
}

void DcqcnRp::increase(bool from_timer) noexcept {
    const std::uint32_t f = p_.rpg_threshold;
    (void)from_timer;
    if (t_stage_ <= f && b_stage_ <= f) {
        last_ = RpEvent::fast_recovery; // until a counter passes F, each event halves the gap
    } else if (t_stage_ > f && b_stage_ > f) {
        const std::uint32_t i = std::min(t_stage_, b_stage_) - f;
        rt_ = std::min(max_rate_, rt_ + double(i) * p_.rpg_hai_rate_mbps);
        last_ = RpEvent::hyper_increase;
    } else {
        rt_ = std::min(max_rate_, rt_ + double(p_.rpg_ai_rate_mbps));
        last_ = RpEvent::additive_increase;
    }
    rc_ = std::min(max_rate_, (rt_ + rc_) / 2.0);
    // Within a hair of the cap counts as there (the average only approaches it).
    if (max_rate_ - rc_ < max_rate_ * 1e-6) rc_ = max_rate_;
}

void DcqcnRp::on_sent(std::uint64_t bytes, std::uint64_t /*now_ns*/) noexcept {
    if (!active_ || p_.rpg_byte_reset == 0) return;
    const std::uint64_t b = std::uint64_t{p_.rpg_byte_reset} * kRpgByteResetUnitBytes;
    bytes_ += bytes;
    while (bytes_ >= b && rc_ < max_rate_) {
        bytes_ -= b;
        ++b_stage_;
        increase(false);
    }
    if (rc_ >= max_rate_) bytes_ %= b;
}

void DcqcnRp::on_time(std::uint64_t now_ns) noexcept {
    if (!active_) return;
    const std::uint64_t alpha_period = std::max<std::uint64_t>(1, p_.dce_tcp_rtt_us) * 1000;
    const double g = p_.dce_tcp_g / 1024.0;
    if (now_ns >= next_alpha_ns_) {
        // The period that just ended: towards 1 if a CNP came in it, towards 0 otherwise; any
        // further whole periods without a CNP decay it at once.
        alpha_ = cnp_in_period_ ? g * alpha_ + (1.0 - g) : g * alpha_;
        cnp_in_period_ = false;
        const std::uint64_t more = (now_ns - next_alpha_ns_) / alpha_period;
        if (more > 0) alpha_ *= std::pow(g, double(more));
        next_alpha_ns_ += (more + 1) * alpha_period;
    }
    const std::uint64_t inc_period = std::max<std::uint64_t>(1, p_.rpg_time_reset_us) * 1000;
    while (now_ns >= next_inc_ns_ && rc_ < max_rate_) {
        ++t_stage_;
        time_inc_since_cnp_ = true;
        increase(true);
        next_inc_ns_ += inc_period;
    }
    if (rc_ >= max_rate_) {
        next_inc_ns_ = now_ns + inc_period;
        // Back at the cap with alpha gone: nothing to do until the next CNP.
        if (alpha_ < 1.0 / 1024) active_ = false;
    }
}

std::uint64_t DcqcnRp::next_event_ns() const noexcept {
    if (!active_) return 0;
    if (rc_ >= max_rate_) return next_alpha_ns_;
    return std::min(next_alpha_ns_, next_inc_ns_);
}

} // namespace droce::cc
