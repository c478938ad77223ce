// SPDX-License-Identifier: Apache-2.0
// Round trips never nest (spec §6.4): libhurray recognises its own wrappers in
// both directions, and a wrapper changed in between is wrapped once more but
// still released exactly once.
#include <cstring>
#include <string>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

constexpr int kRoundTrips = 1000;

// Mixed pattern of versioned and legacy round trips.
bool versioned_at(int i) { return (i % 3) != 1; }

// Bytes the heap holds, where the C library can say (0 otherwise).
size_t heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  return mallinfo2().uordblks;
#else
  return 0;
#endif
}

// Exports `h` one way or the other and imports the result again.
// Returns false (with a failure recorded) if any step fails.
bool round_trip(hurray_buffer *h, bool versioned) {
  if (versioned) {
    DLManagedTensorVersioned *t = nullptr;
    if (hurray_to_dlpack_versioned(h, &t) != HURRAY_OK) {
      ADD_FAILURE() << "export: " << hurray_last_error();
      return false;
    }
    if (hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, h) != HURRAY_OK) {
      ADD_FAILURE() << "import: " << hurray_last_error();
      return false;
    }
  } else {
    DLManagedTensor *t = nullptr;
    if (hurray_to_dlpack(h, &t) != HURRAY_OK) {
      ADD_FAILURE() << "export: " << hurray_last_error();
      return false;
    }
    if (hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, h) != HURRAY_OK) {
      ADD_FAILURE() << "import: " << hurray_last_error();
      return false;
    }
  }
  return true;
}

// 1,000 alternating round trips leave the handle bytewise what it was.
void expect_round_trips_are_identity(hurray_buffer *h) {
  const hurray_buffer orig = *h;
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(round_trip(h, versioned_at(i)));  // warm up
  const size_t heap_before = heap_in_use();
  int first_difference = -1;
  for (int i = 0; i < kRoundTrips; ++i) {
    ASSERT_TRUE(round_trip(h, versioned_at(i))) << "round trip " << i;
    if (first_difference < 0 && !same_bytes(*h, orig)) first_difference = i;
  }
  EXPECT_EQ(heap_in_use(), heap_before) << "round trips made the heap grow";
  EXPECT_EQ(first_difference, -1) << "the handle changed at round trip " << first_difference;
  EXPECT_EQ(h->release_fn, orig.release_fn);
  EXPECT_EQ(h->user_data, orig.user_data);
}

TEST(RoundTrip, ProducerHandleThousandTimesEveryLayout) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    HandleSource src;
    hurray_buffer h = src.handle(l);
    expect_round_trips_are_identity(&h);
    EXPECT_EQ(src.log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(src.log.calls.load(), 1);
    EXPECT_EQ(src.log.last_arg.load(), &src.log);
  }
}

TEST(RoundTrip, ForeignVersionedTensorComesBackAsTheSamePointer) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, l);
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
    expect_round_trips_are_identity(&h);
    DLManagedTensorVersioned *back = nullptr;
    ASSERT_OK(hurray_to_dlpack_versioned(&h, &back));
    EXPECT_EQ(back, t) << "exporting an imported tensor unwraps it";
    EXPECT_TRUE(is_zeroed(h));
    EXPECT_EQ(log.calls.load(), 0);
    back->deleter(back);
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t);
  }
}

TEST(RoundTrip, ForeignLegacyTensorComesBackAsTheSamePointer) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    DeleterLog log;
    DLManagedTensor *t = make_legacy(log, l);
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
    expect_round_trips_are_identity(&h);
    DLManagedTensor *back = nullptr;
    ASSERT_OK(hurray_to_dlpack(&h, &back));
    EXPECT_EQ(back, t);
    EXPECT_EQ(log.calls.load(), 0);
    back->deleter(back);
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t);
  }
}

TEST(RoundTrip, ImmediateUnwrapOfAForeignVersionedTensor) {
  DeleterLog log;
  Layout l = dense({2, 3});
  l.flags = HURRAY_FLAG_READ_ONLY;
  l.device_type = kDLCUDA;
  l.device_id = 3;
  DLManagedTensorVersioned *t = make_versioned(log, l, 1, 2);
  DLManagedTensorVersioned before;
  std::memcpy(&before, t, sizeof before);
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  DLManagedTensorVersioned *back = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &back));
  ASSERT_EQ(back, t);
  EXPECT_EQ(std::memcmp(&before, back, sizeof before), 0) << "the producer's tensor is untouched";
  EXPECT_OK(hurray_dlpack_versioned_delete(back));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);
}

