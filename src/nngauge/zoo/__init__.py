"""Reference architectures: plain-PyTorch copies of the networks users actually bring.

nngauge measures any ``torch.nn.Module``, and the networks people measure are rarely the clean
MLPs of the papers: they come from torchvision, timm and Hugging Face, and each library has
habits that trip up measurement tools (hooks, Jacobians, activation detection, BatchNorm
folding). This module rebuilds those networks with torch alone, in the libraries' own module
layouts, so that nngauge's conformance tests, examples, benchmarks and CLI can run on "real"
networks without torchvision, timm or transformers installed.

The quirks each architecture carries, and the failure mode each one exercises:

* :func:`resnet18`, torchvision layout: one ``relu`` module is called twice per block (forward
  hooks fire twice; per-module statistics must not double count); ``ReLU(inplace=True)`` and
  the in-place residual add ``out += identity`` mutate tensors that hooks have already seen;
  BatchNorm2d behaves differently in train and eval mode. timm layout: separate ``act1`` /
  ``act2`` modules for the same function.
* :func:`vit`: timm's own ``GELU`` class (not ``nn.GELU``), attention fused into
  ``scaled_dot_product_attention`` (no module sees the attention weights), and parameters
  (``cls_token``, ``pos_embed``) that belong to no layer.
* :func:`gpt`: int64 token input (no input gradient: perturb the ``wte`` output instead), a
  dict output, Hugging Face's ``Conv1D`` whose weight is stored transposed (in, out) and applied
  with ``torch.addmm``, the ``NewGELUActivation`` class, causal attention, and one output per
  position.
* :func:`bert`: a :class:`ModelOutput` (an ``OrderedDict`` read by attribute, key or integer
  position), post-norm layers, a Tanh pooler on the first token.
* :func:`lstm_classifier`: a recurrent module with a tuple output, an input reshaped inside
  ``forward``, and an optional token embedding.
* :func:`groupnorm_cnn`: GroupNorm (per-sample normalization, not piecewise linear).
* :func:`mobilenet_block_net`: timm's ``BatchNormAct2d``, an ``nn.BatchNorm2d`` subclass whose
  forward also applies an activation (an eval-mode "BatchNorm" that is not affine), depthwise
  convolution, and squeeze-excitation gating (a product of two branches).
* :func:`convnext_block_net`: ``LayerNorm2d`` (an ``nn.LayerNorm`` subclass over channels-first
  maps), ``GELUTanh`` (an ``nn.GELU`` subclass that is the tanh approximation), a LayerScale
  parameter, channels-last permutes, and a global pool done in ``forward`` with no module.
* :func:`dropout_mlp`: Dropout (random in train mode, the identity in eval mode).
* :func:`elementwise_zoo_net`: activations recognisable only by behaviour, not by class
  (``QuickGELU``, ``nn.Hardswish``, a parameter-free custom ``Swish``).

Every builder is deterministic: it takes a keyword-only ``generator`` (an int seed, default 0,
or a torch.Generator, one draw from which is the seed; ``seed=`` is its deprecated name) and
initializes all parameters from it without touching the global random state. Models are
returned in train mode, as freshly constructed models are. :data:`ZOO` names small, fast
configurations (a forward pass of a batch of 8 takes milliseconds on a CPU) with what a
measurement tool needs to feed them (:func:`sample_inputs`, :func:`sample_labels`) and to read
their logits (``output``).

One module per architecture (``_resnet``, ``_vit``, ``_gpt``, ``_bert``, ``_lstm``, ``_small``
for the small CNNs and MLPs), the registry in ``_registry``, what the builders share in
``_common``; this package re-exports the public names.

Example:
    >>> from nngauge.zoo import ZOO, sample_inputs
    >>> entry = ZOO["bert_small"]
    >>> model = entry.build(generator=0)
    >>> model(sample_inputs(entry, 2))[entry.output].shape
    torch.Size([2, 2])
"""

from __future__ import annotations

from nngauge.zoo._bert import ModelOutput, bert
from nngauge.zoo._gpt import Conv1D, NewGELUActivation, gpt, gpt_small
from nngauge.zoo._lstm import lstm_classifier
from nngauge.zoo._registry import ZOO, ZooEntry, sample_inputs, sample_labels
from nngauge.zoo._resnet import resnet18, resnet50, resnet_small
from nngauge.zoo._small import (
                                BatchNormAct2d,
                                GELUTanh,
                                LayerNorm2d,
                                LayerScale,
                                QuickGELU,
                                Swish,
                                convnext_block_net,
                                dropout_mlp,
                                elementwise_zoo_net,
                                groupnorm_cnn,
                                mobilenet_block_net,
)
from nngauge.zoo._vit import GELU, vit, vit_small

__all__ = [
    "ZOO",
    "ZooEntry",
    "sample_inputs",
    "sample_labels",
    "resnet18",
    "resnet50",
    "resnet_small",
    "vit",
    "vit_small",
    "gpt",
    "gpt_small",
    "bert",
    "lstm_classifier",
    "groupnorm_cnn",
    "mobilenet_block_net",
    "convnext_block_net",
    "dropout_mlp",
    "elementwise_zoo_net",
    "ModelOutput",
    "GELU",
    "Conv1D",
    "NewGELUActivation",
    "BatchNormAct2d",
    "LayerNorm2d",
    "GELUTanh",
    "LayerScale",
    "QuickGELU",
    "Swish",
]
