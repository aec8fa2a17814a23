#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""droce-doctor: its report of this host agrees with what the host says by other means, and its
advice for made-up hosts (a --sysroot tree) names the right driver, binding and config.

    doctor_test.py DROCE_DOCTOR
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import unittest

DOCTOR = None


def run(*args):
    r = subprocess.run([DOCTOR, *args], capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


class ThisHost(unittest.TestCase):
    def setUp(self):
        rc, out, err = run("--json")
        self.assertEqual(rc, 0, err)
        self.rep = json.loads(out)

    def test_cores_and_memory(self):
        self.assertEqual(self.rep["cores"]["online"], os.cpu_count())
        with open("/proc/meminfo") as f:
            total_kb = int(f.readline().split()[1])
        self.assertEqual(self.rep["memory_mb"], total_kb // 1024)

    def test_hugepages_match_meminfo(self):
        meminfo = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                meminfo[k] = v.split()
        size_kb = int(meminfo["Hugepagesize"][0])
        default = [s for s in self.rep["hugepages"]["sizes"] if s["size_kb"] == size_kb]
        self.assertEqual(len(default), 1, self.rep["hugepages"])
        self.assertEqual(default[0]["total"], int(meminfo["HugePages_Total"][0]))
        self.assertEqual(default[0]["free"], int(meminfo["HugePages_Free"][0]))

    def test_memlock_and_interfaces(self):
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        want = None if soft == resource.RLIM_INFINITY else soft
        self.assertEqual(self.rep["memlock_bytes"], want)
        names = {i["name"]: i for i in self.rep["interfaces"]}
        self.assertEqual(set(names), set(os.listdir("/sys/class/net")))
        self.assertEqual(names["lo"]["kind"], "loopback")

    def test_io_uring_answer_and_advice(self):
        # This machine runs the uring tests: io_uring works, and the advice offers the driver.
        self.assertIs(self.rep["io_uring"]["works"], True)
        titles = [a["title"] for a in self.rep["advice"]]
        self.assertTrue(any("io_uring" in t for t in titles), titles)

    def test_text_report(self):
        rc, out, _ = run()
        self.assertEqual(rc, 0)
        self.assertIn("hugepages", out)
        self.assertIn("What droce can run here", out)


def fake_host(root, nic_driver, iommu_groups=0, hugepages_free=0, bound=None):
    """A /sys and /proc tree with one PCI NIC enp3s0 at 0000:03:00.0 driven by nic_driver."""
    def mk(path, text=None):
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if text is not None:
            with open(full, "w") as f:
                f.write(text)
        return full

    mk("/proc/meminfo", "MemTotal:       8192000 kB\nHugepagesize:       2048 kB\n")
    mk("/proc/mounts", "hugetlbfs /dev/hugepages hugetlbfs rw 0 0\n")
    mk("/proc/cmdline", "quiet\n")
    mk("/proc/sys/kernel/osrelease", "6.1.0-fake\n")
    mk("/sys/devices/system/cpu/online", "0-7\n")
    hp = "/sys/kernel/mm/hugepages/hugepages-2048kB/"
    mk(hp + "nr_hugepages", "%d\n" % hugepages_free)
    mk(hp + "free_hugepages", "%d\n" % hugepages_free)
    for g in range(iommu_groups):
        os.makedirs(os.path.join(root, "sys/kernel/iommu_groups/%d" % g))
    pci = "0000:03:00.0"
    dev = mk("/sys/devices/pci0000:00/%s/class" % pci, "0x020000\n")
    devdir = os.path.dirname(dev)
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers", nic_driver), exist_ok=True)
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.symlink(devdir, os.path.join(root, "sys/bus/pci/devices", pci))
    if bound:
        os.symlink(devdir, os.path.join(root, "sys/bus/pci/drivers", nic_driver, pci))
        mk("/sys/class/net/lo/mtu", "65536\n")
        return
    net = os.path.join(root, "sys/class/net/enp3s0")
    os.makedirs(net)
    os.symlink(devdir, os.path.join(net, "device"))
    os.symlink(os.path.join(root, "sys/bus/pci/drivers", nic_driver),
               os.path.join(devdir, "driver"))
    for k, v in (("mtu", "1500"), ("operstate", "up"), ("speed", "25000"),
                 ("address", "0c:42:a1:00:00:01")):
        mk("/sys/class/net/enp3s0/" + k, v + "\n")
    mk("/sys/class/net/lo/mtu", "65536\n")


class MadeUpHosts(unittest.TestCase):
    def advice(self, **kw):
        with tempfile.TemporaryDirectory() as root:
            fake_host(root, **kw)
            rc, out, err = run("--json", "--sysroot", root)
            self.assertEqual(rc, 0, err)
            rep = json.loads(out)
        return rep, {a["title"]: " | ".join(a["lines"]) for a in rep["advice"]}

    def test_kernel_nic_without_iommu_or_hugepages(self):
        rep, adv = self.advice(nic_driver="ixgbe")
        nic = [i for i in rep["interfaces"] if i["name"] == "enp3s0"][0]
        self.assertEqual((nic["kind"], nic["pci"], nic["driver"], nic["speed_mbps"]),
                         ("pci", "0000:03:00.0", "ixgbe", 25000))
        self.assertEqual(rep["cores"]["online"], 8)
        text = adv["PCI NIC 0000:03:00.0 (enp3s0)"]
        self.assertIn("dpdk-devbind.py -b vfio-pci 0000:03:00.0", text)
        self.assertIn("intel_iommu=on", text)
        self.assertIn("nr_hugepages", text)
        self.assertIn("pci-nic.ini", text)

    def test_bifurcated_nic_needs_no_binding(self):
        _, adv = self.advice(nic_driver="mlx5_core", iommu_groups=4, hugepages_free=1024)
        text = adv["PCI NIC 0000:03:00.0 (enp3s0)"]
        self.assertIn("bifurcated", text)
        self.assertNotIn("devbind", text)
        self.assertNotIn("nr_hugepages", text)

    def test_nic_already_bound_to_vfio(self):
        _, adv = self.advice(nic_driver="vfio-pci", iommu_groups=4, hugepages_free=1024,
                             bound=True)
        text = adv["PCI NIC 0000:03:00.0 (no kernel interface)"]
        self.assertIn("ready for DPDK (devargs = 0000:03:00.0)", text)
        self.assertNotIn("intel_iommu", text)

    def test_bad_usage(self):
        rc, _, err = run("--sysroot", "/nonexistent/droce-doctor")
        self.assertEqual(rc, 2)
        self.assertIn("not a directory", err)


if __name__ == "__main__":
    DOCTOR = sys.argv.pop(1)
    unittest.main(verbosity=2)
