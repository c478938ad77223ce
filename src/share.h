// Fan-out: the internal control block and its atomic count (spec §5).
#ifndef HURRAY_SRC_SHARE_H_
#define HURRAY_SRC_SHARE_H_

#include "hurray/hurray.h"

namespace hurray {

// release_fn of every handle produced by hurray_share; user_data is the
// control block. Exposed so other steps can recognise shared handles.
void share_release(void *block);

}  // namespace hurray

#endif  // HURRAY_SRC_SHARE_H_
