/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/config: the shipped configs parse; each kind of bad line is refused with file:line and the
 * key; random and mutated files never crash the loader. No EAL needed.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"

namespace droce {
namespace {

std::string config_dir() {
    const char* d = std::getenv("DROCE_CONFIG_DIR");
    return d ? d : "config";
}

/** A scratch file in the test's temporary directory. */
class TempFile {
  public:
    explicit TempFile(const std::string& text) {
        static int n = 0;
        const char* tmp = std::getenv("TMPDIR");
        path_ = std::string(tmp ? tmp : "/tmp") + "/droce-config-test-" +
                std::to_string(::getpid()) + "-" + std::to_string(n++) + ".ini";
        std::ofstream(path_, std::ios::binary) << text;
    }
    ~TempFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

const char* const kGood = "# a good one-device file\n"      // 1
                          "[device]\n"                      // 2
                          "name = d0\n"                     // 3
                          "eal = --no-huge -m 64\n"         // 4
                          "\n"                              // 5
                          "[port0]\n"                       // 6
                          "devargs = net_ring0\n"           // 7
                          "mac = 02:00:00:00:00:01\n"       // 8
                          "ip = 10.0.0.1/24\n"              // 9
                          "mtu = 1500\n"                    // 10
                          "[qp]\n"                          // 11
                          "path_mtu = 1024\n"               // 12
                          "[neighbors]\n"                   // 13
                          "10.0.0.2 = 02:00:00:00:00:02\n"; // 14

/** kGood with line @p line (1-based) replaced by @p text (or inserted before it when @p insert). */
std::string edit(int line, const std::string& text, bool insert = false) {
    std::istringstream in(kGood);
    std::string out, l;
    for (int n = 1; std::getline(in, l); ++n) {
        if (n == line) {
            out += text + "\n";
            if (insert) out += l + "\n";
        } else {
            out += l + "\n";
        }
    }
    return out;
}

/** Loads @p text and expects an error mentioning file:line and every one of @p needles. */
void expect_refused(const std::string& text, int line, const std::vector<std::string>& needles) {
    TempFile f(text);
    std::string err;
    EXPECT_FALSE(load_config(f.path(), &err)) << text;
    const std::string where =
        line > 0 ? f.path() + ":" + std::to_string(line) + ":" : f.path() + ":";
    EXPECT_EQ(err.rfind(where, 0), 0u) << "error does not start with " << where << ": " << err;
    for (const auto& n : needles)
        EXPECT_NE(err.find(n), std::string::npos) << "no \"" << n << "\" in: " << err;
}

TEST(Config, GoodFileParses) {
    TempFile f(kGood);
    std::string err;
    auto d = load_device_config(f.path(), &err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->name, "d0");
    EXPECT_EQ(d->eal, (std::vector<std::string>{"--no-huge", "-m", "64"}));
    EXPECT_EQ(d->clock, ClockKind::tsc);
    ASSERT_EQ(d->ports.size(), 1u);
    EXPECT_EQ(d->ports[0].devargs, "net_ring0");
    EXPECT_EQ(d->ports[0].mac, (wire::MacAddr{2, 0, 0, 0, 0, 1}));
    EXPECT_TRUE(d->ports[0].ip.ipv4);
    EXPECT_EQ(to_string(d->ports[0].ip), "10.0.0.1");
    EXPECT_EQ(d->ports[0].prefix_len, 24);
    EXPECT_EQ(d->ports[0].mtu, 1500u);
    EXPECT_EQ(d->qp.path_mtu, 1024u);
    EXPECT_EQ(d->qp.timeout, 14);
    ASSERT_EQ(d->neighbors.size(), 1u);
    EXPECT_EQ(to_string(d->neighbors[0].mac), "02:00:00:00:00:02");
}

TEST(Config, EveryFileInTheConfigDirectoryParses) {
    // Every example a user may copy (config/pci-nic.ini, af-xdp.ini, the uring ones, ...) must at
    // least parse: a file added later is covered without being listed.
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(config_dir())) {
        if (e.path().extension() != ".ini") continue;
        ++n;
        std::string err;
        auto f = load_config(e.path().string(), &err);
        ASSERT_TRUE(f) << e.path() << ": " << err;
        ASSERT_FALSE(f->devices.empty()) << e.path();
        for (const auto& d : f->devices)
            EXPECT_FALSE(d.ports.empty()) << e.path();
    }
    EXPECT_GE(n, 16u) << "config/ should hold every shipped example";
}

TEST(Config, ShippedConfigsParse) {
    struct Want {
        const char* file;
        std::size_t devices;
        std::size_t ports;
    };
    for (const Want& w :
         {Want{"demo.ini", 2, 4}, Want{"memif-server.ini", 1, 1}, Want{"memif-client.ini", 1, 1},
          Want{"netns-a.ini", 1, 1}, Want{"netns-b.ini", 1, 1}, Want{"memif4-server.ini", 1, 4},
          Want{"memif4-client.ini", 1, 4}, Want{"netns4-a.ini", 1, 4},
          Want{"netns4-b.ini", 1, 4}}) {
        std::string err;
        auto f = load_config(config_dir() + "/" + w.file, &err);
        ASSERT_TRUE(f) << err;
        ASSERT_EQ(f->devices.size(), w.devices) << w.file;
        EXPECT_FALSE(f->devices[0].eal.empty()) << w.file;
        for (const auto& d : f->devices)
            EXPECT_EQ(d.ports.size(), w.ports) << w.file;
    }
    std::string err;
    auto demo = load_config(config_dir() + "/demo.ini", &err);
    ASSERT_TRUE(demo) << err;
    EXPECT_EQ(demo->devices[0].name, "droce_a");
    EXPECT_EQ(demo->devices[1].name, "droce_b");
    EXPECT_TRUE(demo->devices[1].eal.empty());
    EXPECT_EQ(demo->devices[0].ports[0].devargs, "droce_ringpair,name=plane0,end=a");
    EXPECT_EQ(demo->devices[1].ports[0].devargs, "droce_ringpair,name=plane0,end=b");
    EXPECT_EQ(demo->devices[0].qp.path_mtu, 4096u);
    // demo.ini has two devices: the one-device loader refuses it.
    EXPECT_FALSE(load_device_config(config_dir() + "/demo.ini", &err));
    auto a = load_device_config(config_dir() + "/netns-a.ini", &err);
    ASSERT_TRUE(a) << err;
    EXPECT_EQ(a->ports[0].mtu, 1500u);
    EXPECT_NE(a->ports[0].devargs.find("framesz=8192"), std::string::npos);
    auto s = load_device_config(config_dir() + "/memif-server.ini", &err);
    auto c = load_device_config(config_dir() + "/memif-client.ini", &err);
    ASSERT_TRUE(s && c) << err;
    EXPECT_NE(s->eal, c->eal); // different --file-prefix
    // Fast by default (issue 15): hugepages when the host has them, the client in memif zero-copy
    // (the fallback to --no-huge and copy mode is lib/runtime's), path MTU 4096 on IP MTU 4200.
    for (const auto* d : {&*s, &*c}) {
        EXPECT_EQ(d->hugepages, HugepageMode::auto_fallback) << d->name;
        EXPECT_EQ(std::count(d->eal.begin(), d->eal.end(), "--no-huge"), 0) << d->name;
        EXPECT_EQ(std::count(d->eal.begin(), d->eal.end(), "--single-file-segments"), 1) << d->name;
        EXPECT_EQ(d->ports[0].mtu, 4200u) << d->name;
        EXPECT_EQ(d->qp.path_mtu, 4096u) << d->name;
        EXPECT_NE(d->ports[0].devargs.find("bsize=8192"), std::string::npos) << d->name;
    }
    EXPECT_NE(c->ports[0].devargs.find("zero-copy=yes"), std::string::npos);
    // The four-plane files: plane N is port N on both sides, its own PMD instance, a static
    // neighbour for each of the peer's planes.
    for (const char* pair : {"memif4-server.ini|memif4-client.ini", "netns4-a.ini|netns4-b.ini"}) {
        const std::string names(pair);
        const std::string f0 = names.substr(0, names.find('|')),
                          f1 = names.substr(names.find('|') + 1);
        auto d0 = load_device_config(config_dir() + "/" + f0, &err);
        auto d1 = load_device_config(config_dir() + "/" + f1, &err);
        ASSERT_TRUE(d0 && d1) << err;
        EXPECT_NE(d0->eal, d1->eal) << f0;
        ASSERT_EQ(d0->neighbors.size(), 4u) << f0;
        ASSERT_EQ(d1->neighbors.size(), 4u) << f1;
        for (std::size_t p = 0; p < 4; ++p) {
            const std::string pmd =
                std::string(f0[0] == 'm' ? "net_memif" : "net_af_packet") + std::to_string(p) + ",";
            EXPECT_EQ(d0->ports[p].devargs.rfind(pmd, 0), 0u) << f0 << " port" << p;
            EXPECT_EQ(d1->ports[p].devargs.rfind(pmd, 0), 0u) << f1 << " port" << p;
            EXPECT_EQ(to_string(d0->neighbors[p].mac), to_string(d1->ports[p].mac)) << f0;
            EXPECT_EQ(to_string(d1->neighbors[p].mac), to_string(d0->ports[p].mac)) << f1;
            if (f0[0] == 'n') {
                EXPECT_EQ(d0->ports[p].mtu, 4200u);
                EXPECT_NE(d0->ports[p].devargs.find("framesz=8192"), std::string::npos);
            }
        }
    }
}

TEST(Config, BadMac) {
    expect_refused(edit(8, "mac = 02:00:zz"), 8,
                   {"[port0] mac", "\"02:00:zz\" is not a MAC address"});
    expect_refused(edit(8, "mac = 02:00:00:00:00:0g"), 8, {"[port0] mac"});
    expect_refused(edit(8, "mac = 01:00:5e:00:00:01"), 8, {"[port0] mac", "multicast"});
    expect_refused(edit(8, "mac = 00:00:00:00:00:00"), 8, {"[port0] mac", "zero"});
    expect_refused(edit(14, "10.0.0.2 = 02-00-00-00-00-02"), 14, {"[neighbors] 10.0.0.2", "MAC"});
}

TEST(Config, BadIp) {
    expect_refused(edit(9, "ip = 10.0.0.256/24"), 9, {"[port0] ip"});
    expect_refused(edit(9, "ip = 10.0.0.1"), 9, {"[port0] ip", "/prefix"});
    expect_refused(edit(9, "ip = 10.0.0.1/33"), 9, {"[port0] ip"});
    expect_refused(edit(9, "ip = fd00::1::2/64"), 9, {"[port0] ip"});
    expect_refused(edit(14, "10.0.0.x = 02:00:00:00:00:02"), 14,
                   {"[neighbors] 10.0.0.x", "not an IPv4 or IPv6"});
    TempFile v6(edit(9, "ip = fd00::1/64"));
    std::string err;
    auto d = load_device_config(v6.path(), &err);
    ASSERT_TRUE(d) << err;
    EXPECT_FALSE(d->ports[0].ip.ipv4);
    EXPECT_EQ(d->ports[0].prefix_len, 64);
}

TEST(Config, BadMtu) {
    expect_refused(edit(10, "mtu = 15OO"), 10, {"[port0] mtu", "not a number"});
    expect_refused(edit(10, "mtu = 100000"), 10, {"[port0] mtu", "576..9600"});
    expect_refused(edit(10, "mtu = -1"), 10, {"[port0] mtu"});
    expect_refused(edit(12, "path_mtu = 4096"), 10, {"[port0] mtu", "too small for path_mtu 4096"});
    expect_refused(edit(12, "path_mtu = 1000"), 12, {"[qp] path_mtu"});
}

TEST(Config, UnknownKeyOrSection) {
    expect_refused(edit(10, "mtu_bytes = 1500"), 10, {"[port0] mtu_bytes", "unknown key"});
    expect_refused(edit(4, "eal_args = x"), 4, {"[device] eal_args", "unknown key"});
    expect_refused(edit(12, "retries = 3"), 12, {"[qp] retries", "unknown key"});
    expect_refused(edit(11, "[port4]"), 11, {"unknown section", "port4"});
    expect_refused(edit(11, "[Device]"), 11, {"unknown section"});
}

TEST(Config, MissingSectionOrKey) {
    // A key before any section.
    expect_refused(edit(2, "# [device] removed"), 3, {"name", "outside any section"});
    // No [device] at all.
    expect_refused("[port0]\ndevargs = net_ring0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n", 1,
                   {"missing section [device]"});
    expect_refused("# nothing\n", 0, {"missing section [device]"});
    // No ports.
    expect_refused("[device]\nname = x\n", 1, {"[device]", "no ports"});
    // A gap in the port numbers.
    expect_refused(edit(6, "[port1]"), 6, {"[port1]", "missing section [port0]"});
    // Required keys.
    expect_refused(edit(8, "# no mac"), 6, {"[port0]", "missing required key \"mac\""});
    expect_refused(edit(3, "# no name"), 2, {"[device]", "missing required key \"name\""});
    expect_refused(edit(7, "# no devargs"), 6, {"missing required key \"devargs\""});
}

TEST(Config, GarbageLines) {
    expect_refused(edit(5, "this is not ini"), 5, {"garbage"});
    expect_refused(edit(5, "[unterminated"), 5, {"garbage"});
    expect_refused(edit(5, "[a] b"), 5, {"garbage"});
    expect_refused(edit(8, "= 02:00:00:00:00:01"), 8, {"missing key"});
    expect_refused(edit(8, "mac ="), 8, {"[port0] mac", "empty value"});
    expect_refused(edit(5, std::string("x\x01y = 1")), 5, {"control character"});
    expect_refused(edit(5, "key\\ = 1"), 5, {"backslash"});
    expect_refused(edit(5, std::string(400, 'a')), 5, {"longer than"});
    expect_refused(edit(9, "ip = 10.0.0.1/24", true), 10, {"[port0] ip", "duplicate key"});
    expect_refused(edit(11, "[port0]"), 11, {"[port0]", "duplicate section"});
    expect_refused(edit(7, "devargs = net_ring0 extra"), 7, {"[port0] devargs", "whitespace"});
}

TEST(Config, DeviceKeys) {
    expect_refused(edit(3, "name = bad name!"), 3, {"[device] name"});
    expect_refused(edit(4, "clock = sundial"), 4, {"[device] clock", "tsc or virtual"});
    TempFile v(edit(4, "clock = virtual"));
    std::string err;
    auto d = load_device_config(v.path(), &err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->clock, ClockKind::virtual_clock);
    EXPECT_TRUE(d->eal.empty());
    EXPECT_EQ(d->dcqcn, "off");
    expect_refused(edit(4, "dcqcn = cubic"), 4, {"[device] dcqcn", "off, nvidia or paper"});
    TempFile p(edit(4, "dcqcn = paper"));
    auto dp = load_device_config(p.path(), &err);
    ASSERT_TRUE(dp) << err;
    EXPECT_EQ(dp->dcqcn, "paper");
}

TEST(Config, CaptureKeys) {
    std::string err;
    TempFile none(kGood);
    auto d0 = load_device_config(none.path(), &err);
    ASSERT_TRUE(d0) << err;
    EXPECT_EQ(d0->capture, "");
    EXPECT_EQ(d0->capture_snaplen, 0u);
    TempFile c(edit(5, "capture = out/x.pcapng\ncapture_snaplen = 128"));
    auto d = load_device_config(c.path(), &err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->capture, "out/x.pcapng");
    EXPECT_EQ(d->capture_snaplen, 128u);
    expect_refused(edit(5, "capture_snaplen = 63"), 5, {"[device] capture_snaplen", "64..65535"});
    expect_refused(edit(5, "capture_snaplen = 70000"), 5, {"[device] capture_snaplen"});
    expect_refused(edit(5, "capture = a b.pcapng"), 5, {"[device] capture", "whitespace"});
    expect_refused(edit(7, "capture = x.pcapng", true), 7, {"[port0] capture", "unknown key"});
}

TEST(Config, Hugepages) {
    std::string err;
    TempFile none(kGood);
    auto d0 = load_device_config(none.path(), &err);
    ASSERT_TRUE(d0) << err;
    EXPECT_EQ(d0->hugepages, HugepageMode::as_written);
    TempFile off(edit(5, "hugepages = off"));
    auto d1 = load_device_config(off.path(), &err);
    ASSERT_TRUE(d1) << err;
    EXPECT_EQ(d1->hugepages, HugepageMode::off);
    TempFile aut(edit(4, "eal = -m 64 --single-file-segments\nhugepages = auto"));
    auto d2 = load_device_config(aut.path(), &err);
    ASSERT_TRUE(d2) << err;
    EXPECT_EQ(d2->hugepages, HugepageMode::auto_fallback);
    // auto with an eal line that never asks for hugepages would silently never be fast.
    expect_refused(edit(5, "hugepages = auto"), 5, {"[device] hugepages", "remove --no-huge"});
    expect_refused(edit(5, "hugepages = yes"), 5, {"[device] hugepages", "not auto or off"});
    expect_refused(edit(9, "hugepages = off", true), 9, {"[port0] hugepages", "unknown key"});
    const std::string two = "[device0]\nname = a\neal = -m 64\n"                       // 1-3
                            "[device0.port0]\ndevargs = x0\nmac = 02:00:00:00:00:01\n" // 4-6
                            "ip = 10.0.0.1/24\n"                                       // 7
                            "[device1]\nname = b\nhugepages = off\n"                   // 8-10
                            "[device1.port0]\ndevargs = x1\nmac = 02:00:00:00:00:02\n"
                            "ip = 10.0.0.2/24\n";
    expect_refused(two, 10, {"[device1] hugepages", "first device"});
}

TEST(Config, SeveralDevices) {
    const std::string two =
        "[device0]\nname = a\neal = --no-huge\n"                                      // 1-3
        "[device0.port0]\ndevargs = x0\nmac = 02:00:00:00:00:01\nip = 10.0.0.1/24\n"  // 4-7
        "[device1]\nname = b\n"                                                       // 8-9
        "[device1.port0]\ndevargs = x1\nmac = 02:00:00:00:00:02\nip = 10.0.0.2/24\n"; // 10-13
    TempFile f(two);
    std::string err;
    auto c = load_config(f.path(), &err);
    ASSERT_TRUE(c) << err;
    ASSERT_EQ(c->devices.size(), 2u);
    EXPECT_EQ(c->devices[1].name, "b");
    // eal only on the first device.
    std::string bad = two;
    bad.insert(bad.find("name = b\n") + 9, "eal = --no-pci\n");
    expect_refused(bad, 10, {"[device1] eal", "first device"});
    // the same devargs twice
    bad = two;
    bad.replace(bad.find("devargs = x1"), 12, "devargs = x0");
    expect_refused(bad, 11, {"[device1.port0] devargs", "already used"});
    // the same name twice
    bad = two;
    bad.replace(bad.find("name = b"), 8, "name = a");
    expect_refused(bad, 9, {"[device1] name", "already"});
    // mixing the two forms
    expect_refused(two + "[qp]\n", 14, {"mixes"});
    // a gap in device numbers
    bad = two;
    for (std::size_t p; (p = bad.find("device1")) != std::string::npos;)
        bad.replace(p, 7, "device2");
    expect_refused(bad, 8, {"missing section [device1]"});
}

TEST(Config, MissingFile) {
    std::string err;
    EXPECT_FALSE(load_config("/nonexistent/droce.ini", &err));
    EXPECT_NE(err.find("/nonexistent/droce.ini: cannot open"), std::string::npos) << err;
}

TEST(Config, ValueParsers) {
    wire::MacAddr m{};
    EXPECT_TRUE(parse_mac("AA:bb:0C:dd:EE:ff", &m));
    EXPECT_EQ(to_string(m), "aa:bb:0c:dd:ee:ff");
    EXPECT_FALSE(parse_mac("aa:bb:cc:dd:ee", &m));
    EXPECT_FALSE(parse_mac("aa:bb:cc:dd:ee:ff:", &m));
    EXPECT_FALSE(parse_mac("aabb:cc:dd:ee:ff:0", &m));
    IpAddr ip;
    std::uint8_t len = 0;
    EXPECT_TRUE(parse_ip_prefix("192.168.1.2/32", &ip, &len));
    EXPECT_EQ(ip.addr[10], 0xff);
    EXPECT_EQ(ip.addr[15], 2);
    EXPECT_TRUE(parse_ip_prefix("::1/128", &ip, &len));
    EXPECT_FALSE(parse_ip_prefix("::1/129", &ip, &len));
    EXPECT_FALSE(parse_ip_prefix("1.2.3.4/", &ip, &len));
    EXPECT_FALSE(parse_ip_prefix("/24", &ip, &len));
    EXPECT_FALSE(parse_ip(std::string(100, '1'), &ip));
    std::uint64_t v = 0;
    EXPECT_FALSE(parse_uint("99999999999999999999999", 0, 10, &v));
    EXPECT_FALSE(parse_uint("+1", 0, 10, &v));
    EXPECT_TRUE(parse_uint("10", 0, 10, &v));
}

/** Property: whatever the bytes, the loader returns (a config or an error naming the file). */
TEST(ConfigProperty, RandomBytesNeverCrash) {
    std::mt19937 rng(20261129);
    for (int iter = 0; iter < 300; ++iter) {
        std::string text(std::uniform_int_distribution<std::size_t>(0, 2000)(rng), '\0');
        for (auto& c : text)
            c = static_cast<char>(rng());
        TempFile f(text);
        std::string err;
        if (!load_config(f.path(), &err)) {
            EXPECT_EQ(err.rfind(f.path() + ":", 0), 0u) << err;
        }
    }
}

/** Property: a valid file with random edits (bytes from an INI-ish alphabet, lines cut,
 * duplicated). */
TEST(ConfigProperty, MutatedConfigsNeverCrash) {
    std::mt19937 rng(4791);
    std::string base;
    {
        std::ifstream in(config_dir() + "/demo.ini", std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        base = ss.str();
    }
    ASSERT_FALSE(base.empty());
    const std::string alphabet = "[]=#:./\\ \t\n\r0123456789abcdefxyz_,-\x01\xff";
    int accepted = 0;
    for (int iter = 0; iter < 400; ++iter) {
        std::string text = base;
        const int edits = std::uniform_int_distribution<int>(1, 8)(rng);
        for (int e = 0; e < edits; ++e) {
            const std::size_t pos = std::uniform_int_distribution<std::size_t>(0, text.size())(rng);
            switch (rng() % 4) {
            case 0:
                text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
                break;
            case 1:
                if (pos < text.size()) text.erase(pos, 1 + rng() % 40);
                break;
            case 2:
                if (pos < text.size()) text[pos] = alphabet[rng() % alphabet.size()];
                break;
            case 3:
                text.insert(pos, text.substr(pos, rng() % 200));
                break;
            }
        }
        TempFile f(text);
        std::string err;
        if (load_config(f.path(), &err)) {
            ++accepted;
        } else {
            EXPECT_EQ(err.rfind(f.path() + ":", 0), 0u) << err;
        }
    }
    RecordProperty("accepted", accepted);
}

} // namespace
} // namespace droce
