// The stream-ordered caching allocator on a fake device: splitting, coalescing, per-stream reuse,
// deferred frees after record_stream, the limit, empty_cache and out-of-memory errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "backend/stream_allocator.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using backend::StreamAllocator;
using backend::StreamId;

// Host memory as device memory; events complete only when the test says their stream ran.
struct FakeDevice final : backend::StreamDevice {
  struct Event {
    StreamId stream;
    int64_t ticket;
  };
  std::map<StreamId, int64_t> queued, finished;  // per stream: work queued, work done
  std::set<void*> live;
  size_t capacity = size_t{1} << 30, used = 0;
  std::map<void*, size_t> sizes;
  int frees = 0;

  void* raw_alloc(size_t n) override {
    if (used + n > capacity) return nullptr;
    void* p = std::aligned_alloc(512, n);
    used += n;
    sizes[p] = n;
    live.insert(p);
    return p;
  }
  void raw_free(void* p) override {
    used -= sizes.at(p);
    sizes.erase(p);
    live.erase(p);
    std::free(p);
    ++frees;
  }
  StreamId failing = nullptr;  // record_event on this stream throws (e.g. destroyed since record_stream)
  int events = 0;              // events recorded and not yet released
  void* record_event(StreamId s) override {
    if (s == failing && s != nullptr) KILN_FAIL("cuda", "cudaEventRecord failed: invalid resource handle");
    ++events;
    return new Event{s, ++queued[s]};
  }
  bool event_done(void* e) override {
    auto* ev = static_cast<Event*>(e);
    return finished[ev->stream] >= ev->ticket;
  }
  void release_event(void* e) override {
    --events;
    delete static_cast<Event*>(e);
  }
  void synchronize() override {
    for (auto& [s, q] : queued) finished[s] = q;
  }
  bool failing_fill = false;  // fill throws, as cudaMemset does after a device fault
  void fill(void*, int, size_t) override {
    if (failing_fill) KILN_FAIL("cuda", "cudaMemset(p, byte, n) failed: cudaErrorIllegalAddress");
  }
  void run(StreamId s) { finished[s] = queued[s]; }  // the stream caught up
};

StreamId stream(int i) { return reinterpret_cast<StreamId>(static_cast<uintptr_t>(i)); }

class StreamAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = std::make_unique<FakeDevice>();
    dev = d.get();
    alloc = std::make_unique<StreamAllocator>("cuda:0", std::move(d), backend::CachingAllocator::Mode::Caching);
  }
  FakeDevice* dev = nullptr;
  std::unique_ptr<StreamAllocator> alloc;
};

TEST_F(StreamAllocatorTest, SmallRequestsShareOneSegmentAndReuseFreedBlocks) {
  void* a = alloc->allocate(1000, stream(0));
  void* b = alloc->allocate(3000, stream(0));
  EXPECT_EQ(alloc->stats().reserved, size_t{2} << 20);  // one 2 MiB segment
  EXPECT_EQ(alloc->stats().allocated, 1024u + 3072u);   // rounded to 512 bytes
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);  // carved one after the other
  alloc->deallocate(a);
  void* c = alloc->allocate(900, stream(0));
  EXPECT_EQ(c, a);  // the freed block, same stream: reused at once
  EXPECT_EQ(alloc->stats().os_allocations, 1u);
  alloc->deallocate(b);
  alloc->deallocate(c);
  EXPECT_EQ(alloc->stats().allocated, 0u);
  // Everything coalesced back into the whole segment: the largest small request starts it.
  void* d = alloc->allocate(size_t{1} << 20, stream(0));
  EXPECT_EQ(d, a);
  EXPECT_EQ(alloc->stats().os_allocations, 1u);
  alloc->deallocate(d);
}

TEST_F(StreamAllocatorTest, LargeRequestsGetTheirOwnSegmentsAndSplit) {
  void* a = alloc->allocate(3 << 20, stream(0));  // < 10 MiB: from a 20 MiB segment
  EXPECT_EQ(alloc->stats().reserved, size_t{20} << 20);
  void* b = alloc->allocate(5 << 20, stream(0));  // the rest of that segment
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 3 << 20);
  void* c = alloc->allocate(33 << 20, stream(0));  // >= 10 MiB: rounded up to 2 MiB
  EXPECT_EQ(alloc->stats().reserved, (size_t{20} << 20) + (size_t{34} << 20));
  for (void* p : {a, b, c}) alloc->deallocate(p);
  EXPECT_EQ(alloc->stats().allocated, 0u);
  alloc->empty_cache();
  EXPECT_EQ(alloc->stats().reserved, 0u);
  EXPECT_TRUE(dev->live.empty());
}

TEST_F(StreamAllocatorTest, BlocksAreReusedOnlyOnTheirOwnStream) {
  void* a = alloc->allocate(4096, stream(1));
  alloc->deallocate(a);
  void* b = alloc->allocate(4096, stream(2));
  EXPECT_NE(b, a);  // stream 1's free block is not handed to stream 2
  void* c = alloc->allocate(4096, stream(1));
  EXPECT_EQ(c, a);
  alloc->deallocate(b);
  alloc->deallocate(c);
}

