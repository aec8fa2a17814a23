/* SPDX-License-Identifier: BSD-3-Clause */
#include "telemetry/telemetry.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>
#include <sched.h>
#include <signal.h>

#include <rte_ethdev.h>
#include <rte_telemetry.h>
#include <rte_version.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "mrc/mrc.h"

namespace droce::telemetry {

namespace {

struct Attached {
    std::uint64_t id = 0;
    Source src;
};

/** Guards g_sources and serialises the handlers (DPDK runs one thread per client): detach()
 *  taking it waits for a command in progress. */
std::mutex& g_mu() {
    static auto* m = new std::mutex; // leaked: handlers may run while the process exits
    return *m;
}
std::vector<Attached>& g_sources() {
    static auto* v = new std::vector<Attached>;
    return *v;
}
std::uint64_t g_next_id = 1;
bool g_registered = false;

// ---------------------------------------------------------------- small helpers

/** Telemetry strings are at most RTE_TEL_MAX_STRING_LEN - 1 bytes; longer ones are cut. */
std::string fit(std::string s) {
    if (s.size() >= RTE_TEL_MAX_STRING_LEN) s.resize(RTE_TEL_MAX_STRING_LEN - 1);
    return s;
}

int reply_error(rte_tel_data* d, const std::string& msg) {
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "error", fit(msg).c_str());
    return 0;
}

void add_str(rte_tel_data* d, const char* name, const std::string& v) {
    rte_tel_data_add_dict_string(d, name, fit(v).c_str());
}

/** Splits @p s at @p sep (empty fields kept). */
std::vector<std::string> split(std::string_view s, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        const std::size_t at = s.find(sep, start);
        out.emplace_back(s.substr(start, at == std::string_view::npos ? at : at - start));
        if (at == std::string_view::npos) break;
        start = at + 1;
    }
    return out;
}

/** Decimal or 0x-prefixed hex, all of @p s, at most @p max. */
bool parse_number(const std::string& s, std::uint64_t max, std::uint64_t* out) {
    if (s.empty() || s.size() > 20) return false;
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char* p = s.c_str() + (hex ? 2 : 0);
    if (!std::isxdigit(static_cast<unsigned char>(*p))) return false;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(p, &end, hex ? 16 : 10);
    if (errno != 0 || *end != '\0' || v > max) return false;
    *out = v;
    return true;
}

std::string mac_text(const wire::MacAddr& m) {
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return b;
}

