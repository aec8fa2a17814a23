/* SPDX-License-Identifier: BSD-3-Clause */
#include "config/config.h"

#include "cc/dcqcn.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>

#include <rte_cfgfile.h>

#include "rc/params.h"

namespace droce {

const char* to_string(PortDriverKind k) noexcept {
    switch (k) {
    case PortDriverKind::dpdk:
        return "dpdk";
    case PortDriverKind::uring:
        return "uring";
    }
    return "?";
}

const char* to_string(ClockKind k) noexcept {
    switch (k) {
    case ClockKind::tsc:
        return "tsc";
    case ClockKind::virtual_clock:
        return "virtual";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// value parsers

namespace {

int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

} // namespace

bool parse_mac(std::string_view s, wire::MacAddr* out) noexcept {
    if (s.size() != 17) return false;
    wire::MacAddr m{};
    for (unsigned i = 0; i < 6; ++i) {
        const int hi = hex_digit(s[i * 3]);
        const int lo = hex_digit(s[i * 3 + 1]);
        if (hi < 0 || lo < 0) return false;
        if (i < 5 && s[i * 3 + 2] != ':') return false;
        m[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    *out = m;
    return true;
}

bool parse_ip(std::string_view s, IpAddr* out) noexcept {
    char buf[64];
    if (s.empty() || s.size() >= sizeof(buf)) return false;
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
    IpAddr a;
    if (s.find(':') == std::string_view::npos) {
        wire::Ipv4Addr v4;
        if (inet_pton(AF_INET, buf, v4.data()) != 1) return false;
        a.addr = wire::ipv4_mapped(v4);
        a.ipv4 = true;
    } else {
        if (inet_pton(AF_INET6, buf, a.addr.data()) != 1) return false;
        a.ipv4 = false;
    }
    *out = a;
    return true;
}

bool parse_uint(std::string_view s, std::uint64_t lo, std::uint64_t hi,
                std::uint64_t* out) noexcept {
    if (s.empty() || s.size() > 18) return false;
    std::uint64_t v = 0;
    for (const char c : s) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_ip_prefix(std::string_view s, IpAddr* out, std::uint8_t* prefix_len) noexcept {
    const std::size_t slash = s.find('/');
    if (slash == std::string_view::npos) return false;
    IpAddr a;
    if (!parse_ip(s.substr(0, slash), &a)) return false;
    std::uint64_t len = 0;
    if (!parse_uint(s.substr(slash + 1), 0, a.ipv4 ? 32 : 128, &len)) return false;
    *out = a;
    *prefix_len = static_cast<std::uint8_t>(len);
    return true;
}

std::string to_string(const wire::MacAddr& mac) {
    char b[18];
    std::snprintf(b, sizeof(b), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                  mac[4], mac[5]);
    return b;
}

std::string to_string(const IpAddr& ip) {
    char b[INET6_ADDRSTRLEN];
    if (ip.ipv4) {
        if (!inet_ntop(AF_INET, ip.addr.data() + 12, b, sizeof(b))) return "?";
    } else if (!inet_ntop(AF_INET6, ip.addr.data(), b, sizeof(b))) {
        return "?";
    }
    return b;
}

// ---------------------------------------------------------------------------------------------
// the loader

namespace {

constexpr std::size_t kMaxFileBytes = 1u << 20;
constexpr std::size_t kMaxLineBytes =
    320; // rte_cfgfile reads lines into CFG_NAME_LEN + CFG_VALUE_LEN + 4
constexpr std::size_t kMaxKeyBytes = CFG_NAME_LEN - 1;
constexpr std::size_t kMaxValueBytes = CFG_VALUE_LEN - 1;
constexpr char kComment = '#';

/** RoCEv2 headers around a full path-MTU payload: IP + UDP + BTH + RETH + ImmDt + ICRC. */
constexpr std::uint32_t kRoceOverheadV4 = 20 + 8 + 12 + 16 + 4 + 4;
constexpr std::uint32_t kRoceOverheadV6 = 40 + 8 + 12 + 16 + 4 + 4;

enum class Kind : std::uint8_t { device, port, qp, neighbors };

struct SectionId {
    int device = -1; ///< -1: the one-device form ([device], [port0] ...)
    Kind kind = Kind::device;
    unsigned port = 0;
};

bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && is_space(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && is_space(s.back()))
        s.remove_suffix(1);
    return s;
}

/** Quotes @p s for a message, replacing anything unprintable and cutting it short. */
std::string quote(std::string_view s) {
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size() && i < 80; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '"') {
            out += static_cast<char>(c);
        } else {
            char b[5];
            std::snprintf(b, sizeof(b), "\\x%02x", c);
            out += b;
        }
    }
    if (s.size() > 80) out += "...";
    return out + "\"";
}

bool single_digit(std::string_view s, unsigned max, unsigned* out) noexcept {
    if (s.size() != 1 || s[0] < '0' || static_cast<unsigned>(s[0] - '0') > max) return false;
    *out = static_cast<unsigned>(s[0] - '0');
    return true;
}

/** Classifies a section name; false for an unknown one. */
bool classify(std::string_view name, SectionId* id) noexcept {
    SectionId r;
    std::string_view rest = name;
    if (rest.size() > 6 && rest.substr(0, 6) == "device" && rest[6] >= '0' && rest[6] <= '9') {
        unsigned d = 0;
        if (!single_digit(rest.substr(6, 1), kMaxConfigDevices - 1, &d)) return false;
        r.device = static_cast<int>(d);
        rest.remove_prefix(7);
        if (rest.empty()) {
            r.kind = Kind::device;
            *id = r;
            return true;
        }
        if (rest[0] != '.') return false;
        rest.remove_prefix(1);
    } else if (rest == "device") {
        r.kind = Kind::device;
        *id = r;
        return true;
    }
    if (rest == "qp") {
        r.kind = Kind::qp;
    } else if (rest == "neighbors") {
        r.kind = Kind::neighbors;
    } else if (rest.size() == 5 && rest.substr(0, 4) == "port") {
        if (!single_digit(rest.substr(4), kMaxConfigPorts - 1, &r.port)) return false;
        r.kind = Kind::port;
    } else {
        return false;
    }
    *id = r;
    return true;
}

constexpr const char* kDeviceKeys[] = {"name",  "eal",     "clock",          "hugepages",
                                       "dcqcn", "capture", "capture_snaplen"};
constexpr const char* kPortKeys[] = {"driver",        "devargs",        "mac",       "ip",
                                     "mtu",           "line_rate_gbps", "interface", "udp_port",
                                     "peer_udp_port", "recv_mode",      "share",     "send_zc",
                                     "send_zc_min",   "taskrun",        "gso"};
constexpr const char* kDpdkOnlyKeys[] = {"devargs"};
constexpr const char* kUringOnlyKeys[] = {"interface",   "udp_port", "peer_udp_port",
                                          "recv_mode",   "share",    "send_zc",
                                          "send_zc_min", "taskrun",  "gso"};
constexpr const char* kQpKeys[] = {"path_mtu",  "timeout",       "retry_cnt",
                                   "rnr_retry", "min_rnr_timer", "max_rd_atomic"};

template <std::size_t N>
bool one_of(std::string_view k, const char* const (&keys)[N]) noexcept {
    return std::any_of(std::begin(keys), std::end(keys), [&](const char* x) { return k == x; });
}

template <std::size_t N>
std::string list(const char* const (&keys)[N]) {
    std::string s;
    for (const char* k : keys)
        s += (s.empty() ? "" : ", ") + std::string(k);
    return s;
}

/** Where each section and key is, from our own line scan (rte_cfgfile keeps no line numbers). */
struct Index {
    std::map<std::string, int> section_line;
    std::vector<std::string> sections; ///< in file order
    std::map<std::pair<std::string, std::string>, int> key_line;
};

class Loader {
  public:
    explicit Loader(std::string path) : path_(std::move(path)) {}

    std::optional<ConfigFile> run(std::string* err);

  private:
    bool fail(int line, const std::string& section, const std::string& key,
              const std::string& msg) {
        std::string m = path_;
        if (line > 0) m += ":" + std::to_string(line);
        m += ": ";
        if (!section.empty()) m += "[" + section + "]" + (key.empty() ? ": " : " ");
        if (!key.empty()) m += key + ": ";
        m += msg;
        error_ = m;
        return false;
    }
    bool scan(const std::string& text);
    bool check_key(int line, const std::string& section, const SectionId& id, std::string_view key);
    int line_of(const std::string& section, const std::string& key) const {
        const auto it = index_.key_line.find({section, key});
        return it == index_.key_line.end() ? 0 : it->second;
    }
    int line_of(const std::string& section) const {
        const auto it = index_.section_line.find(section);
        return it == index_.section_line.end() ? 0 : it->second;
    }
    const char* get(rte_cfgfile* cfg, const std::string& section, const char* key) const {
        if (!index_.key_line.count({section, key})) return nullptr;
        return rte_cfgfile_get_entry(cfg, section.c_str(), key);
    }
    bool build(rte_cfgfile* cfg, ConfigFile* out);
    bool build_device(rte_cfgfile* cfg, int dev, bool first, DeviceConfig* d);
    bool get_uint(rte_cfgfile* cfg, const std::string& section, const char* key, std::uint64_t lo,
                  std::uint64_t hi, std::uint64_t* v, bool* present);

    std::string path_;
    std::string error_;
    Index index_;
    std::set<int> devices_; ///< device numbers seen (-1 for the one-device form)
};

bool Loader::check_key(int line, const std::string& section, const SectionId& id,
                       std::string_view key) {
    const std::string k(key);
    switch (id.kind) {
    case Kind::device:
        if (!one_of(key, kDeviceKeys))
            return fail(line, section, k, "unknown key (known: " + list(kDeviceKeys) + ")");
        break;
    case Kind::port:
        if (!one_of(key, kPortKeys))
            return fail(line, section, k, "unknown key (known: " + list(kPortKeys) + ")");
        break;
    case Kind::qp:
        if (!one_of(key, kQpKeys))
            return fail(line, section, k, "unknown key (known: " + list(kQpKeys) + ")");
        break;
    case Kind::neighbors: {
        IpAddr a;
        if (!parse_ip(key, &a))
            return fail(line, section, k, quote(key) + " is not an IPv4 or IPv6 address");
        break;
    }
    }
    return true;
}

bool Loader::scan(const std::string& text) {
    std::string section;
    SectionId id;
    bool have_section = false;
    int line = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        ++line;
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string_view raw(text.data() + pos, eol - pos);
        pos = eol + 1;
        if (raw.size() > kMaxLineBytes)
            return fail(line, "", "",
                        "line longer than " + std::to_string(kMaxLineBytes) + " bytes");
        for (const char c : raw) {
            const auto u = static_cast<unsigned char>(c);
            if ((u < 0x20 && !is_space(c)) || u == 0x7f)
                return fail(line, "", "", "control character in " + quote(raw));
            if (c == '\\') return fail(line, "", "", "backslash not allowed in " + quote(raw));
        }
        std::string_view s = raw;
        if (const std::size_t hash = s.find(kComment); hash != std::string_view::npos)
            s = s.substr(0, hash);
        s = trim(s);
        if (s.empty()) continue;
        if (s.front() == '[') {
            if (s.back() != ']' || s.size() < 3)
                return fail(line, "", "", "garbage: " + quote(raw) + " (expected [section])");
            const std::string_view name = trim(s.substr(1, s.size() - 2));
            if (name.find_first_of("[]") != std::string_view::npos || name.empty())
                return fail(line, "", "", "garbage: " + quote(raw) + " (expected [section])");
            SectionId nid;
            if (!classify(name, &nid))
                return fail(line, "", "",
                            "unknown section " + quote(name) +
                                " (known: device, port0..port3, qp, neighbors; or device0..device3 "
                                "and device0.port0 ...)");
            section = std::string(name);
            if (index_.section_line.count(section))
                return fail(line, section, "",
                            "duplicate section (first at line " +
                                std::to_string(index_.section_line[section]) + ")");
            if (!devices_.empty() && ((*devices_.begin() < 0) != (nid.device < 0)))
                return fail(line, section, "",
                            "mixes the one-device form ([device], [port0]) with the "
                            "several-device form ([device0], [device0.port0])");
            devices_.insert(nid.device);
            index_.section_line[section] = line;
            index_.sections.push_back(section);
            id = nid;
            have_section = true;
            continue;
        }
        const std::size_t eq = s.find('=');
        if (eq == std::string_view::npos)
            return fail(line, have_section ? section : "", "",
                        "garbage: " + quote(raw) + " (expected key = value)");
        const std::string_view key = trim(s.substr(0, eq));
        const std::string_view value = trim(s.substr(eq + 1));
        if (key.empty())
            return fail(line, have_section ? section : "", "",
                        "missing key before '=' in " + quote(raw));
        for (const char c : key)
            if (is_space(c) || c == '[' || c == ']')
                return fail(line, have_section ? section : "", "",
                            "garbage: " + quote(raw) + " (bad key)");
        const std::string k(key);
        if (key.size() > kMaxKeyBytes)
            return fail(line, section, "",
                        "key " + quote(key) + " longer than " + std::to_string(kMaxKeyBytes));
        if (!have_section)
            return fail(line, "", k, "key outside any section (missing [section] line above it)");
        if (value.empty()) return fail(line, section, k, "empty value");
        if (value.size() > kMaxValueBytes)
            return fail(line, section, k,
                        "value longer than " + std::to_string(kMaxValueBytes) + " bytes");
        if (!check_key(line, section, id, key)) return false;
        if (const auto it = index_.key_line.find({section, k}); it != index_.key_line.end())
            return fail(line, section, k,
                        "duplicate key (first at line " + std::to_string(it->second) + ")");
        index_.key_line[{section, k}] = line;
    }
    return true;
}

bool Loader::get_uint(rte_cfgfile* cfg, const std::string& section, const char* key,
                      std::uint64_t lo, std::uint64_t hi, std::uint64_t* v, bool* present) {
    const char* s = get(cfg, section, key);
    *present = s != nullptr;
    if (!s) return true;
    if (!parse_uint(s, lo, hi, v))
        return fail(line_of(section, key), section, key,
                    quote(s) + " is not a number in " + std::to_string(lo) + ".." +
                        std::to_string(hi));
    return true;
}

bool Loader::build_device(rte_cfgfile* cfg, int dev, bool first, DeviceConfig* d) {
    const std::string prefix = dev < 0 ? "" : "device" + std::to_string(dev) + ".";
    const std::string dsec = dev < 0 ? "device" : "device" + std::to_string(dev);
    if (!index_.section_line.count(dsec)) {
        // Name the first section of this device that exists, so the user finds it.
        for (const auto& s : index_.sections)
            if (s.rfind(prefix, 0) == 0)
                return fail(line_of(s), s, "", "missing section [" + dsec + "] (with name = ...)");
        return fail(0, "", "", "missing section [" + dsec + "]");
    }
    // [device]
    const char* name = get(cfg, dsec, "name");
    if (!name) return fail(line_of(dsec), dsec, "", "missing required key \"name\"");
    const std::string_view nv(name);
    if (nv.size() > 63 || !std::all_of(nv.begin(), nv.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
        }))
        return fail(line_of(dsec, "name"), dsec, "name",
                    quote(nv) + " is not 1..63 of [A-Za-z0-9_.-]");
    d->name = name;
    if (const char* eal = get(cfg, dsec, "eal")) {
        if (!first)
            return fail(
                line_of(dsec, "eal"), dsec, "eal",
                "only the first device of a file sets EAL arguments (one process, one EAL)");
        std::istringstream in(eal);
        for (std::string a; in >> a;)
            d->eal.push_back(a);
    }
    if (const char* hp = get(cfg, dsec, "hugepages")) {
        const std::string_view h(hp);
        if (!first)
            return fail(line_of(dsec, "hugepages"), dsec, "hugepages",
                        "only the first device of a file sets it (it shapes the one EAL)");
        if (h == "auto")
            d->hugepages = HugepageMode::auto_fallback;
        else if (h == "off")
            d->hugepages = HugepageMode::off;
        else
            return fail(line_of(dsec, "hugepages"), dsec, "hugepages",
                        quote(h) + " is not auto or off (leave it out: the eal line decides)");
        // auto with --no-huge would never try hugepages: say so rather than run slow silently.
        if (d->hugepages == HugepageMode::auto_fallback &&
            std::find(d->eal.begin(), d->eal.end(), "--no-huge") != d->eal.end())
            return fail(line_of(dsec, "hugepages"), dsec, "hugepages",
                        "auto needs an eal line that asks for hugepages (remove --no-huge)");
    }
    if (const char* clk = get(cfg, dsec, "clock")) {
        const std::string_view c(clk);
        if (c == "tsc")
            d->clock = ClockKind::tsc;
        else if (c == "virtual")
            d->clock = ClockKind::virtual_clock;
        else
            return fail(line_of(dsec, "clock"), dsec, "clock", quote(c) + " is not tsc or virtual");
    }
    if (const char* cc = get(cfg, dsec, "dcqcn")) {
        const std::string_view c(cc);
        if (c != "off" && cc::profile_by_name(c) == nullptr)
            return fail(line_of(dsec, "dcqcn"), dsec, "dcqcn",
                        quote(c) + " is not off, nvidia or paper");
        d->dcqcn = std::string(c);
    }
    if (const char* cap = get(cfg, dsec, "capture")) {
        const std::string_view c(cap);
        if (std::any_of(c.begin(), c.end(), [](char ch) { return ch == ' ' || ch == '\t'; }))
            return fail(line_of(dsec, "capture"), dsec, "capture",
                        quote(c) + ": a file name without whitespace");
        d->capture = std::string(c);
    }
    {
        std::uint64_t v = 0;
        bool present = false;
        if (!get_uint(cfg, dsec, "capture_snaplen", 64, 65535, &v, &present)) return false;
        if (present) d->capture_snaplen = static_cast<std::uint32_t>(v);
    }
    // [portN]
    unsigned nports = 0;
    for (unsigned p = 0; p < kMaxConfigPorts; ++p)
        if (index_.section_line.count(prefix + "port" + std::to_string(p))) nports = p + 1;
    if (nports == 0)
        return fail(line_of(dsec), dsec, "", "no ports: add a [" + prefix + "port0] section");
    for (unsigned p = 0; p < nports; ++p) {
        const std::string psec = prefix + "port" + std::to_string(p);
        if (!index_.section_line.count(psec)) {
            const std::string next = prefix + "port" + std::to_string(p + 1);
            return fail(line_of(next), next, "",
                        "missing section [" + psec + "]: ports are numbered from 0 without gaps");
        }
        PortConfig pc;
        if (const char* drv = get(cfg, psec, "driver")) {
            const std::string_view dv(drv);
            if (dv == "dpdk")
                pc.driver = PortDriverKind::dpdk;
            else if (dv == "uring")
                pc.driver = PortDriverKind::uring;
            else
                return fail(line_of(psec, "driver"), psec, "driver",
                            quote(dv) + " is not dpdk or uring");
        }
        const bool uring = pc.driver == PortDriverKind::uring;
        const std::span<const char* const> foreign =
            uring ? std::span<const char* const>(kDpdkOnlyKeys)
                  : std::span<const char* const>(kUringOnlyKeys);
        for (const char* k : foreign)
            if (get(cfg, psec, k))
                return fail(line_of(psec, k), psec, k,
                            std::string("only for driver = ") + (uring ? "dpdk" : "uring") +
                                " (this port is driver = " + to_string(pc.driver) + ")");
        for (const char* req : {"devargs", "mac", "ip"})
            if (!get(cfg, psec, req) && (!uring || std::string_view(req) == "ip"))
                return fail(line_of(psec), psec, "",
                            "missing required key \"" + std::string(req) + "\"");
        if (!uring) {
            const std::string_view da(get(cfg, psec, "devargs"));
            if (std::any_of(da.begin(), da.end(), [](char c) { return is_space(c); }))
                return fail(line_of(psec, "devargs"), psec, "devargs",
                            quote(da) + " contains whitespace");
            pc.devargs = std::string(da);
        }
        if (const char* mac = get(cfg, psec, "mac")) {
            if (!parse_mac(mac, &pc.mac))
                return fail(line_of(psec, "mac"), psec, "mac",
                            quote(mac) + " is not a MAC address");
            if (pc.mac[0] & 1u)
                return fail(line_of(psec, "mac"), psec, "mac",
                            quote(mac) + " is a multicast address, not a port's");
            if (pc.mac == wire::MacAddr{})
                return fail(line_of(psec, "mac"), psec, "mac", quote(mac) + " is the zero address");
        }
        if (uring) {
            pc.mtu = 0; // the interface's, unless mtu = below
            if (const char* ifn = get(cfg, psec, "interface")) {
                const std::string_view iv(ifn);
                if (iv.size() > 15 || std::any_of(iv.begin(), iv.end(), [](char c) {
                        return is_space(c) || c == '/' || c == ':';
                    }))
                    return fail(line_of(psec, "interface"), psec, "interface",
                                quote(iv) + " is not an interface name (1..15 characters, no "
                                            "whitespace, '/' or ':')");
                pc.interface = std::string(iv);
            }
            std::uint64_t port = 0;
            bool have = false;
            if (!get_uint(cfg, psec, "udp_port", 1, 65535, &port, &have)) return false;
            if (have) pc.udp_port = static_cast<std::uint16_t>(port);
            if (!get_uint(cfg, psec, "peer_udp_port", 1, 65535, &port, &have)) return false;
            if (have) pc.peer_udp_port = static_cast<std::uint16_t>(port);
            if (const char* rm = get(cfg, psec, "recv_mode")) {
                const std::string_view r(rm);
                if (r != "auto" && r != "multishot" && r != "batched" && r != "packet")
                    return fail(line_of(psec, "recv_mode"), psec, "recv_mode",
                                quote(r) + " is not auto, multishot, batched or packet");
                pc.recv_mode = std::string(r);
            }
            if (const char* sh = get(cfg, psec, "share")) {
                const std::string_view v(sh);
                if (v != "yes" && v != "no")
                    return fail(line_of(psec, "share"), psec, "share",
                                quote(v) + " is not yes or no");
                pc.share = v == "yes";
            }
            if (const char* zc = get(cfg, psec, "send_zc")) {
                const std::string_view z(zc);
                if (z != "auto" && z != "on" && z != "off")
                    return fail(line_of(psec, "send_zc"), psec, "send_zc",
                                quote(z) + " is not auto, on or off");
                pc.send_zc = std::string(z);
            }
            std::uint64_t zc_min = 0;
            if (!get_uint(cfg, psec, "send_zc_min", 0, 65535, &zc_min, &have)) return false;
            if (have) pc.send_zc_min = static_cast<std::uint32_t>(zc_min);
            if (const char* tr = get(cfg, psec, "taskrun")) {
                const std::string_view t(tr);
                if (t != "auto" && t != "signal" && t != "coop")
                    return fail(line_of(psec, "taskrun"), psec, "taskrun",
                                quote(t) + " is not auto, signal or coop");
                pc.taskrun = std::string(t);
            }
            if (const char* gso = get(cfg, psec, "gso")) {
                const std::string_view v(gso);
                if (v != "auto" && v != "on" && v != "off")
                    return fail(line_of(psec, "gso"), psec, "gso",
                                quote(v) + " is not auto, on or off");
                pc.gso = std::string(v);
            }
        }
        const char* ip = get(cfg, psec, "ip");
        if (!parse_ip_prefix(ip, &pc.ip, &pc.prefix_len))
            return fail(
                line_of(psec, "ip"), psec, "ip",
                quote(ip) +
                    " is not an IPv4 or IPv6 address with /prefix (e.g. 10.0.0.1/24, fd00::1/64)");
        std::uint64_t v = 0;
        bool present = false;
        if (!get_uint(cfg, psec, "mtu", 576, 9600, &v, &present)) return false;
        if (present) pc.mtu = static_cast<std::uint32_t>(v);
        if (!get_uint(cfg, psec, "line_rate_gbps", 1, 800, &v, &present)) return false;
        if (present) pc.line_rate_mbps = static_cast<double>(v) * 1000.0;
        d->ports.push_back(pc);
    }
    // [qp]
    const std::string qsec = prefix + "qp";
    if (index_.section_line.count(qsec)) {
        std::uint64_t v = 0;
        bool present = false;
        if (const char* pm = get(cfg, qsec, "path_mtu")) {
            const std::string_view s(pm);
            if (s != "256" && s != "512" && s != "1024" && s != "2048" && s != "4096")
                return fail(line_of(qsec, "path_mtu"), qsec, "path_mtu",
                            quote(s) + " is not 256, 512, 1024, 2048 or 4096");
            (void)parse_uint(s, 256, 4096, &v);
            d->qp.path_mtu = static_cast<std::uint32_t>(v);
        }
        struct Field {
            const char* key;
            std::uint64_t max;
            std::uint8_t* dst;
        };
        const Field fields[] = {{"timeout", 31, &d->qp.timeout},
                                {"retry_cnt", 7, &d->qp.retry_cnt},
                                {"rnr_retry", 7, &d->qp.rnr_retry},
                                {"min_rnr_timer", 31, &d->qp.min_rnr_timer},
                                {"max_rd_atomic", rc::kMaxRdAtomic, &d->qp.max_rd_atomic}};
        for (const Field& f : fields) {
            if (!get_uint(cfg, qsec, f.key, 0, f.max, &v, &present)) return false;
            if (present) *f.dst = static_cast<std::uint8_t>(v);
        }
    }
    // path_mtu must fit every port.
    for (unsigned p = 0; p < d->ports.size(); ++p) {
        const PortConfig& pc = d->ports[p];
        const std::uint32_t need =
            d->qp.path_mtu + (pc.ip.ipv4 ? kRoceOverheadV4 : kRoceOverheadV6);
        if (pc.mtu != 0 && pc.mtu < need) { // 0: a uring port's interface MTU, checked later
            const std::string psec = prefix + "port" + std::to_string(p);
            const int ln = line_of(psec, "mtu") ? line_of(psec, "mtu") : line_of(psec);
            return fail(ln, psec, "mtu",
                        std::to_string(pc.mtu) + " is too small for path_mtu " +
                            std::to_string(d->qp.path_mtu) + " (needs >= " + std::to_string(need) +
                            " with RoCEv2 headers)");
        }
    }
    // [neighbors]
    const std::string nsec = prefix + "neighbors";
    if (index_.section_line.count(nsec)) {
        const int n = rte_cfgfile_section_num_entries(cfg, nsec.c_str());
        if (n > 0) {
            std::vector<rte_cfgfile_entry> entries(static_cast<std::size_t>(n));
            const int got = rte_cfgfile_section_entries(cfg, nsec.c_str(), entries.data(), n);
            for (int i = 0; i < got; ++i) {
                const rte_cfgfile_entry& e = entries[static_cast<std::size_t>(i)];
                Neighbor nb;
                if (!parse_ip(e.name, &nb.ip))
                    return fail(line_of(nsec, e.name), nsec, e.name,
                                quote(e.name) + " is not an IP address");
                if (!parse_mac(e.value, &nb.mac))
                    return fail(line_of(nsec, e.name), nsec, e.name,
                                quote(e.value) + " is not a MAC address");
                d->neighbors.push_back(nb);
            }
        }
    }
    return true;
}

bool Loader::build(rte_cfgfile* cfg, ConfigFile* out) {
    if (devices_.empty())
        return fail(0, "", "", "missing section [device] (the file has no sections)");
    const int max_dev = *devices_.rbegin();
    if (max_dev < 0) {
        DeviceConfig d;
        if (!build_device(cfg, -1, true, &d)) return false;
        out->devices.push_back(std::move(d));
    } else {
        for (int dev = 0; dev <= max_dev; ++dev) {
            if (!devices_.count(dev)) {
                const std::string next = "device" + std::to_string(dev + 1);
                return fail(line_of(next), next, "",
                            "missing section [device" + std::to_string(dev) +
                                "]: devices are numbered from 0 without gaps");
            }
            DeviceConfig d;
            if (!build_device(cfg, dev, dev == 0, &d)) return false;
            out->devices.push_back(std::move(d));
        }
    }
    // Names and devargs are unique within a file (one process).
    std::map<std::string, std::string> seen_devargs;
    for (std::size_t i = 0; i < out->devices.size(); ++i) {
        const DeviceConfig& d = out->devices[i];
        const std::string prefix = max_dev < 0 ? "" : "device" + std::to_string(i) + ".";
        for (std::size_t j = 0; j < i; ++j)
            if (out->devices[j].name == d.name) {
                const std::string dsec = "device" + std::to_string(i);
                return fail(line_of(dsec, "name"), dsec, "name",
                            quote(d.name) + " is already the name of [device" + std::to_string(j) +
                                "]");
            }
        for (std::size_t p = 0; p < d.ports.size(); ++p) {
            if (d.ports[p].driver != PortDriverKind::dpdk) continue; // no devargs
            const std::string psec = prefix + "port" + std::to_string(p);
            const auto [it, fresh] = seen_devargs.emplace(d.ports[p].devargs, psec);
            if (!fresh)
                return fail(line_of(psec, "devargs"), psec, "devargs",
                            quote(d.ports[p].devargs) + " is already used by [" + it->second + "]");
        }
    }
    return true;
}

std::optional<ConfigFile> Loader::run(std::string* err) {
    std::string scratch;
    if (!err) err = &scratch;
    std::ifstream in(path_, std::ios::binary);
    if (!in) {
        *err = path_ + ": cannot open: " + std::strerror(errno);
        return std::nullopt;
    }
    // In chunks, up to one byte past the limit: a buffer of the limit's size, zeroed for every
    // load, cost more than reading a config (1 MiB; the config fuzzer ran at 100 inputs/s).
    std::string text;
    std::array<char, 16384> chunk;
    while (text.size() <= kMaxFileBytes &&
           in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())).gcount() > 0)
        text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (in.bad()) {
        *err = path_ + ": read error";
        return std::nullopt;
    }
    if (text.size() > kMaxFileBytes) {
        *err = path_ + ": larger than " + std::to_string(kMaxFileBytes) + " bytes";
        return std::nullopt;
    }
    if (!scan(text)) {
        *err = error_;
        return std::nullopt;
    }
    // The text is well formed: let rte_cfgfile read it.
    rte_cfgfile_parameters params{};
    params.comment_character = kComment;
    std::unique_ptr<rte_cfgfile, int (*)(rte_cfgfile*)> cfg(
        rte_cfgfile_load_with_params(path_.c_str(), 0, &params), rte_cfgfile_close);
    if (!cfg) {
        *err = path_ + ": rte_cfgfile_load failed (file changed while reading?)";
        return std::nullopt;
    }
    ConfigFile out;
    out.path = path_;
    if (!build(cfg.get(), &out)) {
        *err = error_;
        return std::nullopt;
    }
    return out;
}

} // namespace

std::optional<ConfigFile> load_config(const std::string& path, std::string* err) {
    Loader l(path);
    return l.run(err);
}

std::optional<DeviceConfig> load_device_config(const std::string& path, std::string* err) {
    auto f = load_config(path, err);
    if (!f) return std::nullopt;
    if (f->devices.size() != 1) {
        if (err)
            *err = path + ": holds " + std::to_string(f->devices.size()) + " devices, expected one";
        return std::nullopt;
    }
    return std::move(f->devices[0]);
}

} // namespace droce
