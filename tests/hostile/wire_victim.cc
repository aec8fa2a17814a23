/* SPDX-License-Identifier: BSD-3-Clause */
// wire-victim: a droce endpoint for the tests of hostile input on real ports: the wire attack test
// (wire_attack_test.sh: two of them on a Linux bridge, a third namespace sending forged frames) and
// the dead-peer test (peer_kill_test.sh: a client streaming to two servers, one of them killed with
// SIGKILL and restarted). Each process:
//
//  - brings up the device of its config (Runtime: one port per peer);
//  - registers a guarded MR: 8 KiB at offset 64 of three pages of canary bytes, with a PROT_NONE
//    page on each side (a write outside the MR in those pages changes a canary; one further out
//    kills the process), all remote access; before it, an MR on the same bytes that is deregistered
//    at once, whose rkey is the "stale rkey";
//  - per peer, creates a stream QP and --idle idle QPs and connects them to the peer's (TCP: the
//    server listens on --port, the client connects to each HOST:PORT of --client, peer k on the
//    device's port k): the client streams 4 KiB RDMA WRITE with immediate messages into a ring of
//    64 slots of the server's, each filled with a pattern of its sequence number; the server checks
//    every byte of every message when its receive completes, then posts the receive again (32
//    receives: a slot is never rewritten before it was checked);
//  - writes --info FILE (JSON, peer 0: MAC, GID, QPNs, initial PSNs, the guarded MR's VA/length/
//    rkey, the stale rkey, the peer's MAC/GID/QPNs) and answers on stdin:
//      status       one JSON line: the streams (summed, and per peer, with the CLOCK_MONOTONIC time
//                   of a peer's first error completion), each QP's state, live PSNs and non-zero
//                   counters, the guarded MR (canaries intact, the byte ranges of the MR no longer
//                   zero), the device's counters and the parser's reject reasons
//      reconnect K  client: peer K's QPs are destroyed, new ones connected to the same HOST:PORT
//                   (a restarted server), and its stream starts again from sequence 0
//      quit         stops the streams, prints a last status line and exits 0 (1 when a stream
//                   failed: a bad message, or nothing moved).
//
// usage: wire-victim --config FILE (--server --port TCP | --client HOST:PORT[,HOST:PORT...])
//                    --info FILE [--idle N] [--messages N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "dpdk/eal.h"
#include "engine/connect.h"
#include "engine/device.h"
#include "runtime/runtime.h"

namespace {

using namespace droce;

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMrOffset = 64; ///< the MR starts this far into its first page
constexpr std::size_t kMrLen = 8192;
constexpr std::uint8_t kCanary = 0x5A;
constexpr std::uint32_t kSlot = 4096;
constexpr std::uint32_t kSlots = 64;
constexpr std::uint32_t kRecvs = 32;
constexpr std::uint32_t kWindow = 16;
constexpr std::uint32_t kMaxIdle = 12;

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "wire-victim: %s\n", what.c_str());
    std::exit(2);
}

std::uint8_t pattern(std::uint64_t seq, std::uint32_t i) {
    std::uint64_t x = seq * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<std::uint8_t>(x ^ (x >> 17));
}

