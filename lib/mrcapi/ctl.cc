/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib_mrc: the OCP MRC 1.0 controller API (include/mrc_ctl.h) on droce.
 *
 * Where the controller's objects live. A NIC keeps profiles in firmware that every process shares;
 * droce has none: each process that opens the device runs its own engine on its own ports. So the
 * controller state (DeviceEntry::ctl: EV format, EV and CC profiles, EV event CQs) is the calling
 * process's, and acts on the QPs of that process: a controller thread in the application, or
 * droce-mrcctl through the process's control socket (mrcctl_server.cc).
 *
 * How the OCP objects map onto droce's MRC transport (lib/mrc):
 *  - Ports are planes. mrc_ctl_modify_port disables a port with Device::set_port_admin: its paths
 *    are taken out at once, the peer is told (port status), ibv_query_port reports it DOWN.
 *  - An EV is a path. EV profile 0 is droce's own path set (AUTO: num_evs UDP source ports from
 *    ev_base, spread over the ports); a QP that names no profile uses it. Other profiles give the
 *    QP an explicit path per EV entry (mrc::set_evs): the EV is expanded by the profile's fields
 *    (OCP expansion rules) and placed by the format: UDP, the low 16 bits in the UDP source port;
 *    STEV, the low 16 bits there and the next 16 in the IPv6 flow label (IPv4 paths carry the UDP
 *    part only). SRv6 has no encapsulation in droce: EOPNOTSUPP.
 *  - EV states: DENIED is the controller's (mrc::set_ev_denied on every QP of the profile);
 *    GOOD <-> ASSUMED_BAD is the transport's (loss detection, probes), reported as EV events.
 *  - CC profiles name droce's DCQCN ("dcqcn": the NVIDIA profile, "dcqcn-paper": the SIGCOMM'15
 *    one) or no CC (algorithm NULL). NSCC ("uet-1.0-nscc") is not implemented: EOPNOTSUPP.
 *  - EV probes are connectionless MRC_PROBE packets to QP1 of the destination (Device::
 *    send_ep_probe), answered by its engine; the RTT is the device clock's.
 *
 * Thread rules: every call takes the device's control section (Control) for the state it reads or
 * changes; the engine thread reads only what the EV hook needs (mrc_qp::ctl_*, Controller::ev_cqs),
 * which changes only inside a section.
 */
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>

#include "cc/dcqcn.h"
#include "internal.h"

using namespace droce;
using namespace droce::mrcapi;

