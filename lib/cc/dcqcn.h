/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015): the
 * reaction point (RP: a sending QP's rate) and the notification point (NP: when a receiving QP
 * answers ECN marks with a CNP), with NVIDIA ConnectX's parameter names and units (mlx5 rp_* /
 * np_*; MLNX_OFED DCQCN parameters).
 *
 * RP, per QP. Current rate RC, target rate RT, alpha. On a CNP (at most one rate reduction per
 * rate_reduce_monitor_period): RT = RC (when clamping says so), RC = RC x (1 - alpha/2), never
 * below RC x rpg_min_dec_fac % nor below rpg_min_rate; the rate-increase state restarts. Alpha is
 * updated every dce_tcp_rtt: towards 1 (gain g = 1 - dce_tcp_g/1024) when a CNP arrived in that
 * period, towards 0 otherwise. Rate increase events come from a timer (every rpg_time_reset) and a
 * byte counter (every rpg_byte_reset x 64 bytes sent), each counting its own stage: while neither
 * stage has passed rpg_threshold (F) fast recovery (RC = (RT + RC) / 2); once one passed F additive
 * increase (RT += rpg_ai_rate, then the average); once both passed F hyper increase
 * (RT += i x rpg_hai_rate, i = min(stages) - F). Stages only grow until the next CNP, so the
 * three come in that order. Rates are capped at the line rate (or
 * rpg_max_rate).
 *
 * NP, per QP: a CE-marked packet counts np_ecn_marked_roce_packets and, when at least
 * min_time_between_cnps passed since the QP's last CNP, asks for one (CNP wire format: wire/cnp.h).
 *
 * Time is in ns on the caller's clock; rates in Mb/s. Nothing here allocates, locks or throws;
 * one thread (the engine) drives each state.
 */
#pragma once

#include <cstdint>
#include <string_view>

namespace droce::cc {

/**
 * The unit of DcqcnProfile::rpg_byte_reset, bytes. NVIDIA's text calls the field "bytes"; droce
 * reads it, as Google's isekai model of ConnectX DCQCN does (rdma_roce_cc_dcqcn.cc and its test),
 * in 64-byte blocks: ConnectX's default 32767 is then 2 MiB, a byte-counter event every 168 us at
 * 100 Gb/s, the same scale as the 300 us timer. Read as bytes, 32767 fires every 2.6 us at
 * 100 Gb/s, the timer never matters, and on the sim fabric the profile never holds a queue: each
 * flow's rate returns halfway to the line between CNPs and the queue stands at the sum of the
 * windows (README, DCQCN).
 */
inline constexpr std::uint64_t kRpgByteResetUnitBytes = 64;

/** DCQCN parameters, NVIDIA names and units (see the file comment). */
struct DcqcnProfile {
    std::string_view name = "nvidia";
    // RP
    std::uint32_t rpg_time_reset_us = 300; ///< rate-increase timer T
    std::uint32_t rpg_byte_reset = 32767;  ///< byte counter B, kRpgByteResetUnitBytes units
    std::uint32_t rpg_threshold = 1;       ///< F: increase events before leaving fast recovery
    std::uint32_t rpg_ai_rate_mbps = 5;    ///< R_AI
    std::uint32_t rpg_hai_rate_mbps = 50;  ///< R_HAI
    std::uint32_t rpg_min_rate_mbps = 1;   ///< rate floor
    std::uint32_t rpg_max_rate_mbps = 0;   ///< rate cap; 0 = the line rate
    std::uint32_t rpg_min_dec_fac = 50;    ///< a reduction keeps at least this % of RC
    std::uint32_t rate_reduce_monitor_period_us = 4; ///< at most one reduction per period
    std::uint32_t dce_tcp_g = 1019;                  ///< alpha EWMA weight, 1/1024 units
    std::uint32_t dce_tcp_rtt_us = 1;                ///< alpha update period
    std::uint32_t initial_alpha_value = 1023;        ///< alpha at the first CNP, 1/1024 units
    std::uint32_t rate_to_set_on_first_cnp_mbps = 0; ///< RC = RT on the first CNP; 0 = no change
    bool clamp_tgt_rate = false;                     ///< RT = RC on every CNP
    bool clamp_tgt_rate_after_time_inc = true;       ///< RT = RC on a CNP after a timer increase
    // NP
    std::uint32_t min_time_between_cnps_us = 4; ///< CNP spacing per QP
    std::uint8_t cnp_dscp = 48;                 ///< DSCP of the CNPs sent
};

/** ConnectX defaults (mlxconfig / MLNX_OFED; F 1, T 300 us, R_AI 5 Mb/s, CNPs 4 us apart). */
[[nodiscard]] DcqcnProfile nvidia_profile() noexcept;
/** The SIGCOMM'15 paper's values (F 5, T 55 us, B 10 MB, R_AI 40 Mb/s, g 1/256, alpha every
 *  55 us, CNPs 50 us apart, RT = RC on every CNP). */
[[nodiscard]] DcqcnProfile paper_profile() noexcept;
/** The profile named @p name ("nvidia", "paper"), or nullptr. */
[[nodiscard]] const DcqcnProfile* profile_by_name(std::string_view name) noexcept;

/** Which rule changed the rate last (for tests and traces). */
enum class RpEvent : std::uint8_t {
    none,
    decrease,
    fast_recovery,
    additive_increase,
    hyper_increase
};
[[nodiscard]] std::string_view to_string(RpEvent e) noexcept;

/** The reaction point of one QP. */
class DcqcnRp {
  public:
    /** Starts at @p line_rate_mbps (RC = RT = line rate, no CNP seen) with @p profile. */
    void init(const DcqcnProfile& profile, double line_rate_mbps) noexcept;

