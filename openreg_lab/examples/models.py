"""Small example models used by the demo, the tests and the benchmarks.

They are plain ``torch.nn`` modules, so they run unchanged on any device: an MLP and a transformer
block, and tiny vision and diffusion models (:func:`vision_case`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


def mlp(in_features: int = 64, hidden: int = 128, classes: int = 10) -> nn.Module:
    """A three-layer perceptron (GELU, ReLU) ending in log-probabilities."""
    return nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
        nn.LogSoftmax(dim=-1),
    )


class TransformerBlock(nn.Module):
    """A pre-norm transformer block (embedding, self-attention, MLP) predicting the next token."""

    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Return next-token logits of shape ``(batch, seq, vocab)``."""
        x = self.embed(tokens)
        h = self.norm1(x)
        attn, _ = self.attn(h, h, h, need_weights=False)
        x = x + attn
        x = x + self.ff(self.norm2(x))
        return self.head(x)


def transformer_block(vocab: int = 100, dim: int = 32, heads: int = 4) -> nn.Module:
    """A :class:`TransformerBlock` with the given sizes."""
    return TransformerBlock(vocab, dim, heads)


# --- vision and diffusion ---------------------------------------------------------------------------
# Tiny, randomly initialised versions of what people train on images: the shapes of a ResNet-18, a
# ConvNeXt and a ViT, and diffusers' UNet2DModel. The tests train one step of each on openreg and on
# the CPU (tests/operators/test_vision_models.py), benchmarks/bench_vision.py times them.


class BasicBlock(nn.Module):
    """A ResNet basic block: two 3x3 conv-batch-norm layers and a shortcut. A shortcut that changes
    the size averages 2x2 patches first, then projects (a 1x1 conv and batch norm), as ResNet-D does."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            pool: nn.Module = nn.AvgPool2d(stride) if stride != 1 else nn.Identity()
            self.shortcut = nn.Sequential(pool, nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(block(x) + shortcut(x))``."""
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def resnet(widths: tuple[int, ...] = (8, 16, 32, 64), classes: int = 10) -> nn.Module:
    """A ResNet-18-shaped classifier: a 3x3 stem with max pooling, four stages of two basic blocks
    (the last three halve the size), global average pooling and a linear head; 20 convolutions
    and 20 batch norms."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
        nn.BatchNorm2d(widths[0]),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = widths[0]
    for i, width in enumerate(widths):
        layers += [BasicBlock(cin, width, 1 if i == 0 else 2), BasicBlock(width, width, 1)]
        cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor, computed channels-last."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each pixel's channels."""
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """A ConvNeXt block: a 7x7 depthwise conv, then channels-last LayerNorm, a 4x MLP with GELU and
    a learned per-channel layer scale, added to the input."""

    def __init__(self, dim: int, layer_scale: float = 0.1) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``x + gamma * mlp(norm(dwconv(x)))``, the MLP on channels-last pixels."""
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def convnext(dims: tuple[int, int] = (16, 32), classes: int = 10) -> nn.Module:
    """A 2-stage ConvNeXt: a 4x4 patchify stem, two blocks a stage, a LayerNorm and 2x2 conv between
    the stages, global average pooling, LayerNorm and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, dims[0], 4, 4),
        LayerNorm2d(dims[0], eps=1e-6),
        ConvNeXtBlock(dims[0]),
        ConvNeXtBlock(dims[0]),
        LayerNorm2d(dims[0], eps=1e-6),
        nn.Conv2d(dims[0], dims[1], 2, 2),
        ConvNeXtBlock(dims[1]),
        ConvNeXtBlock(dims[1]),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.LayerNorm(dims[1], eps=1e-6),
        nn.Linear(dims[1], classes),
    )


class ViTBlock(nn.Module):
    """A pre-norm transformer encoder block: multi-head self-attention
    (F.scaled_dot_product_attention) and a GELU MLP, each added to its input."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block's output for tokens ``x`` of shape ``(batch, tokens, dim)``."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """A Vision Transformer: a patch-embedding conv, a class token and learned positions, encoder
    blocks, and a linear head on the class token."""

    def __init__(
        self,
        image: int = 16,
        patch: int = 4,
        dim: int = 32,
        heads: int = 4,
        depth: int = 2,
        classes: int = 10,
    ) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Return class logits for ``images`` of shape ``(batch, 3, image, image)``."""
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit(image: int = 16, patch: int = 4, dim: int = 32, heads: int = 4, depth: int = 2) -> nn.Module:
    """A 2-layer :class:`ViT` on 16x16 images by default."""
    return ViT(image, patch, dim, heads, depth)


class NoisePredictor(nn.Module):
    """A diffusers ``UNet2DModel`` returning its predicted noise as a tensor (its ``.sample``)."""

    def __init__(self, unet: nn.Module) -> None:
        super().__init__()
        self.unet = unet

    def forward(self, noisy: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        """Predict the noise in ``noisy`` images at diffusion ``timesteps``."""
        return self.unet(noisy, timesteps).sample


def unet(sample_size: int = 16) -> nn.Module:
    """diffusers' ``UNet2DModel`` in about its smallest configuration (channels 8 and 16, one ResNet
    block a level, an attention block on the lower level and in the middle, group norms of 4
    groups), as a :class:`NoisePredictor`. Needs diffusers."""
    try:
        from diffusers import UNet2DModel
    except ImportError as e:  # pragma: no cover - diffusers is a test dependency
        raise ImportError("the UNet example needs diffusers: pip install diffusers") from e
    return NoisePredictor(
        UNet2DModel(
            sample_size=sample_size,
            in_channels=3,
            out_channels=3,
            block_out_channels=(8, 16),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=4,
            attention_head_dim=8,
        )
    )


@dataclass
class TrainingCase:
    """A model with one batch of data: ``loss(model(*inputs), target)`` is its training loss."""

    name: str
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


VISION_MODELS = ("resnet", "convnext", "vit", "unet")


def vision_case(name: str, batch: int = 4) -> TrainingCase:
    """The CPU model ``name`` (one of :data:`VISION_MODELS`) with a seeded batch: 10-class images for
    the classifiers (32x32, 16x16 for the ViT), noisy 16x16 images and their timesteps for the UNet,
    whose target is the noise (mean squared error)."""
    builders: dict[str, Callable[[], nn.Module]] = {
        "resnet": resnet,
        "convnext": convnext,
        "vit": vit,
        "unet": unet,
    }
    if name not in builders:
        raise ValueError(f"unknown vision model {name!r}: expected one of {', '.join(VISION_MODELS)}")
    torch.manual_seed(0)
    model = builders[name]()
    g = torch.Generator().manual_seed(1)
    if name == "unet":
        noise = torch.randn(batch, 3, 16, 16, generator=g)
        images = torch.randn(batch, 3, 16, 16, generator=g)
        timesteps = torch.randint(0, 1000, (batch,), generator=g)
        alpha = torch.linspace(0.9, 0.1, batch).view(-1, 1, 1, 1)
        noisy = alpha.sqrt() * images + (1 - alpha).sqrt() * noise
        return TrainingCase(name, model, (noisy, timesteps), noise, nn.functional.mse_loss)
    size = 16 if name == "vit" else 32
    images = torch.randn(batch, 3, size, size, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    return TrainingCase(name, model, (images,), labels, nn.functional.cross_entropy)