namespace droce::mrcapi {
namespace {

// ------------------------------------------------------------------ limits droce reports

constexpr std::uint32_t kMaxFmtProfiles = 8;
constexpr std::uint32_t kMaxEvProfiles = 16;
constexpr std::uint32_t kMaxCcProfiles = 8;
constexpr std::uint32_t kMaxEvTotal = kMaxEvProfiles * mrc::kMaxEvs;
constexpr std::uint32_t kMaxEvWidth = 32;  ///< STEV: 16 bits of UDP port + 16 of flow label
constexpr std::uint32_t kMaxUdpWidth = 16; ///< UDP format: the source port only
constexpr std::uint32_t kMaxFields = 8;    ///< format and EV fields per profile
constexpr int kMaxEpRequests = 256;        ///< requests in one mrc_ctl_ep_batch_send_wait
constexpr int kEventStates = MRC_CTL_EV_GOOD | MRC_CTL_EV_ASSUMED_BAD;
/** Every attribute mask bit the API defines, per kind of profile. */
constexpr int kEvProfileMask = MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_CUR_STATE |
                               MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_FMT_ID |
                               MRC_CTL_EV_PROFILE_COUNT | MRC_CTL_EV_PROFILE_MIN_ACTIVE |
                               MRC_CTL_EV_PROFILE_EVENT_MASK | MRC_CTL_EV_PROFILE_EV_OP |
                               MRC_CTL_EV_PROFILE_EV_FIELDS_OP | MRC_CTL_EV_PROFILE_VENDOR_CFG;
constexpr int kFmtProfileMask = MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_CUR_STATE |
                                MRC_CTL_EV_FMT_PROFILE_MODE | MRC_CTL_EV_FMT_PROFILE_OP |
                                MRC_CTL_EV_FMT_VENDOR_CFG;
constexpr int kCcProfileMask = MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CUR_STATE |
                               MRC_CTL_CC_PROFILE_ALGORITHM | MRC_CTL_CC_PROFILE_CONFIG |
                               MRC_CTL_CC_PROFILE_VENDOR_CFG;

/** CC algorithms, as mrc_ctl_device_attr.cc.algorithms lists them (NULL-terminated). */
const char* kAlgorithms[] = {"dcqcn", "dcqcn-paper", nullptr};
/** The DCQCN profile of each entry of kAlgorithms. */
const cc::DcqcnProfile* algorithm_profile(int index) noexcept {
    return cc::profile_by_name(index == 0 ? "nvidia" : "paper");
}

/** The v1.0.0 layout of struct mrc_ctl_ev_event (no state), for callers of that version. */
struct EvEventV100 {
    std::uint64_t profile_id;
    mrc_ctl_ev ev;
    std::uint32_t drop_count;
};
static_assert(sizeof(EvEventV100) == 48 && sizeof(mrc_ctl_ev_event) == 56);

// ------------------------------------------------------------------ EV values

std::uint32_t ev_value(const mrc_ctl_ev& e) noexcept {
    std::uint32_t v;
    std::memcpy(&v, e.val, sizeof v); // as the OCP examples store a 32-bit STEV
    return v;
}

mrc_ctl_ev make_ev(std::uint32_t value, std::uint8_t port) noexcept {
    mrc_ctl_ev e{};
    std::memcpy(e.val, &value, sizeof value);
    e.port = port;
    return e;
}

bool is_unpopulated(const mrc_ctl_ev& e) noexcept {
    return e.port == 0 &&
           std::all_of(e.val, e.val + MRC_CTL_EV_MAX_BYTES, [](std::uint8_t b) { return b == 0; });
}

/** Bits of the EV a profile's fields take (the sum of their masks' set bits). */
unsigned ev_bits(const std::vector<mrc_ctl_ev_field>& fields) noexcept {
    unsigned n = 0;
    for (const mrc_ctl_ev_field& f : fields)
        n += static_cast<unsigned>(std::popcount(f.mask));
    return n;
}

/**
 * OCP EV expansion: each field starts as init_val; each set bit of its mask, from the most
 * significant, takes the next most significant bit of the EV; the fields are concatenated, the
 * first one most significant. No fields: the EV is its own packet value.
 */
std::uint32_t expand(const std::vector<mrc_ctl_ev_field>& fields, std::uint32_t ev) noexcept {
    if (fields.empty()) return ev;
    unsigned pos = ev_bits(fields);
    std::uint64_t out = 0;
    for (const mrc_ctl_ev_field& f : fields) {
        std::uint32_t v = f.init_val;
        for (int b = 31; b >= 0; --b) {
            if (!(f.mask & (1u << b))) continue;
            --pos;
            const std::uint32_t bit = (ev >> pos) & 1u;
            v = (v & ~(1u << b)) | (bit << b);
        }
        const std::uint64_t width_mask = f.width >= 32 ? 0xffffffffull : (1ull << f.width) - 1;
        out = (out << f.width) | (v & width_mask);
    }
    return static_cast<std::uint32_t>(out);
}

/** Where a packet value goes: the UDP source port and, for STEV, the IPv6 flow label. */
mrc::EvSpec path_of(mrc_ctl_ev_fmt_mode mode, std::uint32_t packet_value, std::uint8_t port,
                    bool denied) noexcept {
    mrc::EvSpec s;
    s.udp_sport = static_cast<std::uint16_t>(packet_value & 0xffffu);
    s.flow_label = mode == MRC_CTL_EV_FMT_MODE_STEV ? (packet_value >> 16) : 0;
    s.plane = static_cast<std::uint8_t>(port - 1u);
    s.denied = denied;
    return s;
}

/** The EVs of a generated profile: a mixed-radix count over the fields' [min_val, max_val]
 *  ranges (the last field fastest), each part in its field's mask bits; ports in turn. */
void generate(EvProfile& p, unsigned num_ports) noexcept {
    std::vector<std::uint64_t> range;
    for (const mrc_ctl_ev_field& f : p.fields)
        range.push_back(std::popcount(f.mask) == 0
                            ? 1u
                            : static_cast<std::uint64_t>(f.max_val) - f.min_val + 1u);
    std::vector<EvSlot> old = std::move(p.evs);
    p.evs.assign(p.count, EvSlot{});
    for (std::uint32_t k = 0; k < p.count; ++k) {
        std::uint64_t rest = k;
        std::uint32_t value = 0;
        std::vector<std::uint32_t> part(p.fields.size());
        for (std::size_t i = p.fields.size(); i-- > 0;) {
            part[i] = static_cast<std::uint32_t>(
                std::popcount(p.fields[i].mask) == 0 ? 0 : p.fields[i].min_val + rest % range[i]);
            rest /= range[i];
        }
        for (std::size_t i = 0; i < p.fields.size(); ++i) {
            const auto n = static_cast<unsigned>(std::popcount(p.fields[i].mask));
            value = n >= 32 ? part[i] : (value << n) | part[i];
        }
        p.evs[k].value = value;
        p.evs[k].port = static_cast<std::uint8_t>(k % num_ports + 1u);
        p.evs[k].denied = k < old.size() && old[k].denied;
    }
}

// ------------------------------------------------------------------ tables

template <typename T>
T* find(std::vector<std::pair<std::uint64_t, T>>& v, std::uint64_t id) noexcept {
    for (auto& [k, p] : v)
        if (k == id) return &p;
    return nullptr;
}

/** Profile @p id of @p v, created in INIT when absent (not stored until it leaves INIT). */
template <typename T>
T lookup_or_init(std::vector<std::pair<std::uint64_t, T>>& v, std::uint64_t id) {
    if (T* p = find(v, id)) return *p;
    return T{};
}

/** Stores @p p as profile @p id (INIT: removes it). @return 0 or ENOSPC (table full). */
template <typename T>
int store(std::vector<std::pair<std::uint64_t, T>>& v, std::uint64_t id, T&& p, std::uint32_t max) {
    auto it = std::find_if(v.begin(), v.end(), [id](const auto& e) { return e.first == id; });
    if (p.state == MRC_CTL_PROFILE_INIT) {
        if (it != v.end()) v.erase(it);
        return 0;
    }
    if (it != v.end()) {
        it->second = std::move(p);
        return 0;
    }
    if (v.size() >= max) return ENOSPC;
    v.emplace_back(id, std::move(p));
    return 0;
}

/** Every MRC QP of the device (all contexts of this process), with a control section held. */
template <typename Fn>
void for_each_qp(DeviceEntry& e, Fn&& fn) {
    for (mrc_context* c : e.contexts) {
        std::lock_guard<std::mutex> g(c->mu);
        for (mrc_qp* q : c->qps)
            fn(q);
    }
}

bool profile_in_use(DeviceEntry& e, std::uint64_t id, bool cc) {
    bool used = false;
    for_each_qp(e, [&](mrc_qp* q) { used |= (cc ? q->cc_profile_id : q->ev_profile_id) == id; });
    return used;
}

std::uint32_t evs_in_use(const Controller& c) noexcept {
    std::uint32_t n = 0;
    for (const auto& [id, p] : c.ev)
        if (p.mode != MRC_CTL_EV_MODE_AUTO) n += p.count;
    return n;
}

/** The context's device entry, or null (then errno is set). */
DeviceEntry* entry_of_ctx(mrc_context* ctx) noexcept {
    if (!ctx || !context_is_live(ctx) || !ctx->entry) {
        errno = EINVAL;
        return nullptr;
    }
    return ctx->entry;
}

void srv6_unsupported() noexcept {
    static std::once_flag once;
    std::call_once(once, [] {
        std::fprintf(stderr, "droce: MRC EV format SRv6 is not supported (droce has no SRv6 "
                             "encapsulation); use MRC_CTL_EV_FMT_MODE_UDP or _STEV\n");
    });
}

// ------------------------------------------------------------------ EV hook (engine thread)

void ev_event_hook(void* user, std::uint16_t ev, mrc::EvState state) noexcept {
    auto* qp = static_cast<mrc_qp*>(user);
    const int bit = state == mrc::EvState::good          ? MRC_CTL_EV_GOOD
                    : state == mrc::EvState::assumed_bad ? MRC_CTL_EV_ASSUMED_BAD
                                                         : 0;
    if (!(qp->ctl_event_mask & bit)) return;
    mrc::EvInfo info;
    if (!mrc::ev_info(*qp->native, ev, info)) return;
    const std::uint32_t value =
        ev < qp->ctl_ev_values.size() ? qp->ctl_ev_values[ev] : info.udp_sport;
    const mrc_ctl_ev e = make_ev(value, static_cast<std::uint8_t>(info.plane + 1u));
    for (mrc_cq* cq : qp->ctx->entry->ctl.ev_cqs)
        if (cq) cq->ev_events->push(cq, qp->ev_profile_id, e, static_cast<std::uint32_t>(bit));
}

// ------------------------------------------------------------------ EV states over QPs

/** Paths of QPs on profile @p id whose EV is @p ev: fn(qp, path index). Profile 0 matches by the
 *  path's UDP source port and port; others by the index of a matching slot. */
template <typename Fn>
void for_each_path(DeviceEntry& e, std::uint64_t id, const EvProfile* p, const mrc_ctl_ev& ev,
                   Fn&& fn) {
    const std::uint32_t value = ev_value(ev);
    for_each_qp(e, [&](mrc_qp* q) {
        if (q->ev_profile_id != id) return;
        if (p == nullptr || p->mode == MRC_CTL_EV_MODE_AUTO) {
            std::array<mrc::EvInfo, mrc::kMaxEvs> infos;
            const std::size_t n = mrc::ev_snapshot(*q->native, infos);
            for (std::size_t i = 0; i < n; ++i)
                if (infos[i].udp_sport == value && infos[i].plane + 1u == ev.port)
                    fn(q, static_cast<std::uint32_t>(i));
            return;
        }
        for (std::size_t i = 0; i < p->evs.size(); ++i)
            if (p->evs[i].value == value && p->evs[i].port == ev.port)
                fn(q, static_cast<std::uint32_t>(i));
    });
}

/** The state of an EV over the QPs using it: DENIED, else ASSUMED_BAD if any QP found it bad. */
mrc_ctl_ev_state aggregate_state(DeviceEntry& e, std::uint64_t id, const EvProfile* p,
                                 const mrc_ctl_ev& ev, bool denied) {
    if (denied) return MRC_CTL_EV_DENIED;
    bool bad = false, any_denied = false;
    for_each_path(e, id, p, ev, [&](mrc_qp* q, std::uint32_t i) {
        mrc::EvInfo info;
        if (!mrc::ev_info(*q->native, i, info)) return;
        bad |= info.state == mrc::EvState::assumed_bad;
        any_denied |= info.state == mrc::EvState::denied;
    });
    return any_denied ? MRC_CTL_EV_DENIED : bad ? MRC_CTL_EV_ASSUMED_BAD : MRC_CTL_EV_GOOD;
}

/** Distinct (value, port) of the QPs on profile 0, in path order. */
std::vector<mrc_ctl_ev> default_evs(DeviceEntry& e) {
    std::vector<mrc_ctl_ev> out;
    for_each_qp(e, [&](mrc_qp* q) {
        if (q->ev_profile_id != 0) return;
        std::array<mrc::EvInfo, mrc::kMaxEvs> infos;
        const std::size_t n = mrc::ev_snapshot(*q->native, infos);
        for (std::size_t i = 0; i < n; ++i) {
            const mrc_ctl_ev ev =
                make_ev(infos[i].udp_sport, static_cast<std::uint8_t>(infos[i].plane + 1u));
            if (std::none_of(out.begin(), out.end(), [&](const mrc_ctl_ev& o) {
                    return ev_value(o) == ev_value(ev) && o.port == ev.port;
                }))
                out.push_back(ev);
        }
    });
    return out;
}

/** Applies a changed profile @p id to the QPs that use it (ONLINE changes). */
void propagate(DeviceEntry& e, std::uint64_t id, const EvProfile& p, const FmtProfile* fmt) {
    for_each_qp(e, [&](mrc_qp* q) {
        if (q->ev_profile_id != id) return;
        q->ctl_event_mask = p.event_mask;
        (void)mrc::set_min_active_evs(*q->native,
                                      static_cast<std::uint16_t>(std::min<std::uint32_t>(
                                          p.min_active, mrc::get_attr(*q->native)->num_evs)));
        if (p.mode == MRC_CTL_EV_MODE_AUTO || !fmt) return;
        for (std::size_t i = 0; i < p.evs.size() && i < q->ctl_ev_values.size(); ++i) {
            const EvSlot& s = p.evs[i];
            const mrc::EvSpec spec =
                path_of(fmt->mode, expand(p.fields, s.value), s.port, s.denied);
            q->ctl_ev_values[i] = s.value;
            (void)mrc::replace_ev(*q->native, static_cast<std::uint32_t>(i), spec.udp_sport,
                                  spec.flow_label);
            mrc::EvInfo info;
            if (mrc::ev_info(*q->native, static_cast<std::uint32_t>(i), info) &&
                (info.state == mrc::EvState::denied) != s.denied)
                (void)mrc::set_ev_denied(*q->native, static_cast<std::uint32_t>(i), s.denied);
        }
    });
}

// ------------------------------------------------------------------ field checks

/** EV fields against their format profile (OCP restrictions). @return 0, EINVAL or E2BIG. */
int check_fields(const std::vector<mrc_ctl_ev_field>& fields, const FmtProfile* fmt) noexcept {
    if (fields.size() > kMaxFields) return E2BIG;
    unsigned width = 0;
    for (const mrc_ctl_ev_field& f : fields) {
        if (f.width == 0 || f.width > 32) return EINVAL;
        const std::uint64_t lim = 1ull << f.width;
        if (f.init_val >= lim || f.mask >= lim) return EINVAL;
        const auto n = static_cast<unsigned>(std::popcount(f.mask));
        if (n < 32 && f.max_val >= (1ull << n)) return EINVAL;
        if (f.min_val > f.max_val) return EINVAL;
        width += f.width;
    }
    if (width > kMaxEvWidth) return E2BIG;
    if (fmt) {
        if (fields.size() > fmt->widths.size()) return EINVAL;
        unsigned fmt_width = 0;
        for (std::uint8_t w : fmt->widths)
            fmt_width += w;
        if (width > fmt_width) return EINVAL;
    }
    return 0;
}

/** A profile state the caller may name: INIT, OFFLINE or ONLINE, nothing else of the enum's
 *  underlying type (a value outside it would be stored and leave the profile stuck in no state). */
bool is_profile_state(mrc_ctl_profile_state s) noexcept {
    return s == MRC_CTL_PROFILE_INIT || s == MRC_CTL_PROFILE_OFFLINE || s == MRC_CTL_PROFILE_ONLINE;
}

/** The OCP profile state machine, for every kind of profile: INIT -> OFFLINE -> ONLINE ->
 *  OFFLINE -> INIT (and OFFLINE -> INIT); staying where it is is no step. */
bool state_step_ok(mrc_ctl_profile_state from, mrc_ctl_profile_state to) noexcept {
    return to == from || (from == MRC_CTL_PROFILE_INIT && to == MRC_CTL_PROFILE_OFFLINE) ||
           (from == MRC_CTL_PROFILE_OFFLINE && to != MRC_CTL_PROFILE_OFFLINE) ||
           (from == MRC_CTL_PROFILE_ONLINE && to == MRC_CTL_PROFILE_OFFLINE);
}

bool vendor_cfg_zero(const std::uint8_t* cfg) noexcept {
    return std::all_of(cfg, cfg + MRC_CTL_MAX_VENDOR_CFG_SIZE,
                       [](std::uint8_t b) { return b == 0; });
}

// ------------------------------------------------------------------ EV profile modify

int ev_op_modify(DeviceEntry& e, std::uint64_t id, EvProfile& p, mrc_ctl_ev_profile_attr& a) {
    if (a.ev_op.entry_count < 0 || (a.ev_op.entry_count > 0 && !a.ev_op.entries)) return EINVAL;
    const bool online = p.state == MRC_CTL_PROFILE_ONLINE;
    for (int i = 0; i < a.ev_op.entry_count; ++i) {
        mrc_ctl_ev_op_entry& en = a.ev_op.entries[i];
        const bool all = en.flags & MRC_CTL_EV_OP_F_ALL_COPIES;
        switch (a.ev_op.op) {
        case MRC_CTL_EV_OP_REPLACE_EV: {
            if (p.mode != MRC_CTL_EV_MODE_EXP)
                return EINVAL; // only explicit arrays are the caller's
            if (en.ev_new.port < 1 || en.ev_new.port > e.dev->num_ports()) return EINVAL;
            if (en.state != 0 && en.state != MRC_CTL_EV_GOOD && en.state != MRC_CTL_EV_DENIED)
                return EINVAL;
            const bool unpop = is_unpopulated(en.ev);
            bool found = false;
            for (EvSlot& s : p.evs) {
                const bool match =
                    unpop ? s.port == 0
                          : s.port != 0 && s.value == ev_value(en.ev) && s.port == en.ev.port;
                if (!match) continue;
                // A path keeps its plane while QPs use it: only its value changes online.
                if (online && s.port != en.ev_new.port) return EINVAL;
                s.value = ev_value(en.ev_new);
                s.port = en.ev_new.port;
                s.denied = en.state == MRC_CTL_EV_DENIED;
                found = true;
                if (!all) break;
            }
            if (!found) return ENOENT;
            break;
        }
        case MRC_CTL_EV_OP_MODIFY_EV_STATE: {
            if (en.state != MRC_CTL_EV_GOOD && en.state != MRC_CTL_EV_DENIED) return EINVAL;
            const bool deny = en.state == MRC_CTL_EV_DENIED;
            bool found = false;
            if (p.mode == MRC_CTL_EV_MODE_AUTO) {
                for_each_path(e, id, &p, en.ev, [&](mrc_qp* q, std::uint32_t k) {
                    found = true;
                    (void)mrc::set_ev_denied(*q->native, k, deny);
                });
            } else {
                for (EvSlot& s : p.evs) {
                    if (s.port == 0 || s.value != ev_value(en.ev) || s.port != en.ev.port) continue;
                    s.denied = deny;
                    found = true;
                }
            }
            if (!found) return ENOENT;
            break;
        }
        default:
            return EINVAL; // the queries are mrc_ctl_query_ev_profile's
        }
    }
    return 0;
}

int modify_ev_profile(DeviceEntry& e, std::uint64_t id, mrc_ctl_ev_profile_attr& a, int mask) {
    if (mask & ~kEvProfileMask) return EINVAL;
    if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP))
        return EINVAL;
    if ((mask & MRC_CTL_EV_PROFILE_VENDOR_CFG) && !vendor_cfg_zero(a.vendor_cfg)) return EOPNOTSUPP;
    if ((mask & MRC_CTL_EV_PROFILE_EVENT_MASK) && (a.ev_event_mask & ~kEventStates))
        return EINVAL; // events report GOOD and ASSUMED_BAD only (OCP)
    Controller& c = e.ctl;
    if (id == 0) {
        // droce's default path set: its event mask and EV states only.
        constexpr int kDefaultOk = MRC_CTL_EV_PROFILE_EVENT_MASK | MRC_CTL_EV_PROFILE_EV_OP;
        if (mask & ~kDefaultOk) return EINVAL;
        if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
            if (a.ev_op.op != MRC_CTL_EV_OP_MODIFY_EV_STATE) return EINVAL;
            EvProfile auto_profile;
            auto_profile.mode = MRC_CTL_EV_MODE_AUTO;
            if (const int r = ev_op_modify(e, 0, auto_profile, a); r != 0) return r;
        }
        if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK) {
            c.default_event_mask = a.ev_event_mask;
            for_each_qp(e, [&](mrc_qp* q) {
                if (q->ev_profile_id == 0) q->ctl_event_mask = a.ev_event_mask;
            });
        }
        return 0;
    }
    EvProfile p = lookup_or_init(c.ev, id);
    const mrc_ctl_profile_state from = p.state;
    const bool online = from == MRC_CTL_PROFILE_ONLINE;
    if (online) {
        // ONLINE: the state, the event mask, min_active, EV operations and (generated) fields
        // (droce offers MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE); the shape is fixed.
        if (mask & (MRC_CTL_EV_PROFILE_MODE | MRC_CTL_EV_PROFILE_FMT_ID | MRC_CTL_EV_PROFILE_COUNT))
            return EINVAL;
    }
    if (from == MRC_CTL_PROFILE_INIT && !(mask & MRC_CTL_EV_PROFILE_STATE)) return EINVAL;
    if (mask & MRC_CTL_EV_PROFILE_MODE) {
        if (a.ev_mode != MRC_CTL_EV_MODE_AUTO && a.ev_mode != MRC_CTL_EV_MODE_EXP &&
            a.ev_mode != MRC_CTL_EV_MODE_GEN)
            return EINVAL;
        p.mode = a.ev_mode;
        p.mode_set = true;
    }
    if (mask & MRC_CTL_EV_PROFILE_FMT_ID) {
        p.fmt_id = a.ev_fmt_profile_id;
        p.fmt_set = true;
    }
    const std::uint32_t old_count = p.count;
    if (mask & MRC_CTL_EV_PROFILE_COUNT) {
        if (a.ev_count < 1) return EINVAL;
        if (a.ev_count > mrc::kMaxEvs) return E2BIG;
        p.count = a.ev_count;
        p.count_set = true;
    }
    if (mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE) p.min_active = a.ev_min_active;
    if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK) p.event_mask = a.ev_event_mask;
    FmtProfile* fmt = p.mode != MRC_CTL_EV_MODE_AUTO ? find(c.fmt, p.fmt_id) : nullptr;
    if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) {
        if (a.ev_fields_op.op != MRC_CTL_EV_FIELDS_OP_MODIFY_FIELDS) return EINVAL;
        if (a.ev_fields_op.field_count < 0 ||
            (a.ev_fields_op.field_count > 0 && !a.ev_fields_op.fields))
            return EINVAL;
        if (static_cast<std::uint32_t>(a.ev_fields_op.field_count) > kMaxFields) return E2BIG;
        std::vector<mrc_ctl_ev_field> fields(a.ev_fields_op.fields,
                                             a.ev_fields_op.fields + a.ev_fields_op.field_count);
        if (const int r = check_fields(fields, fmt); r != 0) return r;
        p.fields = std::move(fields);
    }
    // The EV array follows the shape: explicit entries start unpopulated (OCP), generated ones
    // are made from the fields.
    // (EXP after AUTO, which has no array, gets its count of unpopulated entries back.)
    if (p.mode == MRC_CTL_EV_MODE_EXP && (p.count != old_count || p.evs.size() != p.count))
        p.evs.assign(p.count, EvSlot{});
    if (p.mode == MRC_CTL_EV_MODE_GEN && p.count_set) generate(p, std::max(1u, e.dev->num_ports()));
    if (p.mode == MRC_CTL_EV_MODE_AUTO) p.evs.clear();
    if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
        if (p.state == MRC_CTL_PROFILE_INIT && !(mask & MRC_CTL_EV_PROFILE_STATE)) return EINVAL;
        if (const int r = ev_op_modify(e, id, p, a); r != 0) return r;
    }
    if (p.min_active >
        std::max<std::uint32_t>(p.count, p.mode == MRC_CTL_EV_MODE_AUTO ? mrc::kMaxEvs : 0))
        return EINVAL; // ev_min_active <= ev_count

    if (mask & MRC_CTL_EV_PROFILE_STATE) {
        const mrc_ctl_profile_state to = a.profile_state;
        if (!is_profile_state(to)) return EINVAL;
        if (!state_step_ok(from, to)) return EINVAL;
        if (to == MRC_CTL_PROFILE_OFFLINE && from == MRC_CTL_PROFILE_INIT) {
            // To OFFLINE: mode, and for non-AUTO modes a format and a count (OCP).
            if (!p.mode_set) return EINVAL;
            if (p.mode != MRC_CTL_EV_MODE_AUTO && (!p.fmt_set || !p.count_set || !fmt))
                return EINVAL;
            if (p.mode != MRC_CTL_EV_MODE_AUTO && evs_in_use(c) + p.count > kMaxEvTotal)
                return ENOSPC;
        }
        if (to == MRC_CTL_PROFILE_ONLINE && from != MRC_CTL_PROFILE_ONLINE) {
            if (p.mode != MRC_CTL_EV_MODE_AUTO) {
                if (!fmt || fmt->state != MRC_CTL_PROFILE_ONLINE) return EINVAL;
                if (p.mode == MRC_CTL_EV_MODE_GEN && p.fields.empty()) return EINVAL;
                // Every explicit EV populated before the profile goes ONLINE (OCP).
                if (std::any_of(p.evs.begin(), p.evs.end(),
                                [](const EvSlot& s) { return s.port == 0; }))
                    return EINVAL;
                const unsigned max_width =
                    fmt->mode == MRC_CTL_EV_FMT_MODE_UDP ? kMaxUdpWidth : kMaxEvWidth;
                unsigned width = 0;
                for (const mrc_ctl_ev_field& f : p.fields)
                    width += f.width;
                if (width > max_width) return E2BIG;
            }
        }
        if (from == MRC_CTL_PROFILE_ONLINE && to == MRC_CTL_PROFILE_OFFLINE &&
            profile_in_use(e, id, false))
            return EBUSY; // OCP: active QPs are associated with the profile
        p.state = to;
        if (to == MRC_CTL_PROFILE_INIT) p = EvProfile{};
    }
    const bool still_online = p.state == MRC_CTL_PROFILE_ONLINE && online;
    if (const int r = store(c.ev, id, EvProfile(p), kMaxEvProfiles); r != 0) return r;
    if (still_online) propagate(e, id, p, fmt);
    return 0;
}

