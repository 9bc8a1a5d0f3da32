// Everything optim/ offers, for code that wants one include and one dependency
// (@zerotrain//optim): fused optimizers on flat shards, the CUDA Adam step, loss scaling,
// gradient clipping, inf/NaN checks, LR schedules and the bf16/fp16 conversions.
#pragma once

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/fused_adam_cuda.h"
#include "optim/lamb.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedules.h"
#include "optim/newton_schulz.h"
#include "optim/overflow_check.h"
#include "optim/precision.h"
#include "optim/sgd.h"
#include "tools/cpu_dispatch.h"
