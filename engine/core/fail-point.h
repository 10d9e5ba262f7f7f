// Fail points: named places in the engine where a test makes this process die, or one operation
// fail, at an exact moment that a kill from outside could only hit by chance (FreeBSD's fail(9),
// TiKV's fail crate). The fault matrix (README, tests/app/fault-matrix-test.cpp) kills the real
// worker in the middle of a checkpoint, an export or a runs.db write this way, and refuses its
// pinned-memory allocation, then checks that nothing saved before was lost.
//
// Armed only through the environment, read once at the first check:
//   SPILLWAY_FAIL_POINTS="checkpoint.write=kill@2;host.alloc=fail"
// Entries are NAME=ACTION[@N] separated by ';'. ACTION `kill` raises SIGKILL in the calling thread
// (as `kill -9` would at that instant: no destructor, no flush); `fail` makes fail_point() return
// true, and the caller fails as the real fault would (an allocator returning nullptr, a write
// returning ENOSPC). @N acts on the N-th pass through the point only (counted from 1 in this
// process); without it, on every pass. Unset, as for every user, a check is one atomic load.
//
// The points, by name: checkpoint.write (a checkpoint half written: the weights, not yet its
// optimizer state; `fail` fails that write with ENOSPC, a full disk), checkpoint.prune (an old
// checkpoint renamed out of the list by the keep-N rotation, not yet deleted), export.write (an
// export half written), folder.replace (a finished folder swapped in, the one it replaced not yet
// removed), runs-db.write (a write to runs.db's WAL, through a VFS shim in
// history/sqlite-util.cpp), host.alloc (the backends' pinned host allocation), collective.fail
// (a data-parallel reduce-scatter failing as NCCL's would, on whichever GPU passes it).
//
// Thread-safe: the table is built once; pass counts are atomic.
#pragma once

#include <string_view>

namespace spillway {

// True when the point named `name` is armed with `fail` for this pass; never returns when armed
// with `kill` for this pass; false otherwise.
bool fail_point(std::string_view name);

// True when SPILLWAY_FAIL_POINTS arms any point whose name starts with `prefix`.
bool fail_points_armed(std::string_view prefix);

}  // namespace spillway