// ------------------------------------------------------------------ EV probes

std::mutex& ep_mu() noexcept {
    static auto* m = new std::mutex;
    return *m;
}

} // namespace

// ------------------------------------------------------------------ shared with qp.cc / cq.cc

void EvEventQueue::push(mrc_cq* cq, std::uint64_t profile_id, const mrc_ctl_ev& ev,
                        std::uint32_t state) noexcept {
    if (queued.load(std::memory_order_acquire) >= capacity) {
        ++dropped; // an EV event CQ never overruns: the event is dropped and counted
        return;
    }
    Record r{profile_id, ev, dropped, state};
    if (write(wfd, &r, sizeof r) != static_cast<ssize_t>(sizeof r)) {
        ++dropped;
        return;
    }
    dropped = 0;
    queued.fetch_add(1, std::memory_order_acq_rel);
    if (cq->channel && armed.exchange(false, std::memory_order_acq_rel)) [[maybe_unused]]
        ssize_t n = write(cq->channel->wfd, &cq->cqn, sizeof cq->cqn);
}

void install_ev_hook(mrc_qp* qp) noexcept {
    qp->ctl_event_mask = qp->ctx->entry->ctl.default_event_mask;
    mrc::set_ev_event_hook(*qp->native, &ev_event_hook, qp);
}

