// Status/Result: context trails, propagation macros, conversions; MappedFile's refusals.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "loom/base/file.h"
#include "loom/base/status.h"

namespace loom {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("value {} is not positive", v);
  return v;
}

Result<int> doubled(int v) {
  LOOM_ASSIGN_OR_RETURN(int x, parse_positive(v).with_context("parsing"));
  return 2 * x;
}

TEST(Status, OkIsCheapAndOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(Status, ContextReadsOutermostFirst) {
  Status s = not_found("tensor {} missing", "blk.0.attn_q.weight");
  s.with_context("reading x.gguf").with_context("loading model");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "loading model: reading x.gguf: tensor blk.0.attn_q.weight missing");
}

TEST(Result, PropagatesErrorsWithContext) {
  auto good = doubled(21);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 42);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().to_string(), "parsing: value -1 is not positive");
}

TEST(Result, OkStatusIsRejectedAsValue) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(MappedFile, MissingFileIsNotFound) {
  auto f = MappedFile::open("/nonexistent/loom/file.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().to_string().find("/nonexistent/loom/file.gguf"), std::string::npos);
}

TEST(MappedFile, DirectoryIsRefused) {
  auto f = MappedFile::open("/tmp");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().to_string().find("/tmp is not a regular file (a directory)"), std::string::npos)
      << f.status().to_string();
}

TEST(MappedFile, CharacterDeviceIsRefused) {
  auto f = MappedFile::open("/dev/null");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().to_string().find("/dev/null is not a regular file (a character device)"), std::string::npos)
      << f.status().to_string();
}

// open(O_RDONLY) on a FIFO without a writer blocks forever; MappedFile must refuse it at once.
TEST(MappedFile, FifoIsRefusedWithoutBlocking) {
  const std::string path = ::testing::TempDir() + "/loom_map_test.fifo";
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return MappedFile::open(path); });
  if (pending.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock the reader (a writer end opens at once while a reader waits) so the test can end.
    int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "MappedFile::open blocked on a FIFO";
  }
  auto f = pending.get();
  ::unlink(path.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().to_string().find(path + " is not a regular file (a FIFO)"), std::string::npos)
      << f.status().to_string();
}

TEST(ReadFile, DirectoryIsRefused) {
  auto r = read_file("/tmp");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("/tmp is a directory"), std::string::npos) << r.status().to_string();
}

TEST(MappedFile, MapsBytes) {
  std::string path = ::testing::TempDir() + "/loom_map_test.bin";
  ASSERT_TRUE(write_file(path, "hello").ok());
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data()), 5), "hello");
  MappedFile moved = std::move(*f);
  EXPECT_EQ(moved.size(), 5u);
}

}  // namespace
}  // namespace loom