TEST_F(StreamAllocatorTest, ABlockUsedOnAnotherStreamWaitsForThatStream) {
  void* a = alloc->allocate(4096, stream(1));
  alloc->record_stream(a, stream(2));  // a kernel on stream 2 reads it
  alloc->deallocate(a);
  void* b = alloc->allocate(4096, stream(1));
  EXPECT_NE(b, a) << "reused while stream 2 may still be reading it";
  dev->run(stream(2));  // stream 2's work finished
  void* c = alloc->allocate(4096, stream(1));
  EXPECT_EQ(c, a);
  alloc->deallocate(b);
  alloc->deallocate(c);
  expect_error([&] { alloc->record_stream(reinterpret_cast<void*>(0x1000), stream(1)); }, "[record_stream]");
}

TEST_F(StreamAllocatorTest, TheLimitReleasesTheCacheThenFailsClearly) {
  alloc->set_limit(size_t{30} << 20);
  void* a = alloc->allocate(12 << 20, stream(0));
  void* b = alloc->allocate(12 << 20, stream(1));
  alloc->deallocate(b);  // cached on stream 1
  // 12 MiB more for stream 0 passes the limit only if stream 1's cached segment is released.
  void* c = alloc->allocate(12 << 20, stream(0));
  EXPECT_EQ(alloc->stats().allocation_retries, 1u);
  EXPECT_EQ(alloc->stats().reserved, size_t{24} << 20);
  try {
    alloc->allocate(30 << 20, stream(0));
    ADD_FAILURE() << "passed the limit";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[cuda] out of memory on cuda:0: asked 30.0 MiB, limit 30.0 MiB, 24.0 MiB in use, 24.0 MiB reserved", 0), 0u) << e.what();
  }
  EXPECT_EQ(alloc->stats().out_of_memory, 1u);
  alloc->deallocate(a);
  alloc->deallocate(c);
}

TEST_F(StreamAllocatorTest, ARetryTakesABlockThatAnotherStreamHasFinishedWith) {
  alloc->set_limit(size_t{20} << 20);
  void* a = alloc->allocate(3 << 20, stream(0));
  void* b = alloc->allocate(15 << 20, stream(0));  // the same 20 MiB segment
  alloc->record_stream(b, stream(1));              // e.g. a collective on a communication stream
  alloc->deallocate(b);
  // Only b's block holds 15 MiB within the limit, once stream 1 is done; its segment stays in use.
  void* c = alloc->allocate(15 << 20, stream(0));
  EXPECT_EQ(c, b);
  EXPECT_EQ(alloc->stats().allocation_retries, 1u);
  EXPECT_EQ(alloc->stats().reserved, size_t{20} << 20);
  alloc->deallocate(a);
  alloc->deallocate(c);
}

TEST_F(StreamAllocatorTest, TheDriverRefusingIsAClearErrorAfterARetry) {
  dev->capacity = size_t{30} << 20;
  void* a = alloc->allocate(20 << 20, stream(0));
  try {
    alloc->allocate(20 << 20, stream(0));
    ADD_FAILURE() << "the fake device has no room";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("which the driver refused"), std::string::npos) << e.what();
  }
  alloc->deallocate(a);
  void* b = alloc->allocate(20 << 20, stream(0));  // the cached block serves it
  alloc->deallocate(b);
  // A size no device has is refused before the driver is asked (and before rounding could wrap).
  try {
    alloc->allocate(SIZE_MAX, stream(0));
    ADD_FAILURE() << "SIZE_MAX bytes were handed out";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("asked 16384 PiB, more than any cuda device has"), std::string::npos) << e.what();
  }
}

// Under a limit, a request whose shared 20 MiB segment would pass it gets a segment of its own
// size (to 2 MiB): "asked 3 MiB, limit 30 MiB, 12 MiB in use" must not be an error.
TEST_F(StreamAllocatorTest, ARequestUnderTheLimitGetsASegmentOfItsOwnSize) {
  alloc->set_limit(size_t{30} << 20);
  void* a = alloc->allocate(12 << 20, stream(0));
  void* b = alloc->allocate(3 << 20, stream(0));
  EXPECT_EQ(alloc->stats().reserved, size_t{16} << 20);
  EXPECT_EQ(alloc->stats().out_of_memory, 0u);
  alloc->deallocate(a);
  alloc->deallocate(b);
  // No limit: the shared segment as before.
  alloc->set_limit(0);
  void* c = alloc->allocate(3 << 20, stream(1));
  EXPECT_EQ(alloc->stats().reserved, size_t{36} << 20);
  alloc->deallocate(c);
}

