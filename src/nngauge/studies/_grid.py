"""Model zoos: a study over a grid of hyperparameters, in the style of Jiang et al. and PGDL.

Jiang, Neyshabur, Mobahi, Krishnan & Bengio, "Fantastic Generalization Measures and Where to
Find Them", ICLR 2020, section 4, train one network for every combination of a few values of
seven hyperparameters (depth, width, batch size, learning rate, dropout, weight decay and the
optimizer: 3^7 = 2,187 networks), each to the same cross-entropy on its training set, and score
a measure by how well it ranks the networks' generalization gaps, overall and among networks
that differ in one hyperparameter only (granulated Kendall; the NeurIPS 2020 PGDL competition's
conditional mutual information conditions on pairs of hyperparameters). A ``[grid]`` study
spec makes such a zoo: every point of the grid is one network, trained once per seed by
:func:`nngauge.training.fit` to ``training.target_loss`` (Jiang's 0.01) or ``max_steps``, and
measured at initialization and after training::

    [grid]
    family = ["mlp", "cnn", "resnet"]   # a list: the values the grid takes
    depth = [2, 4]                      # a scalar: a fixed value (stored all the same)
    lr = [0.01, 0.05]
    sample = 0                          # 0: the full product; N: a seeded subset (see below)

The hyperparameters (:data:`HYPERPARAMETERS`, each stored as a column of every network):

- ``family``: ``mlp`` (:func:`nngauge.nn.mlp`), ``cnn`` (:func:`nngauge.nn.cnn` on each input
  read as a one-channel signal (1, d): a 1-D CNN), ``resnet`` (the same with identity skips
  around every block after the first, ``skip=1``: a residual 1-D CNN). ReLU units, He et al.'s
  initialization (Gaussian, variance 2 / fan-in); the CNNs pool by 2 after each of their first
  three blocks and average over positions before the linear read-out;
- ``depth``: hidden layers (MLP) or convolutional blocks (CNNs), each followed by ReLU; plus a
  linear read-out;
- ``width``: hidden units (MLP) or channels (CNNs);
- ``batch_norm``: batch normalization (without trainable affine parameters) after every hidden
  layer's linear map or convolution;
- ``dropout``: dropout probability after every hidden activation;
- ``weight_decay``: the L2 penalty's coefficient (the optimizer's weight decay);
- ``lr``: the learning rate, constant through training;
- ``batch_size``: minibatch size;
- ``train_size``: training samples: the first ``train_size`` of a permutation of the training
  split drawn once per seed, so smaller sets are subsets of larger ones (default: all);
- ``label_noise``: the fraction p of training labels replaced (after the subset is taken;
  test labels stay true): ``round(p n)`` labels chosen at random are redrawn uniformly over
  all classes (:func:`nngauge.data.random_labels`, Zhang et al.'s convention), so a redrawn
  label keeps its old value with probability 1 / k and about p (k - 1) / k of the labels end
  up wrong (the record's ``labels_changed`` says exactly how many);
- ``optimizer``: ``momentum`` (SGD with momentum ``training.momentum``, default 0.9), ``sgd``
  (plain) or ``adam``: Jiang's seventh hyperparameter.

Networks that differ only in training hyperparameters (lr, batch size, weight decay, dropout,
batch norm, optimizer) share their initial weights (drawn from (family, depth, width) and the
seed); networks of one seed share their training set for equal train_size and label_noise, and
the order of their minibatches.

Designs. ``sample = 0`` (default) trains the full product, as Jiang et al. do: every network
has, for every varied hyperparameter, the complete set of networks that differ from it in that
one hyperparameter, which is what granulated Kendall averages over, and every cell of PGDL's
conditional mutual information (a pair of values of two hyperparameters) holds the same number
of networks. A default zoo is therefore a reduced full product (fewer hyperparameters varied,
two values each), not a random subset of a larger grid: a random subset of size N of a product
of size M leaves each network about N / M of its neighbours, so most networks have none and
the granulated averages rest on a few pairs. ``sample = N`` (0 < N < the product's size) takes
a seeded subset that keeps such groups: anchors drawn at random without replacement, each with
its whole "star", every network that differs from it in exactly one varied hyperparameter, until
at least N networks are taken (so up to one star more than N); every anchor then contributes a
complete group along every hyperparameter.
"""

from __future__ import annotations

import io
import itertools
import math
from dataclasses import dataclass
from typing import Any, Optional

from nngauge.errors import InvalidInputError, UnknownNameError