    /** A CNP for this QP arrived at @p now_ns. @return true when it reduced the rate (false:
     *  within rate_reduce_monitor_period of the last reduction: counted as ignored). */
    bool on_cnp(std::uint64_t now_ns) noexcept;
    /** The QP sent @p bytes at @p now_ns (drives the byte counter). */
    void on_sent(std::uint64_t bytes, std::uint64_t now_ns) noexcept;
    /** Runs the timers (alpha update, rate-increase timer) due at @p now_ns. */
    void on_time(std::uint64_t now_ns) noexcept;
    /** The next time on_time() has something to do, or 0 (at line rate with alpha settled). */
    [[nodiscard]] std::uint64_t next_event_ns() const noexcept;

    [[nodiscard]] double rate_mbps() const noexcept { return rc_; }   ///< RC
    [[nodiscard]] double target_mbps() const noexcept { return rt_; } ///< RT
    [[nodiscard]] double alpha() const noexcept { return alpha_; }    ///< 0..1
    [[nodiscard]] double line_rate_mbps() const noexcept { return line_; }
    [[nodiscard]] bool limited() const noexcept { return rc_ < max_rate_; } ///< below the cap
    [[nodiscard]] RpEvent last_event() const noexcept { return last_; }
    [[nodiscard]] std::uint32_t time_stage() const noexcept { return t_stage_; }
    [[nodiscard]] std::uint32_t byte_stage() const noexcept { return b_stage_; }

  private:
    void increase(bool from_timer) noexcept;

    DcqcnProfile p_;
    double line_ = 0, max_rate_ = 0, rc_ = 0, rt_ = 0, alpha_ = 1.0;
    bool active_ = false;        ///< a CNP was seen: timers run until back at the cap
    bool cnp_in_period_ = false; ///< for the alpha update
    bool time_inc_since_cnp_ = false;
    std::uint64_t last_reduce_ns_ = 0;
    bool reduced_once_ = false;
    std::uint64_t next_alpha_ns_ = 0;
    std::uint64_t next_inc_ns_ = 0;
    std::uint64_t bytes_ = 0;
    std::uint32_t t_stage_ = 0, b_stage_ = 0;
    RpEvent last_ = RpEvent::none;
};

/** The notification point of one QP. */
class DcqcnNp {
  public:
    /** A CE-marked packet arrived at @p now_ns; @return true when a CNP should be sent now. */
    [[nodiscard]] bool on_marked(std::uint64_t now_ns, const DcqcnProfile& p) noexcept {
        if (sent_once_ && now_ns - last_cnp_ns_ < p.min_time_between_cnps_us * 1000ull)
            return false;
        sent_once_ = true;
        last_cnp_ns_ = now_ns;
        return true;
    }

  private:
    std::uint64_t last_cnp_ns_ = 0;
    bool sent_once_ = false;
};

} // namespace droce::cc