// A free whose event cannot be recorded on one of the block's streams reports the error, keeps no
// event, and frees the block after waiting for the device: not handed out while a stream may
// still use it, not lost.
TEST_F(StreamAllocatorTest, AFailedEventRecordWaitsThenFreesTheBlock) {
  void* a = alloc->allocate(4096, stream(1));
  alloc->record_stream(a, stream(2));
  alloc->record_stream(a, stream(3));
  dev->failing = stream(3);
  dev->queued[stream(2)] = 5;  // stream 2 is still busy
  expect_error([&] { alloc->deallocate(a); }, "cudaEventRecord failed");
  EXPECT_EQ(dev->events, 0);
  EXPECT_EQ(dev->finished[stream(2)], dev->queued[stream(2)]) << "the device was not waited for";
  EXPECT_EQ(alloc->stats().allocated, 0u);
  void* b = alloc->allocate(4096, stream(1));
  EXPECT_EQ(b, a);
  alloc->deallocate(b);
}

// Sizes near the address space's are refused before any rounding can wrap around.
TEST_F(StreamAllocatorTest, AnImpossibleSizeIsOutOfMemory) {
  for (size_t n : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 511,
                   std::numeric_limits<size_t>::max() / 2}) {
    EXPECT_THROW(alloc->allocate(n, stream(0)), OutOfMemoryError) << n;
  }
  EXPECT_EQ(alloc->stats().reserved, 0u);
  alloc->set_limit(size_t{1} << 30);
  EXPECT_THROW(alloc->allocate(std::numeric_limits<size_t>::max() / 8, stream(0)), OutOfMemoryError);
}

// The peaks of allocated and of reserved bytes (torch's max_memory_allocated / _reserved); a
// reset brings both down to the present values.
TEST_F(StreamAllocatorTest, PeakAndReset) {
  void* a = alloc->allocate(1 << 20, stream(0));
  void* b = alloc->allocate(1 << 20, stream(0));
  void* big = alloc->allocate(33 << 20, stream(0));  // a 34 MiB segment of its own
  alloc->deallocate(a);
  alloc->deallocate(big);
  alloc->empty_cache();  // the big segment goes back; b's 2 MiB segment stays
  EXPECT_EQ(alloc->stats().peak, (size_t{2} << 20) + (size_t{34} << 20));  // blocks count rounded
  EXPECT_EQ(alloc->stats().reserved, size_t{2} << 20);
  EXPECT_EQ(alloc->stats().peak_reserved, (size_t{2} << 20) + (size_t{34} << 20));
  alloc->reset_peak();
  EXPECT_EQ(alloc->stats().peak, size_t{1} << 20);
  EXPECT_EQ(alloc->stats().peak_reserved, size_t{2} << 20);
  alloc->deallocate(b);
}

TEST(StreamAllocatorSystem, EveryBlockGoesToTheDeviceAndBack) {
  auto d = std::make_unique<FakeDevice>();
  FakeDevice* dev = d.get();
  StreamAllocator alloc("cuda:0", std::move(d), backend::CachingAllocator::Mode::System);
  void* a = alloc.allocate(1000, stream(0));
  EXPECT_EQ(dev->sizes.at(a), 1024u);
  alloc.deallocate(a);
  EXPECT_TRUE(dev->live.empty());
  EXPECT_FALSE(alloc.stats().caching);
}

// A poisoning fill that fails gives the new segment back and counts nothing: reserved stays what
// the device holds.
TEST(StreamAllocatorSystem, AFailedFillGivesTheSegmentBack) {
  auto d = std::make_unique<FakeDevice>();
  FakeDevice* dev = d.get();
  StreamAllocator alloc("cuda:0", std::move(d), backend::CachingAllocator::Mode::System);
  dev->failing_fill = true;
  EXPECT_THROW(alloc.allocate(1000, stream(0)), Error);
  EXPECT_EQ(dev->used, 0u);
  EXPECT_TRUE(dev->live.empty());
  EXPECT_EQ(alloc.stats().reserved, 0u);
  EXPECT_EQ(alloc.stats().os_allocations, 0u);
  dev->failing_fill = false;
  void* a = alloc.allocate(1000, stream(0));
  EXPECT_EQ(alloc.stats().reserved, 1024u);
  alloc.deallocate(a);
  EXPECT_EQ(alloc.stats().reserved, 0u);
}

// The host's allocator refuses a size past a quarter of the address space before rounding it up
// to its size class (which wrapped to 0: a 0-byte block handed out as SIZE_MAX bytes).
TEST(CachingAllocator, AHugeSizeIsRefusedNotRoundedToZero) {
  size_t asked_os = 0;
  backend::CachingAllocator alloc(
      "cpu", [&](size_t n) { asked_os += n; return std::malloc(n == 0 ? 1 : n); }, [](void* p) { std::free(p); },
      nullptr, backend::CachingAllocator::Mode::Caching);
  for (size_t n : {std::numeric_limits<size_t>::max(), (std::numeric_limits<size_t>::max() / 8) * 7 + 2}) {
    try {
      (void)alloc.allocate(n);
      ADD_FAILURE() << n << " bytes were handed out";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("more than any cpu device has"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(asked_os, 0u);
  EXPECT_EQ(alloc.stats().out_of_memory, 2u);
}

}  // namespace
}  // namespace kiln::test
