/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * EthPort over net_ring: two ports joined by an in-process ring pair (droce_ringpair), so what one
 * transmits the other receives. The EAL is initialised once for the whole program by a global test
 * environment (DPDK cannot initialise twice), without hugepages.
 */
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "config/config.h"
#include "dpdk/eal.h"
#include "dpdk/eth_port.h"
#include "eal_environment.h"

namespace droce::dpdk {
namespace {

::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(
    new test::EalEnvironment("droce-test", {"--vdev=net_ring0"}));

/** A fresh connected pair of EthPorts for each test. */
class PairTest : public ::testing::Test {
  protected:
    void make_pair(std::uint32_t mtu, unsigned ring_size = 1024) {
        static unsigned serial = 0;
        name_ = "t" + std::to_string(serial++);
        std::uint16_t pa = 0, pb = 0;
        ASSERT_EQ(create_ring_pair_end(name_, 'a', ring_size, &pa), "");
        ASSERT_EQ(
            probe_port("droce_ringpair,name=" + name_ + ",end=b,size=" + std::to_string(ring_size),
                       &pb),
            "");
        EthPortConfig ca;
        ca.port_id = pa;
        ca.port_index = 0;
        ca.mtu = mtu;
        EthPortConfig cb = ca;
        cb.port_id = pb;
        cb.port_index = 1;
        std::string err;
        a_ = EthPort::create(ca, &err);
        ASSERT_TRUE(a_) << err;
        b_ = EthPort::create(cb, &err);
        ASSERT_TRUE(b_) << err;
    }

    /** Sends @p frames from a to b and checks that they arrive byte for byte, in order. */
    void send_and_check(const std::vector<std::vector<std::uint8_t>>& frames) {
        std::vector<PktBuf*> tx(frames.size());
        ASSERT_EQ(a_->alloc_bulk(tx.data(), static_cast<std::uint16_t>(tx.size())), tx.size());
        for (std::size_t i = 0; i < frames.size(); ++i) {
            ASSERT_GE(tx[i]->capacity, frames[i].size());
            EXPECT_EQ(tx[i]->port, 0);
            std::memcpy(tx[i]->data, frames[i].data(), frames[i].size());
            tx[i]->len = static_cast<std::uint32_t>(frames[i].size());
        }
        ASSERT_EQ(a_->tx_burst(tx.data(), static_cast<std::uint16_t>(tx.size())), tx.size());
        std::size_t got = 0;
        std::array<PktBuf*, EthPort::kMaxBurst> rx{};
        for (int spin = 0; spin < 1000 && got < frames.size(); ++spin) {
            const std::uint16_t n = b_->rx_burst(rx.data(), EthPort::kMaxBurst);
            for (std::uint16_t i = 0; i < n; ++i, ++got) {
                ASSERT_LT(got, frames.size());
                const auto& want = frames[got];
                ASSERT_EQ(rx[i]->len, want.size()) << "frame " << got;
                EXPECT_EQ(std::memcmp(rx[i]->data, want.data(), want.size()), 0) << "frame " << got;
                EXPECT_EQ(rx[i]->port, 1);
                EXPECT_EQ(rx[i]->frame().size(), want.size());
            }
            b_->free_bulk(rx.data(), n);
        }
        EXPECT_EQ(got, frames.size());
    }

    static std::vector<std::uint8_t> frame(std::size_t len, std::uint32_t seed) {
        std::vector<std::uint8_t> f(len);
        std::uint32_t x = seed * 2654435761u + 1;
        for (auto& byte : f) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            byte = static_cast<std::uint8_t>(x);
        }
        f[12] = 0x88; // not IP: no ECN parsing
        f[13] = 0xb5;
        return f;
    }

    std::string name_;
    std::unique_ptr<EthPort> a_, b_;
};

TEST(Eal, SecondInitIsRefused) {
    EXPECT_TRUE(eal_initialized());
    EXPECT_NE(eal_init({"--no-huge"}), "");
}

TEST(Eal, TheThreadThatBroughtItUpKeepsItsCpus) {
    // No lcores in the arguments: DPDK took this thread's CPUs as its lcores and pinned the thread
    // to the first; eal_init() gave it back its CPUs, and threads started from it inherit them
    // (a perftest pair ran both processes' engine and application threads on CPU 0 of two).
    const cpu_set_t& before = static_cast<test::EalEnvironment*>(g_env)->cpus_before();
    cpu_set_t now;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&now, &before))
        << CPU_COUNT(&now) << " CPUs after eal_init, " << CPU_COUNT(&before) << " before";
    cpu_set_t child;
    CPU_ZERO(&child);
    std::thread([&] { (void)pthread_getaffinity_np(pthread_self(), sizeof child, &child); }).join();
    EXPECT_TRUE(CPU_EQUAL(&child, &before)) << CPU_COUNT(&child) << " CPUs in a new thread";
}