std::string gid_text(const wire::Ipv6Addr& g) {
    char b[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, g.data(), b, sizeof b);
    return b;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

/** The QPN of a registry scope "qp/0x<hex>" (the QP's own block, not "qp/0x…/mrc"). */
bool qp_scope(std::string_view scope, std::uint32_t* qpn) {
    if (scope.substr(0, 5) != "qp/0x" || scope.find('/', 3) != std::string_view::npos) return false;
    std::uint64_t v = 0;
    if (!parse_number(std::string("0x") + std::string(scope.substr(5)), UINT32_MAX, &v))
        return false;
    *qpn = static_cast<std::uint32_t>(v);
    return true;
}

/**
 * Calls @p fn(qp) for every live QP of @p dev, in registration order, while the registry's lock
 * is held: a QP whose block is listed cannot be freed meanwhile (destroy_qp unlists it first).
 * @p fn must not call into the registry.
 */
template <typename Fn>
void for_each_qp(Device& dev, Fn&& fn) {
    std::string last;
    dev.counter_registry().for_each([&](std::string_view scope, std::string_view, std::uint64_t) {
        if (scope == last) return; // once per block
        last.assign(scope);
        std::uint32_t qpn = 0;
        if (!qp_scope(scope, &qpn)) return;
        if (rc::Qp* qp = dev.qp_by_num(qpn)) fn(*qp);
    });
}

/** One counter block read from the registry. */
struct Block {
    std::string scope;
    std::vector<std::pair<std::string, std::uint64_t>> values;
};

std::vector<Block> read_blocks(const Device& dev) {
    std::vector<Block> out;
    dev.counter_registry().for_each(
        [&](std::string_view scope, std::string_view name, std::uint64_t v) {
            if (out.empty() || out.back().scope != scope)
                out.push_back(Block{std::string(scope), {}});
            out.back().values.emplace_back(std::string(name), v);
        });
    return out;
}

rte_tel_data* dict_of(const std::vector<std::pair<std::string, std::uint64_t>>& values) {
    rte_tel_data* c = rte_tel_data_alloc();
    if (!c) return nullptr;
    rte_tel_data_start_dict(c);
    for (const auto& [n, v] : values)
        rte_tel_data_add_dict_u64(c, n.c_str(), v);
    return c;
}

void add_container(rte_tel_data* d, const char* name, rte_tel_data* c) {
    if (c && rte_tel_data_add_dict_container(d, name, c, 0) != 0) rte_tel_data_free(c);
}

/** Takes the owner's control mutex, waiting at most kLockWaitMs. */
class ControlLock {
  public:
    explicit ControlLock(std::mutex* m) : m_(m) {
        if (!m_) return;
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(kLockWaitMs);
        while (!(held_ = m_->try_lock())) {
            if (std::chrono::steady_clock::now() > deadline) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    ~ControlLock() {
        if (held_) m_->unlock();
    }
    ControlLock(const ControlLock&) = delete;
    ControlLock& operator=(const ControlLock&) = delete;
    [[nodiscard]] bool ok() const noexcept { return !m_ || held_; }

  private:
    std::mutex* m_;
    bool held_ = false;
};

constexpr const char* kBusy = "busy: a control call holds the device, try again";

struct Found {
    Attached* src = nullptr;
    Device* dev = nullptr;
    const DeviceEntry* entry = nullptr;
};

/** The device named @p name (empty: the only one). Caller holds g_mu. */
Found find_device(const std::string& name, std::string* err) {
    Found f;
    unsigned count = 0;
    for (Attached& a : g_sources())
        for (const DeviceEntry& e : a.src.devices) {
            ++count;
            if ((name.empty() && count == 1) || (!name.empty() && e.dev->name() == name && !f.dev))
                f = Found{&a, e.dev, &e};
        }
    if (name.empty() && count != 1) {
        *err = count == 0 ? "no droce device in this process"
                          : "several devices: name one (see /droce/devices)";
        return Found{};
    }
    if (!f.dev) *err = "no device \"" + name + "\" (see /droce/devices)";
    return f;
}

// ---------------------------------------------------------------- the commands

int cmd_devices(const char*, const char*, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    rte_tel_data_start_dict(d);
    rte_tel_data* names = rte_tel_data_alloc();
    rte_tel_data* ports = rte_tel_data_alloc();
    rte_tel_data* qps = rte_tel_data_alloc();
    if (!names || !ports || !qps) {
        rte_tel_data_free(names);
        rte_tel_data_free(ports);
        rte_tel_data_free(qps);
        return reply_error(d, "out of memory");
    }
    rte_tel_data_start_array(names, RTE_TEL_STRING_VAL);
    rte_tel_data_start_array(ports, RTE_TEL_INT_VAL);
    rte_tel_data_start_array(qps, RTE_TEL_U64_VAL);
    for (Attached& a : g_sources())
        for (const DeviceEntry& e : a.src.devices) {
            rte_tel_data_add_array_string(names, fit(e.dev->name()).c_str());
            rte_tel_data_add_array_int(ports, static_cast<int>(e.dev->num_ports()));
            std::uint64_t n = 0;
            std::string last;
            e.dev->counter_registry().for_each(
                [&](std::string_view scope, std::string_view, std::uint64_t) {
                    std::uint32_t qpn = 0;
                    if (scope != last && qp_scope(scope, &qpn)) ++n;
                    if (scope != last) last.assign(scope);
                });
            rte_tel_data_add_array_u64(qps, n);
        }
    add_container(d, "devices", names);
    add_container(d, "ports", ports);
    add_container(d, "qps", qps);
    return 0;
}

int cmd_device(const char*, const char* params, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    std::string err;
    const Found f = find_device(params ? params : "", &err);
    if (!f.dev) return reply_error(d, err);
    const std::vector<Block> blocks = read_blocks(*f.dev);
    rte_tel_data_start_dict(d);
    add_str(d, "name", f.dev->name());
    rte_tel_data_add_dict_int(d, "ports", static_cast<int>(f.dev->num_ports()));
    // "total": the device block plus every QP's own block, counter by counter (the names are the
    // same: common/counters.h). A gauge (rp_current_rate_mbps) sums as the device's rate.
    std::vector<std::pair<std::string, std::uint64_t>> total;
    std::uint64_t qps = 0;
    for (const Block& b : blocks) {
        std::uint32_t qpn = 0;
        const bool is_qp = qp_scope(b.scope, &qpn);
        if (b.scope == "device" || is_qp) {
            if (total.empty())
                total = b.values;
            else
                for (std::size_t i = 0; i < total.size() && i < b.values.size(); ++i)
                    total[i].second += b.values[i].second;
            if (is_qp) ++qps;
        }
    }
    rte_tel_data_add_dict_u64(d, "qps", qps);
    add_container(d, "total", dict_of(total));
    for (const Block& b : blocks)
        if (b.scope.rfind("qp/", 0) != 0) add_container(d, b.scope.c_str(), dict_of(b.values));
    return 0;
}

int cmd_port(const char*, const char* params, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    const std::vector<std::string> p = split(params ? params : "", '/');
    std::string err;
    if (p.size() != 2) return reply_error(d, "usage: /droce/port,DEV/PORT (PORT 1..4)");
    const Found f = find_device(p[0], &err);
    if (!f.dev) return reply_error(d, err);
    std::uint64_t port = 0;
    if (!parse_number(p[1], f.dev->num_ports(), &port) || port == 0)
        return reply_error(d, "no port \"" + p[1] + "\" on " + f.dev->name() + " (1.." +
                                  std::to_string(f.dev->num_ports()) + ")");
    const unsigned idx = static_cast<unsigned>(port - 1);
    ControlLock lock(f.src->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);

    bool admin = false, link = false;
    mrc::PlaneStats sum;
    std::uint64_t mrc_qps = 0;
    {
        // Admin state and the QP list are control state: read them with the engine between passes.
        Device::ControlSection cs(*f.dev);
        admin = f.dev->port_admin_up(idx);
        const PortDriver* drv = f.dev->port(idx).driver;
        link = drv && drv->link_up();
        for_each_qp(*f.dev, [&](rc::Qp& qp) {
            const mrc::PlaneStats* ps = mrc::plane_stats(qp, idx);
            if (!ps) return;
            ++mrc_qps;
            const auto ld = [](const std::atomic<std::uint64_t>& a) {
                return a.load(std::memory_order_relaxed);
            };
            sum.tx_pkts += ld(ps->tx_pkts);
            sum.tx_bytes += ld(ps->tx_bytes);
            sum.retransmits += ld(ps->retransmits);
            sum.rx_pkts += ld(ps->rx_pkts);
            sum.rx_bytes += ld(ps->rx_bytes);
        });
    }
    const PortSpec& ps = f.dev->port(idx);
    rte_tel_data_start_dict(d);
    add_str(d, "device", f.dev->name());
    rte_tel_data_add_dict_int(d, "port", static_cast<int>(port));
    rte_tel_data_add_dict_int(d, "plane", static_cast<int>(idx));
    // As ibv_query_port / `rdma link` name them.
    add_str(d, "state", admin && link ? "ACTIVE" : "DOWN");
    add_str(d, "physical_state", !admin ? "DISABLED" : link ? "LINK_UP" : "POLLING");
    add_str(d, "admin_state", admin ? "up" : "down");
    add_str(d, "link", link ? "up" : "down");
    add_str(d, "mac", mac_text(ps.mac));
    add_str(d, "gid", gid_text(ps.gid));
    rte_tel_data_add_dict_u64(d, "max_path_mtu", ps.mtu);
    rte_tel_data_add_dict_u64(d, "line_rate_mbps", static_cast<std::uint64_t>(ps.line_rate_mbps));
    const int eth = idx < f.entry->ethdev.size() ? f.entry->ethdev[idx] : -1;
    if (eth >= 0) {
        rte_tel_data_add_dict_int(d, "ethdev_port_id", eth);
        char name[RTE_ETH_NAME_MAX_LEN] = {};
        if (rte_eth_dev_get_name_by_port(static_cast<std::uint16_t>(eth), name) == 0)
            add_str(d, "ethdev_name", name);
        // As DPDK's own /ethdev/stats reads them from this thread.
        rte_eth_stats st{};
        if (rte_eth_stats_get(static_cast<std::uint16_t>(eth), &st) == 0) {
            add_container(d, "ethdev",
                          dict_of({{"ipackets", st.ipackets},
                                   {"opackets", st.opackets},
                                   {"ibytes", st.ibytes},
                                   {"obytes", st.obytes},
                                   {"imissed", st.imissed},
                                   {"ierrors", st.ierrors},
                                   {"oerrors", st.oerrors},
                                   {"rx_nombuf", st.rx_nombuf}}));
        }
    }
    const std::string neigh = "port" + std::to_string(port) + "/neigh";
    for (const Block& b : read_blocks(*f.dev))
        if (b.scope == neigh) add_container(d, "neigh", dict_of(b.values));
    if (mrc_qps) {
        add_container(d, "mrc",
                      dict_of({{"qps", mrc_qps},
                               {"tx_pkts", sum.tx_pkts.load()},
                               {"tx_bytes", sum.tx_bytes.load()},
                               {"retransmits", sum.retransmits.load()},
                               {"rx_pkts", sum.rx_pkts.load()},
                               {"rx_bytes", sum.rx_bytes.load()}}));
    }
    return 0;
}

int cmd_qps(const char*, const char* params, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    const std::vector<std::string> p = split(params ? params : "", '/');
    std::string err;
    if (p.size() > 2) return reply_error(d, "usage: /droce/qps,DEV[/FROM_QPN]");
    const Found f = find_device(p[0], &err);
    if (!f.dev) return reply_error(d, err);
    std::uint64_t from = 0;
    if (p.size() == 2 && !parse_number(p[1], 0xffffff, &from))
        return reply_error(d, "bad QPN \"" + p[1] + "\"");
    ControlLock lock(f.src->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);
    struct Row {
        std::uint32_t qpn;
        std::string transport;
        std::string state;
        int port;
        std::uint32_t dest_qpn;
    };
    std::vector<Row> rows;
    std::uint32_t next = 0;
    {
        Device::ControlSection cs(*f.dev);
        for_each_qp(*f.dev, [&](rc::Qp& qp) {
            if (qp.qpn < from) return;
            if (rows.size() == kMaxQpsPerReply) {
                if (!next || qp.qpn < next) next = qp.qpn;
                return;
            }
            rows.push_back(Row{qp.qpn, upper(qp.transport->name), upper(rc::to_string(qp.state)),
                               qp.attr.port_num, qp.attr.dest_qp_num});
        });
    }
    // Registration order is creation order, not QPN order (a freed QPN is used again).
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.qpn < b.qpn; });
    rte_tel_data_start_dict(d);
    add_str(d, "device", f.dev->name());
    rte_tel_data* qpn = rte_tel_data_alloc();
    rte_tel_data* tr = rte_tel_data_alloc();
    rte_tel_data* st = rte_tel_data_alloc();
    rte_tel_data* port = rte_tel_data_alloc();
    rte_tel_data* dq = rte_tel_data_alloc();
    if (qpn) rte_tel_data_start_array(qpn, RTE_TEL_U64_VAL);
    if (tr) rte_tel_data_start_array(tr, RTE_TEL_STRING_VAL);
    if (st) rte_tel_data_start_array(st, RTE_TEL_STRING_VAL);
    if (port) rte_tel_data_start_array(port, RTE_TEL_INT_VAL);
    if (dq) rte_tel_data_start_array(dq, RTE_TEL_U64_VAL);
    for (const Row& r : rows) {
        if (qpn) rte_tel_data_add_array_u64(qpn, r.qpn);
        if (tr) rte_tel_data_add_array_string(tr, r.transport.c_str());
        if (st) rte_tel_data_add_array_string(st, r.state.c_str());
        if (port) rte_tel_data_add_array_int(port, r.port);
        if (dq) rte_tel_data_add_array_u64(dq, r.dest_qpn);
    }
    add_container(d, "qpn", qpn);
    add_container(d, "transport", tr);
    add_container(d, "state", st);
    add_container(d, "port", port);
    add_container(d, "dest_qpn", dq);
    rte_tel_data_add_dict_u64(d, "next", next);
    return 0;
}

int cmd_qp(const char*, const char* params, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    const std::vector<std::string> p = split(params ? params : "", '/');
    std::string err;
    if (p.size() != 2) return reply_error(d, "usage: /droce/qp,DEV/QPN");
    const Found f = find_device(p[0], &err);
    if (!f.dev) return reply_error(d, err);
    std::uint64_t want = 0;
    if (!parse_number(p[1], 0xffffff, &want)) return reply_error(d, "bad QPN \"" + p[1] + "\"");
    ControlLock lock(f.src->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);

    bool found = false, is_mrc = false;
    std::string transport, state;
    int port = 0;
    std::uint32_t dest_qpn = 0, mtu = 0;
    CounterSnapshot counters;
    std::vector<std::pair<std::string, std::uint64_t>> mrc_counters;
    std::vector<std::vector<std::pair<std::string, std::uint64_t>>> planes;
    std::vector<mrc::EvInfo> evs;
    {
        Device::ControlSection cs(*f.dev);
        for_each_qp(*f.dev, [&](rc::Qp& qp) {
            if (qp.qpn != want) return;
            found = true;
            transport = upper(qp.transport->name);
            state = upper(rc::to_string(qp.state));
            port = qp.attr.port_num;
            dest_qpn = qp.attr.dest_qp_num;
            mtu = qp.mtu;
            counters = qp.counters.snapshot();
            if (!mrc::is_mrc(qp)) return;
            is_mrc = true;
            if (const mrc::MrcCounters* mc = mrc::counters(qp)) {
                for (std::size_t i = 0; i < mrc::kNumMrcCounters; ++i)
                    mrc_counters.emplace_back(std::string(mrc::kMrcCounterNames[i]),
                                              mc->v[i].load(std::memory_order_relaxed));
            }
            for (unsigned pl = 0; pl < f.dev->num_ports(); ++pl) {
                const mrc::PlaneStats* s = mrc::plane_stats(qp, pl);
                if (!s) break;
                const auto ld = [](const std::atomic<std::uint64_t>& a) {
                    return a.load(std::memory_order_relaxed);
                };
                planes.push_back({{"tx_pkts", ld(s->tx_pkts)},
                                  {"tx_bytes", ld(s->tx_bytes)},
                                  {"retransmits", ld(s->retransmits)},
                                  {"rx_pkts", ld(s->rx_pkts)},
                                  {"rx_bytes", ld(s->rx_bytes)}});
            }
            evs.resize(mrc::kMaxEvs);
            evs.resize(mrc::ev_snapshot(qp, evs)); // engine between passes: ControlSection
        });
    }
    if (!found)
        return reply_error(d, "no QP " + std::to_string(want) + " on " + f.dev->name() +
                                  " (see /droce/qps," + f.dev->name() + ")");
    rte_tel_data_start_dict(d);
    add_str(d, "device", f.dev->name());
    rte_tel_data_add_dict_u64(d, "qpn", want);
    add_str(d, "transport", transport);
    add_str(d, "state", state);
    rte_tel_data_add_dict_int(d, "port", port);
    rte_tel_data_add_dict_u64(d, "dest_qpn", dest_qpn);
    rte_tel_data_add_dict_u64(d, "path_mtu", mtu);
    std::vector<std::pair<std::string, std::uint64_t>> cv;
    for (std::size_t i = 0; i < kNumCounters; ++i)
        cv.emplace_back(std::string(kCounterNames[i]), counters.v[i]);
    add_container(d, "counters", dict_of(cv));
    if (!is_mrc) return 0;
    add_container(d, "mrc", dict_of(mrc_counters));
    for (std::size_t pl = 0; pl < planes.size(); ++pl)
        add_container(d, ("plane" + std::to_string(pl)).c_str(), dict_of(planes[pl]));
    // Paths in columns: one array per field, index = path number (DPDK replies are at most
    // 16 KiB; 256 paths in rows of dicts would not fit).
    rte_tel_data* sport = rte_tel_data_alloc();
    rte_tel_data* plane = rte_tel_data_alloc();
    rte_tel_data* est = rte_tel_data_alloc();
    rte_tel_data* tx = rte_tel_data_alloc();
    rte_tel_data* loss = rte_tel_data_alloc();
    if (sport) rte_tel_data_start_array(sport, RTE_TEL_U64_VAL);
    if (plane) rte_tel_data_start_array(plane, RTE_TEL_INT_VAL);
    if (est) rte_tel_data_start_array(est, RTE_TEL_STRING_VAL);
    if (tx) rte_tel_data_start_array(tx, RTE_TEL_U64_VAL);
    if (loss) rte_tel_data_start_array(loss, RTE_TEL_U64_VAL);
    for (const mrc::EvInfo& e : evs) {
        if (sport) rte_tel_data_add_array_u64(sport, e.udp_sport);
        if (plane) rte_tel_data_add_array_int(plane, e.plane);
        if (est) rte_tel_data_add_array_string(est, std::string(mrc::to_string(e.state)).c_str());
        if (tx) rte_tel_data_add_array_u64(tx, e.tx_pkts);
        if (loss) rte_tel_data_add_array_u64(loss, e.losses);
    }
    add_container(d, "ev_udp_sport", sport);
    add_container(d, "ev_plane", plane);
    add_container(d, "ev_state", est);
    add_container(d, "ev_tx_pkts", tx);
    add_container(d, "ev_losses", loss);
    return 0;
}

/** The first source that can capture. Caller holds g_mu. */
Attached* capture_source() {
    for (Attached& a : g_sources())
        if (a.src.capture_start) return &a;
    return nullptr;
}

void put_capture(rte_tel_data* d, const CaptureStatus& s) {
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_int(d, "running", s.running ? 1 : 0);
    add_str(d, "file", s.file);
    rte_tel_data_add_dict_u64(d, "snaplen", s.snaplen);
    rte_tel_data_add_dict_u64(d, "frames", s.stats.frames);
    rte_tel_data_add_dict_u64(d, "dropped", s.stats.dropped);
    rte_tel_data_add_dict_u64(d, "truncated", s.stats.truncated);
    rte_tel_data_add_dict_u64(d, "bytes", s.stats.bytes);
    rte_tel_data_add_dict_int(d, "write_errno", s.stats.error);
}

int cmd_capture(const char*, const char*, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    Attached* a = capture_source();
    if (!a) return reply_error(d, "this process cannot capture (no droce runtime)");
    ControlLock lock(a->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);
    put_capture(d, a->src.capture_status());
    return 0;
}

int cmd_capture_start(const char*, const char* params, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    const std::vector<std::string> p = split(params ? params : "", ',');
    if (p.empty() || p.size() > 2 || p[0].empty())
        return reply_error(d, "usage: /droce/capture_start,FILE[,SNAPLEN] (FILE an absolute path)");
    if (std::string e = check_capture_path(p[0]); !e.empty())
        return reply_error(d, "capture " + p[0] + ": " + e);
    std::uint64_t snaplen = 0;
    if (p.size() == 2 && (!parse_number(p[1], capture::Capture::kMaxSnaplen, &snaplen) ||
                          snaplen < capture::Capture::kMinSnaplen))
        return reply_error(d, "snaplen \"" + p[1] + "\": a number of bytes in 64..65535");
    Attached* a = capture_source();
    if (!a) return reply_error(d, "this process cannot capture (no droce runtime)");
    ControlLock lock(a->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);
    if (const CaptureStatus now = a->src.capture_status(); now.running)
        return reply_error(d, "a capture runs already (" + now.file + "): stop it first");
    if (std::string e = a->src.capture_start(p[0], static_cast<std::uint32_t>(snaplen)); !e.empty())
        return reply_error(d, e);
    put_capture(d, a->src.capture_status());
    return 0;
}

int cmd_capture_stop(const char*, const char*, rte_tel_data* d) {
    std::lock_guard g(g_mu());
    Attached* a = capture_source();
    if (!a) return reply_error(d, "this process cannot capture (no droce runtime)");
    ControlLock lock(a->src.control_mutex);
    if (!lock.ok()) return reply_error(d, kBusy);
    if (!a->src.capture_status().running) return reply_error(d, "no capture runs");
    put_capture(d, a->src.capture_stop());
    return 0;
}

struct Command {
    const char* name;
    telemetry_cb fn;
    const char* help;
};

constexpr std::array<Command, 8> kCommands{{
    {"/droce/devices", cmd_devices, "droce devices: names, ports, QPs. No parameters."},
    {"/droce/device", cmd_device,
     "Counter blocks of a droce device and their total. Parameters: DEV (optional with one "
     "device)"},
    {"/droce/port", cmd_port,
     "A droce port (plane): state, addresses, ethdev stats, neighbour and MRC plane counters. "
     "Parameters: DEV/PORT (PORT 1..4)"},
    {"/droce/qps", cmd_qps,
     "QPs of a droce device: QPN, transport, state. Parameters: DEV[/FROM_QPN]"},
    {"/droce/qp", cmd_qp,
     "A droce QP: state, counters, MRC counters, planes and paths. Parameters: DEV/QPN"},
    {"/droce/capture", cmd_capture, "The live pcapng capture: file, frames, dropped, truncated."},
    {"/droce/capture_start", cmd_capture_start,
     "Starts capturing every droce device. Parameters: FILE[,SNAPLEN] (absolute path; 64..65535)"},
    {"/droce/capture_stop", cmd_capture_stop, "Stops the live capture; replies its figures."},
}};

} // namespace

