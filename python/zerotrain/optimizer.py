"""The optimizer and lr_scheduler objects initialize returns. The engine owns and steps both, as
DeepSpeed's engine steps its own; these read it (and the optimizer sets its lr)."""


class ZeroOptimizer:
    """The optimizer initialize returns: the engine steps it; its lr is readable and settable."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def param_groups(self):
        return [{"params": self._engine._trainable, "lr": self._engine._engine.next_lr}]

    @property
    def loss_scale(self):
        # fp16's current loss scale (1 at other precisions), as DeepSpeed's ZeRO optimizers read.
        return self._engine._engine.loss_scale

    cur_scale = loss_scale

    def set_lr(self, lr):
        self._engine._engine.set_lr(float(lr))

    def step(self, *args, **kwargs):
        raise RuntimeError("the zerotrain optimizer is stepped by engine.step(), not directly")

    def zero_grad(self, set_to_none=True):
        pass  # the engine owns the gradients and clears them after each step


class ZeroLrScheduler:
    """The lr_scheduler initialize returns when the config names one. The engine steps it at each
    optimizer step, as DeepSpeed's engine steps its own; this reads it."""

    def __init__(self, engine):
        self._engine = engine

    def get_last_lr(self):
        return [self._engine._engine.next_lr]

    def get_lr(self):
        return self.get_last_lr()

    def step(self, *args, **kwargs):
        raise RuntimeError("the config's scheduler is stepped by engine.step(), not directly")