TEST(Eal, ItsControlThreadsKeepTheCallersCpus) {
    // DPDK 22.11 pins the control threads it starts (the interrupt thread, which runs memif's
    // connection handshake) to the main lcore's CPU when every CPU is an lcore; a busy engine
    // thread of another process on that CPU then held a restarted memif peer's handshake back for
    // seconds (test peer-kill). eal_init() gives them the caller's CPUs.
    const cpu_set_t& before = static_cast<test::EalEnvironment*>(g_env)->cpus_before();
    if (CPU_COUNT(&before) < 2)
        GTEST_SKIP() << "one CPU: DPDK's pinning and the caller's CPUs are the same";
    int control_threads = 0;
    DIR* d = opendir("/proc/self/task");
    ASSERT_NE(d, nullptr);
    while (const dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char comm[64] = {};
        const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
        if (FILE* f = std::fopen(path.c_str(), "r")) {
            if (!std::fgets(comm, sizeof comm, f)) comm[0] = '\0';
            std::fclose(f);
        }
        const std::string name(comm, std::strcspn(comm, "\n"));
        const pid_t tid = static_cast<pid_t>(std::atoi(e->d_name));
        if (name.rfind("rte-worker", 0) == 0) { // a worker lcore's thread stays on its lcore
            cpu_set_t cpus;
            CPU_ZERO(&cpus);
            ASSERT_EQ(sched_getaffinity(tid, sizeof cpus, &cpus), 0);
            EXPECT_EQ(CPU_COUNT(&cpus), 1) << name;
            continue;
        }
        if (name.rfind("eal-intr", 0) != 0 && name.rfind("rte_mp", 0) != 0 &&
            name.rfind("telemetry", 0) != 0)
            continue;
        ++control_threads;
        cpu_set_t cpus;
        CPU_ZERO(&cpus);
        ASSERT_EQ(sched_getaffinity(tid, sizeof cpus, &cpus), 0);
        EXPECT_TRUE(CPU_EQUAL(&cpus, &before))
            << name << ": " << CPU_COUNT(&cpus) << " CPUs, the caller had " << CPU_COUNT(&before);
    }
    closedir(d);
    EXPECT_GE(control_threads, 1) << "no EAL interrupt thread found";
}

TEST(Eal, AThreadOfItsOwnGetsAnLcoreAndItsMempoolCache) {
    // Engine threads are not the EAL's: without an lcore id DPDK gives them no mempool cache, and
    // every mbuf they allocate or free goes through the pool's shared ring.
    rte_mempool* mp = rte_pktmbuf_pool_create("droce-regtest", 1023, 64, 0, 2048, SOCKET_ID_ANY);
    ASSERT_NE(mp, nullptr) << rte_strerror(rte_errno);
    unsigned id = LCORE_ID_ANY, cached = 0, after = 1, id_after = 0;
    rte_lcore_role_t role = ROLE_OFF, role_after = ROLE_NON_EAL;
    bool uncached_before = false;
    std::thread([&] {
        uncached_before = rte_lcore_id() == LCORE_ID_ANY &&
                          rte_mempool_default_cache(mp, rte_lcore_id()) == nullptr;
        register_thread();
        id = rte_lcore_id();
        if (id == LCORE_ID_ANY) return;
        role = rte_eal_lcore_role(id);
        std::array<rte_mbuf*, 10> m{};
        if (rte_pktmbuf_alloc_bulk(mp, m.data(), m.size()) != 0) return;
        rte_pktmbuf_free_bulk(m.data(), m.size());
        rte_mempool_cache* c = rte_mempool_default_cache(mp, id);
        cached = c ? c->len : 0;
        unregister_thread();
        id_after = rte_lcore_id();
        after = c ? c->len : 1;
        role_after = rte_eal_lcore_role(id);
    }).join();
    EXPECT_TRUE(uncached_before);
    ASSERT_NE(id, LCORE_ID_ANY) << "no lcore id for the thread";
    EXPECT_EQ(role, ROLE_NON_EAL);
    EXPECT_GE(cached, 10u) << "the freed mbufs did not go to the thread's cache";
    EXPECT_EQ(after, 0u) << "unregister_thread left mbufs in the ended thread's cache";
    EXPECT_EQ(id_after, LCORE_ID_ANY);
    EXPECT_EQ(role_after, ROLE_OFF) << "the lcore id was not given back";
    EXPECT_EQ(rte_mempool_avail_count(mp), 1023u);
    // The EAL's own thread keeps its lcore.
    const unsigned main_id = rte_lcore_id();
    unregister_thread();
    EXPECT_EQ(rte_lcore_id(), main_id);
    rte_mempool_free(mp);
}