FAMILIES = ("mlp", "cnn", "resnet")
OPTIMIZERS = ("momentum", "sgd", "adam")
ARCHITECTURE = ("family", "depth", "width")
"""The hyperparameters the initial weights are drawn from (with the seed)."""
CNN_POOLINGS = 3
"""The CNN families pool by 2 after each of their first (at most) three blocks."""


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter of a grid: its Python type, what it takes (in words), the test of a
    value, its value when the spec does not give it (None: resolved from the data), and an
    example list of values for messages."""

    kind: type
    expected: str
    accepts: Any
    default: Any
    example: str


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


HYPERPARAMETERS: dict[str, Hyperparameter] = {
    "family": Hyperparameter(str, f"names from {list(FAMILIES)}", lambda v: v in FAMILIES,
                             "mlp", '["mlp", "cnn", "resnet"]'),
    "depth": Hyperparameter(int, "integers >= 1", lambda v: _integer(v) and v >= 1, 2,
                            "[2, 4]"),
    "width": Hyperparameter(int, "integers >= 1", lambda v: _integer(v) and v >= 1, 32,
                            "[16, 32]"),
    "batch_norm": Hyperparameter(bool, "true or false", lambda v: isinstance(v, bool), False,
                                 "[false, true]"),
    "dropout": Hyperparameter(float, "numbers in [0, 1)",
                              lambda v: _number(v) and 0 <= v < 1, 0.0, "[0.0, 0.25]"),
    "weight_decay": Hyperparameter(float, "numbers >= 0", lambda v: _number(v) and v >= 0, 0.0,
                                   "[0.0, 0.0005]"),
    "lr": Hyperparameter(float, "numbers > 0", lambda v: _number(v) and v > 0, 0.05,
                         "[0.01, 0.05]"),
    "batch_size": Hyperparameter(int, "integers >= 1", lambda v: _integer(v) and v >= 1, 64,
                                 "[32, 128]"),
    "train_size": Hyperparameter(int, "integers >= 1 (at most the training split's size)",
                                 lambda v: _integer(v) and v >= 1, None, "[500, 1000]"),
    "label_noise": Hyperparameter(float, "numbers in [0, 1]",
                                  lambda v: _number(v) and 0 <= v <= 1, 0.0, "[0.0, 0.2]"),
    "optimizer": Hyperparameter(str, f"names from {list(OPTIMIZERS)}",
                                lambda v: v in OPTIMIZERS, "momentum", '["momentum", "adam"]'),
}
"""Name -> :class:`Hyperparameter`, in the grid's order (the first varies slowest)."""

EXAMPLE = "[grid]\nfamily = [\"mlp\", \"cnn\"]\ndepth = [2, 4]"


@dataclass(frozen=True)
class GridSpec:
    """A validated ``[grid]``: every hyperparameter's values, in :data:`HYPERPARAMETERS` order
    (one value: fixed; ``train_size`` () until resolved from the data: the whole training
    split), and ``sample`` (0: the full product; N: at least N networks, see the module
    docstring)."""

    axes: tuple[tuple[str, tuple], ...]
    sample: int = 0

    @property
    def values(self) -> dict[str, tuple]:
        return dict(self.axes)

    @property
    def varied(self) -> tuple[str, ...]:
        """The hyperparameters with more than one value."""
        return tuple(name for name, values in self.axes if len(values) > 1)

    @property
    def product_size(self) -> int:
        return math.prod(max(1, len(values)) for _, values in self.axes)


def parse_grid(raw: Any) -> GridSpec:
    """Validate the ``[grid]`` table (raises one-line errors naming the field)."""
    from nngauge.studies._spec import _fail

    if not isinstance(raw, dict):
        raise _fail("grid", "a table of hyperparameters", raw, f"write it as {EXAMPLE!r}")
    unknown = sorted(set(raw) - set(HYPERPARAMETERS) - {"sample"})
    if unknown:
        raise UnknownNameError(
            f"study spec field grid.{unknown[0]} expected a hyperparameter among "
            f"{list(HYPERPARAMETERS)} or sample; got {unknown[0]!r}. Fix: remove or rename "
            "it.")
    axes = []
    for name, spec in HYPERPARAMETERS.items():
        given = raw.get(name, [] if spec.default is None else [spec.default])
        values = given if isinstance(given, list) else [given]
        field = f"grid.{name}"
        if not values and name in raw:
            raise _fail(field, f"a non-empty list of {spec.expected}", given,
                        f"give at least one value, e.g. {name} = {spec.example}, or drop "
                        f"{name} for its default")
        bad = [v for v in values if not spec.accepts(v)]
        if bad:
            raise _fail(field, f"{spec.expected} (a list, or one value)", bad[0],
                        f"write e.g. {name} = {spec.example}")
        values = [spec.kind(v) for v in values]
        if len(set(values)) != len(values):
            raise _fail(field, "distinct values", given, "list each value once")
        axes.append((name, tuple(values)))
    sample = raw.get("sample", 0)
    if not _integer(sample) or sample < 0:
        raise _fail("grid.sample", "an integer >= 0 (0: the full product)", sample,
                    "write e.g. sample = 150")
    return GridSpec(tuple(axes), sample)


