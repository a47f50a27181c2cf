"""ResNet-50 in PyTorch: the standard bottleneck layout, written out here.

torchvision's build cannot be installed beside the pinned torch on these machines, and the
Keras twin needs the same layer order anyway, so the layout lives in one small table.
Stride sits on the 3x3 conv of a block (the "v1.5" layout torchvision and MLPerf use).
"""

from __future__ import annotations

import torch
from torch import nn

from model_zoo.resnet_layout import EXPANSION, RESNET50_STAGES

BN_EPS = 1e-5


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand, each with batch norm; projection shortcut."""

    def __init__(self, in_channels: int, planes: int, stride: int):
        super().__init__()
        out_channels = planes * EXPANSION
        self.conv1 = nn.Conv2d(in_channels, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, eps=BN_EPS)
        self.conv3 = nn.Conv2d(planes, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels, eps=BN_EPS)
        self.downsample: nn.Sequential | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels, eps=BN_EPS),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + shortcut)


class ResNet50(nn.Module):
    """Channels-last image in, logits out."""

    def __init__(self, spec) -> None:  # spec: ModelSpec (kept untyped to avoid a cycle)
        super().__init__()
        channels = spec.input_shape[2]
        self.conv1 = nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=BN_EPS)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks: list[Bottleneck] = []
        in_channels = 64
        for planes, count, stride in RESNET50_STAGES:
            for i in range(count):
                blocks.append(Bottleneck(in_channels, planes, stride if i == 0 else 1))
                in_channels = planes * EXPANSION
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(in_channels, spec.num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        for block in self.blocks:
            x = block(x)
        return self.fc(x.mean(dim=(2, 3)))

    @torch.no_grad()
    def randomize_batchnorm(self) -> None:
        """Give every batch norm non-trivial statistics, as a trained network has.

        Default statistics (mean 0, var 1) would make batch norm an identity and leave the
        parity check blind to a wrong epsilon or a swapped mean/variance. The last norm of
        each block gets a small scale, as in zero-init-residual training, so activations
        stay bounded through 16 residual additions.
        """
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.1, 0.1)
        for block in self.blocks:
            block.bn3.weight.uniform_(0.05, 0.2)