/** Three pages of canaries between two PROT_NONE pages; the MR is kMrLen bytes at kMrOffset. */
struct GuardedRegion {
    std::uint8_t* map = nullptr;
    std::uint8_t* pages = nullptr; ///< the three readable pages
    GuardedRegion() {
        void* p =
            mmap(nullptr, 5 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        map = static_cast<std::uint8_t*>(p);
        pages = map + kPage;
        std::memset(pages, kCanary, 3 * kPage);
        std::memset(mr(), 0, kMrLen);
        if (mprotect(map, kPage, PROT_NONE) || mprotect(map + 4 * kPage, kPage, PROT_NONE))
            die("mprotect");
    }
    std::uint8_t* mr() const { return pages + kMrOffset; }
    bool canaries_intact() const {
        for (std::size_t i = 0; i < 3 * kPage; ++i) {
            const bool in_mr = i >= kMrOffset && i < kMrOffset + kMrLen;
            if (!in_mr && pages[i] != kCanary) return false;
        }
        return true;
    }
    /** The ranges of the MR that are no longer zero, as "[off,len]" JSON pairs. */
    std::string changed() const {
        std::string out = "[";
        std::size_t i = 0;
        while (i < kMrLen) {
            if (mr()[i] == 0) {
                ++i;
                continue;
            }
            std::size_t j = i;
            while (j < kMrLen && mr()[j] != 0)
                ++j;
            if (out.size() > 1) out += ",";
            out += "[" + std::to_string(i) + "," + std::to_string(j - i) + "]";
            i = j;
        }
        return out + "]";
    }
};

struct Options {
    std::string config, info;
    std::vector<std::pair<std::string, int>> peers; ///< client: HOST, TCP port of each server
    bool server = false;
    int port = 0;
    unsigned idle = 4;
    std::uint64_t messages = 0; ///< client: stop after this many per peer (0: until quit)
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--config") {
            o.config = val();
        } else if (a == "--server") {
            o.server = true;
        } else if (a == "--client") {
            std::string list = val() + ",";
            for (std::size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos;
                 at = comma + 1) {
                const std::string hp = list.substr(at, comma - at);
                const std::size_t colon = hp.rfind(':');
                if (colon == std::string::npos) die("--client wants HOST:PORT, got " + hp);
                o.peers.emplace_back(hp.substr(0, colon), std::atoi(hp.c_str() + colon + 1));
            }
        } else if (a == "--port") {
            o.port = std::atoi(val().c_str());
        } else if (a == "--info") {
            o.info = val();
        } else if (a == "--idle") {
            o.idle = static_cast<unsigned>(std::atoi(val().c_str()));
        } else if (a == "--messages") {
            o.messages = std::strtoull(val().c_str(), nullptr, 10);
        } else {
            die("unknown argument " + a);
        }
    }
    if (o.config.empty() || o.info.empty() || o.server == !o.peers.empty() ||
        (o.server && o.port <= 0) || o.idle < 1 || o.idle > kMaxIdle)
        die("usage: wire-victim --config FILE (--server --port TCP | --client HOST:PORT[,...]) "
            "--info FILE [--idle 1..12] [--messages N]");
    return o;
}

int tcp_listen_accept(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 1))
        die("bind/listen: " + std::string(std::strerror(errno)));
    std::fprintf(stderr, "wire-victim: waiting for the client\n");
    const int s = accept(l, nullptr, nullptr);
    close(l);
    if (s < 0) die("accept");
    return s;
}

int tcp_connect(const std::string& host, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) die("bad host " + host);
    for (int tries = 0; tries < 200; ++tries) {
        const int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
        close(s);
        usleep(50'000);
    }
    die("cannot connect to " + host + ":" + std::to_string(port));
}

/** What one side tells the other (fixed layout, host order: both ends are this program). */
struct Hello {
    std::uint8_t mac[6];
    std::uint8_t gid[16];
    std::uint32_t stream_qpn, stream_psn;
    std::uint32_t idle_qpn[kMaxIdle], idle_psn[kMaxIdle];
    std::uint64_t ring_va; ///< server: the stream ring
    std::uint32_t ring_rkey;
};

void exchange(int s, const Hello& mine, Hello& theirs) {
    std::array<char, sizeof(Hello)> out;
    std::memcpy(out.data(), &mine, out.size());
    if (write(s, out.data(), out.size()) != static_cast<ssize_t>(out.size())) die("TCP write");
    std::size_t got = 0;
    while (got < sizeof theirs) {
        const ssize_t n = read(s, reinterpret_cast<char*>(&theirs) + got, sizeof theirs - got);
        if (n <= 0) die("TCP read: the peer went away");
        got += static_cast<std::size_t>(n);
    }
}

std::string mac_str(const std::uint8_t* m) {
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return b;
}
std::string ip_str(const std::uint8_t* gid) { // IPv4-mapped GID
    char b[16];
    std::snprintf(b, sizeof b, "%u.%u.%u.%u", gid[12], gid[13], gid[14], gid[15]);
    return b;
}

double mono_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Stream {
    std::uint64_t posted = 0, completed = 0, verified = 0, bad = 0, error_completions = 0;
    std::string first_error;
    double first_error_ms = 0; ///< CLOCK_MONOTONIC, ms
};

/** One connected peer: its QPs, its stream and the buffers of that stream. */
struct Peer {
    unsigned port = 0; ///< the device's port (0-based) toward this peer
    std::string host;  ///< client: the server's address and TCP port
    int tcp_port = 0;
    int sock = -1;
    Hello mine{}, theirs{};
    rc::Qp* stream = nullptr;
    std::vector<rc::Qp*> idle;
    Stream st;
    std::uint64_t next_seq = 0;
    std::vector<std::uint8_t> ring; ///< server: where the stream lands
    mem::Mr* ring_mr = nullptr;
    std::vector<std::uint8_t> src; ///< client: one slot per message in flight
    mem::Mr* src_mr = nullptr;
};

