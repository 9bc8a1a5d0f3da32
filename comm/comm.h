// zerotrain comm: one include for users of //comm:comm.
//   auto info = zerotrain::comm::RendezvousFromEnv();            // torchrun / mpirun / srun
//   auto group = zerotrain::comm::ProcessGroup::Create(*info, {});
//   (*group)->AllReduce(tensor, zerotrain::comm::ReduceOp::kAvg);
#pragma once

#include "comm/comm_log.h"
#include "comm/process_group.h"
#include "comm/rendezvous.h"
#include "comm/types.h"
#include "comm/work.h"
