"""The brute-force oracle of the Jacobian-norm tests: operator norms from full Jacobians."""

import torch


def full_norms(model, x, name, coupled, output=None):
    """||d name / dx||_2 from torch.autograd.functional.jacobian: per sample (the diagonal
    blocks of the batch Jacobian), or of the whole batch when coupled; ``output`` indexes a
    tuple output of the module."""
    module = model if name == "output" else model.get_submodule(name)
    captured = {}
    hook = module.register_forward_hook(lambda m, i, o: captured.__setitem__("y", o))

    def f(inputs):
        model(inputs)
        y = captured["y"]
        return y[output] if output is not None else y

    try:
        full = torch.autograd.functional.jacobian(f, x, vectorize=True)  # (b, n..., b, m...)
    finally:
        hook.remove()
    b = len(x)
    full = full.reshape(b, -1, b, x[0].numel())
    if coupled:
        return torch.linalg.matrix_norm(full.reshape(b * full.shape[1], -1), ord=2).reshape(1)
    return torch.linalg.matrix_norm(full[torch.arange(b), :, torch.arange(b), :], ord=2)
