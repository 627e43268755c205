"""What fine-tuning expects to differ between a released checkpoint and the model it starts: the class count, and
the input's channels. Used by the families' `adapt_checkpoint` hooks, which say which tensors are their classifiers
and their input convolution; everything else that differs is left for the loader to report (strict loading)."""

from __future__ import annotations

import warnings

import torch


def fresh_classifiers(state: dict[str, torch.Tensor], target: dict[str, torch.Tensor], keys: list[str],
                      old: int | None = None, new: int | None = None, what: str = "classifier"
                      ) -> dict[str, torch.Tensor]:
    """`state` with the classifier tensors among `keys` that are sized for another class count (first dimension
    differs, the rest agrees) replaced by the model's own fresh ones (`target`), with one warning: the fine-tuning
    case. `old`, `new`: the class counts to name in the warning (default: the first such tensor's rows); `what`:
    the classifier's name in it ("head")."""
    differing = [k for k in keys if k in state and k in target and state[k].ndim == target[k].ndim > 0
                 and state[k].shape[0] != target[k].shape[0] and state[k].shape[1:] == target[k].shape[1:]]
    if not differing:
        return state
    old = state[differing[0]].shape[0] if old is None else old
    new = target[differing[0]].shape[0] if new is None else new
    warnings.warn(f"the checkpoint's {what} has {old} classes, the model {new}: keeping the rest and "
                  f"starting a new {what} ({', '.join(sorted(differing))}), the fine-tuning case", stacklevel=3)
    return {**state, **{k: target[k] for k in differing}}


def adapt_input_channels(state: dict[str, torch.Tensor], target: dict[str, torch.Tensor], key: str
                         ) -> dict[str, torch.Tensor]:
    """A convolution's weight (out, C, kh, kw) for another number of input channels made to fit, as timm does for
    `in_chans`: one channel gets the sum over the checkpoint's (a grey image is R = G = B), more channels get its
    filters repeated and scaled by C_old / C_new (the response to a grey image is kept where C_new is a multiple of
    C_old). One warning."""
    if key not in state or key not in target:
        return state
    weight, want = state[key], target[key]
    if weight.ndim != 4 or weight.shape[1] == want.shape[1] or weight.shape[:1] + weight.shape[2:] != \
            want.shape[:1] + want.shape[2:]:
        return state
    old, new = weight.shape[1], want.shape[1]
    if new == 1:
        adapted = weight.sum(dim=1, keepdim=True)
    else:
        repeats = -(-new // old)
        adapted = weight.repeat(1, repeats, 1, 1)[:, :new] * (old / new)
    warnings.warn(f"the checkpoint's {key} takes {old} input channels, the model {new}: adapted (summed or repeated "
                  f"and scaled), as timm does for in_chans", stacklevel=3)
    return {**state, key: adapted.to(weight.dtype)}
