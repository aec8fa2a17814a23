/* SPDX-License-Identifier: BSD-3-Clause */
// wire-victim: one droce endpoint of the wire attack test (wire_attack_test.sh). Two of them, in
// two network namespaces on a Linux bridge, run a verified transfer while a third namespace sends
// forged frames (wire_attack.py). Each process:
//
//  - brings up the device of its config (Runtime: a net_af_packet port on its veth);
//  - registers a guarded MR: 8 KiB at offset 64 of three pages of canary bytes, with a PROT_NONE
//    page on each side (a write outside the MR in those pages changes a canary; one further out
//    kills the process), all remote access; before it, an MR on the same bytes that is deregistered
//    at once, whose rkey is the "stale rkey";
//  - creates a stream QP and --idle idle QPs and connects them to the peer's (TCP on --port, the
//    server listening): the client streams 4 KiB RDMA WRITE with immediate messages into a ring of
//    64 slots of the server's, each filled with a pattern of its sequence number; the server checks
//    every byte of every message when its receive completes, then posts the receive again (32
//    receives: a slot is never rewritten before it was checked);
//  - writes --info FILE (JSON: MAC, GID, QPNs, initial PSNs, the guarded MR's VA/length/rkey, the
//    stale rkey, the peer's MAC/GID/QPNs) and answers on stdin:
//      status  one JSON line: stream figures, each QP's state and live PSNs, the guarded MR
//      (canaries
//              intact, the byte ranges of the MR no longer zero), the device's counters
//      quit    stops the stream, prints a last status line and exits 0 (1 when the stream failed).
//
// usage: wire-victim --config FILE --server|--client HOST --port TCP --info FILE [--idle N]
//                    [--messages N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

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
    std::string config, host, info;
    bool server = false;
    int port = 0;
    unsigned idle = 4;
    std::uint64_t messages = 0; ///< client: stop after this many (0: until quit)
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die(a + " needs a value");
            return argv[++i];
        };
        if (a == "--config")
            o.config = val();
        else if (a == "--server")
            o.server = true;
        else if (a == "--client")
            o.host = val();
        else if (a == "--port")
            o.port = std::atoi(val().c_str());
        else if (a == "--info")
            o.info = val();
        else if (a == "--idle")
            o.idle = static_cast<unsigned>(std::atoi(val().c_str()));
        else if (a == "--messages")
            o.messages = std::strtoull(val().c_str(), nullptr, 10);
        else
            die("unknown argument " + a);
    }
    if (o.config.empty() || o.port <= 0 || o.info.empty() || (o.server == !o.host.empty()) ||
        o.idle < 1 || o.idle > kMaxIdle)
        die("usage: wire-victim --config FILE --server|--client HOST --port TCP --info FILE "
            "[--idle 1..12] [--messages N]");
    return o;
}

