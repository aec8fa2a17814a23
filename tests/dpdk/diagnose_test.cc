/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * dpdk::pci_obstacle over a fake /sys tree: each reason a PCI port does not come up gets its own
 * sentence (no device, no driver, a kernel driver DPDK cannot share with its interface named), and
 * the drivers DPDK can use (vfio-pci with a free group, uio, mlx5's bifurcated driver) get none,
 * so DPDK's own message stands. A vfio group held by another process needs /dev/vfio: not here.
 */
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "dpdk/diagnose.h"

namespace droce::dpdk {
namespace {

namespace fs = std::filesystem;

class FakeSysfs : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("droce-sysfs-" + std::to_string(getpid()));
        fs::create_directories(root_ / "bus/pci/drivers");
        fs::create_directories(root_ / "kernel/iommu_groups/7");
    }
    void TearDown() override { fs::remove_all(root_); }
    /** A device at @p addr bound to @p driver ("" = none), with net interface @p ifname. */
    void device(const std::string& addr, const std::string& driver, const std::string& ifname = "",
                bool iommu_group = false) {
        const fs::path dev = root_ / "bus/pci/devices" / addr;
        fs::create_directories(dev);
        if (!driver.empty()) {
            fs::create_directories(root_ / "bus/pci/drivers" / driver);
            fs::create_directory_symlink(root_ / "bus/pci/drivers" / driver, dev / "driver");
        }
        if (!ifname.empty()) fs::create_directories(dev / "net" / ifname);
        if (iommu_group)
            fs::create_directory_symlink(root_ / "kernel/iommu_groups/7", dev / "iommu_group");
    }
    std::string obstacle(const std::string& devargs) { return pci_obstacle(devargs, root_); }
    fs::path root_;
};

TEST_F(FakeSysfs, NoSuchDevice) {
    const std::string why = obstacle("0000:03:00.0");
    EXPECT_NE(why.find("no PCI device 0000:03:00.0 on this host"), std::string::npos) << why;
    EXPECT_NE(why.find("README: Two hosts, or a real NIC"), std::string::npos) << why;
}

TEST_F(FakeSysfs, UpperCaseHexFindsTheDevice) {
    device("0000:af:00.0", "ixgbe", "enp175s0f0");
    const std::string why = obstacle("0000:AF:00.0");
    EXPECT_NE(why.find("bound to the kernel driver ixgbe"), std::string::npos) << why;
}

TEST_F(FakeSysfs, NoDriver) {
    device("0000:03:00.0", "");
    const std::string why = obstacle("0000:03:00.0,rxq=2");
    EXPECT_NE(why.find("has no driver: bind it to vfio-pci"), std::string::npos) << why;
}

TEST_F(FakeSysfs, AKernelDriverNamesItsInterface) {
    device("0000:00:03.0", "virtio-pci", "eth0");
    const std::string why = obstacle("0000:00:03.0");
    EXPECT_NE(why.find("bound to the kernel driver virtio-pci (interface eth0)"), std::string::npos)
        << why;
    EXPECT_NE(why.find("dpdk-devbind.py -b vfio-pci 0000:00:03.0"), std::string::npos) << why;
    EXPECT_NE(why.find("net_af_xdp"), std::string::npos) << why;
}

TEST_F(FakeSysfs, DriversDpdkUsesLeaveDpdksMessage) {
    device("0000:03:00.0", "vfio-pci", "", /*iommu_group=*/true); // group 7: no /dev/vfio/7 open
    device("0000:03:00.1", "mlx5_core", "enp3s0f1");
    device("0000:04:00.0", "uio_pci_generic");
    EXPECT_EQ(obstacle("0000:03:00.0"), "");
    EXPECT_EQ(obstacle("0000:03:00.1"), "");
    EXPECT_EQ(obstacle("0000:04:00.0"), "");
}

TEST_F(FakeSysfs, OtherDevargsAreNotPci) {
    EXPECT_EQ(obstacle("net_memif0,role=client"), "");
    EXPECT_EQ(obstacle("net_af_xdp0,iface=eth1"), "");
    EXPECT_EQ(obstacle("0000:03:00"), "");
    EXPECT_EQ(obstacle("000g:03:00.0"), "");
}

} // namespace
} // namespace droce::dpdk
