/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file
 * lib/config default_config_path: a binary in the build directory takes the source tree's config,
 * any other the installed one, whatever path (relative, through a symlink) names the directory.
 */
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "config/default_path.h"

namespace droce {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBuildConfig = "/src/config/demo.ini";
constexpr const char* kInstalledConfig = "/etc/droce/demo.ini";

class DefaultPath : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/droce-default-path.XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        top_ = tmpl;
        fs::create_directories(top_ / "build" / "lib" / "verbs");
        fs::create_directories(top_ / "usr" / "lib" / "droce");
        fs::create_directory_symlink(top_ / "build", top_ / "link");
        build_dir_ = (top_ / "build" / "lib" / "verbs").string();
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(top_, ec);
    }
    std::string pick(const std::string& binary) const {
        return default_config_path(binary.c_str(), build_dir_.c_str(), kBuildConfig,
                                   kInstalledConfig);
    }
    fs::path top_;
    std::string build_dir_;
};

TEST_F(DefaultPath, BuildTreeBinaryTakesTheSourceConfig) {
    EXPECT_EQ(pick(build_dir_ + "/libibverbs.so.1"), kBuildConfig);
}

TEST_F(DefaultPath, InstalledBinaryTakesTheInstalledConfig) {
    EXPECT_EQ(pick((top_ / "usr" / "lib" / "droce" / "libibverbs.so.1").string()),
              kInstalledConfig);
    // A directory beside or above the build directory is not it.
    EXPECT_EQ(pick((top_ / "build" / "lib" / "libibverbs.so.1").string()), kInstalledConfig);
}

TEST_F(DefaultPath, SymlinkAndRelativePathsNameTheSameDirectory) {
    EXPECT_EQ(pick((top_ / "link" / "lib" / "verbs" / "libibverbs.so.1").string()), kBuildConfig);
    const fs::path cwd = fs::current_path();
    fs::current_path(top_ / "build");
    EXPECT_EQ(pick("lib/verbs/libibverbs.so.1"), kBuildConfig);
    fs::current_path(top_ / "build" / "lib" / "verbs");
    EXPECT_EQ(pick("libibverbs.so.1"), kBuildConfig); // no directory part: the cwd
    fs::current_path(cwd);
}

TEST_F(DefaultPath, NoBinaryOrNoBuildTreeTakesTheInstalledConfig) {
    EXPECT_EQ(default_config_path(nullptr, build_dir_.c_str(), kBuildConfig, kInstalledConfig),
              kInstalledConfig);
    EXPECT_EQ(pick(""), kInstalledConfig);
    const std::string binary = build_dir_ + "/libibverbs.so.1";
    fs::remove_all(top_ / "build");
    EXPECT_EQ(pick(binary), kInstalledConfig);
}

} // namespace
} // namespace droce
