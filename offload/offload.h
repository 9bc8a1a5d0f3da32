// offload/: host memory and NVMe swap space for ZeRO-Offload and ZeRO-Infinity, behind one
// include for other repositories (@zerotrain//offload). docs/OFFLOAD.md describes it.
#pragma once

#include "offload/async_file_io.h"     // IWYU pragma: export
#include "offload/host_memory.h"       // IWYU pragma: export
#include "offload/memory_roles.h"      // IWYU pragma: export
#include "offload/pinned_host_pool.h"  // IWYU pragma: export
#include "offload/sub_group_store.h"   // IWYU pragma: export
#include "offload/swap_file.h"         // IWYU pragma: export
#include "offload/swap_space.h"        // IWYU pragma: export
