"""zerotrain.checkpointing: deepspeed.checkpointing.checkpoint, activation recomputation.

The block's activations are dropped after forward and recomputed in backward (torch's non-reentrant
recomputation, which the C++ engine's gradient hooks and stage 3's gather on use compose with).
"""
import torch.utils.checkpoint


def checkpoint(function, *args):
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)
