"""Knowledge distillation, DeiT §4: a student learns from the true labels and from a frozen teacher.

With student logits Z_s (the class head), Z_s' (the distillation head; = Z_s for a student without the
distillation token), teacher logits Z_t, true labels y, softmax ψ, cross-entropy L_CE:

    none   L = L_CE(ψ(Z_s), y)                                    (both heads on y for a distilled student)
    soft   L = (1 − α)·L_CE(ψ(Z_s), y) + α·τ²·KL(ψ(Z_t/τ) ‖ ψ(Z_s'/τ))                              (eq. 2)
    hard   L = (1 − α)·L_CE(ψ(Z_s), y) + α·L_CE(ψ(Z_s'), y_t),   y_t = argmax_c Z_t(c)   (eq. 3 with α = ½)

Normalisation of the KL term: it is summed over classes and averaged over the batch, which is the KL divergence
between two distributions per image, as the paper's formula reads, and is what makes τ² the right factor to keep
its gradients at the scale of the cross-entropy (Hinton et al. 2015). DeiT's released code instead divides the
sum by the number of logits (batch × classes), which shrinks the term by the class count; we follow the paper.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...engine.options import OptionError
from ...models.deit import DistilledOutput

DISTILL_KINDS = ("none", "soft", "hard")


def soft_distillation_term(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tau: float) -> torch.Tensor:
    """τ²·KL(ψ(Z_t/τ) ‖ ψ(Z_s/τ)), summed over classes, averaged over the batch. Logits: (B, K)."""
    log_student = F.log_softmax(student_logits / tau, dim=-1)
    log_teacher = F.log_softmax(teacher_logits / tau, dim=-1)
    return F.kl_div(log_student, log_teacher, reduction="batchmean", log_target=True) * tau**2


def hard_distillation_term(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """L_CE(ψ(Z_s), argmax Z_t), averaged over the batch. Logits: (B, K)."""
    return F.cross_entropy(student_logits, teacher_logits.argmax(dim=-1))


class DistillationLoss(nn.Module):
    """loss(images, outputs, targets) for a student's outputs: logits (B, K), or a distilled DeiT's
    `DistilledOutput` (logits = Z_s and dist_logits = Z_s', each (B, K)).

    targets: class indices (B,) or, after Mixup/CutMix, class probabilities (B, K). The teacher sees the same
    (augmented, mixed) images as the student, in eval mode and without gradients; its parameters are frozen.
    """

    def __init__(self, teacher: nn.Module | None = None, kind: str = "none", alpha: float = 0.5, tau: float = 1.0,
                 label_smoothing: float = 0.0) -> None:
        super().__init__()
        if kind not in DISTILL_KINDS:
            raise OptionError("distill", f"must be one of {', '.join(DISTILL_KINDS)}, got {kind!r}")
        if kind != "none" and teacher is None:
            raise OptionError("distill", f"{kind} needs a teacher: the run folder of a finished `vitlab train` run")
        if not 0 <= alpha <= 1 or tau <= 0:
            raise ValueError(f"distill_alpha must be in [0, 1] and distill_tau positive, got {alpha} and {tau}")
        self.kind, self.alpha, self.tau, self.label_smoothing = kind, alpha, tau, label_smoothing
        self.teacher = freeze(teacher) if teacher is not None and kind != "none" else None

    def train(self, mode: bool = True) -> DistillationLoss:
        super().train(mode)
        if self.teacher is not None:
            self.teacher.eval()  # the teacher never trains: no dropout, no batch-norm statistics updates
        return self

    def base(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), targets, label_smoothing=self.label_smoothing)

    def forward(self, images: torch.Tensor, outputs: torch.Tensor | DistilledOutput,
                targets: torch.Tensor) -> torch.Tensor:
        y_cls, y_dist = split_heads(outputs)
        if self.kind == "none":
            if y_dist is y_cls:
                return self.base(y_cls, targets)
            return (self.base(y_cls, targets) + self.base(y_dist, targets)) / 2
        with torch.no_grad():
            teacher_logits = self.teacher(images).float()
        if self.kind == "soft":
            term = soft_distillation_term(y_dist.float(), teacher_logits, self.tau)
        else:
            term = hard_distillation_term(y_dist.float(), teacher_logits)
        return (1 - self.alpha) * self.base(y_cls, targets) + self.alpha * term


def split_heads(outputs: torch.Tensor | DistilledOutput) -> tuple[torch.Tensor, torch.Tensor]:
    """(Z_s, Z_s'), each (B, K): a DistilledOutput's two heads, or plain logits twice (no distillation token)."""
    if isinstance(outputs, DistilledOutput):
        return outputs.logits, outputs.dist_logits
    if isinstance(outputs, torch.Tensor):
        return outputs, outputs
    raise TypeError(f"expected the student's logits (B, K) or a DistilledOutput, got {type(outputs).__name__}; "
                    f"wrap two heads' logits as vitlab.models.DistilledOutput(logits, dist_logits)")


def freeze(model: nn.Module) -> nn.Module:
    """The model in eval mode with every parameter's requires_grad off."""
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return model