TEST(Eal, ArgumentsThatChooseTheCores) {
    for (const char* a : {"-l", "-l0", "-c", "-c0x3", "--lcores=0@(0-1)", "--lcores",
                          "--main-lcore=1", "--master-lcore"})
        EXPECT_TRUE(eal_args_choose_cores({"--no-huge", a, "0"})) << a;
    EXPECT_FALSE(eal_args_choose_cores({"--no-huge", "-m", "256", "--log-level=*:warning",
                                        "--file-prefix=x", "--no-pci", "--vdev=net_ring0"}));
    EXPECT_FALSE(eal_args_choose_cores({}));
}

TEST(Eal, SplitArgs) {
    EXPECT_EQ(split_args("  --no-huge\t-m 256\n"),
              (std::vector<std::string>{"--no-huge", "-m", "256"}));
    EXPECT_TRUE(split_args("   ").empty());
}

TEST(Probe, FindsEalVdevAndRefusesBadDevargs) {
    std::uint16_t p = 0xffff;
    EXPECT_EQ(probe_port("net_ring0", &p), "");
    EXPECT_NE(p, 0xffff);
    EXPECT_NE(probe_port("net_nosuchpmd0", &p), "");
    EXPECT_NE(probe_port("droce_ringpair,name=x", &p), "");                 // no end
    EXPECT_NE(probe_port("droce_ringpair,name=x,end=c", &p), "");           // bad end
    EXPECT_NE(probe_port("droce_ringpair,name=x,end=a,size=1000", &p), ""); // not a power of two
    EXPECT_NE(probe_port("droce_ringpair,name=waytoolongname1,end=a", &p), "");
    EXPECT_NE(probe_port("droce_ringpair,name=x,end=a,colour=red", &p), "");
    EXPECT_NE(probe_port("droce_ringpair;name=x", &p), "");
}

TEST(Probe, LoopbackRingPortCarriesFrames) {
    std::uint16_t p = 0;
    ASSERT_EQ(probe_port("net_ring0", &p), "");
    EthPortConfig c;
    c.port_id = p;
    std::string err;
    auto port = EthPort::create(c, &err);
    ASSERT_TRUE(port) << err;
    EXPECT_EQ(port->driver_name(), "net_ring");
    PktBuf* b = nullptr;
    ASSERT_EQ(port->alloc_bulk(&b, 1), 1);
    std::memset(b->data, 0xab, 60);
    b->len = 60;
    ASSERT_EQ(port->tx_burst(&b, 1), 1);
    PktBuf* r = nullptr;
    ASSERT_EQ(port->rx_burst(&r, 1), 1); // a plain net_ring hears itself
    EXPECT_EQ(r->len, 60u);
    port->free_bulk(&r, 1);
}

TEST(EthPortCreate, RefusesBadConfig) {
    std::string err;
    EthPortConfig c;
    c.port_id = 1000; // no such port
    EXPECT_FALSE(EthPort::create(c, &err));
    EXPECT_NE(err.find("no such ethdev"), std::string::npos) << err;
    std::uint16_t p = 0;
    ASSERT_EQ(create_ring_pair_end("badcfg", 'a', 64, &p), "");
    c.port_id = p;
    c.mtu = 20000;
    EXPECT_FALSE(EthPort::create(c, &err));
    EXPECT_NE(err.find("mtu"), std::string::npos) << err;
    c.mtu = 1500;
    c.n_mbufs = 100;
    EXPECT_FALSE(EthPort::create(c, &err));
    EXPECT_NE(err.find("n_mbufs"), std::string::npos) << err;
    // The rings and two bursts fit, but not the lcores' caches as well: refused.
    c.n_mbufs = c.rx_desc + c.tx_desc + 2u * EthPort::kMaxBurst;
    EXPECT_FALSE(EthPort::create(c, &err));
    EXPECT_NE(err.find("lcore caches"), std::string::npos) << err;
}