class Victim {
  public:
    Victim(const Options& o, Device& dev) : o_(o), dev_(dev), rng_(std::random_device{}()) {
        int e = 0;
        pd_ = dev.alloc_pd(&e);
        cq_ = pd_ ? dev.create_cq(4096, &e) : nullptr;
        if (!cq_) die("pd/cq: " + std::string(std::strerror(e)));
        mem::Mr* stale = dev.reg_mr(pd_, g_.mr(), kMrLen, kAll, &e);
        if (!stale) die("reg_mr");
        stale_rkey_ = stale->rkey;
        if (dev.dereg_mr(stale) != 0) die("dereg_mr");
        gmr_ = dev.reg_mr(pd_, g_.mr(), kMrLen, kAll, &e);
        if (!gmr_) die("reg_mr (guarded)");
        const std::size_t n = o.server ? 1 : o.peers.size();
        if (n > dev.num_ports()) die("more peers than the device has ports");
        for (std::size_t k = 0; k < n; ++k) {
            auto p = std::make_unique<Peer>();
            p->port = static_cast<unsigned>(k);
            if (!o.server) {
                p->host = o.peers[k].first;
                p->tcp_port = o.peers[k].second;
            }
            p->ring.resize(o.server ? std::size_t{kSlots} * kSlot : 0);
            p->src.resize(o.server ? 0 : std::size_t{kWindow} * kSlot);
            std::vector<std::uint8_t>& buf = o.server ? p->ring : p->src;
            p->ring_mr = dev.reg_mr(pd_, buf.data(), buf.size(), kAll, &e);
            if (!p->ring_mr) die("reg_mr (stream)");
            p->src_mr = p->ring_mr;
            peers_.push_back(std::move(p));
        }
    }

    /** Creates peer @p p's QPs, exchanges with the peer over TCP and connects them (RTS). */
    void connect(Peer& p) {
        int e = 0;
        const rc::QpCap cap{64, 64, 1, 1, 0};
        p.stream = dev_.create_qp(pd_, cq_, cq_, cap, false, &e);
        if (!p.stream) die("create_qp: " + std::string(std::strerror(e)));
        p.idle.clear();
        for (unsigned i = 0; i < o_.idle; ++i) {
            p.idle.push_back(dev_.create_qp(pd_, cq_, cq_, cap, false, &e));
            if (!p.idle.back()) die("create_qp: " + std::string(std::strerror(e)));
        }
        std::memcpy(p.mine.mac, dev_.port(p.port).mac.data(), 6);
        std::memcpy(p.mine.gid, dev_.port(p.port).gid.data(), 16);
        p.mine.stream_qpn = p.stream->qpn;
        p.mine.stream_psn = rng_() & 0xFFFFFF;
        for (unsigned i = 0; i < o_.idle; ++i) {
            p.mine.idle_qpn[i] = p.idle[i]->qpn;
            p.mine.idle_psn[i] = rng_() & 0xFFFFFF;
        }
        p.mine.ring_va = reinterpret_cast<std::uintptr_t>(p.ring.data());
        p.mine.ring_rkey = p.ring_mr->rkey;
        if (p.sock >= 0) close(p.sock);
        p.sock = o_.server ? tcp_listen_accept(o_.port) : tcp_connect(p.host, p.tcp_port);
        exchange(p.sock, p.mine, p.theirs);
        rc_connect(p, p.stream, p.mine.stream_psn, p.theirs.stream_qpn, p.theirs.stream_psn);
        for (unsigned i = 0; i < o_.idle; ++i)
            rc_connect(p, p.idle[i], p.mine.idle_psn[i], p.theirs.idle_qpn[i],
                       p.theirs.idle_psn[i]);
        p.st = Stream{};
        p.next_seq = 0;
        std::uint32_t bad = 0;
        if (o_.server)
            for (std::uint32_t i = 0; i < kRecvs; ++i) {
                rc::RecvWqe r;
                r.wr_id = i;
                if (dev_.post_recv(p.stream, &r, 1, &bad) != 0) die("post_recv");
            }
    }

