// Which allocator serves which device type in this build.
#include "../error.h"
#include "allocator.h"

namespace hurray {

const DeviceAllocator *find_device_allocator(int32_t device_type) {
  fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
       "device type %d (%s) has no allocator in this build of libhurray", device_type,
       device_type_name(device_type));
  return nullptr;
}

}  // namespace hurray
