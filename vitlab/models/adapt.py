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


def match_classes(model, state: dict[str, torch.Tensor], labels: tuple[str, ...] | list[str] | None
                  ) -> dict[str, torch.Tensor]:
    """`state`'s classifier rows (`model.classifier_keys()`) put in the order of the model's own classes, matched
    by name, where both name their classes (`labels`: the checkpoint's, by row): a class the checkpoint has keeps
    its row wherever it now stands (the same names in another order are a permutation; a subset keeps those rows),
    a class it lacks starts from the model's fresh row. Rows after the classes (a detector's "no object") are kept.
    With one warning saying which, unless the names are the same in the same order. Where either side names no
    classes, or the names do not describe the checkpoint's rows, `state` is returned as it is (the count decides,
    in the model's adapt_checkpoint)."""
    new = tuple(model.config.labels)
    keys = [key for key in model.classifier_keys() if key in state]
    if not labels or not new or not keys or tuple(labels) == new:
        return state
    old = tuple(labels)
    target = model.state_dict()
    extra = state[keys[0]].shape[0] - len(old)  # rows after the classes, in the checkpoint and in the model
    if extra < 0 or any(state[k].shape[0] - len(old) != extra or target[k].shape[0] - len(new) != extra
                        or state[k].shape[1:] != target[k].shape[1:] for k in keys):
        return state
    row_of = {name: i for i, name in reversed(list(enumerate(old)))}  # the first row of a name listed twice
    found = [row_of.get(name) for name in new]
    matched = {}
    for key in keys:
        rows = target[key].clone()
        for j, i in enumerate(found):
            if i is not None:
                rows[j] = state[key][i]
        if extra:
            rows[len(new):] = state[key][len(old):]
        matched[key] = rows.to(state[key].dtype)
    fresh = [name for name, i in zip(new, found) if i is None]
    kept = len(new) - len(fresh)
    if not kept:
        says = (f"none of the model's classes ({_names(new)}) is one of the checkpoint's ({_names(old)}): its "
                f"classifier starts fresh")
    elif not fresh and sorted(found) == list(range(len(old))):
        says = "the checkpoint's classes are the model's in another order: its classifier rows are reordered to match"
    elif not fresh:
        says = f"the model's {len(new)} classes are {len(new)} of the checkpoint's {len(old)}: their rows are kept"
    else:
        says = (f"{kept} of the model's classes keep the checkpoint's rows; {len(fresh)} are new to it and start "
                f"fresh: {_names(fresh)}")
    warnings.warn(f"{says} (matched by name)", stacklevel=3)
    return {**state, **matched}


def _names(names: tuple[str, ...] | list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