    /** reconnect: peer @p k's QPs (whatever their state) destroyed, then connect() again. */
    void reconnect(std::size_t k) {
        if (o_.server || k >= peers_.size()) return;
        Peer& p = *peers_[k];
        // Completions the old QPs still have in the CQ are theirs: taken now, while the stream
        // QPN still names the old QP (the new one may get the same number).
        for (int i = 0; i < 20; ++i) {
            (void)poll();
            usleep(1000);
        }
        for (rc::Qp* q : p.idle)
            (void)dev_.destroy_qp(q);
        (void)dev_.destroy_qp(p.stream);
        connect(p);
        std::fprintf(stderr, "wire-victim: peer %zu connected again\n", k);
    }

    void write_info() const {
        const Peer& p = *peers_[0];
        FILE* f = std::fopen(o_.info.c_str(), "w");
        if (!f) die("cannot write " + o_.info);
        std::fprintf(f,
                     "{\"mac\": \"%s\", \"ip\": \"%s\", \"stream_qpn\": %u, \"stream_sq_psn\": %u, "
                     "\"g_va\": %" PRIu64 ", \"g_len\": %zu, \"g_rkey\": %u, \"stale_rkey\": %u, "
                     "\"idle\": [",
                     mac_str(p.mine.mac).c_str(), ip_str(p.mine.gid).c_str(), p.mine.stream_qpn,
                     p.mine.stream_psn, reinterpret_cast<std::uint64_t>(g_.mr()), kMrLen,
                     gmr_->rkey, stale_rkey_);
        for (unsigned i = 0; i < o_.idle; ++i)
            std::fprintf(f, "%s{\"qpn\": %u, \"sq_psn\": %u, \"rq_psn\": %u, \"peer_qpn\": %u}",
                         i ? ", " : "", p.mine.idle_qpn[i], p.mine.idle_psn[i],
                         p.theirs.idle_psn[i], p.theirs.idle_qpn[i]);
        std::fprintf(f, "], \"peer\": {\"mac\": \"%s\", \"ip\": \"%s\", \"stream_qpn\": %u}}\n",
                     mac_str(p.theirs.mac).c_str(), ip_str(p.theirs.gid).c_str(),
                     p.theirs.stream_qpn);
        std::fclose(f);
    }

