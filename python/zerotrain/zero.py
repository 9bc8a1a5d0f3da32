"""zerotrain.zero: deepspeed.zero's GatheredParameters and Init."""
from zerotrain import engine as _engine


def _owner(params):
    for e in _engine._engines:
        mine = {id(t) for t in e._trainable}
        if all(id(p) in mine for p in params):
            return e
    return None


class GatheredParameters:
    """While open, `params` hold their full values on every rank (stage 3 gathers them); with a
    modifier_rank, that rank's changes become everyone's at exit. Collective, as DeepSpeed's.
    Parameters no engine trains are left as they are."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        if fwd_module is not None:
            raise NotImplementedError("GatheredParameters: fwd_module is not supported")
        if not isinstance(params, (list, tuple)):
            params = [params]
        self._params = list(params)
        self._modifier_rank = -1 if modifier_rank is None else int(modifier_rank)
        self._enabled = enabled
        self._open = None

    def __enter__(self):
        owner = _owner(self._params) if self._enabled and self._params else None
        if owner is not None:
            self._open = owner._engine.gather(self._params, self._modifier_rank)
        return self

    def __exit__(self, *exc):
        if self._open is not None:
            self._open.close()
            self._open = None
        return False


class Init:
    """deepspeed.zero.Init: not supported yet. Raising, not ignoring it, since a script that uses
    it expects a model larger than one rank's memory to be built partitioned."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "zerotrain.zero.Init: partitioned construction is not supported from Python yet; "
            "build the model whole (stage 3 partitions it at initialize), or use the C++ "
            "engine::ZeroInit")
