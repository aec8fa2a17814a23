/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * A GoogleTest global environment that brings the DPDK EAL up once for a whole test program (DPDK
 * cannot initialise twice) and down at the end: no hugepages, its own file prefix (so concurrent
 * test programs never share EAL files), --no-shconf rather than --in-memory (on DPDK 22.11
 * --no-huge implies legacy memory, which --in-memory refuses: "Option --legacy-mem is not
 * compatible with --in-memory"), and whatever vdevs the test asks for.
 *
 *     ::testing::Environment* const g_env =
 *         ::testing::AddGlobalTestEnvironment(new droce::dpdk::test::EalEnvironment("droce-test",
 * {"--vdev=net_ring0"}));
 */
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <rte_eal.h>

#include "dpdk/eal.h"

namespace droce::dpdk::test {

class EalEnvironment : public ::testing::Environment {
  public:
    /** @param prefix file prefix stem (the pid is appended) @param extra further EAL arguments */
    explicit EalEnvironment(std::string prefix, std::vector<std::string> extra = {})
        : prefix_(std::move(prefix)), extra_(std::move(extra)) {}

    void SetUp() override {
        std::vector<std::string> args{"--no-huge",
                                      "-m",
                                      "512",
                                      "--no-pci",
                                      "--no-telemetry",
                                      "--no-shconf",
                                      "--file-prefix=" + prefix_ + "-" + std::to_string(::getpid()),
                                      "--log-level=*:warning"};
        args.insert(args.end(), extra_.begin(), extra_.end());
        CPU_ZERO(&cpus_before_);
        ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof cpus_before_, &cpus_before_), 0);
        const std::string err = eal_init(args);
        ASSERT_EQ(err, "") << "EAL bring-up failed";
        runtime_dir_ = rte_eal_get_runtime_dir();
    }
    void TearDown() override {
        rte_eal_cleanup();
        // --no-shconf leaves an empty runtime directory behind; rmdir removes only an empty one.
        if (!runtime_dir_.empty()) ::rmdir(runtime_dir_.c_str());
    }

    /** The CPUs the thread that brought the EAL up could run on just before eal_init(). */
    [[nodiscard]] const cpu_set_t& cpus_before() const noexcept { return cpus_before_; }

  private:
    cpu_set_t cpus_before_{};
    std::string prefix_;
    std::vector<std::string> extra_;
    std::string runtime_dir_;
};

} // namespace droce::dpdk::test
