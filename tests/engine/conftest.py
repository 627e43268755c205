from pathlib import Path

import pytest

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


@pytest.fixture
def mini_dir() -> Path:
    return MINI


def tiny_options(out, **kw):
    """A 1-block, 32-wide ViT on the 200-image Fashion-MNIST slice: a full run in about a second."""
    base = dict(data="fashion-mnist", data_dir=str(MINI), allow_partial_data=True, out=str(out), epochs=2,
                batch_size=32, lr=2e-3, model="vit_tiny_patch4_28", drop_path=0.1,
                model_overrides={"dim": 32, "depth": 2, "num_heads": 2})
    base.update(kw)
    return base
