"""VGG (11/13/16/19) with a width multiplier, used by the VGG example, its tests and benchmarks."""

import oneflow as flow
from oneflow import nn

# Output channels per conv layer, "M" for a 2x2 max-pool (Simonyan & Zisserman, table 1).
CONFIGS = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        512,
        "M",
    ],
}


def scaled(channels: int, width_mult: float) -> int:
    return max(1, int(round(channels * width_mult)))


class VGG(nn.Module):
    def __init__(
        self,
        depth: int = 16,
        width_mult: float = 1.0,
        image_size: int = 224,
        num_classes: int = 1000,
        dropout: float = 0.0,
    ):
        super().__init__()
        if depth not in CONFIGS:
            raise ValueError(f"--depth must be one of {sorted(CONFIGS)}, not {depth}")
        layers, in_ch, size = [], 3, image_size
        for item in CONFIGS[depth]:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                size //= 2
            else:
                out_ch = scaled(item, width_mult)
                layers += [nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1), nn.ReLU()]
                in_ch = out_ch
        if size < 1:
            raise ValueError(f"--image-size {image_size} is too small for 5 max-pools")
        hidden = scaled(4096, width_mult)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * size * size, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.classifier(flow.flatten(self.features(x), 1))