TEST(RoundTrip, CrossFormExportsWrapOnceAndUnwrapBack) {
  // A versioned import exported as legacy cannot be the original struct: it
  // is wrapped, and importing that wrapper gives the imported handle back.
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({4}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  const hurray_buffer imported = h;
  DLManagedTensor *legacy = nullptr;
  ASSERT_OK(hurray_to_dlpack(&h, &legacy));
  EXPECT_NE(static_cast<void *>(legacy), static_cast<void *>(t));
  ASSERT_OK(hurray_from_dlpack(legacy, HURRAY_IMPORT_DEFAULT, &h));
  EXPECT_TRUE(same_bytes(h, imported));
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);

  // And the legacy wrapper deleted directly releases the import exactly once.
  DeleterLog log2;
  DLManagedTensor *u = make_legacy(log2, dense({4}));
  ASSERT_OK(hurray_from_dlpack(u, HURRAY_IMPORT_DEFAULT, &h));
  DLManagedTensorVersioned *v = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &v));
  EXPECT_EQ(v->version.major, 1u);
  EXPECT_EQ(v->version.minor, 3u);
  EXPECT_EQ(v->flags, 0u);
  v->deleter(v);
  EXPECT_EQ(log2.calls.load(), 1);
  EXPECT_EQ(log2.last_arg.load(), u);
}

// ----- wrappers changed in between are not unwrapped ---------------------------------

TEST(RoundTrip, MutatedVersionedExportIsNotUnwrappedButReleasedOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  const hurray_buffer orig = h;
  DLManagedTensorVersioned *e = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &e));
  e->dl_tensor.byte_offset += 4;  // a consumer's view of the same memory
  ASSERT_OK(hurray_from_dlpack_versioned(e, HURRAY_IMPORT_DEFAULT, &h));
  EXPECT_FALSE(same_bytes(h, orig));
  EXPECT_NE(h.user_data, orig.user_data) << "must not unwrap a changed wrapper";
  EXPECT_EQ(h.byte_offset, orig.byte_offset + 4);
  EXPECT_EQ(h.data, orig.data);

  // Exporting that handle again gives back the changed wrapper itself: one
  // wrapper frame, never two.
  DLManagedTensorVersioned *again = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &again));
  EXPECT_EQ(again, e);
  EXPECT_EQ(src.log.calls.load(), 0);
  again->deleter(again);
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
}

TEST(RoundTrip, VariousConsumerChangesPreventUnwrapping) {
  struct Change {
    const char *name;
    void (*apply)(DLManagedTensorVersioned *e, int64_t *own_dims);
  };
  const Change changes[] = {
      {"flags", [](DLManagedTensorVersioned *e, int64_t *) { e->flags |= HURRAY_FLAG_READ_ONLY; }},
      {"data and byte_offset refolded",
       [](DLManagedTensorVersioned *e, int64_t *) {
         e->dl_tensor.data = static_cast<char *>(e->dl_tensor.data) + 8;
         e->dl_tensor.byte_offset -= 8;
       }},
      {"shape pointer (same values)",
       [](DLManagedTensorVersioned *e, int64_t *own) {
         own[0] = e->dl_tensor.shape[0];
         own[1] = e->dl_tensor.shape[1];
         e->dl_tensor.shape = own;
       }},
      {"strides pointer (same values)",
       [](DLManagedTensorVersioned *e, int64_t *own) {
         own[0] = e->dl_tensor.strides[0];
         own[1] = e->dl_tensor.strides[1];
         e->dl_tensor.strides = own;
       }},
      {"ndim reduced", [](DLManagedTensorVersioned *e, int64_t *) { e->dl_tensor.ndim = 1; }},
      {"dtype reinterpreted",
       [](DLManagedTensorVersioned *e, int64_t *) { e->dl_tensor.dtype.code = kDLInt; }},
      {"device id",
       [](DLManagedTensorVersioned *e, int64_t *) { e->dl_tensor.device.device_id = 1; }},
  };
  for (const Change &c : changes) {
    SCOPED_TRACE(c.name);
    HandleSource src;
    Layout l = dense({2, 3});
    l.byte_offset = 16;
    l.device_type = kDLCUDA;
    hurray_buffer h = src.handle(l);
    const hurray_buffer orig = h;
    DLManagedTensorVersioned *e = nullptr;
    ASSERT_OK(hurray_to_dlpack_versioned(&h, &e));
    int64_t own_dims[2];
    c.apply(e, own_dims);
    ASSERT_OK(hurray_from_dlpack_versioned(e, HURRAY_IMPORT_DEFAULT, &h));
    EXPECT_NE(h.user_data, orig.user_data) << "unwrapped a changed wrapper";
    EXPECT_EQ(h.flags, e->flags);
    EXPECT_EQ(h.data, e->dl_tensor.data);
    EXPECT_EQ(h.byte_offset, e->dl_tensor.byte_offset);
    EXPECT_EQ(h.ndim, e->dl_tensor.ndim);
    EXPECT_EQ(h.device.device_id, e->dl_tensor.device.device_id);
    EXPECT_EQ(src.log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(src.log.calls.load(), 1);
  }
}

TEST(RoundTrip, MutatedLegacyExportIsNotUnwrappedButReleasedOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({4, 2}));
  const hurray_buffer orig = h;
  DLManagedTensor *e = nullptr;
  ASSERT_OK(hurray_to_dlpack(&h, &e));
  e->dl_tensor.byte_offset = 8;
  ASSERT_OK(hurray_from_dlpack(e, HURRAY_IMPORT_DEFAULT, &h));
  EXPECT_NE(h.user_data, orig.user_data);
  EXPECT_EQ(h.byte_offset, 8u);
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(RoundTrip, ChangedImportedHandleIsExportedAsANewWrapper) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({2, 4}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  h.byte_offset = 16;  // the holder narrowed its view
  DLManagedTensorVersioned *w = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &w));
  EXPECT_NE(w, t) << "a changed handle must not hand back the original tensor";
  EXPECT_EQ(w->dl_tensor.byte_offset, 16u);
  EXPECT_EQ(t->dl_tensor.byte_offset, 0u) << "the original tensor is not modified";
  w->deleter(w);
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);

  // Changed flags count as a change too.
  DeleterLog log2;
  DLManagedTensorVersioned *u = make_versioned(log2, dense({2}));
  ASSERT_OK(hurray_from_dlpack_versioned(u, HURRAY_IMPORT_DEFAULT, &h));
  h.flags |= HURRAY_FLAG_READ_ONLY;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &w));
  EXPECT_NE(w, u);
  EXPECT_EQ(w->flags, HURRAY_FLAG_READ_ONLY);
  EXPECT_EQ(u->flags, 0u);
  w->deleter(w);
  EXPECT_EQ(log2.calls.load(), 1);
  EXPECT_EQ(log2.last_arg.load(), u);
}

