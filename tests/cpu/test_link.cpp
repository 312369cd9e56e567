// The controller link: clients get queue pairs as handles (their own
// mapping of the memfd), a closed handle deletes its queue pair on the
// controller, caches hold the link (an owning link keeps its controller),
// and datasets' host memory comes as a mapping with its kind.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;

TEST(Link, QueuePairHandlesMapTheirOwnViewAndDeleteTheQueueWhenClosed) {
  controller ctl;
  auto mem = test::pattern_memory(1 << 20, true, 5);
  const uint32_t ns = ctl.add_namespace({mem, 4096, false});
  auto link = in_process_link(ctl);
  EXPECT_EQ(ctl.queue_pair_count(), 0u);
  {
    host_queue_client c(link->open_queue_pair({16, 16, 4096}));
    EXPECT_EQ(ctl.queue_pair_count(), 1u);
    EXPECT_EQ(c.pair().state(), queue_state::running);
    EXPECT_EQ(c.pair().geometry().sq_entries, 16u);
    std::vector<uint8_t> block(4096, 0xAB), back(4096);
    ASSERT_TRUE(c.write(ns, 3, 1, 4096, block.data()).ok());
    ASSERT_TRUE(c.read(ns, 3, 1, 4096, back.data()).ok());
    EXPECT_EQ(back, block);
    EXPECT_EQ(ctl.counters(c.pair().id()).commands, 2u);
  }
  EXPECT_EQ(ctl.queue_pair_count(), 0u);
  EXPECT_EQ(ctl.total_counters().commands, 2u) << "a deleted queue's counters stay in the totals";
  EXPECT_THROW(ctl.counters(1), error);
  ctl.delete_queue_pair(1);  // again: ignored
  ctl.delete_queue_pair(77);
}

TEST(Link, CachesMadeAndDroppedLeaveNoQueuePairsBehind) {
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  auto mem = test::pattern_memory(1 << 20, false, 6);
  const uint32_t ns = ctl.add_namespace({mem, 4096, true});
  cache_config cfg = test::small_cache(64);
  cfg.direct_tier = false;  // through the controller's queues
  for (int round = 0; round < 20; ++round) {
    auto cache = make_host_page_cache(ctl, cfg);
    array<uint64_t> a(cache, ns);
    request_status s;
    EXPECT_EQ(a.ref().try_read(round * 512 + 1, &s), test::pattern_word((round * 512 + 1) * 8, 6));
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(ctl.queue_pair_count(), cfg.queue_pairs + 1) << "the cache's queues and its control queue";
  }
  EXPECT_EQ(ctl.queue_pair_count(), 0u);
  // The pollers drop deleted queues on their own; the dump lists none.
  EXPECT_EQ(ctl.dump().find("qp "), std::string::npos) << ctl.dump();
  // And the controller still serves new ones.
  auto cache = make_host_page_cache(ctl, cfg);
  array<uint64_t> a(cache, ns);
  request_status s;
  EXPECT_EQ(a.ref().try_read(7, &s), test::pattern_word(7 * 8, 6));
  EXPECT_TRUE(s.ok());
}

TEST(Link, AnOwningLinkKeepsItsControllerForItsCaches) {
  auto ctl = std::make_shared<controller>();
  auto mem = test::pattern_memory(1 << 20, false, 8);
  const uint32_t ns = ctl->add_namespace({mem, 4096, true});
  auto link = in_process_link(ctl);
  std::weak_ptr<controller> weak = ctl;
  ctl.reset();
  cache_config cfg = test::small_cache(64);
  cfg.direct_tier = false;
  auto cache = make_host_page_cache(link, cfg);
  link.reset();
  EXPECT_FALSE(weak.expired()) << "the cache holds the link, the link its controller";
  {
    array<uint64_t> a(cache, ns);
    request_status s;
    EXPECT_EQ(a.ref().try_read(99, &s), test::pattern_word(99 * 8, 8));
    EXPECT_TRUE(s.ok());
  }
  cache.reset();
  EXPECT_TRUE(weak.expired()) << "the last cache gone, the controller goes";
}

TEST(Link, DatasetMemoryComesAsAMappingThatSaysWhatItIs) {
  controller ctl;
  auto mem = test::pattern_memory(10240 * 8, true, 9);
  const uint32_t in_memory = ctl.add_namespace({mem, 512, false});
  test::scratch_file f(1 << 16, 10);
  const uint32_t in_file = ctl.add_namespace({open_file_target(f.path()), 4096, true});
  auto link = in_process_link(ctl);

  auto m = link->map_dataset(in_memory, false);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->file);
  EXPECT_TRUE(m->writable);
  EXPECT_EQ(m->data, mem->host_pointer());
  EXPECT_EQ(m->bytes, 10240u * 8);
  EXPECT_EQ(m->base_bytes % 4096, 0u);

  EXPECT_EQ(link->map_dataset(in_file, false), nullptr) << "a file is mapped only when asked";
  auto fm = link->map_dataset(in_file, true);
  ASSERT_NE(fm, nullptr);
  EXPECT_TRUE(fm->file);
  EXPECT_FALSE(fm->writable);
  EXPECT_EQ(fm->bytes, 1u << 16);
  EXPECT_EQ(test::check_pattern(fm->data, fm->bytes, 0, 10), -1);

  EXPECT_THROW(link->info(42), error);
  EXPECT_EQ(link->info(in_file).bytes, 1u << 16);
}

TEST(Link, AClientThatMapsTheMemfdItselfTalksToTheController) {
  // What a client in another process does: map the queue pair from its
  // memfd and geometry alone.
  controller ctl;
  auto mem = test::pattern_memory(1 << 20, true, 12);
  const uint32_t ns = ctl.add_namespace({mem, 4096, false});
  std::shared_ptr<queue_pair> qp = ctl.create_queue_pair({16, 16, 8192});
  auto handle = std::make_unique<queue_pair_handle>(qp->id(), qp->geometry(), qp->memfd(), qp->bytes(),
                                                    [&ctl, id = qp->id()] { ctl.delete_queue_pair(id); });
  EXPECT_NE(handle->base(), qp->base()) << "its own mapping";
  EXPECT_NE(handle->memfd(), qp->memfd()) << "its own descriptor";
  {
    host_queue_client c(std::move(handle));
    std::vector<uint8_t> back(8192);
    ASSERT_TRUE(c.read(ns, 10, 2, 4096, back.data()).ok());
    EXPECT_EQ(test::check_pattern(back.data(), back.size(), 10 * 4096, 12), -1);
    std::vector<uint8_t> block(4096, 0x11), again(4096);
    ASSERT_TRUE(c.write(ns, 20, 1, 4096, block.data()).ok());
    // Read back through the queue (ThreadSanitizer cannot see the ordering
    // the completion gives through a second mapping of the same memory).
    ASSERT_TRUE(c.read(ns, 20, 1, 4096, again.data()).ok());
    EXPECT_EQ(again, block);
  }
  EXPECT_EQ(ctl.queue_pair_count(), 0u);
  // A handle over memory that is not the queue pair it names is refused.
  std::shared_ptr<queue_pair> other = ctl.create_queue_pair({16, 16, 8192});
  bool closed = false;
  EXPECT_THROW(queue_pair_handle(other->id() + 1, other->geometry(), other->memfd(), other->bytes(),
                                 [&closed] { closed = true; }),
               error);
  EXPECT_TRUE(closed) << "on_close runs when the handle cannot be made";
}