int apply_ev_profile(mrc_qp* qp, std::uint64_t id) noexcept {
    DeviceEntry& e = *qp->ctx->entry;
    rc::Qp& q = *qp->native;
    const mrc::MrcAttr cur = *mrc::get_attr(q);
    if (id == 0) {
        // Back to droce's own paths: set_attr rebuilds them from num_evs and ev_base.
        if (qp->ev_profile_id != 0) {
            if (const int r = mrc::set_attr(q, cur); r != 0) return r;
        }
        qp->ctl_ev_values.clear();
        qp->ctl_event_mask = e.ctl.default_event_mask;
        return 0;
    }
    const EvProfile* p = find(e.ctl.ev, id);
    if (!p || p->state != MRC_CTL_PROFILE_ONLINE) return EINVAL; // OCP: profiles must be ONLINE
    try {
        if (p->mode == MRC_CTL_EV_MODE_AUTO) {
            mrc::MrcAttr a = cur;
            if (p->count_set) a.num_evs = static_cast<std::uint16_t>(p->count);
            a.min_active_evs = static_cast<std::uint16_t>(std::min<std::uint32_t>(
                p->min_active ? p->min_active : a.min_active_evs, a.num_evs));
            if (const int r = mrc::set_attr(q, a); r != 0) return r;
            qp->ctl_ev_values.clear();
        } else {
            const FmtProfile* fmt = find(e.ctl.fmt, p->fmt_id);
            if (!fmt) return EINVAL;
            std::vector<mrc::EvSpec> specs;
            std::vector<std::uint32_t> values;
            for (const EvSlot& s : p->evs) {
                specs.push_back(path_of(fmt->mode, expand(p->fields, s.value), s.port, s.denied));
                values.push_back(s.value);
            }
            if (const int r = mrc::set_evs(q, specs); r != 0) return r;
            (void)mrc::set_min_active_evs(
                q, static_cast<std::uint16_t>(std::min<std::uint32_t>(p->min_active, p->count)));
            qp->ctl_ev_values = std::move(values);
        }
    } catch (const std::bad_alloc&) {
        return ENOMEM;
    }
    qp->ctl_event_mask = p->event_mask;
    return 0;
}