std::string check_capture_path(const std::string& path) {
    if (path.empty() || path[0] != '/')
        return "not an absolute path (the droce process has its own working directory)";
    if (path.size() >= RTE_TEL_MAX_STRING_LEN - 8) return "path longer than 119 bytes";
    for (char c : path)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ',')
            return "control character or comma in the path";
    if (path.back() == '/') return "names a directory";
    const std::string dir = path.substr(0, path.rfind('/'));
    struct stat st {};
    if (stat(dir.empty() ? "/" : dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return "directory " + (dir.empty() ? std::string("/") : dir) + " does not exist";
    if (lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "" : std::strerror(errno);
    if (!S_ISREG(st.st_mode)) return "exists and is not a regular file";
    // pcapng Section Header Block type, the same in either byte order.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return std::strerror(errno);
    std::uint8_t magic[4] = {};
    const ssize_t n = read(fd, magic, sizeof magic);
    close(fd);
    if (st.st_size != 0 && (n != 4 || std::memcmp(magic, "\x0a\x0d\x0d\x0a", 4) != 0))
        return "exists and is not a pcapng file (droce overwrites only its own captures)";
    return "";
}

std::uint64_t attach(Source src, std::string* err) {
    std::lock_guard g(g_mu());
    if (!g_registered) {
        for (const Command& c : kCommands) {
            if (const int rc = rte_telemetry_register_cmd(c.name, c.fn, c.help); rc != 0) {
                *err =
                    std::string("rte_telemetry_register_cmd ") + c.name + ": " + std::strerror(-rc);
                return 0;
            }
        }
        g_registered = true;
    }
    const std::uint64_t id = g_next_id++;
    g_sources().push_back(Attached{id, std::move(src)});
    return id;
}

namespace {

#if RTE_VER_YEAR == 22 && RTE_VER_MONTH == 11
// DPDK 22.11 lib/telemetry/telemetry_internal.h (not installed): the EAL calls it at start-up.
using TelemetryLogFn = int (*)(std::uint32_t level, std::uint32_t logtype, const char* format, ...);
extern "C" int rte_telemetry_init(const char* runtime_dir, const char* rte_version,
                                  rte_cpuset_t* cpuset, TelemetryLogFn log_fn,
                                  std::uint32_t registered_logtype);

int telemetry_log(std::uint32_t level, std::uint32_t /*logtype*/, const char* format, ...) {
    if (level > RTE_LOG_ERR) return 0; // "no legacy callbacks" and such are warnings
    std::fputs("droce: telemetry: ", stderr);
    va_list ap;
    va_start(ap, format);
    const int n = std::vfprintf(stderr, format, ap);
    va_end(ap);
    return n;
}
#endif

constexpr const char* kUringPrefix = "droce-uring-";
/** Held (flock) by the process that serves a droce-uring directory, for as long as it lives: a
 *  directory whose lock can be taken is stale, whatever its PID says in another PID namespace. */
constexpr const char* kLockName = "droce.lock";

/** The process's directory, for the exit handler (static storage: the library keeps a pointer). */
std::string& g_socket_dir() {
    static std::string d;
    return d;
}
/** The process that opened it (a forked child that exits must not remove its parent's). */
pid_t g_owner_pid = 0;
/** For remove_socket_dir_on_signal(): the socket, lock and directory paths (no allocation). */
char g_sig_socket[PATH_MAX];
char g_sig_lock[PATH_MAX];
char g_sig_dir[PATH_MAX];

/** True when @p st is a directory of this user that no one else may write to. */
bool own_private_dir(const struct stat& st) {
    return S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

/**
 * Opens the entry @p name of the directory open as @p parent_fd when it is a private directory of
 * this user, never through a symbolic link (a directory of /tmp/dpdk, where another user may have
 * planted one, must not lead anything elsewhere): the descriptor, or -1.
 */
int open_own_dir_at(int parent_fd, const char* name) {
    struct stat st {};
    if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !own_private_dir(st)) return -1;
    const int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat now {};
    if (fd >= 0 && (fstat(fd, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino)) {
        close(fd); // replaced between the two looks
        return -1;
    }
    return fd;
}

/** Removes the files in the directory open as @p fd (closed here), then the entry @p name of
 *  @p parent_fd. */
void remove_dir_fd(int parent_fd, const char* name, int fd) {
    if (DIR* d = fdopendir(fd)) { // owns fd from here
        while (const dirent* e = readdir(d)) {
            if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
                (void)unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
    } else {
        close(fd);
    }
    (void)unlinkat(parent_fd, name, AT_REMOVEDIR);
}

/**
 * Whether the droce-uring directory open as @p fd is served by a live process: its lock is held
 * (a directory without one, from a droce before the lock: its PID alive in this namespace).
 */
bool served(int fd, const char* name) {
    const int lk = openat(fd, kLockName, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (lk < 0) {
        const long pid = std::strtol(name + std::strlen(kUringPrefix), nullptr, 10);
        return pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    }
    const bool held = flock(lk, LOCK_EX | LOCK_NB) != 0;
    close(lk); // a lock taken here goes with the descriptor
    return held;
}

/** open_socket_without_eal made the base directory: at exit it goes too when empty, so that a
 *  shared /tmp/dpdk is not left this user's (the next user could not use it). */
bool g_made_base = false;

/** Registered before DPDK's own exit handler, so it runs after it (sockets unlinked first). */
void remove_socket_dir() {
    const std::string& d = g_socket_dir();
    if (d.empty() || getpid() != g_owner_pid) return;
    const std::size_t slash = d.rfind('/');
    const int parent = open(d.substr(0, slash).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) return;
    if (const int fd = open_own_dir_at(parent, d.c_str() + slash + 1); fd >= 0)
        remove_dir_fd(parent, d.c_str() + slash + 1, fd);
    close(parent);
    if (g_made_base) (void)rmdir(d.substr(0, slash).c_str()); // refused unless empty
}

/** droce-uring directories under the base open as @p base_fd that no live process serves. */
void remove_stale(int base_fd) {
    const int fd = dup(base_fd);
    DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    const std::size_t plen = std::strlen(kUringPrefix);
    while (const dirent* e = readdir(d)) {
        if (std::strncmp(e->d_name, kUringPrefix, plen) != 0) continue;
        const int dir = open_own_dir_at(base_fd, e->d_name); // only this user's, never a link
        if (dir < 0) continue;
        if (served(dir, e->d_name))
            close(dir);
        else
            remove_dir_fd(base_fd, e->d_name, dir);
    }
    closedir(d);
}

/** Copies @p a then @p b into @p out (PATH_MAX), for the signal path. */
void set_path(char* out, const std::string& a, const char* b) {
    std::snprintf(out, PATH_MAX, "%s%s", a.c_str(), b);
}

} // namespace

bool open_socket_without_eal(std::string* dir, std::string* err) {
    std::string scratch;
    if (!err) err = &scratch;
    static std::mutex mu;
    static bool opened = false, failed = false;
    std::lock_guard g(mu);
    if (opened || failed) {
        if (dir) *dir = g_socket_dir();
        if (failed) *err = "an earlier attempt failed";
        return opened;
    }
    failed = true; // until it worked: one attempt per process
#if RTE_VER_YEAR == 22 && RTE_VER_MONTH == 11
    std::string base;
    if (geteuid() == 0)
        base = "/var/run";
    else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
        base = x;
    else
        base = "/tmp";
    base += "/dpdk";
    std::string name;
    int base_fd = -1, dir_fd = -1;
    // Twice at most: a process that made the base removes it at exit when it is empty, which can
    // fall between our mkdir of it and our mkdirat in it (ENOENT).
    for (int attempt = 0; attempt < 2 && dir_fd < 0; ++attempt) {
        if (base_fd >= 0) close(base_fd);
        if (mkdir(base.c_str(), 0700) == 0) {
            g_made_base = true;
        } else if (errno != EEXIST) {
            *err = "mkdir " + base + ": " + std::strerror(errno);
            return false;
        }
        // The base must be this user's and private: in another user's (a world-writable
        // /tmp/dpdk) that user could put a socket of theirs in the place of ours.
        base_fd = open(base.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat bst {};
        if (base_fd < 0 || fstat(base_fd, &bst) != 0 || !own_private_dir(bst)) {
            *err = base + " is not a private directory of this user (set XDG_RUNTIME_DIR to one)";
            if (base_fd >= 0) close(base_fd);
            return false;
        }
        remove_stale(base_fd);
        // droce-uring-PID, or -PID-N when a live process of another PID namespace has that name.
        for (int n = 0; n < 16 && dir_fd < 0; ++n) {
            name = kUringPrefix + std::to_string(getpid()) + (n ? "-" + std::to_string(n) : "");
            const bool made = mkdirat(base_fd, name.c_str(), 0700) == 0;
            if (!made && errno != EEXIST) break; // ENOENT: the base went; the next attempt
            const int fd = open_own_dir_at(base_fd, name.c_str());
            if (fd < 0) continue; // not ours, or not a directory: the next name
            if (!made && served(fd, name.c_str())) {
                close(fd); // a live process of another PID namespace has it
                continue;
            }
            dir_fd = fd;
        }
    }
    const int lock_fd =
        dir_fd < 0 ? -1
                   : openat(dir_fd, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        *err = "no directory of ours under " + base + " for the socket (" + name +
               (dir_fd < 0 ? ")" : ": " + std::string(std::strerror(errno)) + ")");
        if (lock_fd >= 0) close(lock_fd);
        if (dir_fd >= 0) close(dir_fd);
        close(base_fd);
        return false;
    }
    // lock_fd stays open, and locked, for the life of the process.
    close(dir_fd);
    close(base_fd);
    const std::string d = base + "/" + name;
    g_socket_dir() = d; // the library keeps the pointer: static storage
    g_owner_pid = getpid();
    set_path(g_sig_socket, d, "/dpdk_telemetry.v2");
    set_path(g_sig_lock, d, "/droce.lock");
    set_path(g_sig_dir, d, "");
    static rte_cpuset_t cpus;
    CPU_ZERO(&cpus);
    (void)sched_getaffinity(0, sizeof cpus, &cpus);
    static bool handler = false;
    if (!handler) handler = std::atexit(remove_socket_dir) == 0;
    if (rte_telemetry_init(g_socket_dir().c_str(), rte_version(), &cpus, telemetry_log, 0) != 0) {
        *err = "rte_telemetry_init in " + d + " failed";
        remove_socket_dir();
        g_socket_dir().clear();
        return false;
    }
    opened = true;
    failed = false;
    if (dir) *dir = d;
    return true;
#else
    *err = std::string("a telemetry socket without the EAL needs DPDK 22.11 (this is ") +
           rte_version() + ")";
    return false;
#endif
}

void remove_socket_dir_on_signal() noexcept {
    if (g_sig_dir[0] == '\0' || getpid() != g_owner_pid) return;
    (void)unlink(g_sig_socket);
    (void)unlink(g_sig_lock);
    (void)rmdir(g_sig_dir);
}

void detach(std::uint64_t id) noexcept {
    if (id == 0) return;
    std::lock_guard g(g_mu());
    std::erase_if(g_sources(), [id](const Attached& a) { return a.id == id; });
}

} // namespace droce::telemetry