TEST(EthPortCreate, LeavesPromiscuousModeAndReceivesTheConfiguredMacAndMulticast) {
    // net_ring starts promiscuous, cannot set a default MAC but has one address slot to fill, and
    // has an all-multicast flag but no multicast list: the port ends with cfg.mac in the PMD,
    // all-multicast on and promiscuous mode off.
    std::uint16_t p = 0;
    ASSERT_EQ(create_ring_pair_end("rxfilter", 'a', 64, &p), "");
    EthPortConfig c;
    c.port_id = p;
    c.mac = wire::MacAddr{0x02, 0, 0, 0, 0x5a, 0x01};
    c.multicast = {{0x33, 0x33, 0xff, 0, 0, 0x01}, {0x33, 0x33, 0, 0, 0, 0x01}};
    std::string err;
    auto port = EthPort::create(c, &err);
    ASSERT_TRUE(port) << err;
    EXPECT_EQ(port->mac(), *c.mac);
    rte_ether_addr a{};
    ASSERT_EQ(rte_eth_macaddr_get(p, &a), 0);
    EXPECT_EQ(std::memcmp(a.addr_bytes, c.mac->data(), 6), 0) << "the PMD was not given the MAC";
    EXPECT_FALSE(port->promiscuous());
    EXPECT_EQ(rte_eth_promiscuous_get(p), 0);
    EXPECT_EQ(rte_eth_allmulticast_get(p), 1);
    port.reset();
    // Asked for, it stays.
    ASSERT_EQ(create_ring_pair_end("rxfilter", 'a', 64, &p), "");
    c.port_id = p;
    c.promiscuous = true;
    port = EthPort::create(c, &err);
    ASSERT_TRUE(port) << err;
    EXPECT_TRUE(port->promiscuous());
    EXPECT_EQ(rte_eth_promiscuous_get(p), 1);
}

TEST_F(PairTest, SmallFramesArriveByteForByte) {
    make_pair(1500);
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::uint32_t i = 0; i < 8; ++i)
        frames.push_back(frame(64, i));
    send_and_check(frames);
}

TEST_F(PairTest, LargeFramesArriveByteForByte) {
    make_pair(9000);
    EXPECT_EQ(a_->max_frame(), 9014u);
    std::vector<std::vector<std::uint8_t>> frames;
    for (const std::size_t len : {4096u, 4097u, 4200u, 8192u, 9014u})
        frames.push_back(frame(len, static_cast<std::uint32_t>(len)));
    send_and_check(frames);
}

TEST_F(PairTest, FullBurstsOf64InOrder) {
    make_pair(4200);
    for (int round = 0; round < 20; ++round) {
        std::vector<std::vector<std::uint8_t>> frames;
        for (std::uint32_t i = 0; i < 64; ++i)
            frames.push_back(frame(64 + (i * 61) % 4000, round * 64 + i));
        send_and_check(frames);
    }
    EXPECT_EQ(a_->counter(PortCounter::tx_packets), 20u * 64u);
    EXPECT_EQ(b_->counter(PortCounter::rx_packets), 20u * 64u);
}

TEST_F(PairTest, BurstsLongerThan64AreChunked) {
    make_pair(1500);
    std::vector<std::vector<std::uint8_t>> frames;
    for (std::uint32_t i = 0; i < 200; ++i)
        frames.push_back(frame(100, i));
    send_and_check(frames); // tx in one call of 200; rx in calls of 64
}

TEST_F(PairTest, AllocatedBuffersFitMaxFrame) {
    make_pair(4200);
    std::array<PktBuf*, 64> bufs{};
    ASSERT_EQ(a_->alloc_bulk(bufs.data(), 64), 64);
    for (PktBuf* b : bufs) {
        EXPECT_GE(b->capacity, a_->max_frame());
        EXPECT_EQ(b->len, 0u);
        EXPECT_NE(b->driver, nullptr);
        EXPECT_EQ(static_cast<void*>(b), rte_mbuf_to_priv(static_cast<rte_mbuf*>(b->driver)));
    }
    a_->free_bulk(bufs.data(), 64);
    EXPECT_EQ(rte_mempool_in_use_count(a_->mempool()), 0u);
}