def expand_grid(grid: GridSpec, seed: int) -> list[dict]:
    """The networks of a grid: one dict of hyperparameter values each, in product order
    (``train_size`` None where the spec leaves it to the data); a subset of the product when
    ``grid.sample`` is below its size (stars around anchors drawn with ``seed``: see the module
    docstring).

    Example:
        >>> from nngauge.studies._grid import expand_grid, parse_grid
        >>> grid = parse_grid({"family": ["mlp", "cnn"], "depth": [2, 4], "lr": [0.01, 0.1]})
        >>> points = expand_grid(grid, 0)
        >>> len(points), points[0]["family"], points[0]["depth"], points[0]["lr"]
        (8, 'mlp', 2, 0.01)
        >>> len(expand_grid(parse_grid({**{"depth": [1, 2, 3, 4]}, "lr": [0.1, 0.2, 0.3],
        ...                             "sample": 5}), 0))  # one anchor's star: 1 + 3 + 2
        6
    """
    names = [name for name, _ in grid.axes]
    values = [values or (None,) for _, values in grid.axes]
    product = [dict(zip(names, combination)) for combination in itertools.product(*values)]
    if not grid.sample or grid.sample >= len(product):
        return product
    import torch

    from nngauge.studies._units import derive_seed

    strides = [math.prod(len(v) for v in values[i + 1:]) for i in range(len(values))]
    order = torch.randperm(len(product),
                           generator=torch.Generator().manual_seed(derive_seed(seed, "grid")))
    chosen: set[int] = set()
    for anchor in order.tolist():
        for size, stride in zip(map(len, values), strides):
            position = anchor // stride % size
            chosen.update(anchor + (other - position) * stride for other in range(size))
        if len(chosen) >= grid.sample:
            break
    return [product[i] for i in sorted(chosen)]


def resolve_points(grid: GridSpec, seed: int, n_train: int) -> list[dict]:
    """:func:`expand_grid` with ``train_size`` resolved against the training split's
    ``n_train`` samples (left out: all of them; larger: an error)."""
    too_large = [size for size in grid.values["train_size"] if size > n_train]
    if too_large:
        raise InvalidInputError(
            f"study spec field grid.train_size expected sizes of at most {n_train}, the "
            f"training split's samples; got {too_large[0]}. Fix: use smaller sizes, more data "
            "(data.n) or a larger training fraction (data.split).")
    points = expand_grid(grid, seed)
    for point in points:
        if point["train_size"] is None:
            point["train_size"] = n_train
    return points


# ------------------------------------------------------------------------------ networks


def build_network(hyperparameters: dict, d_in: int, d_out: int, *, generator=None,
                  dtype=None):
    """The network of a grid point: :func:`nngauge.nn.mlp` or :func:`nngauge.nn.cnn` with the
    point's family, depth, width, batch norm and dropout (module docstring), initialized from
    ``generator``."""
    import torch

    from nngauge.nn import cnn, mlp

    h = hyperparameters
    common = {"norm": "batch" if h["batch_norm"] else None, "dropout": float(h["dropout"]),
              "init": "gaussian", "sigma_w": math.sqrt(2.0), "generator": generator,
              "dtype": dtype or torch.float32}
    if h["family"] == "mlp":
        return mlp(d_in, h["width"], h["depth"] + 1, d_out, **common)
    return cnn(d_in, h["width"], h["depth"], d_out, image_shape=(1, d_in),
               skip=1.0 if h["family"] == "resnet" else None,
               pool_after=tuple(range(min(h["depth"], CNN_POOLINGS, _poolings(d_in)))), **common)


def _poolings(length: int) -> int:
    from nngauge.nn._cnn import max_poolings

    return max_poolings((1, length))


def training_set(train, train_size: int, label_noise: float, n_classes: int, seed: int,
                 replicate: int):
    """The training set of a network of seed ``replicate``: the first ``train_size`` samples of
    a permutation of ``train`` (one per seed), with a ``label_noise`` fraction of labels
    redrawn uniformly over the ``n_classes`` classes (module docstring); and the fraction of
    its labels that differ from the true ones."""
    import torch

    from nngauge.data import LabelledData, random_labels
    from nngauge.studies._units import derive_seed

    order = torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(
        derive_seed(seed, "train_subset", replicate)))[:train_size]
    inputs, labels = train.inputs[order], train.labels[order]
    if label_noise:
        noisy = random_labels(labels, label_noise, n_classes=n_classes,
                              generator=torch.Generator().manual_seed(
                                  derive_seed(seed, "label_noise", replicate, train_size)))
    else:
        noisy = labels
    return LabelledData(inputs, noisy), float((noisy != labels).double().mean())