// ----- compact strides synthesised on import are exported explicitly ---------------

TEST(RoundTrip, NullStridesAreExportedAgainWithExplicitStrides) {
  struct Origin {
    const char *name;
    bool legacy;
    uint32_t minor;
  };
  for (const Origin &o : {Origin{"legacy", true, 0}, Origin{"versioned 1.0", false, 0},
                          Origin{"versioned 1.1", false, 1}}) {
    for (bool export_versioned : {true, false}) {
      SCOPED_TRACE(std::string(o.name) + (export_versioned ? " -> versioned" : " -> legacy"));
      DeleterLog log;
      Layout l = dense({2, 3, 4});
      l.has_strides = false;
      void *original = nullptr;
      hurray_buffer h;
      if (o.legacy) {
        DLManagedTensor *t = make_legacy(log, l);
        original = t;
        ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
      } else {
        DLManagedTensorVersioned *t = make_versioned(log, l, 1, o.minor);
        original = t;
        ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
      }
      const hurray_buffer imported = h;
      const DLTensor *dl = nullptr;
      DLManagedTensorVersioned *v = nullptr;
      DLManagedTensor *g = nullptr;
      if (export_versioned) {
        ASSERT_OK(hurray_to_dlpack_versioned(&h, &v));
        EXPECT_NE(static_cast<void *>(v), original);
        dl = &v->dl_tensor;
      } else {
        ASSERT_OK(hurray_to_dlpack(&h, &g));
        EXPECT_NE(static_cast<void *>(g), original);
        dl = &g->dl_tensor;
      }
      ASSERT_NE(dl->strides, nullptr) << "strides are always given when ndim > 0";
      ExpectTensorIs(*dl, dense({2, 3, 4}), imported.data);
      // Importing the wrapper gives the imported handle back.
      if (export_versioned) {
        ASSERT_OK(hurray_from_dlpack_versioned(v, HURRAY_IMPORT_DEFAULT, &h));
      } else {
        ASSERT_OK(hurray_from_dlpack(g, HURRAY_IMPORT_DEFAULT, &h));
      }
      EXPECT_TRUE(same_bytes(h, imported));
      EXPECT_EQ(log.calls.load(), 0);
      ASSERT_OK(hurray_buffer_release(&h));
      EXPECT_EQ(log.calls.load(), 1);
      EXPECT_EQ(log.last_arg.load(), original);
    }
  }
}

TEST(RoundTrip, SharedHandlesRoundTripWithoutNesting) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({8}));
  hurray_buffer out[2];
  ASSERT_OK(hurray_share(&h, 2, out));
  expect_round_trips_are_identity(&out[0]);
  ASSERT_OK(hurray_buffer_release(&out[1]));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&out[0]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(RoundTrip, ExportOnOneThreadImportOnAnotherReleaseOnAThird) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({3, 3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  const hurray_buffer imported = h;
  DLManagedTensor *e = nullptr;
  int32_t st1 = -1, st2 = -1;
  std::thread a([&] { st1 = hurray_to_dlpack(&h, &e); });
  a.join();
  std::thread b([&] { st2 = hurray_from_dlpack(e, HURRAY_IMPORT_DEFAULT, &h); });
  b.join();
  EXPECT_STATUS(st1, HURRAY_OK);
  EXPECT_STATUS(st2, HURRAY_OK);
  EXPECT_TRUE(same_bytes(h, imported));
  std::thread::id releaser;
  std::thread c([&] {
    releaser = std::this_thread::get_id();
    (void)hurray_buffer_release(&h);
  });
  c.join();
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_thread(), releaser);
  EXPECT_EQ(log.last_arg.load(), t);
}

}  // namespace
