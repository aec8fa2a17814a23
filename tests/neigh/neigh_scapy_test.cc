/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * Cross-check with scapy: the ARP request, ARP reply, Neighbor Solicitation (plain and
 * 802.1Q-tagged) and Neighbor Advertisement droce builds are written to a pcap; Debian's scapy (run
 * with /usr/bin/python3, which sees the Debian package) must parse every field back and compute the
 * same ICMPv6 checksums. Skipped when scapy is not installed.
 */
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include "neigh_test_util.h"

namespace droce::test {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

void put_le32(std::ofstream& f, std::uint32_t v) {
    const char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 24)};
    f.write(b, 4);
}
void put_le16(std::ofstream& f, std::uint16_t v) {
    const char b[2] = {static_cast<char>(v), static_cast<char>(v >> 8)};
    f.write(b, 2);
}

/** Classic pcap (microsecond, little-endian), link type Ethernet. */
bool write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
    std::ofstream f(path, std::ios::binary);
    put_le32(f, 0xa1b2c3d4);
    put_le16(f, 2);
    put_le16(f, 4);
    put_le32(f, 0);
    put_le32(f, 0);
    put_le32(f, 65535);
    put_le32(f, 1);
    std::uint32_t t = 0;
    for (const Bytes& fr : frames) {
        put_le32(f, 1'700'000'000);
        put_le32(f, t++);
        put_le32(f, static_cast<std::uint32_t>(fr.size()));
        put_le32(f, static_cast<std::uint32_t>(fr.size()));
        f.write(reinterpret_cast<const char*>(fr.data()), static_cast<std::streamsize>(fr.size()));
    }
    return static_cast<bool>(f);
}

bool have_scapy() {
    const std::string cmd = std::string(kPython) + " -c 'import scapy.all' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}

// The checks, in Python. argv[1] is the pcap. A failed assert exits non-zero with its message.
constexpr const char* kScript = R"PY(
import sys
from scapy.all import rdpcap, Ether, ARP, IPv6, Dot1Q, ICMPv6ND_NS, ICMPv6ND_NA
from scapy.all import ICMPv6NDOptSrcLLAddr, ICMPv6NDOptDstLLAddr

OUR_MAC, PEER_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
pk = rdpcap(sys.argv[1])
assert len(pk) == 5, len(pk)

def same_checksum(p, layer):
    # scapy recomputes the checksum when the field is deleted; it must equal droce's.
    wire = p[layer].cksum
    q = Ether(bytes(p))
    del q[layer].cksum
    again = Ether(bytes(q))[layer].cksum
    assert wire == again, (layer.__name__, hex(wire), hex(again))

# 0: ARP request (droce build_arp_request), broadcast, padded to 60 bytes.
p = pk[0]
assert len(bytes(p)) == 60
assert p[Ether].dst == "ff:ff:ff:ff:ff:ff" and p[Ether].src == OUR_MAC and p[Ether].type == 0x0806
a = p[ARP]
assert (a.hwtype, a.ptype, a.hwlen, a.plen, a.op) == (1, 0x0800, 6, 4, 1), a.summary()
assert a.hwsrc == OUR_MAC and a.psrc == "10.0.0.1" and a.hwdst == "00:00:00:00:00:00" and a.pdst == "10.0.0.2"

# 1: ARP reply (droce's answer to a request from the peer).
a = pk[1][ARP]
assert pk[1][Ether].dst == PEER_MAC
assert a.op == 2 and a.hwsrc == OUR_MAC and a.psrc == "10.0.0.1" and a.hwdst == PEER_MAC and a.pdst == "10.0.0.2"

# 2: NS (droce build_ns) to the solicited-node multicast address.
p = pk[2]
assert p[Ether].dst == "33:33:ff:00:00:02" and p[Ether].src == OUR_MAC
ip = p[IPv6]
assert ip.hlim == 255 and ip.nh == 58 and ip.src == "2001:db8::1" and ip.dst == "ff02::1:ff00:2", ip.summary()
ns = p[ICMPv6ND_NS]
assert ns.type == 135 and ns.code == 0 and ns.tgt == "2001:db8::2"
assert p[ICMPv6NDOptSrcLLAddr].lladdr == OUR_MAC
same_checksum(p, ICMPv6ND_NS)

# 3: NS with an 802.1Q tag.
p = pk[3]
assert p[Dot1Q].vlan == 5 and p[Dot1Q].prio == 3
assert p[ICMPv6ND_NS].tgt == "2001:db8::2"
same_checksum(p, ICMPv6ND_NS)

# 4: NA (droce's answer to the peer's NS): solicited, override, target link-layer option.
p = pk[4]
assert p[Ether].dst == PEER_MAC and p[Ether].src == OUR_MAC
assert p[IPv6].hlim == 255 and p[IPv6].src == "2001:db8::1" and p[IPv6].dst == "2001:db8::2"
na = p[ICMPv6ND_NA]
assert (na.R, na.S, na.O) == (0, 1, 1), (na.R, na.S, na.O)
assert na.tgt == "2001:db8::1"
assert p[ICMPv6NDOptDstLLAddr].lladdr == OUR_MAC
same_checksum(p, ICMPv6ND_NA)
print("scapy: all frames parse and checksums match")
)PY";

TEST(NeighScapy, ScapyParsesOurFramesAndAgreesOnChecksums) {
    if (!have_scapy()) GTEST_SKIP() << "scapy is not installed for " << kPython;

    Clock clock = Clock::virtual_clock();
    NeighTable table(clock, 8);
    NeighResponder resp(table, our_addrs());
    std::vector<Bytes> frames;
    std::array<std::uint8_t, kNeighMaxReply> out{};

    std::size_t n = resp.build_arp_request(kPeerIp4, out);
    ASSERT_EQ(n, kArpFrameLen);
    frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));

    NeighRx r =
        resp.handle_frame(arp_frame(1, kPeerMac, kPeerIp4, MacAddr{}, kOurIp4, kBroadcastMac), out);
    ASSERT_EQ(r.status, NeighStatus::arp_request);
    frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(r.reply_len));

    n = resp.build_ns(kPeerIp6, out);
    ASSERT_EQ(n, kNdFrameLen);
    frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));

    n = resp.build_ns(kPeerIp6, out, std::nullopt, std::uint16_t{(3u << 13) | 5u});
    ASSERT_EQ(n, kNdFrameLen + 4);
    frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));

    r = resp.handle_frame(nd_frame(NdSpec{}), out);
    ASSERT_EQ(r.status, NeighStatus::ns);
    frames.emplace_back(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(r.reply_len));

    char dir_template[] = "/tmp/droce-neigh-scapy-XXXXXX";
    const char* dir = mkdtemp(dir_template);
    ASSERT_NE(dir, nullptr);
    const std::string pcap = std::string(dir) + "/neigh.pcap";
    const std::string script = std::string(dir) + "/check.py";
    ASSERT_TRUE(write_pcap(pcap, frames));
    {
        std::ofstream s(script);
        s << kScript;
    }
    const std::string cmd = std::string(kPython) + " " + script + " " + pcap + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string output;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p))
        output += buf;
    const int status = pclose(p);
    EXPECT_EQ(status, 0) << output;
    std::printf("%s", output.c_str());
    std::remove(pcap.c_str());
    std::remove(script.c_str());
    rmdir(dir);
}

} // namespace
} // namespace droce::test
