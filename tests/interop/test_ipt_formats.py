"""IPT checkpoints in the official code's layout (huawei-noah/Pretrained-IPT) load into vitlab's IPT and compute the
same restoration.

`OfficialIPT` below is written here from the official module definitions (model/ipt.py, model/common.py): a
Conv2d mean shift with frozen parameters, sequence-first `nn.MultiheadAttention(bias=False)` in pre-norm encoder
and decoder layers named linear1/linear2/norm1..3, `LearnedPositionalEncoding` with an Embedding `pe` and a
`position_ids` buffer, the task table `query_embed` as an Embedding of rows N·D, heads and tails per scale. It works
on images in [0, 255]; vitlab's IPT takes [0, 1].
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitlab.interop import model_from_checkpoint
from vitlab.interop.formats import read_checkpoint
from vitlab.interop.ipt_formats import degradations_for


class OfficialMeanShift(nn.Conv2d):
    def __init__(self, rgb_range, mean=(0.4488, 0.4371, 0.4040), sign=-1):
        super().__init__(3, 3, kernel_size=1)
        self.weight.data = torch.eye(3).view(3, 3, 1, 1)
        self.bias.data = sign * rgb_range * torch.tensor(mean)
        for p in self.parameters():
            p.requires_grad = False


def conv(cin, cout, k):
    return nn.Conv2d(cin, cout, k, padding=k // 2)


class OfficialResBlock(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.body = nn.Sequential(conv(c, c, k), nn.ReLU(True), conv(c, c, k))

    def forward(self, x):
        return self.body(x) + x


def official_upsampler(scale, c):
    layers = []
    if scale & (scale - 1) == 0:
        for _ in range(int(math.log2(scale))):
            layers += [conv(c, 4 * c, 3), nn.PixelShuffle(2)]
    else:
        layers += [conv(c, 9 * c, 3), nn.PixelShuffle(3)]
    return nn.Sequential(*layers)


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, bias=False)
        self.linear1, self.linear2 = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, src, pos=None):
        src2 = self.norm1(src)
        q = k = src2 if pos is None else src2 + pos
        src = src + self.self_attn(q, k, src2)[0]
        return src + self.linear2(F.relu(self.linear1(self.norm2(src))))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, bias=False)
        self.multihead_attn = nn.MultiheadAttention(d, heads, bias=False)
        self.linear1, self.linear2 = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, tgt, memory, pos=None, query_pos=None):
        tgt2 = self.norm1(tgt)
        q = k = tgt2 + query_pos
        tgt = tgt + self.self_attn(q, k, value=tgt2)[0]
        tgt2 = self.norm2(tgt)
        key = memory if pos is None else memory + pos
        tgt = tgt + self.multihead_attn(query=tgt2 + query_pos, key=key, value=memory)[0]
        return tgt + self.linear2(F.relu(self.linear1(self.norm3(tgt))))


class Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class LearnedPositionalEncoding(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.pe = nn.Embedding(n, d)
        self.register_buffer("position_ids", torch.arange(n).expand((1, -1)))

    def forward(self):
        return self.pe(self.position_ids)


class OfficialBody(nn.Module):
    def __init__(self, img_dim, patch_dim, c, heads, layers, queries, pos_every=False):
        super().__init__()
        self.img_dim, self.patch_dim, self.pos_every = img_dim, patch_dim, pos_every
        d = c * patch_dim * patch_dim
        self.d, self.n = d, (img_dim // patch_dim) ** 2
        self.linear_encoding = nn.Linear(d, d)
        self.mlp_head = nn.Sequential(nn.Linear(d, 4 * d), nn.Dropout(0), nn.ReLU(), nn.Linear(4 * d, d), nn.Dropout(0))
        self.query_embed = nn.Embedding(queries, d * self.n)
        self.encoder = Stack([EncoderLayer(d, heads, 4 * d) for _ in range(layers)])
        self.decoder = Stack([DecoderLayer(d, heads, 4 * d) for _ in range(layers)])
        self.position_encoding = LearnedPositionalEncoding(self.n, d)

    def forward(self, x, query_idx):
        x = F.unfold(x, self.patch_dim, stride=self.patch_dim).transpose(1, 2).transpose(0, 1).contiguous()
        x = self.linear_encoding(x) + x
        query_embed = self.query_embed.weight[query_idx].view(-1, 1, self.d).repeat(1, x.size(1), 1)
        pos = self.position_encoding().transpose(0, 1)
        if self.pos_every:
            for layer in self.encoder.layers:
                x = layer(x, pos=pos)
            memory = x
            for layer in self.decoder.layers:
                x = layer(x, memory, pos=pos, query_pos=query_embed)
        else:
            x = x + pos
            for layer in self.encoder.layers:
                x = layer(x)
            memory = x
            for layer in self.decoder.layers:
                x = layer(x, memory, query_pos=query_embed)
        x = self.mlp_head(x) + x
        x = x.transpose(0, 1).contiguous().view(x.size(1), -1, self.d)
        return F.fold(x.transpose(1, 2).contiguous(), self.img_dim, self.patch_dim, stride=self.patch_dim)


class OfficialIPT(nn.Module):
    def __init__(self, scales, c=8, patch_size=12, patch_dim=3, heads=12, layers=2, queries=None, pos_every=False):
        super().__init__()
        self.scale_idx = 0
        self.sub_mean = OfficialMeanShift(255)
        self.add_mean = OfficialMeanShift(255, sign=1)
        self.head = nn.ModuleList(nn.Sequential(conv(3, c, 3), OfficialResBlock(c, 5), OfficialResBlock(c, 5))
                                  for _ in scales)
        self.body = OfficialBody(patch_size, patch_dim, c, heads, layers, queries or len(scales), pos_every)
        self.tail = nn.ModuleList(nn.Sequential(official_upsampler(s, c), conv(c, 3, 3)) for s in scales)

    def forward(self, x):
        x = self.sub_mean(x)
        x = self.head[self.scale_idx](x)
        res = self.body(x, self.scale_idx)
        res += x
        return self.add_mean(self.tail[self.scale_idx](res))


def saved_official(tmp_path, name: str, scales, **kwargs) -> tuple[OfficialIPT, str]:
    torch.manual_seed(0)
    official = OfficialIPT(scales, **kwargs).eval()
    with torch.no_grad():
        for param in official.parameters():  # away from the initialisation, biases included; the mean shift stays
            if param.requires_grad:
                param.add_(torch.randn_like(param) * 0.02)
    path = tmp_path / name
    torch.save(official.state_dict(), path)
    return official, str(path)


def test_the_pretrained_six_task_layout_loads_and_restores_as_the_official_model(tmp_path):
    official, path = saved_official(tmp_path, "IPT_pretrain.pt", [2, 3, 4, 1, 1, 1])
    assert not any(k.endswith(("in_proj_bias", "out_proj.bias")) for k in official.state_dict())  # bias=False
    model = model_from_checkpoint(path).eval()  # raises on any missing, unexpected or misshaped key
    assert model.degradations == ("sr2", "sr3", "sr4", "derain", "denoise30", "denoise50")
    assert (model.config.channels, model.config.patch_size, model.config.num_layers) == (8, 12, 2)
    x = torch.rand(2, 3, 12, 12)
    for index, scale in enumerate([2, 3, 4, 1, 1, 1]):
        official.scale_idx = index
        with torch.no_grad():
            expected = official(x * 255) / 255
            got = model(x, index)
        assert got.shape == (2, 3, 12 * scale, 12 * scale)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, scale, degradation", [("IPT_sr3.pt", 3, "sr3"), ("IPT_denoise50.pt", 1, "denoise50"),
                                                      ("IPT_derain.pt", 1, "derain")])
def test_single_task_files_load_with_their_task_from_the_shapes_and_name(tmp_path, name, scale, degradation):
    official, path = saved_official(tmp_path, name, [scale])
    model = model_from_checkpoint(path).eval()
    assert model.degradations == (degradation,)
    x = torch.rand(1, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(x, degradation), official(x * 255) / 255, atol=1e-5, rtol=1e-5)


def test_positions_in_every_layer_map_too(tmp_path):
    official, path = saved_official(tmp_path, "IPT_sr2.pt", [2], pos_every=True)
    from vitlab.interop import load_weights
    from vitlab.models.ipt import IPTConfig

    model = load_weights(IPTConfig(degradations=("sr2",), channels=8, patch_size=12, num_layers=2,
                                   pos_every=True).build().eval(), path)
    x = torch.rand(1, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(model(x), official(x * 255) / 255, atol=1e-5, rtol=1e-5)


def test_the_mapped_names_are_vitlabs_and_the_arange_buffer_is_dropped(tmp_path):
    _, path = saved_official(tmp_path, "IPT_sr2.pt", [2])
    state, info = read_checkpoint(path)
    assert info.format == "ipt"
    assert "body.position_encoding.position_ids" not in state
    assert state["body.pos_embed"].shape == (1, 16, 72)
    assert state["body.query_embed"].shape == (1, 16, 72)
    assert "body.decoder.1.cross_attn.qkv.weight" in state and "body.encoder.0.mlp.fc2.bias" in state


def test_a_nonzero_output_bias_cannot_be_dropped(tmp_path):
    official, _ = saved_official(tmp_path, "IPT_sr2.pt", [2])
    state = official.state_dict()
    state["body.encoder.layers.0.self_attn.out_proj.bias"] = torch.ones(72)
    path = tmp_path / "odd.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"out_proj\.bias is not zero"):
        read_checkpoint(path)
    state["body.encoder.layers.0.self_attn.out_proj.bias"] = torch.zeros(72)  # what torch 1.5-1.8 wrote
    torch.save(state, path)
    assert "body.encoder.0.attn.proj.bias" not in read_checkpoint(path)[0]


def test_scale_one_tasks_without_a_name_are_guessed_with_a_warning():
    with pytest.warns(UserWarning, match="could be deraining or denoising"):
        assert degradations_for([1], "weights.pt") == ("derain",)
    assert degradations_for([2, 1], "my_denoise30_model.pt") == ("sr2", "denoise30")


def test_a_vitlab_run_of_ipt_round_trips(tmp_path):
    from vitlab.interop import load_model, save_weights
    from vitlab.models.ipt import IPTConfig

    model = IPTConfig(degradations=("sr2", "denoise30"), channels=4, patch_size=12, num_layers=1).build().eval()
    save_weights(model, tmp_path / "m.safetensors")
    again = load_model(tmp_path / "m.safetensors").eval()
    x = torch.rand(1, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(again(x, "denoise30"), model(x, "denoise30"))


def test_an_official_file_starts_training_of_other_tasks_matched_by_name(tmp_path):
    """`vitlab train --task restoration --weights IPT_pretrain.pt --degradations denoise30,sr2`: each task the file
    has restores as the official model's head, body and tail of that name do."""
    from vitlab.models.ipt import IPTConfig
    from vitlab.tasks.restoration.task import load_start

    official, path = saved_official(tmp_path, "IPT_pretrain.pt", [2, 3, 4, 1, 1, 1])
    model = IPTConfig(degradations=("denoise30", "sr2"), channels=8, patch_size=12, num_heads=12,
                      num_layers=2).build().eval()
    load_start(model, path)
    x = torch.rand(1, 3, 12, 12)
    for name, official_index in (("denoise30", 4), ("sr2", 0)):
        official.scale_idx = official_index
        with torch.no_grad():
            torch.testing.assert_close(model(x, name), official(x * 255) / 255, atol=1e-5, rtol=1e-5)