def state_bytes(model) -> bytes:
    """A model's ``state_dict`` as ``torch.save`` bytes (loadable with ``weights_only=True``)."""
    import torch

    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    return buffer.getvalue()


def load_state(model, blob: bytes):
    """Load :func:`state_bytes` into ``model`` (in place); returns the model."""
    import torch

    model.load_state_dict(torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu"))
    return model


def optimizer_options(name: str, momentum: float) -> dict:
    """:func:`nngauge.training.fit`'s optimizer and momentum for a grid's optimizer name."""
    if name == "adam":
        return {"optimizer": "adam", "momentum": 0.0}
    return {"optimizer": "sgd", "momentum": momentum if name == "momentum" else 0.0}


# -------------------------------------------------------------------------------- scales

SCALES: dict[str, dict] = {
    "default": {
        "grid": {"family": list(FAMILIES), "depth": [3, 5], "width": [16, 32],
                 "batch_norm": [False, True], "dropout": 0.0, "weight_decay": [0.0, 0.0001],
                 "lr": [0.02, 0.05], "batch_size": [32, 128], "train_size": 500,
                 "label_noise": 0.0, "optimizer": "momentum"},
        "training": {"target_loss": 0.01, "max_steps": 2000},
    },
    "paper": {
        "grid": {"family": list(FAMILIES), "depth": [3, 5], "width": [16, 32],
                 "batch_norm": [False, True], "dropout": [0.0, 0.1],
                 "weight_decay": [0.0, 0.0001], "lr": [0.01, 0.02, 0.05],
                 "batch_size": [32, 128], "train_size": [500, 1000], "label_noise": [0.0, 0.2],
                 "optimizer": "momentum"},
        "training": {"target_loss": 0.01, "max_steps": 4000},
    },
}
"""The zoos of :func:`zoo_spec` (also ``examples/zoo.toml`` and ``examples/zoo_paper.toml``).

``default``: 192 networks a seed, the full product of two values of six hyperparameters
(depth, width, batch norm, learning rate, batch size, weight decay) for each of the three
families, on 500 training samples, the step cap 2,000: about 3.5 s of one core per network on
MNIST-1D with NLC at initialization and after training (2/3 of the networks reach the target
loss), so three seeds take about 20 minutes on two cores. ``paper``: 2,304 networks a seed,
every hyperparameter varied (three learning rates, two values of the others), the cap 4,000:
for the Ray executor on a cluster."""


def zoo_spec(scale: str = "default", *, source: str = "mnist1d", seeds=(0, 1, 2),
             measures=(), measure_after=(), measure_options=None, name: Optional[str] = None,
             seed: int = 0):
    """The :class:`~nngauge.studies.StudySpec` of a model zoo at a named scale (:data:`SCALES`).

    Args:
        scale: "default" (192 networks a seed) or "paper" (2,304 a seed).
        source: the data (``data.source``; split 0.8 / 0.2 into train and test).
        seeds: the replicates (each trains the whole zoo).
        measures, measure_after: study measure names (:data:`nngauge.studies.MEASURES`) taken
            at initialization and after training.
        measure_options: ``{measure name: {keyword: value}}``, the spec's
            ``[measures.options]`` (e.g. ``{"flatness": {"n_iter": 8}}``).
        name: the study's name (default ``zoo-<scale>``). seed: the study seed (data split).

    Example:
        >>> from nngauge.studies import plan_units, zoo_spec
        >>> spec = zoo_spec("default", source="digits", seeds=[0], measures=["n_params"])
        >>> len(plan_units(spec)), spec.grid.varied
        (192, ('family', 'depth', 'width', 'batch_norm', 'weight_decay', 'lr', 'batch_size'))
    """
    from nngauge.studies._spec import parse_spec

    if scale not in SCALES:
        raise UnknownNameError(f"zoo_spec() expected a scale in {list(SCALES)}; got "
                               f"{scale!r}. Fix: use one of those.")
    return parse_spec({"name": name or f"zoo-{scale}", "seed": seed, "seeds": list(seeds),
                       "data": {"source": source, "split": [0.8, 0.2]},
                       "grid": SCALES[scale]["grid"],
                       "measures": {"names": list(measures),
                                    **({"options": measure_options} if measure_options else {})},
                       "training": {**SCALES[scale]["training"],
                                    "measure_after": list(measure_after)}})
