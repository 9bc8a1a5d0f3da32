"""init_distributed: the process group every rank of a zerotrain job joins, as
deepspeed.init_distributed makes torch.distributed's. The rendezvous is zerotrain's own (comm/),
reading what torchrun, DeepSpeed's launcher, mpirun and srun set; a script started on its own
(python train.py) is a job of one rank on loopback, as under DeepSpeed.
"""
import datetime
import os
import socket

from zerotrain import _C

_group = None

_LAUNCHER_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_timeout_s():
    # DeepSpeed's default: DEEPSPEED_TIMEOUT minutes, else 30.
    minutes = os.environ.get("DEEPSPEED_TIMEOUT", "30")
    try:
        value = int(minutes)
    except ValueError:
        raise ValueError(f"DEEPSPEED_TIMEOUT='{minutes}' is not a whole number of minutes") from None
    if value < 1:
        raise ValueError(f"DEEPSPEED_TIMEOUT='{minutes}' is not a whole number of minutes >= 1")
    return value * 60.0


def init_distributed(dist_backend=None, auto_mpi_discovery=True, distributed_port=None,
                     verbose=True, timeout=None, init_method=None, dist_init_required=None,
                     config=None, rank=-1, world_size=-1):
    """Joins (once per process) the group of all ranks; later calls return the same group."""
    global _group
    if _group is not None:
        return _group
    if init_method is not None:
        raise NotImplementedError(
            "init_distributed: init_method is not supported; zerotrain reads the launcher's "
            "variables (torchrun, deepspeed, mpirun, srun) or runs one rank on loopback")
    if rank != -1 or world_size != -1:
        raise NotImplementedError(
            "init_distributed: rank/world_size arguments are not supported; set RANK and "
            "WORLD_SIZE (any launcher does)")
    if not any(v in os.environ for v in _LAUNCHER_VARIABLES):
        # No launcher: one rank, as DeepSpeed's init_distributed sets up.
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                           "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(distributed_port or _free_port())})
    if timeout is None:
        timeout_s = _default_timeout_s()
    elif isinstance(timeout, datetime.timedelta):
        timeout_s = timeout.total_seconds()
    else:
        raise ValueError(f"init_distributed: timeout must be a datetime.timedelta, not {timeout!r}")
    backend = dist_backend or "gloo"
    # Every op's bytes and time are recorded (a clock read each): the config's comms_logger,
    # which comes later, only decides whether log_summary prints them.
    _group = _C.join_group(backend, timeout_s, True)
    return _group


_report_config = None  # the first config initialize saw with comms_logger enabled


def _report_with(loaded):
    """initialize's: the first config with comms_logger enabled decides what rank 0 reports (its
    verbose lines from now on, prof_all/prof_ops), as the trainer's does."""
    global _report_config
    if _report_config is not None or not loaded.comms_logger:
        return
    _report_config = loaded
    if _group.rank == 0:
        _group.print_each_op(loaded)


def log_summary(show_straggler=False):
    """deepspeed.comm.log_summary: with the config's comms_logger enabled, rank 0 prints (and
    returns) the collectives it profiles (prof_all, or prof_ops): calls, sizes, mean time and
    bandwidths; otherwise nothing."""
    if show_straggler:
        raise NotImplementedError("log_summary: show_straggler is not supported")
    if _group is None or _report_config is None or _group.rank != 0:
        return ""
    text = _group.comms_report(_report_config)
    print(text, flush=True)
    return text


def group():
    """The joined group (init_distributed first), or None."""
    return _group