int apply_cc_profile(mrc_qp* qp, std::uint64_t id) noexcept {
    if (id == 0) return 0; // the device's configured default ([device] dcqcn)
    const CcProfile* p = find(qp->ctx->entry->ctl.cc, id);
    if (!p || p->state != MRC_CTL_PROFILE_ONLINE) return EINVAL;
    return qp->ctx->dev->set_qp_dcqcn(qp->native,
                                      p->algorithm < 0 ? nullptr : algorithm_profile(p->algorithm));
}

} // namespace droce::mrcapi

// ------------------------------------------------------------------ versions, device, ports

extern "C" void mrc_ctl_query_version(uint32_t* current_version, uint32_t* last_supported_version,
                                      uint32_t* vendor_version,
                                      uint32_t* last_supported_vendor_version) {
    if (current_version) *current_version = MRC_CTL_API_CURRENT_VERSION;
    if (last_supported_version) *last_supported_version = MRC_CTL_API_LAST_SUPPORTED_VERSION;
    if (vendor_version) *vendor_version = MRC_CTL_VENDOR_API_CURRENT_VERSION;
    if (last_supported_vendor_version)
        *last_supported_vendor_version = MRC_CTL_VENDOR_API_LAST_SUPPORTED_VERSION;
}

namespace {

int ctl_query_device(ibv_context* context, mrc_context* mctx, mrc_ctl_device_attr* attr) {
    if (!context || !attr) return fail_neg(EINVAL);
    if (mctx && (!context_is_live(mctx) || mctx->ibv != context)) return fail_neg(EINVAL);
    if (!verbs_private().ok()) return fail_neg(ENODEV);
    Device* dev = verbs_private().device(context);
    if (!dev) return fail_neg(EINVAL);
    std::memset(attr, 0, sizeof *attr);
    attr->mrc_ctl_protocol_version = MRC_CTL_PROTOCOL_VERSION_1;
    attr->ev.ev_max_fmt_profiles = kMaxFmtProfiles;
    attr->ev.ev_max_profiles = kMaxEvProfiles;
    attr->ev.ev_max_count = kMaxEvTotal;
    attr->ev.ev_free_count = kMaxEvTotal;
    {
        Control ctl(context);
        if (!ctl.ok()) return fail_neg(EINVAL);
        if (DeviceEntry* e = find_entry(dev)) attr->ev.ev_free_count -= evs_in_use(e->ctl);
    }
    attr->ev.ev_max_count_profile = mrc::kMaxEvs;
    attr->ev.ev_count_align = 1;
    attr->ev.ev_max_width = kMaxEvWidth;
    attr->ev.ev_fmt_mode_mask = MRC_CTL_EV_FMT_MODE_STEV | MRC_CTL_EV_FMT_MODE_UDP;
    attr->ev.ev_mode_mask = MRC_CTL_EV_MODE_AUTO | MRC_CTL_EV_MODE_EXP | MRC_CTL_EV_MODE_GEN;
    attr->ev.ev_op_max_entries = 0; // no cap
    attr->cc.cc_max_profiles = kMaxCcProfiles;
    attr->cc.algorithms = kAlgorithms;
    attr->phy_port_mask = ((1u << dev->num_ports()) - 1u) << 1; // bit N = port N (1-based)
    attr->opt_attr = MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE | MRC_CTL_OPT_CAP_EV_EVENT |
                     MRC_CTL_OPT_CAP_EV_EVENT_PRECISE_DROP_CNT | MRC_CTL_OPT_CAP_EP_OP_EV_PROBE;
    return 0;
}

} // namespace

extern "C" int mrc_ctl_query_device(ibv_context* context, mrc_ctl_device_attr* ctl_attr) {
    return ctl_query_device(context, nullptr, ctl_attr);
}

extern "C" int mrc_ctl_query_device_ex(ibv_context* context, mrc_context* mcontext,
                                       mrc_ctl_device_attr* ctl_attr, int* supported) {
    if (!supported) return fail_neg(EINVAL);
    if (!verbs_private().ok() || (context && !verbs_private().device(context))) {
        if (!context || !ctl_attr) return fail_neg(EINVAL);
        std::memset(ctl_attr, 0, sizeof *ctl_attr);
        *supported = 0;
        return 0;
    }
    if (ctl_query_device(context, mcontext, ctl_attr) != 0) return -1;
    // The _ex form is the 1.0.1 one: its caller gets EV events with their state.
    if (mcontext) mcontext->ctl_api_101 = true;
    *supported = 1;
    return 0;
}

extern "C" int mrc_ctl_query_port(mrc_context* context, uint8_t port_num, mrc_ctl_port_attr* attr,
                                  int attr_mask) {
    DeviceEntry* e = entry_of_ctx(context);
    if (!e) return -1;
    if (!attr || (attr_mask & ~MRC_CTL_PORT_ADMIN_STATE) || port_num < 1 ||
        port_num > e->dev->num_ports())
        return fail_neg(EINVAL);
    if (attr_mask & MRC_CTL_PORT_ADMIN_STATE) {
        Control ctl(context->ibv);
        if (!ctl.ok()) return fail_neg(EINVAL);
        attr->port_admin_state = e->dev->port_admin_up(port_num - 1u) ? MRC_CTL_PORT_ADMIN_ENABLED
                                                                      : MRC_CTL_PORT_ADMIN_DISABLED;
    }
    return 0;
}

