import pytest

from vitlab.data import find_fashion_mnist
from vitlab.tasks import train


def real_fashion_mnist():
    try:
        return find_fashion_mnist(download=False)
    except FileNotFoundError:
        return None


@pytest.mark.slow
@pytest.mark.skipif(real_fashion_mnist() is None, reason="Fashion-MNIST is not installed (scripts/setup.sh does it)")
def test_a_few_hundred_steps_on_real_fashion_mnist_learn(tmp_path):
    """429 steps (one epoch of the 55,000 training images; 5,000 validate) of a small ViT: far above the 10 % of
    chance on the test set."""
    result = train(
        data="fashion-mnist", out=str(tmp_path / "run"), model="vit_tiny_patch7_28", epochs=1, batch_size=128,
        lr=2e-3, warmup_epochs=0.2, model_overrides={"dim": 64, "depth": 2, "num_heads": 2},
    )
    assert result["step"] == 429 and result["val_acc"] > 0.70
    assert result["test_acc"] > 0.70
    assert result["train_acc"] > 0.5
