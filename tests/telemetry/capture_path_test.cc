/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * telemetry::check_capture_path: what a telemetry client may name as a capture file. A client of
 * the socket must not make the droce process (often root) truncate an arbitrary file, and a
 * relative path would be the process's working directory, not the client's.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "telemetry/telemetry.h"

namespace {

using droce::telemetry::check_capture_path;

class CapturePath : public ::testing::Test {
  protected:
    void SetUp() override {
        char t[] = "/tmp/droce-capture-path-XXXXXX";
        ASSERT_NE(mkdtemp(t), nullptr);
        dir_ = t;
    }
    void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
    std::string dir_;
};

TEST_F(CapturePath, NewFileInAnExistingDirectoryIsAccepted) {
    EXPECT_EQ(check_capture_path(dir_ + "/new.pcapng"), "");
}

TEST_F(CapturePath, RelativeCommaControlAndDirectoryRefused) {
    EXPECT_NE(check_capture_path("x.pcapng"), "");
    EXPECT_NE(check_capture_path(""), "");
    EXPECT_NE(check_capture_path(dir_ + "/a,b.pcapng"), "");
    EXPECT_NE(check_capture_path(dir_ + "/a\nb.pcapng"), "");
    EXPECT_NE(check_capture_path(dir_ + "/"), "");
    EXPECT_NE(check_capture_path(dir_), ""); // a directory that exists
    EXPECT_NE(check_capture_path(dir_ + "/no/such/dir/x.pcapng"), "");
    EXPECT_NE(check_capture_path("/" + std::string(200, 'a')), "");
}

TEST_F(CapturePath, ExistingFileOnlyWhenItIsAPcapng) {
    const std::string text = dir_ + "/text";
    std::ofstream(text) << "not a capture";
    EXPECT_NE(check_capture_path(text), "");
    const std::string empty = dir_ + "/empty";
    std::ofstream(empty).flush();
    EXPECT_EQ(check_capture_path(empty), "");
    const std::string pcapng = dir_ + "/old.pcapng";
    std::ofstream(pcapng) << std::string("\x0a\x0d\x0d\x0a\x1c\x00\x00\x00", 8);
    EXPECT_EQ(check_capture_path(pcapng), "");
    // A link, even to a capture, is refused: the client would choose where the file goes.
    const std::string link = dir_ + "/link.pcapng";
    ASSERT_EQ(symlink(pcapng.c_str(), link.c_str()), 0);
    EXPECT_NE(check_capture_path(link), "");
    EXPECT_NE(check_capture_path("/etc/passwd"), "");
}

} // namespace