extern "C" int mrc_ctl_modify_port(mrc_context* context, uint8_t port_num, mrc_ctl_port_attr* attr,
                                   int attr_mask) {
    DeviceEntry* e = entry_of_ctx(context);
    if (!e) return -1;
    if (!attr || (attr_mask & ~MRC_CTL_PORT_ADMIN_STATE) || port_num < 1 ||
        port_num > e->dev->num_ports())
        return fail_neg(EINVAL);
    if (!(attr_mask & MRC_CTL_PORT_ADMIN_STATE)) return 0;
    if (attr->port_admin_state != MRC_CTL_PORT_ADMIN_ENABLED &&
        attr->port_admin_state != MRC_CTL_PORT_ADMIN_DISABLED)
        return fail_neg(EINVAL);
    // A control section as every other call takes: one control thread at a time (the control
    // socket's thread and the application's may both call this), and EINVAL for an MRC context
    // whose verbs context was closed.
    Control ctl(context->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    const int r =
        e->dev->set_port_admin(port_num - 1u, attr->port_admin_state == MRC_CTL_PORT_ADMIN_ENABLED);
    return r == 0 ? 0 : fail_neg(r);
}

// ------------------------------------------------------------------ EV format profiles

extern "C" int mrc_ctl_modify_ev_fmt_profile(mrc_context* mrc_ctx, uint64_t id,
                                             mrc_ctl_ev_fmt_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr || (mask & ~kFmtProfileMask)) return fail_neg(EINVAL);
    if ((mask & MRC_CTL_EV_FMT_VENDOR_CFG) && !vendor_cfg_zero(attr->vendor_cfg))
        return fail_neg(EOPNOTSUPP);
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    Controller& c = e->ctl;
    FmtProfile p = lookup_or_init(c.fmt, id);
    const mrc_ctl_profile_state from = p.state;
    if (from == MRC_CTL_PROFILE_INIT && !(mask & MRC_CTL_EV_FMT_PROFILE_STATE))
        return fail_neg(EINVAL);
    if (from == MRC_CTL_PROFILE_ONLINE && (mask & MRC_CTL_EV_FMT_PROFILE_MODE))
        return fail_neg(EINVAL);
    if (mask & MRC_CTL_EV_FMT_PROFILE_MODE) {
        if (attr->ev_fmt_mode == MRC_CTL_EV_FMT_MODE_SRV6) {
            srv6_unsupported();
            return fail_neg(EOPNOTSUPP);
        }
        if (attr->ev_fmt_mode != MRC_CTL_EV_FMT_MODE_STEV &&
            attr->ev_fmt_mode != MRC_CTL_EV_FMT_MODE_UDP)
            return fail_neg(EINVAL);
        p.mode = attr->ev_fmt_mode;
        p.mode_set = true;
    }
    if (mask & MRC_CTL_EV_FMT_PROFILE_OP) {
        auto& op = attr->ev_fmt_op;
        if (op.op == MRC_CTL_EV_FMT_OP_QUERY_FIELDS) {
            if (op.fmt_field_count < static_cast<int>(p.widths.size()) || !op.fmt_fields) {
                op.fmt_field_count = static_cast<int>(p.widths.size());
                return fail_neg(E2BIG);
            }
            for (std::size_t i = 0; i < p.widths.size(); ++i)
                op.fmt_fields[i].width = p.widths[i];
            op.fmt_field_count = static_cast<int>(p.widths.size());
        } else if (op.op == MRC_CTL_EV_FMT_OP_MODIFY_FIELDS) {
            if (from == MRC_CTL_PROFILE_ONLINE) return fail_neg(EINVAL);
            if (op.fmt_field_count < 1 || !op.fmt_fields) return fail_neg(EINVAL);
            if (static_cast<std::uint32_t>(op.fmt_field_count) > kMaxFields) return fail_neg(E2BIG);
            unsigned width = 0;
            std::vector<std::uint8_t> widths;
            for (int i = 0; i < op.fmt_field_count; ++i) {
                if (op.fmt_fields[i].width == 0) return fail_neg(EINVAL);
                width += op.fmt_fields[i].width;
                widths.push_back(op.fmt_fields[i].width);
            }
            const unsigned max = p.mode == MRC_CTL_EV_FMT_MODE_UDP ? kMaxUdpWidth : kMaxEvWidth;
            if (width > max) return fail_neg(E2BIG); // OCP: an unsupportable combination
            p.widths = std::move(widths);
            p.fields_set = true;
        } else {
            return fail_neg(EINVAL);
        }
    }
    if (mask & MRC_CTL_EV_FMT_PROFILE_STATE) {
        const mrc_ctl_profile_state to = attr->profile_state;
        if (!is_profile_state(to)) return fail_neg(EINVAL);
        if (!state_step_ok(from, to)) return fail_neg(EINVAL);
        if (to == MRC_CTL_PROFILE_OFFLINE && !p.mode_set) return fail_neg(EINVAL);
        if (to == MRC_CTL_PROFILE_ONLINE && !p.fields_set) return fail_neg(EINVAL);
        if (from == MRC_CTL_PROFILE_ONLINE && to == MRC_CTL_PROFILE_OFFLINE) {
            // OCP: EBUSY while an EV profile that uses this format is ONLINE.
            for (const auto& [eid, ep] : c.ev)
                if (ep.mode != MRC_CTL_EV_MODE_AUTO && ep.fmt_id == id &&
                    ep.state == MRC_CTL_PROFILE_ONLINE)
                    return fail_neg(EBUSY);
        }
        p.state = to;
        if (to == MRC_CTL_PROFILE_INIT) p = FmtProfile{};
    }
    if (const int r = store(c.fmt, id, std::move(p), kMaxFmtProfiles); r != 0) return fail_neg(r);
    return 0;
}

extern "C" int mrc_ctl_query_ev_fmt_profile(mrc_context* mrc_ctx, uint64_t id,
                                            mrc_ctl_ev_fmt_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr || (mask & ~kFmtProfileMask)) return fail_neg(EINVAL);
    if ((mask & MRC_CTL_EV_FMT_PROFILE_OP) && attr->ev_fmt_op.op != MRC_CTL_EV_FMT_OP_QUERY_FIELDS)
        return fail_neg(EINVAL); // OCP: MODIFY_FIELDS is not a query
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    const FmtProfile p = lookup_or_init(e->ctl.fmt, id);
    if (mask & (MRC_CTL_EV_FMT_PROFILE_STATE | MRC_CTL_EV_FMT_PROFILE_CUR_STATE)) {
        attr->profile_state = p.state;
        attr->cur_profile_state = p.state;
    }
    if (mask & MRC_CTL_EV_FMT_PROFILE_MODE) attr->ev_fmt_mode = p.mode;
    if (mask & MRC_CTL_EV_FMT_VENDOR_CFG) std::memset(attr->vendor_cfg, 0, sizeof attr->vendor_cfg);
    if (mask & MRC_CTL_EV_FMT_PROFILE_OP) {
        auto& op = attr->ev_fmt_op;
        const int n = static_cast<int>(p.widths.size());
        if (op.fmt_field_count < n || (n > 0 && !op.fmt_fields)) {
            op.fmt_field_count = n;
            return fail_neg(E2BIG);
        }
        for (int i = 0; i < n; ++i)
            op.fmt_fields[i].width = p.widths[static_cast<std::size_t>(i)];
        op.fmt_field_count = n;
    }
    return 0;
}

// ------------------------------------------------------------------ EV profiles

extern "C" int mrc_ctl_modify_ev_profile(mrc_context* mrc_ctx, uint64_t id,
                                         mrc_ctl_ev_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr) return fail_neg(EINVAL);
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    int r;
    try {
        r = modify_ev_profile(*e, id, *attr, mask);
    } catch (const std::bad_alloc&) {
        r = ENOMEM;
    }
    return r == 0 ? 0 : fail_neg(r);
}