    /** Client: keeps kWindow messages in flight on every peer's stream that has not failed. */
    void post(bool quitting) {
        if (o_.server || quitting) return;
        std::uint32_t bad = 0;
        for (auto& pp : peers_) {
            Peer& p = *pp;
            while (p.st.error_completions == 0 && p.st.posted - p.st.completed < kWindow &&
                   (o_.messages == 0 || p.st.posted < o_.messages)) {
                const std::uint64_t seq = p.next_seq++;
                std::uint8_t* b = p.src.data() + (seq % kWindow) * kSlot;
                for (std::uint32_t i = 0; i < kSlot; ++i)
                    b[i] = pattern(seq, i);
                rc::SendWqe w;
                w.wr_id = seq;
                w.opcode = rc::WrOpcode::rdma_write_with_imm;
                w.send_flags = rc::kSendSignaled;
                w.imm_data = static_cast<std::uint32_t>(seq);
                w.num_sge = 1;
                w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(b), kSlot, p.src_mr->lkey};
                w.remote_addr = p.theirs.ring_va + (seq % kSlots) * kSlot;
                w.rkey = p.theirs.ring_rkey;
                if (dev_.post_send(p.stream, &w, 1, &bad) != 0) break;
                ++p.st.posted;
            }
        }
    }

    /** Takes completions; returns how many. */
    std::uint32_t poll() {
        rc::Cqe c[32];
        const std::uint32_t n = dev_.poll_cq(cq_, c, 32);
        for (std::uint32_t i = 0; i < n; ++i) {
            Peer* pp = nullptr;
            for (auto& q : peers_)
                if (q->stream && c[i].qp_num == q->stream->qpn) pp = q.get();
            if (!pp) continue; // idle QPs have no WQEs; a destroyed stream's leftovers
            Peer& p = *pp;
            if (c[i].status != rc::WcStatus::success) {
                if (p.st.error_completions++ == 0) {
                    p.st.first_error = std::string(rc::to_string(c[i].status));
                    p.st.first_error_ms = mono_ms();
                }
                continue;
            }
            if (!o_.server) {
                ++p.st.completed;
                continue;
            }
            // Server: a message arrived; check every byte of its slot, then take the next.
            const std::uint64_t seq = c[i].imm_data;
            const std::uint8_t* b = p.ring.data() + (seq % kSlots) * kSlot;
            bool ok = c[i].byte_len == kSlot;
            for (std::uint32_t k = 0; ok && k < kSlot; ++k)
                ok = b[k] == pattern(seq, k);
            if (ok && seq == p.st.verified + p.st.bad)
                ++p.st.verified;
            else
                ++p.st.bad;
            rc::RecvWqe r;
            r.wr_id = c[i].wr_id;
            std::uint32_t bad = 0;
            (void)dev_.post_recv(p.stream, &r, 1, &bad);
        }
        return n;
    }

    [[nodiscard]] bool drained() const {
        for (const auto& p : peers_)
            if (p->st.posted != p->st.completed + p->st.error_completions) return false;
        return true;
    }

    void status(const char* tag) {
        Stream sum;
        std::string per;
        char b[512];
        for (const auto& p : peers_) {
            sum.posted += p->st.posted;
            sum.completed += p->st.completed;
            sum.verified += p->st.verified;
            sum.bad += p->st.bad;
            sum.error_completions += p->st.error_completions;
            if (sum.first_error.empty()) sum.first_error = p->st.first_error;
            std::snprintf(
                b, sizeof b,
                "%s{\"posted\": %" PRIu64 ", \"completed\": %" PRIu64 ", \"verified\": %" PRIu64
                ", \"bad\": %" PRIu64 ", \"error_completions\": %" PRIu64
                ", \"first_error\": \"%s\", \"first_error_ms\": %.3f}",
                per.empty() ? "" : ", ", p->st.posted, p->st.completed, p->st.verified, p->st.bad,
                p->st.error_completions, p->st.first_error.c_str(), p->st.first_error_ms);
            per += b;
        }
        std::string s = "{\"tag\": \"" + std::string(tag) + "\"";
        std::snprintf(b, sizeof b,
                      ", \"stream\": {\"posted\": %" PRIu64 ", \"completed\": %" PRIu64
                      ", \"verified\": %" PRIu64 ", \"bad\": %" PRIu64
                      ", \"error_completions\": %" PRIu64 ", \"first_error\": \"%s\"}",
                      sum.posted, sum.completed, sum.verified, sum.bad, sum.error_completions,
                      sum.first_error.c_str());
        s += b;
        s += ", \"peers\": [" + per + "], \"qps\": {";
        {
            Device::ControlSection cs(dev_);
            bool first = true;
            for (const auto& p : peers_) {
                std::vector<rc::Qp*> all{p->stream};
                all.insert(all.end(), p->idle.begin(), p->idle.end());
                for (const rc::Qp* q : all) {
                    std::snprintf(b, sizeof b,
                                  "%s\"%u\": {\"state\": \"%s\", \"sq_psn\": %u, \"rq_psn\": %u}",
                                  first ? "" : ", ", q->qpn,
                                  std::string(rc::to_string(q->state)).c_str(),
                                  q->req.next_psn.value(), q->resp.expected_psn.value());
                    s += b;
                    first = false;
                }
            }
        }
        // Each QP's own counters (the registry's "qp/0x..." blocks), the non-zero ones.
        s += "}, \"qp_counters\": {";
        std::string scope_now;
        dev_.counter_registry().for_each([&](std::string_view scope, std::string_view name,
                                             std::uint64_t v) {
            if (!scope.starts_with("qp/") || scope.find('/', 3) != std::string_view::npos || v == 0)
                return;
            if (scope != scope_now) {
                if (!scope_now.empty()) s += "}, ";
                scope_now = std::string(scope);
                s += "\"" + std::to_string(std::stoul(scope_now.substr(3), nullptr, 16)) + "\": {";
            } else {
                s += ", ";
            }
            s += "\"" + std::string(name) + "\": " + std::to_string(v);
        });
        if (!scope_now.empty()) s += "}";
        s += "}, \"g\": {\"canaries_intact\": ";
        s += g_.canaries_intact() ? "true" : "false";
        s += ", \"changed\": " + g_.changed() + "}, \"counters\": {";
        const CounterSnapshot c = dev_.total_counters();
        for (std::size_t i = 0; i < kNumCounters; ++i) {
            s += i ? ", \"" : "\"";
            s += std::string(kCounterNames[i]) + "\": " + std::to_string(c.v[i]);
        }
        s += "}, \"parse\": {"; // the receive parser's reject reasons
        bool first = true;
        dev_.counter_registry().for_each(
            [&](std::string_view scope, std::string_view name, std::uint64_t v) {
                if (scope != "device/parse") return;
                s += first ? "\"" : ", \"";
                s += std::string(name) + "\": " + std::to_string(v);
                first = false;
            });
        s += "}}";
        std::printf("%s\n", s.c_str());
    }

    [[nodiscard]] bool ok() const {
        for (const auto& p : peers_)
            if (p->st.bad != 0) return false;
        std::uint64_t moved = 0;
        for (const auto& p : peers_)
            moved += o_.server ? p->st.verified : p->st.completed;
        return moved > 0;
    }

    [[nodiscard]] std::vector<std::unique_ptr<Peer>>& peers() { return peers_; }

  private:
    static constexpr std::uint32_t kAll = rc::kAccessLocalWrite | rc::kAccessRemoteWrite |
                                          rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;

    void rc_connect(const Peer& p, rc::Qp* q, std::uint32_t sq_psn, std::uint32_t peer_qpn,
                    std::uint32_t peer_psn) {
        RcConnectParams c;
        c.port_num = static_cast<std::uint8_t>(p.port + 1);
        c.qp_access_flags = kAll & ~rc::kAccessLocalWrite;
        c.path_mtu = rc::Mtu::mtu1024;
        c.dest_qp_num = peer_qpn;
        c.rq_psn = peer_psn;
        c.sq_psn = sq_psn;
        std::memcpy(c.ah_attr.dgid.data(), p.theirs.gid, 16);
        c.timeout = timeout_;
        c.retry_cnt = retry_cnt_;
        c.rnr_retry = 7;
        c.min_rnr_timer = 1;
        c.max_rd_atomic = 4;
        c.max_dest_rd_atomic = 4;
        if (connect_rc(dev_, q, c) != 0) die("connect_rc");
    }

  public:
    std::uint8_t timeout_ = 14;  ///< from the config's [qp]
    std::uint8_t retry_cnt_ = 7; ///< from the config's [qp]

  private:
    const Options& o_;
    Device& dev_;
    std::mt19937 rng_;
    mem::Pd* pd_ = nullptr;
    rc::Cq* cq_ = nullptr;
    GuardedRegion g_;
    mem::Mr* gmr_ = nullptr;
    std::uint32_t stale_rkey_ = 0;
    std::vector<std::unique_ptr<Peer>> peers_;
};

} // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    RuntimeOptions ro;
    ro.telemetry = false;
    std::string err;
    auto rt = Runtime::create(o.config, ro, &err);
    if (!rt) die(err);
    Device& dev = rt->device(0);
    Victim v(o, dev);
    v.timeout_ = rt->device_config(0).qp.timeout;
    v.retry_cnt_ = rt->device_config(0).qp.retry_cnt;
    if (!rt->start_engines(EngineMode::per_device)) die("start_engines");
    std::fprintf(stderr, "wire-victim: device up\n");
    for (auto& p : v.peers())
        v.connect(*p);
    v.write_info();
    std::fprintf(stderr, "wire-victim: connected, %s\n", o.server ? "server" : "client");

    // quit: the client stops posting and waits (at most 3 s) for what it has in flight; the
    // server goes on taking messages for 0.5 s (the client quits first), then reports.
    bool quitting = false;
    double quit_deadline = 0;
    while (true) {
        v.post(quitting);
        const std::uint32_t n = v.poll();
        if (quitting) {
            if ((!o.server && v.drained()) || mono_ms() >= quit_deadline) break;
            if (!n) usleep(1000);
            continue;
        }
        pollfd pfd{0, POLLIN, 0};
        if (poll(&pfd, 1, n ? 0 : 1) > 0) {
            char line[64];
            if (!std::fgets(line, sizeof line, stdin) || std::strncmp(line, "quit", 4) == 0) {
                quitting = true;
                quit_deadline = mono_ms() + (o.server ? 500 : 3000);
            } else if (std::strncmp(line, "status", 6) == 0) {
                v.status("status");
            } else if (std::strncmp(line, "reconnect ", 10) == 0) {
                v.reconnect(std::strtoul(line + 10, nullptr, 10));
            }
        }
    }
    v.status("final");
    rt->stop_engines();
    const bool ok = v.ok();
    rt.reset();
    // With every port closed: the hugepage files and the runtime directory go back.
    dpdk::eal_release();
    return ok ? 0 : 1;
}