int tcp_connect(const Options& o) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(o.port));
    if (o.server) {
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
    if (inet_pton(AF_INET, o.host.c_str(), &a.sin_addr) != 1) die("bad host " + o.host);
    for (int tries = 0; tries < 100; ++tries) {
        const int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
        close(s);
        usleep(100'000);
    }
    die("cannot connect to " + o.host);
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
    if (write(s, &mine, sizeof mine) != static_cast<ssize_t>(sizeof mine)) die("TCP write");
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

struct Stream {
    std::uint64_t posted = 0, completed = 0, verified = 0, bad = 0, error_completions = 0;
    std::string first_error;
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
    int e = 0;
    mem::Pd* pd = dev.alloc_pd(&e);
    rc::Cq* cq = pd ? dev.create_cq(4096, &e) : nullptr;
    if (!cq) die("pd/cq: " + std::string(std::strerror(e)));
    const std::uint32_t remote_all =
        rc::kAccessRemoteWrite | rc::kAccessRemoteRead | rc::kAccessRemoteAtomic;
    GuardedRegion g;
    mem::Mr* stale = dev.reg_mr(pd, g.mr(), kMrLen, rc::kAccessLocalWrite | remote_all, &e);
    if (!stale) die("reg_mr");
    const std::uint32_t stale_rkey = stale->rkey;
    if (dev.dereg_mr(stale) != 0) die("dereg_mr");
    mem::Mr* gmr = dev.reg_mr(pd, g.mr(), kMrLen, rc::kAccessLocalWrite | remote_all, &e);
    if (!gmr) die("reg_mr (guarded)");
    std::vector<std::uint8_t> ring(std::size_t{kSlots} * kSlot);
    mem::Mr* ring_mr =
        dev.reg_mr(pd, ring.data(), ring.size(), rc::kAccessLocalWrite | remote_all, &e);
    if (!ring_mr) die("reg_mr (ring)");
    rc::QpCap cap{64, 64, 1, 1, 0};
    rc::Qp* stream = dev.create_qp(pd, cq, cq, cap, false, &e);
    std::vector<rc::Qp*> idle;
    for (unsigned i = 0; i < o.idle && stream; ++i)
        idle.push_back(dev.create_qp(pd, cq, cq, cap, false, &e));
    for (rc::Qp* q : idle)
        if (!q) die("create_qp: " + std::string(std::strerror(e)));
    if (!stream) die("create_qp");

    std::mt19937 rng(std::random_device{}());
    Hello mine{}, theirs{};
    std::memcpy(mine.mac, dev.port(0).mac.data(), 6);
    std::memcpy(mine.gid, dev.port(0).gid.data(), 16);
    mine.stream_qpn = stream->qpn;
    mine.stream_psn = rng() & 0xFFFFFF;
    for (unsigned i = 0; i < o.idle; ++i) {
        mine.idle_qpn[i] = idle[i]->qpn;
        mine.idle_psn[i] = rng() & 0xFFFFFF;
    }
    mine.ring_va = reinterpret_cast<std::uintptr_t>(ring.data());
    mine.ring_rkey = ring_mr->rkey;
    const int sock = tcp_connect(o);
    exchange(sock, mine, theirs);

    auto connect = [&](rc::Qp* q, std::uint32_t sq_psn, std::uint32_t peer_qpn,
                       std::uint32_t peer_psn) {
        RcConnectParams c;
        c.qp_access_flags = remote_all;
        c.path_mtu = rc::Mtu::mtu1024;
        c.dest_qp_num = peer_qpn;
        c.rq_psn = peer_psn;
        c.sq_psn = sq_psn;
        std::memcpy(c.ah_attr.dgid.data(), theirs.gid, 16);
        c.timeout = 14;
        c.retry_cnt = 7;
        c.rnr_retry = 7;
        c.min_rnr_timer = 1;
        c.max_rd_atomic = 4;
        c.max_dest_rd_atomic = 4;
        if (connect_rc(dev, q, c) != 0) die("connect_rc");
    };
    connect(stream, mine.stream_psn, theirs.stream_qpn, theirs.stream_psn);
    for (unsigned i = 0; i < o.idle; ++i)
        connect(idle[i], mine.idle_psn[i], theirs.idle_qpn[i], theirs.idle_psn[i]);

    {
        FILE* f = std::fopen(o.info.c_str(), "w");
        if (!f) die("cannot write " + o.info);
        std::fprintf(f,
                     "{\"mac\": \"%s\", \"ip\": \"%s\", \"stream_qpn\": %u, \"stream_sq_psn\": %u, "
                     "\"g_va\": %" PRIu64 ", \"g_len\": %zu, \"g_rkey\": %u, \"stale_rkey\": %u, "
                     "\"idle\": [",
                     mac_str(mine.mac).c_str(), ip_str(mine.gid).c_str(), mine.stream_qpn,
                     mine.stream_psn, reinterpret_cast<std::uint64_t>(g.mr()), kMrLen, gmr->rkey,
                     stale_rkey);
        for (unsigned i = 0; i < o.idle; ++i)
            std::fprintf(f, "%s{\"qpn\": %u, \"sq_psn\": %u, \"rq_psn\": %u, \"peer_qpn\": %u}",
                         i ? ", " : "", mine.idle_qpn[i], mine.idle_psn[i], theirs.idle_psn[i],
                         theirs.idle_qpn[i]);
        std::fprintf(f, "], \"peer\": {\"mac\": \"%s\", \"ip\": \"%s\", \"stream_qpn\": %u}}\n",
                     mac_str(theirs.mac).c_str(), ip_str(theirs.gid).c_str(), theirs.stream_qpn);
        std::fclose(f);
    }

    Stream st;
    std::uint32_t bad_dummy = 0;
    if (o.server)
        for (std::uint32_t i = 0; i < kRecvs; ++i) {
            rc::RecvWqe r;
            r.wr_id = i;
            if (dev.post_recv(stream, &r, 1, &bad_dummy) != 0) die("post_recv");
        }
    // The client's source: one slot-sized buffer per message in flight.
    std::vector<std::uint8_t> src(std::size_t{kWindow} * kSlot);
    mem::Mr* src_mr = dev.reg_mr(pd, src.data(), src.size(), rc::kAccessLocalWrite, &e);
    if (!src_mr) die("reg_mr (source)");
    if (!rt->start_engines(EngineMode::per_device)) die("start_engines");
    std::fprintf(stderr, "wire-victim: connected, %s\n", o.server ? "server" : "client");

    auto status = [&](const char* tag) {
        std::string s = "{\"tag\": \"" + std::string(tag) + "\"";
        char b[512];
        std::snprintf(b, sizeof b,
                      ", \"stream\": {\"posted\": %" PRIu64 ", \"completed\": %" PRIu64
                      ", \"verified\": %" PRIu64 ", \"bad\": %" PRIu64
                      ", \"error_completions\": %" PRIu64 ", \"first_error\": \"%s\"}",
                      st.posted, st.completed, st.verified, st.bad, st.error_completions,
                      st.first_error.c_str());
        s += b;
        s += ", \"qps\": {";
        {
            Device::ControlSection cs(dev);
            std::vector<rc::Qp*> all{stream};
            all.insert(all.end(), idle.begin(), idle.end());
            for (std::size_t i = 0; i < all.size(); ++i) {
                const rc::Qp& q = *all[i];
                std::snprintf(b, sizeof b,
                              "%s\"%u\": {\"state\": \"%s\", \"sq_psn\": %u, \"rq_psn\": %u}",
                              i ? ", " : "", q.qpn, std::string(rc::to_string(q.state)).c_str(),
                              q.req.next_psn.value(), q.resp.expected_psn.value());
                s += b;
            }
        }
        s += "}, \"g\": {\"canaries_intact\": ";
        s += g.canaries_intact() ? "true" : "false";
        s += ", \"changed\": " + g.changed() + "}, \"counters\": {";
        const CounterSnapshot c = dev.total_counters();
        for (std::size_t i = 0; i < kNumCounters; ++i) {
            s += i ? ", \"" : "\"";
            s += std::string(kCounterNames[i]) + "\": " + std::to_string(c.v[i]);
        }
        s += "}, \"parse\": {"; // the receive parser's reject reasons
        bool first = true;
        dev.counter_registry().for_each(
            [&](std::string_view scope, std::string_view name, std::uint64_t v) {
                if (scope != "device/parse") return;
                s += first ? "\"" : ", \"";
                s += std::string(name) + "\": " + std::to_string(v);
                first = false;
            });
        s += "}}";
        std::printf("%s\n", s.c_str());
    };

    // quit: the client stops posting and waits (at most 3 s) for what it has in flight; the
    // server goes on taking messages for 0.5 s (the client quits first), then reports.
    bool quitting = false;
    std::uint64_t quit_deadline = 0;
    auto now_ms = [] {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<std::uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
    };
    std::uint64_t next_seq = 0;
    while (true) {
        if (!o.server && !quitting && st.error_completions == 0) {
            while (st.posted - st.completed < kWindow &&
                   (o.messages == 0 || st.posted < o.messages)) {
                const std::uint64_t seq = next_seq++;
                std::uint8_t* p = src.data() + (seq % kWindow) * kSlot;
                for (std::uint32_t i = 0; i < kSlot; ++i)
                    p[i] = pattern(seq, i);
                rc::SendWqe w;
                w.wr_id = seq;
                w.opcode = rc::WrOpcode::rdma_write_with_imm;
                w.send_flags = rc::kSendSignaled;
                w.imm_data = static_cast<std::uint32_t>(seq);
                w.num_sge = 1;
                w.sg_list[0] = rc::Sge{reinterpret_cast<std::uintptr_t>(p), kSlot, src_mr->lkey};
                w.remote_addr = theirs.ring_va + (seq % kSlots) * kSlot;
                w.rkey = theirs.ring_rkey;
                if (dev.post_send(stream, &w, 1, &bad_dummy) != 0) break;
                ++st.posted;
            }
        }
        rc::Cqe c[32];
        const std::uint32_t n = dev.poll_cq(cq, c, 32);
        for (std::uint32_t i = 0; i < n; ++i) {
            if (c[i].qp_num != stream->qpn) continue; // idle QPs have no WQEs to complete
            if (c[i].status != rc::WcStatus::success) {
                if (st.error_completions++ == 0)
                    st.first_error = "qp " + std::to_string(c[i].qp_num) + " status " +
                                     std::string(rc::to_string(c[i].status));
                continue;
            }
            if (!o.server) {
                ++st.completed;
                continue;
            }
            // Server: a message arrived; check every byte of its slot, then take the next.
            const std::uint64_t seq = c[i].imm_data;
            const std::uint8_t* p = ring.data() + (seq % kSlots) * kSlot;
            bool ok = c[i].byte_len == kSlot;
            for (std::uint32_t k = 0; ok && k < kSlot; ++k)
                ok = p[k] == pattern(seq, k);
            if (ok && seq == st.verified + st.bad)
                ++st.verified;
            else
                ++st.bad;
            rc::RecvWqe r;
            r.wr_id = c[i].wr_id;
            (void)dev.post_recv(stream, &r, 1, &bad_dummy);
        }
        if (quitting) {
            const bool drained = !o.server && st.posted == st.completed + st.error_completions;
            if (drained || now_ms() >= quit_deadline) break;
            if (!n) usleep(1000);
            continue;
        }
        pollfd pfd{0, POLLIN, 0};
        if (poll(&pfd, 1, n ? 0 : 1) > 0) {
            char line[64];
            if (!std::fgets(line, sizeof line, stdin) || std::strncmp(line, "quit", 4) == 0) {
                quitting = true;
                quit_deadline = now_ms() + (o.server ? 500 : 3000);
            } else if (std::strncmp(line, "status", 6) == 0) {
                status("status");
            }
        }
    }
    status("final");
    rt->stop_engines();
    close(sock);
    const bool ok = st.bad == 0 && (o.server ? st.verified > 0 : st.completed > 0);
    return ok ? 0 : 1;
}
