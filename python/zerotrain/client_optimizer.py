"""A torch optimizer given to initialize, as a config "optimizer" section.

zerotrain steps its own sharded optimizers (optim/), so it cannot run a torch.optim object; but
the common ones are the same update as a built-in optimizer with the same hyperparameters, which
is what this maps them to. Anything without an exact equivalent (several parameter groups, AMSGrad,
maximize, other classes) is refused naming it, never approximated.
"""
import torch


def _refuse(what):
    raise NotImplementedError(
        f"initialize: {what}; name the optimizer in the config's \"optimizer\" section instead")


def _check_flags(opt, group, flags):
    for flag in flags:
        if group.get(flag):
            _refuse(f"{type(opt).__name__}({flag}=True) has no zerotrain equivalent")


def _adam(opt, group, w_mode):
    _check_flags(opt, group, ("amsgrad", "maximize", "capturable", "differentiable"))
    # torch's AdamW is Adam with decoupled_weight_decay (2.11 records it in the group).
    w_mode = bool(group.get("decoupled_weight_decay", w_mode))
    beta1, beta2 = group["betas"]
    return {"type": "AdamW" if w_mode else "Adam",
            "params": {"lr": float(group["lr"]), "betas": [float(beta1), float(beta2)],
                       "eps": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                       **({} if w_mode else {"adam_w_mode": False})}}


def _sgd(opt, group):
    _check_flags(opt, group, ("maximize", "differentiable"))
    return {"type": "SGD",
            "params": {"lr": float(group["lr"]), "momentum": float(group["momentum"]),
                       "dampening": float(group["dampening"]),
                       "weight_decay": float(group["weight_decay"]),
                       "nesterov": bool(group["nesterov"])}}


def _adagrad(opt, group):
    _check_flags(opt, group, ("maximize", "differentiable"))
    return {"type": "Adagrad",
            "params": {"lr": float(group["lr"]), "eps": float(group["eps"]),
                       "weight_decay": float(group["weight_decay"]),
                       "lr_decay": float(group["lr_decay"]),
                       "initial_accumulator_value": float(group["initial_accumulator_value"])}}


def optimizer_section(optimizer, model):
    """The config section equal to `optimizer` (a torch.optim object, or a callable that makes one
    from the parameters, as DeepSpeed accepts) for `model`'s trainable parameters."""
    if callable(optimizer) and not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer([p for p in model.parameters() if p.requires_grad])
    if not isinstance(optimizer, torch.optim.Optimizer):
        _refuse(f"optimizer {type(optimizer).__name__} is not a torch.optim.Optimizer")
    if len(optimizer.param_groups) != 1:
        _refuse(f"an optimizer with {len(optimizer.param_groups)} parameter groups is not "
                "supported")
    group = optimizer.param_groups[0]
    want = {id(p) for p in model.parameters() if p.requires_grad}
    if {id(p) for p in group["params"]} != want:
        _refuse("the optimizer's parameters must be the model's trainable parameters")
    kind = type(optimizer)
    if kind is torch.optim.AdamW:
        return _adam(optimizer, group, w_mode=True)
    if kind is torch.optim.Adam:
        return _adam(optimizer, group, w_mode=False)
    if kind is torch.optim.SGD:
        return _sgd(optimizer, group)
    if kind is torch.optim.Adagrad:
        return _adagrad(optimizer, group)
    _refuse(f"a client optimizer of type {kind.__module__}.{kind.__name__} is not supported "
            "(torch.optim.AdamW, Adam, SGD and Adagrad are)")