TEST_F(PairTest, FullTxRingLeavesTheRestWithTheCaller) {
    make_pair(1500, 64); // the a->b ring holds 63 frames
    std::array<PktBuf*, 64> tx{};
    ASSERT_EQ(a_->alloc_bulk(tx.data(), 64), 64);
    for (std::uint16_t i = 0; i < 64; ++i) {
        std::memset(tx[i]->data, i, 64);
        tx[i]->len = 64;
    }
    const std::uint16_t sent = a_->tx_burst(tx.data(), 64);
    EXPECT_EQ(sent, 63);
    EXPECT_EQ(a_->counter(PortCounter::tx_ring_full), 1u);
    // The caller still owns tx[63]: it can write it, retry later or free it.
    EXPECT_EQ(tx[63]->data[0], 63);
    EXPECT_EQ(a_->tx_burst(&tx[63], 1), 0); // still full
    a_->free_bulk(&tx[63], 1);
    std::array<PktBuf*, 64> rx{};
    const std::uint16_t n = b_->rx_burst(rx.data(), 64);
    ASSERT_EQ(n, 63);
    for (std::uint16_t i = 0; i < n; ++i)
        EXPECT_EQ(rx[i]->data[0], i);
    b_->free_bulk(rx.data(), n);
    EXPECT_EQ(rte_mempool_in_use_count(a_->mempool()), 0u);
}

TEST_F(PairTest, LinkIsUp) {
    make_pair(1500);
    EXPECT_TRUE(a_->link_up());
    EXPECT_TRUE(b_->link_up());
    EXPECT_EQ(a_->poll_link(), LinkEvent::none);
    EXPECT_FALSE(a_->lsc_interrupt()); // net_ring raises no LSC interrupt
    EXPECT_FALSE(a_->ipv4_cksum_offload());
    EXPECT_FALSE(a_->set_tx_ipv4_cksum(true)); // nothing to offload to
    EXPECT_STREQ(to_string(LinkEvent::down), "down");
    EXPECT_STREQ(to_string(PortCounter::rx_linearized), "rx_linearized");
}

TEST_F(PairTest, PollLinkReportsChanges) {
    make_pair(1500);
    // net_ring can take its link down and up (rte_eth_dev_set_link_down/up).
    ASSERT_EQ(rte_eth_dev_set_link_down(a_->port_id()), 0);
    EXPECT_FALSE(a_->link_up());
    EXPECT_EQ(a_->poll_link(), LinkEvent::down);
    EXPECT_EQ(a_->poll_link(), LinkEvent::none);
    ASSERT_EQ(rte_eth_dev_set_link_up(a_->port_id()), 0);
    EXPECT_EQ(a_->poll_link(), LinkEvent::up);
    EXPECT_EQ(a_->poll_link(), LinkEvent::none);
    EXPECT_TRUE(a_->link_up());
}

TEST_F(PairTest, EcnCeIsReadFromTheIpHeader) {
    make_pair(1500);
    std::array<PktBuf*, 3> tx{};
    ASSERT_EQ(a_->alloc_bulk(tx.data(), 3), 3);
    for (auto* b : tx) {
        std::memset(b->data, 0, 80);
        b->len = 80;
    }
    tx[0]->data[12] = 0x08;
    tx[0]->data[13] = 0x00;
    tx[0]->data[14] = 0x45;
    tx[0]->data[15] = 0x03; // IPv4 CE
    tx[1]->data[12] = 0x08;
    tx[1]->data[13] = 0x00;
    tx[1]->data[14] = 0x45;
    tx[1]->data[15] = 0x02; // IPv4 ECT(0)
    tx[2]->data[12] = 0x86;
    tx[2]->data[13] = 0xdd;
    tx[2]->data[14] = 0x60;
    tx[2]->data[15] = 0x30; // IPv6 CE
    ASSERT_EQ(a_->tx_burst(tx.data(), 3), 3);
    std::array<PktBuf*, 3> rx{};
    ASSERT_EQ(b_->rx_burst(rx.data(), 3), 3);
    EXPECT_TRUE(rx[0]->ecn_ce);
    EXPECT_FALSE(rx[1]->ecn_ce);
    EXPECT_TRUE(rx[2]->ecn_ce);
    b_->free_bulk(rx.data(), 3);
}

