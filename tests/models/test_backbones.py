"""ResNet backbones from a classifier's weights: torchvision's ResNet and vitlab's grey resnet18_tv_28, compared
with the classifier's own layers on the same images."""

import pytest
import torch
import torchvision
from safetensors.torch import save_file

from vitlab.interop import load_weights, save_weights
from vitlab.models import create_model
from vitlab.models.backbones import ResNetBackbone, classifier_to_backbone_state


def through_layer3(net, images):
    """A torchvision ResNet's own modules up to layer3: what the backbone must compute."""
    x = net.maxpool(net.relu(net.bn1(net.conv1(images))))
    return net.layer3(net.layer2(net.layer1(x)))


@pytest.mark.parametrize("frozen_bn", [True, False])
def test_a_torchvision_classifier_gives_its_own_features(frozen_bn):
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None, num_classes=1000)
    with torch.no_grad():  # batch statistics that are not the defaults, so that loading them shows
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    net.eval()
    backbone = ResNetBackbone("resnet18", last_stage=3, frozen_bn=frozen_bn, frozen_stages=0).eval()
    load_weights(backbone, classifier_to_backbone_state(net.state_dict(), backbone))
    images = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        torch.testing.assert_close(backbone(images)[-1], through_layer3(net, images), atol=1e-5, rtol=1e-5)


def test_a_grey_vitlab_classifier_answers_grey_rgb_images_alike(tmp_path):
    """resnet18_tv_28 (torchvision's stem), made for one channel, read by a 3-channel backbone: a grey image given
    as three equal channels gets the classifier's features of the grey image."""
    torch.manual_seed(1)
    classifier = create_model("resnet18_tv_28").eval()
    path = save_weights(classifier, tmp_path / "classifier.safetensors")
    from vitlab.checkpoint import read_state_dict

    backbone = ResNetBackbone("resnet18", last_stage=3, frozen_bn=False, frozen_stages=0).eval()
    load_weights(backbone, classifier_to_backbone_state(read_state_dict(path)[0], backbone))
    grey = torch.rand(2, 1, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(backbone(grey.expand(-1, 3, -1, -1))[-1], through_layer3(classifier.net, grey),
                                   atol=1e-5, rtol=1e-5)


def test_an_official_detr_backbone_and_a_timm_file_without_batch_counters(tmp_path):
    net = torchvision.models.resnet18(weights=None)
    state = {f"backbone.0.body.{k}": v for k, v in net.state_dict().items()
             if not k.startswith("fc.") and not k.endswith("num_batches_tracked")}
    state["transformer.encoder.layers.0.linear1.weight"] = torch.zeros(4, 4)  # the rest of a detector is ignored
    backbone = ResNetBackbone("resnet18", last_stage=4, frozen_bn=False, frozen_stages=0)
    load_weights(backbone, classifier_to_backbone_state(state, backbone))
    torch.testing.assert_close(backbone.layer4[1].conv2.weight, net.layer4[1].conv2.weight)


def test_a_stem_of_another_kernel_is_explained():
    backbone = ResNetBackbone("resnet18", last_stage=3, frozen_bn=False, frozen_stages=0)
    with pytest.raises(ValueError, match=r"3×3 convolution.*resnet18_tv_28"):
        classifier_to_backbone_state(create_model("resnet18_28").state_dict(), backbone)
    with pytest.raises(ValueError, match="one ResNet"):
        classifier_to_backbone_state({"head.weight": torch.zeros(2, 2)}, backbone)


def test_detection_training_starts_from_the_backbone_weights(tmp_path):
    from vitlab.engine.config import LoopConfig
    from vitlab.tasks.detection import DetectionConfig, DetectionTask

    net = torchvision.models.resnet18(weights=None)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp_path / "resnet18.safetensors"))
    task = DetectionTask(DetectionConfig(backbone_weights=str(tmp_path / "resnet18.safetensors")), LoopConfig())
    model = task.build_model(num_classes=10)
    torch.testing.assert_close(model.backbone.layer3[0].conv1.weight, net.layer3[0].conv1.weight)
    assert model.backbone.conv1.weight.shape == net.conv1.weight.shape