extern "C" int mrc_ctl_query_ev_profile(mrc_context* mrc_ctx, uint64_t id,
                                        mrc_ctl_ev_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr || (mask & ~kEvProfileMask)) return fail_neg(EINVAL);
    if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP))
        return fail_neg(EINVAL);
    if ((mask & MRC_CTL_EV_PROFILE_EV_OP) && attr->ev_op.op != MRC_CTL_EV_OP_QUERY_EV_STATE &&
        attr->ev_op.op != MRC_CTL_EV_OP_QUERY_EV_ARRAY)
        return fail_neg(EINVAL);
    if ((mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) &&
        attr->ev_fields_op.op != MRC_CTL_EV_FIELDS_OP_QUERY_FIELDS)
        return fail_neg(EINVAL);
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    try {
        EvProfile p;
        std::vector<mrc_ctl_ev> evs; // the EV array (profile 0: the QPs' own paths)
        std::vector<bool> denied;
        if (id == 0) {
            p.state = MRC_CTL_PROFILE_ONLINE;
            p.mode = MRC_CTL_EV_MODE_AUTO;
            p.event_mask = e->ctl.default_event_mask;
            evs = default_evs(*e);
            p.count = static_cast<std::uint32_t>(evs.size());
            p.min_active = mrc::MrcAttr{}.min_active_evs;
            denied.assign(evs.size(), false);
        } else {
            p = lookup_or_init(e->ctl.ev, id);
            for (const EvSlot& s : p.evs) {
                evs.push_back(s.port == 0 ? MRC_CTL_EV_UNPOPULATED : make_ev(s.value, s.port));
                denied.push_back(s.denied);
            }
        }
        const EvProfile* pp = id == 0 ? nullptr : &p;
        if (mask & (MRC_CTL_EV_PROFILE_STATE | MRC_CTL_EV_PROFILE_CUR_STATE)) {
            attr->profile_state = p.state;
            attr->cur_profile_state = p.state;
        }
        if (mask & MRC_CTL_EV_PROFILE_MODE) attr->ev_mode = p.mode;
        if (mask & MRC_CTL_EV_PROFILE_FMT_ID) attr->ev_fmt_profile_id = p.fmt_id;
        if (mask & MRC_CTL_EV_PROFILE_COUNT) attr->ev_count = p.count;
        if (mask & MRC_CTL_EV_PROFILE_MIN_ACTIVE) attr->ev_min_active = p.min_active;
        if (mask & MRC_CTL_EV_PROFILE_EVENT_MASK) attr->ev_event_mask = p.event_mask;
        if (mask & MRC_CTL_EV_PROFILE_VENDOR_CFG)
            std::memset(attr->vendor_cfg, 0, sizeof attr->vendor_cfg);
        if (mask & MRC_CTL_EV_PROFILE_EV_FIELDS_OP) {
            auto& op = attr->ev_fields_op;
            const int n = static_cast<int>(p.fields.size());
            if (op.field_count < n || (n > 0 && !op.fields)) {
                op.field_count = n;
                return fail_neg(E2BIG);
            }
            std::copy(p.fields.begin(), p.fields.end(), op.fields);
            op.field_count = n;
        }
        if (mask & MRC_CTL_EV_PROFILE_EV_OP) {
            auto& op = attr->ev_op;
            if (op.op == MRC_CTL_EV_OP_QUERY_EV_ARRAY) {
                const int n = static_cast<int>(evs.size());
                if (op.entry_count < n || (n > 0 && !op.entries)) {
                    op.entry_count = n;
                    return fail_neg(E2BIG);
                }
                for (int i = 0; i < n; ++i) {
                    mrc_ctl_ev_op_entry& en = op.entries[i];
                    std::memset(&en, 0, sizeof en);
                    en.ev = evs[static_cast<std::size_t>(i)];
                    en.state = en.ev.port == 0
                                   ? MRC_CTL_EV_UNKNOWN
                                   : aggregate_state(*e, id, pp, en.ev,
                                                     denied[static_cast<std::size_t>(i)]);
                }
                op.entry_count = n;
            } else { // QUERY_EV_STATE
                if (op.entry_count < 0 || (op.entry_count > 0 && !op.entries))
                    return fail_neg(EINVAL);
                for (int i = 0; i < op.entry_count; ++i) {
                    mrc_ctl_ev_op_entry& en = op.entries[i];
                    const auto it = std::find_if(evs.begin(), evs.end(), [&](const mrc_ctl_ev& v) {
                        return v.port != 0 && v.port == en.ev.port &&
                               ev_value(v) == ev_value(en.ev);
                    });
                    if (it == evs.end()) return fail_neg(ENOENT);
                    en.state = aggregate_state(*e, id, pp, en.ev,
                                               denied[static_cast<std::size_t>(it - evs.begin())]);
                }
            }
        }
    } catch (const std::bad_alloc&) {
        return fail_neg(ENOMEM);
    }
    return 0;
}

// ------------------------------------------------------------------ CC profiles

extern "C" int mrc_ctl_modify_cc_profile(mrc_context* mrc_ctx, uint64_t id,
                                         mrc_ctl_cc_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr || (mask & ~kCcProfileMask) || id == 0) return fail_neg(EINVAL);
    if ((mask & MRC_CTL_CC_PROFILE_VENDOR_CFG) && !vendor_cfg_zero(attr->vendor_cfg))
        return fail_neg(EOPNOTSUPP);
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    CcProfile p = lookup_or_init(e->ctl.cc, id);
    const mrc_ctl_profile_state from = p.state;
    if (from == MRC_CTL_PROFILE_INIT && !(mask & MRC_CTL_CC_PROFILE_STATE)) return fail_neg(EINVAL);
    if (mask & MRC_CTL_CC_PROFILE_ALGORITHM) {
        if (from == MRC_CTL_PROFILE_ONLINE) return fail_neg(EINVAL);
        int index = -1;
        if (attr->algorithm) {
            for (int i = 0; kAlgorithms[i]; ++i)
                if (std::strcmp(attr->algorithm, kAlgorithms[i]) == 0) index = i;
            if (index < 0)
                // NSCC (uet-1.0-nscc) and any other name droce does not implement.
                return fail_neg(std::strcmp(attr->algorithm, "uet-1.0-nscc") == 0 ? EOPNOTSUPP
                                                                                  : EINVAL);
        }
        p.algorithm = index;
        p.algorithm_set = true;
    }
    // droce's DCQCN takes its parameters from the named profile: no configuration structure.
    if ((mask & MRC_CTL_CC_PROFILE_CONFIG) && attr->cc_config) return fail_neg(EINVAL);
    if (mask & MRC_CTL_CC_PROFILE_STATE) {
        const mrc_ctl_profile_state to = attr->profile_state;
        if (!is_profile_state(to)) return fail_neg(EINVAL);
        if (!state_step_ok(from, to)) return fail_neg(EINVAL);
        if (to == MRC_CTL_PROFILE_OFFLINE && from == MRC_CTL_PROFILE_INIT && !p.algorithm_set)
            return fail_neg(EINVAL);
        if (from == MRC_CTL_PROFILE_ONLINE && to == MRC_CTL_PROFILE_OFFLINE &&
            profile_in_use(*e, id, true))
            return fail_neg(EBUSY);
        p.state = to;
        if (to == MRC_CTL_PROFILE_INIT) p = CcProfile{};
    }
    if (const int r = store(e->ctl.cc, id, std::move(p), kMaxCcProfiles); r != 0)
        return fail_neg(r);
    return 0;
}

extern "C" int mrc_ctl_query_cc_profile(mrc_context* mrc_ctx, uint64_t id,
                                        mrc_ctl_cc_profile_attr* attr, int mask) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!attr || (mask & ~kCcProfileMask)) return fail_neg(EINVAL);
    Control ctl(mrc_ctx->ibv);
    if (!ctl.ok()) return fail_neg(EINVAL);
    const CcProfile p = lookup_or_init(e->ctl.cc, id);
    if (mask & (MRC_CTL_CC_PROFILE_STATE | MRC_CTL_CC_PROFILE_CUR_STATE)) {
        attr->profile_state = p.state;
        attr->cur_profile_state = p.state;
    }
    if (mask & MRC_CTL_CC_PROFILE_ALGORITHM)
        attr->algorithm = p.algorithm < 0 ? nullptr : kAlgorithms[p.algorithm];
    if (mask & MRC_CTL_CC_PROFILE_CONFIG) attr->cc_config = nullptr;
    if (mask & MRC_CTL_CC_PROFILE_VENDOR_CFG)
        std::memset(attr->vendor_cfg, 0, sizeof attr->vendor_cfg);
    return 0;
}

// ------------------------------------------------------------------ EV events