TEST_F(PairTest, RxBufferCanBeTransmittedWithAnOffset) {
    make_pair(1500);
    PktBuf* b = nullptr;
    ASSERT_EQ(a_->alloc_bulk(&b, 1), 1);
    std::memset(b->data, 0x11, 100);
    b->len = 100;
    ASSERT_EQ(a_->tx_burst(&b, 1), 1);
    ASSERT_EQ(b_->rx_burst(&b, 1), 1);
    // Strip 4 bytes at the front and send it back.
    b->data += 4;
    b->len -= 4;
    b->data[0] = 0x22;
    ASSERT_EQ(b_->tx_burst(&b, 1), 1);
    ASSERT_EQ(a_->rx_burst(&b, 1), 1);
    EXPECT_EQ(b->len, 96u);
    EXPECT_EQ(b->data[0], 0x22);
    EXPECT_EQ(b->data[1], 0x11);
    a_->free_bulk(&b, 1);
}

/** Puts a chained mbuf from a pool without a PktBuf area straight into b's rx ring. */
class ChainTest : public PairTest {
  protected:
    void SetUp() override {
        foreign_ = rte_pktmbuf_pool_create(
            ("chain" + std::to_string(::getpid() % 1000) + name_seq()).c_str(), 255, 0, 0,
            RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        ASSERT_NE(foreign_, nullptr);
    }
    void TearDown() override {
        a_.reset();
        b_.reset();
        rte_mempool_free(foreign_);
    }
    static std::string name_seq() {
        static int n = 0;
        return std::to_string(n++);
    }
    /** A chain of @p segs segments of @p seg_len bytes each, byte k = k mod 251. */
    rte_mbuf* chain(unsigned segs, std::uint16_t seg_len) {
        rte_mbuf* head = nullptr;
        std::uint32_t k = 0;
        for (unsigned s = 0; s < segs; ++s) {
            rte_mbuf* m = rte_pktmbuf_alloc(foreign_);
            if (!m) return nullptr;
            auto* d = reinterpret_cast<std::uint8_t*>(rte_pktmbuf_append(m, seg_len));
            for (std::uint16_t i = 0; i < seg_len; ++i)
                d[i] = static_cast<std::uint8_t>(k++ % 251);
            if (!head)
                head = m;
            else if (rte_pktmbuf_chain(head, m) != 0)
                return nullptr;
        }
        return head;
    }
    void inject(rte_mbuf* m) {
        rte_ring* r = rte_ring_lookup(("rp_" + name_ + "_ab").c_str());
        ASSERT_NE(r, nullptr);
        ASSERT_EQ(rte_ring_enqueue(r, m), 0);
    }
    rte_mempool* foreign_ = nullptr;
};

TEST_F(ChainTest, MultiSegmentFrameIsLinearized) {
    make_pair(4200);
    rte_mbuf* m = chain(3, 1000);
    ASSERT_NE(m, nullptr);
    inject(m);
    PktBuf* b = nullptr;
    ASSERT_EQ(b_->rx_burst(&b, 1), 1);
    ASSERT_EQ(b->len, 3000u);
    for (std::uint32_t i = 0; i < 3000; ++i)
        ASSERT_EQ(b->data[i], i % 251) << i;
    EXPECT_EQ(b_->counter(PortCounter::rx_linearized), 1u);
    b_->free_bulk(&b, 1);
    EXPECT_EQ(rte_mempool_in_use_count(foreign_), 0u); // the chain went back to its pool
}

TEST_F(ChainTest, ForeignSingleSegmentIsCopiedIntoOwnMbuf) {
    make_pair(1500);
    rte_mbuf* m = chain(1, 200);
    ASSERT_NE(m, nullptr);
    inject(m);
    PktBuf* b = nullptr;
    ASSERT_EQ(b_->rx_burst(&b, 1), 1);
    EXPECT_EQ(b->len, 200u);
    EXPECT_EQ(static_cast<rte_mbuf*>(b->driver)->pool, b_->mempool());
    b_->free_bulk(&b, 1);
}

TEST_F(ChainTest, OversizeMultiSegmentFrameIsDroppedAndCounted) {
    make_pair(1500); // own mbufs hold 2048 bytes
    rte_mbuf* m = chain(3, 1000);
    ASSERT_NE(m, nullptr);
    inject(m);
    PktBuf* b = nullptr;
    EXPECT_EQ(b_->rx_burst(&b, 1), 0);
    EXPECT_EQ(b_->counter(PortCounter::rx_oversize_dropped), 1u);
    EXPECT_EQ(rte_mempool_in_use_count(foreign_), 0u);
}

TEST(EthPortLifetime, DestructorFreesThePoolWhenAllMbufsAreHome) {
    std::uint16_t p = 0;
    ASSERT_EQ(create_ring_pair_end("life", 'a', 64, &p), "");
    EthPortConfig c;
    c.port_id = p;
    std::string err;
    auto port = EthPort::create(c, &err);
    ASSERT_TRUE(port) << err;
    const std::string pool_name = port->mempool()->name;
    ASSERT_NE(rte_mempool_lookup(pool_name.c_str()), nullptr);
    port.reset();
    EXPECT_EQ(rte_mempool_lookup(pool_name.c_str()), nullptr);
    // The device went with it: the same end can be made again (an engine restarted in one process).
    ASSERT_EQ(create_ring_pair_end("life", 'a', 64, &p), "");
    c.port_id = p;
    port = EthPort::create(c, &err);
    EXPECT_TRUE(port) << err;
}

TEST(EthPortLifetime, EalVdevCanBeProbedAgainAfterDestruction) {
    for (int round = 0; round < 2; ++round) {
        std::uint16_t p = 0;
        ASSERT_EQ(probe_port("net_ring1", &p), "") << "round " << round;
        std::string err;
        EthPortConfig c;
        c.port_id = p;
        auto port = EthPort::create(c, &err);
        ASSERT_TRUE(port) << err;
        EXPECT_TRUE(port->link_up());
    }
}

/** config/demo.ini as the engine would bring it up: its devargs join device0.portN to
 * device1.portN. */
TEST(Demo, ShippedDemoConfigJoinsTheTwoDevices) {
    const char* dir = std::getenv("DROCE_CONFIG_DIR");
    std::string err;
    const auto cfg = load_config(std::string(dir ? dir : "config") + "/demo.ini", &err);
    ASSERT_TRUE(cfg) << err;
    ASSERT_EQ(cfg->devices.size(), 2u);
    const auto& d0 = cfg->devices[0];
    const auto& d1 = cfg->devices[1];
    ASSERT_EQ(d0.ports.size(), d1.ports.size());
    for (std::size_t i = 0; i < d0.ports.size(); ++i) {
        std::unique_ptr<EthPort> ports[2];
        const PortConfig* pcs[2] = {&d0.ports[i], &d1.ports[i]};
        for (int side = 0; side < 2; ++side) {
            EthPortConfig c;
            ASSERT_EQ(probe_port(pcs[side]->devargs, &c.port_id), "");
            c.port_index = static_cast<std::uint8_t>(i);
            c.mtu = pcs[side]->mtu;
            c.mac = pcs[side]->mac;
            ports[side] = EthPort::create(c, &err);
            ASSERT_TRUE(ports[side]) << err;
        }
        for (int from = 0; from < 2; ++from) {
            EthPort& tx = *ports[from];
            EthPort& rx = *ports[1 - from];
            for (const std::uint32_t len : {64u, tx.max_frame()}) {
                PktBuf* b = nullptr;
                ASSERT_EQ(tx.alloc_bulk(&b, 1), 1);
                std::memcpy(b->data, pcs[1 - from]->mac.data(), 6);
                std::memcpy(b->data + 6, pcs[from]->mac.data(), 6);
                for (std::uint32_t k = 12; k < len; ++k)
                    b->data[k] = static_cast<std::uint8_t>(k + from);
                b->len = len;
                ASSERT_EQ(tx.tx_burst(&b, 1), 1);
                PktBuf* r = nullptr;
                ASSERT_EQ(rx.rx_burst(&r, 1), 1) << "plane " << i << " from device" << from;
                ASSERT_EQ(r->len, len);
                EXPECT_EQ(std::memcmp(r->data, pcs[1 - from]->mac.data(), 6), 0);
                EXPECT_EQ(r->data[len - 1], static_cast<std::uint8_t>(len - 1 + from));
                EXPECT_EQ(r->port, i);
                rx.free_bulk(&r, 1);
            }
        }
    }
}

} // namespace
} // namespace droce::dpdk
