"""What zerotrain does not support, or cannot accept, is one Python exception naming it: a bad
config value (ValueError naming the field), a client optimizer with no zerotrain equivalent or
given twice, a model_parameters subset, zero.Init without a stage 3 config; and training_data's
DataLoader. One process, no launcher. Prints "bad_input: OK".
"""
import torch

import zerotrain as deepspeed


def expect(kind, text, fn):
    try:
        fn()
    except kind as e:
        assert text in str(e), f"{kind.__name__} without {text!r}: {e}"
        return
    raise AssertionError(f"no {kind.__name__} ({text})")


def main():
    model = torch.nn.Linear(4, 2)
    good = {"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    expect(ValueError, "zero_optimization.stage",
           lambda: deepspeed.initialize(model=model, config={**good,
                                                             "zero_optimization": {"stage": 7}}))
    no_optimizer = {"train_batch_size": 2}
    expect(NotImplementedError, "torch.optim.rmsprop.RMSprop",
           lambda: deepspeed.initialize(model=model, config=no_optimizer,
                                        optimizer=torch.optim.RMSprop(model.parameters())))
    expect(NotImplementedError, "amsgrad=True",
           lambda: deepspeed.initialize(model=model, config=no_optimizer, optimizer=torch.optim.AdamW(
               model.parameters(), amsgrad=True)))
    expect(ValueError, "both as the optimizer argument and in <config dict>",
           lambda: deepspeed.initialize(model=model, config=good,
                                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1)))
    # training_data: a DataLoader of micro-batches over a DistributedSampler, as DeepSpeed's.
    data = torch.utils.data.TensorDataset(torch.arange(10.0))
    engine, optimizer, loader, scheduler = deepspeed.initialize(
        model=model, config=no_optimizer, training_data=data,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.25, momentum=0.5))
    assert loader.batch_size == 2 and len(loader) == 5, (loader.batch_size, len(loader))
    assert isinstance(loader.sampler, torch.utils.data.distributed.DistributedSampler)
    assert scheduler is None and optimizer.param_groups[0]["lr"] == 0.25
    expect(NotImplementedError, "model_parameters",
           lambda: deepspeed.initialize(model=model, config=good,
                                        model_parameters=[model.weight]))
    expect(ValueError, "zero.Init: pass the stage 3 config", lambda: deepspeed.zero.Init())
    expect(NotImplementedError, "remote_device=",
           lambda: deepspeed.zero.Init(config_dict_or_path=good, remote_device="cpu"))
    expect(ValueError, "partitioned construction is for ZeRO stage 3",
           lambda: deepspeed.zero.Init(config_dict_or_path=good).__enter__())
    expect(ValueError, "no config", lambda: deepspeed.initialize(model=model))
    print("bad_input: OK")


if __name__ == "__main__":
    main()