extern "C" mrc_cq* mrc_ctl_create_ev_event_cq(mrc_context* mrc_ctx, int cqe, void* cq_context,
                                              mrc_comp_channel* channel, int comp_vector) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return nullptr;
    if (cqe <= 0 || cqe > 65536 || comp_vector < 0) return fail<mrc_cq>(EINVAL);
    {
        // The verbs context may have been closed (and freed): look at it only once it is known
        // to be open.
        Control ctl(mrc_ctx->ibv);
        if (!ctl.ok() || comp_vector >= mrc_ctx->ibv->num_comp_vectors) return fail<mrc_cq>(EINVAL);
    }
    if (channel && (!handle_is_live(channel) || channel->ctx != mrc_ctx))
        return fail<mrc_cq>(EINVAL);
    auto* cq = new (std::nothrow) mrc_cq;
    if (!cq) return fail<mrc_cq>(ENOMEM);
    cq->ev_events.reset(new (std::nothrow) EvEventQueue);
    int fds[2];
    if (!cq->ev_events || !handle_add(cq)) {
        delete cq;
        return fail<mrc_cq>(ENOMEM);
    }
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        const int err = errno;
        handle_drop(cq);
        delete cq;
        return fail<mrc_cq>(err);
    }
    // Room for cqe records without the writer ever blocking.
    fcntl(fds[1], F_SETPIPE_SZ,
          static_cast<int>(std::min<std::size_t>(1u << 20, (static_cast<std::size_t>(cqe) + 1) *
                                                               sizeof(EvEventQueue::Record))));
    static std::atomic<std::uint32_t> next_cqn{0x40000000u}; // apart from the native CQ numbers
    cq->ctx = mrc_ctx;
    cq->cq_context = cq_context;
    cq->channel = channel;
    cq->cqn = next_cqn.fetch_add(1, std::memory_order_relaxed);
    cq->ev_events->rfd = fds[0];
    cq->ev_events->wfd = fds[1];
    cq->ev_events->capacity = cqe;
    {
        Control ctl(mrc_ctx->ibv);
        auto& slots = e->ctl.ev_cqs;
        auto free_slot = std::find(slots.begin(), slots.end(), nullptr);
        if (!ctl.ok() || free_slot == slots.end()) {
            close(fds[0]);
            close(fds[1]);
            handle_drop(cq);
            delete cq;
            return fail<mrc_cq>(ctl.ok() ? ENOSPC : EINVAL);
        }
        *free_slot = cq;
    }
    if (channel) {
        std::lock_guard<std::mutex> g(channel->mu);
        channel->cqs.push_back(cq);
    }
    std::lock_guard<std::mutex> g(mrc_ctx->mu);
    mrc_ctx->cqs.push_back(cq);
    return cq;
}

namespace droce::mrcapi {

void destroy_ev_event_cq(mrc_cq* cq) noexcept {
    {
        Control ctl(cq->ctx->ibv);
        for (mrc_cq*& slot : cq->ctx->entry->ctl.ev_cqs)
            if (slot == cq) slot = nullptr;
    }
    close(cq->ev_events->rfd);
    close(cq->ev_events->wfd);
}

} // namespace droce::mrcapi

extern "C" int mrc_ctl_poll_ev_event(mrc_cq* ev_cq, int num_entries, mrc_ctl_ev_event* ev_event) {
    if (!ev_cq || !ev_cq->ev_events || num_entries < 0 || (num_entries > 0 && !ev_event))
        return -EINVAL;
    EvEventQueue& q = *ev_cq->ev_events;
    const bool with_state = ev_cq->ctx->ctl_api_101;
    q.read_lock.lock();
    int n = 0;
    while (n < num_entries) {
        EvEventQueue::Record r;
        const ssize_t got = read(q.rfd, &r, sizeof r);
        if (got != static_cast<ssize_t>(sizeof r)) break; // EAGAIN: empty
        q.queued.fetch_sub(1, std::memory_order_acq_rel);
        if (with_state) {
            mrc_ctl_ev_event& out = ev_event[n];
            std::memset(&out, 0, sizeof out);
            out.profile_id = r.profile_id;
            out.ev = r.ev;
            out.drop_count = r.drop_count;
            out.state = static_cast<mrc_ctl_ev_state>(r.state);
        } else {
            // A 1.0.0 caller's array has the shorter element (no state).
            auto* out = reinterpret_cast<EvEventV100*>(ev_event) + n;
            std::memset(out, 0, sizeof *out);
            out->profile_id = r.profile_id;
            out->ev = r.ev;
            out->drop_count = r.drop_count;
        }
        ++n;
    }
    q.read_lock.unlock();
    return n;
}

// ------------------------------------------------------------------ endpoint operations

extern "C" int mrc_ctl_ep_batch_send_wait(mrc_context* mrc_ctx, uint8_t req_tc,
                                          mrc_ctl_ep_op_type op_type, mrc_ctl_ep_req* req,
                                          int num_req, uint32_t rsp_timeout, mrc_ctl_ep_rsp* rsp,
                                          int* num_rsp) {
    DeviceEntry* e = entry_of_ctx(mrc_ctx);
    if (!e) return -1;
    if (!req || !rsp || !num_rsp || num_req < 1 || num_req > kMaxEpRequests || req_tc > 63)
        return fail_neg(EINVAL);
    *num_rsp = 0;
    if (op_type == MRC_CTL_EP_OP_PORT_STATUS_UPDATE)
        // droce's MRC QPs tell their peers of port changes themselves (MRC_PORT_STATUS).
        return fail_neg(EOPNOTSUPP);
    if (op_type != MRC_CTL_EP_OP_EV_PROBE) return fail_neg(EINVAL);
    Device& dev = *e->dev;
    std::vector<EpProbeRequest> probes;
    for (int i = 0; i < num_req; ++i) {
        const mrc_ctl_ep_req& r = req[i];
        if (r.ev_fmt_mode == MRC_CTL_EV_FMT_MODE_SRV6) {
            srv6_unsupported();
            return fail_neg(EOPNOTSUPP);
        }
        if (r.ev_fmt_mode != MRC_CTL_EV_FMT_MODE_STEV && r.ev_fmt_mode != MRC_CTL_EV_FMT_MODE_UDP)
            return fail_neg(EINVAL);
        if (r.req_ev.port < 1 || r.req_ev.port > dev.num_ports()) return fail_neg(EINVAL);
        for (int j = 0; j < i; ++j)
            if (req[j].req_id == r.req_id) return fail_neg(EINVAL); // ids must be unique
        const mrc::EvSpec path = path_of(r.ev_fmt_mode, ev_value(r.req_ev), r.req_ev.port, false);
        EpProbeRequest p;
        p.req_id = r.req_id;
        p.port = r.req_ev.port - 1u;
        std::memcpy(p.sgid.data(), r.sgid.raw, 16);
        std::memcpy(p.dgid.data(), r.dgid.raw, 16);
        p.udp_sport = path.udp_sport;
        p.flow_label = path.flow_label;
        p.traffic_class = static_cast<std::uint8_t>(req_tc << 2); // req_tc is a DSCP
        probes.push_back(p);
    }
    std::lock_guard<std::mutex> one_caller(ep_mu()); // take_ep_replies has one consumer
    // Replies to an earlier batch that came after its timeout are not this batch's.
    std::array<EpProbeReply, 64> buf;
    while (dev.take_ep_replies(buf) > 0) {
    }
    static std::mt19937 rng{std::random_device{}()};
    const std::uint32_t nonce = static_cast<std::uint32_t>(rng());
    for (EpProbeRequest& p : probes)
        p.nonce = nonce;
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::nanoseconds(rsp_timeout);
    std::vector<bool> sent(probes.size(), false), answered(probes.size(), false);
    std::size_t outstanding = probes.size(), unsent = probes.size();
    while (outstanding > 0) {
        for (std::size_t i = 0; i < probes.size() && unsent > 0; ++i) {
            if (sent[i]) continue;
            int r;
            {
                // Serialised with the process's other control calls (the neighbour table and the
                // port's transmit queue are the control path's while it runs), and refused once
                // the verbs context is closed.
                Control ctl(mrc_ctx->ibv);
                r = ctl.ok() ? dev.send_ep_probe(probes[i]) : EINVAL;
            }
            if (r == EAGAIN || r == ENOBUFS) continue; // the address is being resolved: again
            if (r != 0) return fail_neg(r);
            sent[i] = true;
            --unsent;
        }
        const std::size_t n = dev.take_ep_replies(buf);
        for (std::size_t k = 0; k < n; ++k) {
            const EpProbeReply& rep = buf[k];
            if (rep.nonce != nonce) continue; // stale or forged
            for (std::size_t i = 0; i < probes.size(); ++i) {
                if (answered[i] || !sent[i] || probes[i].req_id != rep.req_id) continue;
                answered[i] = true;
                --outstanding;
                mrc_ctl_ep_rsp& out = rsp[(*num_rsp)++];
                std::memset(&out, 0, sizeof out);
                out.req_id = rep.req_id;
                out.port = static_cast<std::uint8_t>(rep.port + 1u);
                out.rtt =
                    static_cast<unsigned int>(std::min<std::uint64_t>(rep.rtt_ns, UINT32_MAX));
                out.adj_svc_time = 0; // the responder's service time is not taken out
                break;
            }
        }
        if (outstanding == 0) break;
        if (clock::now() >= deadline) return fail_neg(ETIMEDOUT);
        if (n == 0) sched_yield();
    }
    return 0;
}
