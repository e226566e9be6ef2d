"""Loss landscapes: the loss on a line or a plane of weight space through the current weights.

With theta the network's parameters and d_1, d_2 directions in parameter space (one tensor per
parameter), the landscape is

    f(alpha) = L(theta + alpha d_1)                      (a line, ``dims=1``)
    f(alpha, beta) = L(theta + alpha d_1 + beta d_2)     (a plane, ``dims=2``)

on a grid of coordinates, L the mean loss over the data (Goodfellow, Vinyals & Saxe,
"Qualitatively Characterizing Neural Network Optimization Problems", ICLR 2015, for lines; Li,
Xu, Taylor, Studer & Goldstein, "Visualizing the Loss Landscape of Neural Nets", NeurIPS 2018,
sections 3-4, for planes). Random directions are meaningless without a scale: a network with
batchnorm or ReLUs computes the same function after its filters are rescaled, so Li et al.
(section 4) *filter-normalize* a Gaussian direction: each filter d_{i,j} (row j of a Linear
weight, output channel j of a convolution kernel: the slice along dimension 0) becomes

    d_{i,j} <- d_{i,j} / ||d_{i,j}|| * ||theta_{i,j}||,

and one-dimensional parameters (biases, normalization scales and shifts) are not moved. The
directions can also be the top Hessian eigenvectors (Yao, Gholami, Keutzer & Mahoney, "PyHessian:
Neural Networks Through the Lens of the Hessian", IEEE BigData 2020) or the first
principal components of an optimization trajectory (Li et al., section 7).

Every grid point is evaluated with ``torch.func.functional_call``: chunks of points are one
``vmap`` over perturbed parameter sets (a loop only for modules vmap cannot batch); the model's
parameters are never written.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from nngauge._constraints import Choice, Flag, Maybe, constrained
from nngauge._internal.adapter import MeasurementMode, ModelAdapter
from nngauge._internal.batching import Vectorizer
from nngauge._internal.losses import LOSS, Loss, LossFn, labelled_tensors, scalar_loss, with_labels
from nngauge._internal.options import ModelOptions, model_options
from nngauge._internal.sites import SiteRecorder
from nngauge._plots import new_axes
from nngauge._results import Result
from nngauge._vocabulary import renamed
from nngauge.errors import invalid, require_extra
from nngauge.measures.curvature._hessian import hessian
from nngauge.measures.curvature._landscape_regions import (
    PatternProbe,
    SliceRegions,
    exact_line,
    pattern_probe,
    sampled_regions,
)
from nngauge.measures.generalization._local_noise import ELEMENT_BUDGET

DirectionKind = Literal["filter", "layer", "random", "hessian", "pca"]
BatchNormHandling = Literal["frozen", "recompute"]
"""The values of the deprecated ``bn=`` (``norm_mode`` says it alone)."""
PlotKind = Literal["contour", "surface", "line"]
Direction = Mapping[str, Any]

MOVED = "a loss landscape moves the weights"
KINDS = ("filter", "layer", "random", "hessian", "pca")
DEFAULT_RESOLUTION = 21
CHUNK_ELEMENTS = 2**21
"""Default bound on a chunk's widest layer output, in elements (8 MiB in float32): past the
caches, a batched pass's unfused bias additions and activations run at memory speed and a
larger chunk is slower per point than a smaller one."""


@dataclass(frozen=True)
class LossLandscapeResult(Result):
    """The loss (and accuracy) on a grid of weight space around theta.

    Attributes:
        losses: the mean loss at every grid point, shape ``resolution``: ``losses[i]`` is
            L(theta + a_i d_1) on a line, ``losses[i, j]`` is L(theta + a_i d_1 + b_j d_2) on
            a plane (a = ``coordinates[0]``, b = ``coordinates[1]``).
        accuracies: the fraction of correct arg-max predictions, same shape (classifiers;
            None for regression targets or ``accuracy=False``).
        coordinates: one 1-D array of coordinates per axis (a, then b).
        center_loss, center_accuracy: at theta itself (alpha = beta = 0).
        min_loss, min_coordinates: the smallest loss on the grid and where it is.
        dims: 1 (line) or 2 (plane).
        direction_norms: ||d_k|| over all parameters, per direction.
        explained_variance: ``directions="pca"``: the fraction of the trajectory's variance
            along each direction; else None.
        eigenvalues: ``directions="hessian"``: the Hessian eigenvalue of each direction.
        trajectory_coordinates: ``directions="pca"``: (n_snapshots, dims) the projection of
            each snapshot minus theta onto the directions (the path drawn by :meth:`plot`).
        settings: directions (the kind, or "given"), loss (its name), norm_mode,
            include_bias_bn, layers, count_regions, resolution (one count per axis), span,
            batch_size, chunk_size, n_samples.
        mode: how the model was run (:class:`~nngauge.MeasurementMode`), batchnorm's
            statistics in its ``norm_mode``.
        directions: d_1 (and d_2) by parameter name, every parameter present (zeros where it
            is not moved); not in ``to_dict()``.
        regions_method: ``count_regions=True``: "exact" or "sampled (the reason it is not
            exact)"; else None. The fields below are None without ``count_regions``.
        pattern_distance: shaped like ``losses``: the fraction of the data's (sample, unit)
            activation regions that differ from theirs at theta (0 inside theta's piece of
            weight space, where the loss is smooth).
        region_changes: a line: (resolution - 1,) the pattern changes of the data inside each grid
            interval: exact, every (sample, change); sampled, the samples whose pattern
            differs between the interval's ends (a lower bound). None on a plane.
        region_breakpoints: exact only: every value of alpha where some sample's pattern
            changes (:func:`weight_transitions`' ``breakpoints``).
        smooth_interval: a line: (lo, hi) around alpha = 0 in which no sample's pattern
            changes, so that the loss is smooth there (sampled: an outer bound from the grid).
    """

    losses: np.ndarray
    accuracies: Optional[np.ndarray]
    coordinates: tuple[np.ndarray, ...]
    center_loss: float
    center_accuracy: Optional[float]
    min_loss: float
    min_coordinates: tuple[float, ...]
    dims: int
    direction_norms: tuple[float, ...]
    explained_variance: Optional[tuple[float, ...]]
    eigenvalues: Optional[tuple[float, ...]]
    trajectory_coordinates: Optional[np.ndarray]
    settings: dict
    mode: MeasurementMode
    directions: tuple[dict, ...] = field(repr=False, compare=False)
    regions_method: Optional[str] = None
    pattern_distance: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    region_changes: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    region_breakpoints: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    smooth_interval: Optional[tuple[float, float]] = None

    def to_frame(self):
        """One row per grid point: columns alpha (and beta), loss (and accuracy). Needs
        pandas (``nngauge[report]``)."""
        pd = require_extra("pandas", "report", "LossLandscapeResult.to_frame()")
        grids = np.meshgrid(*self.coordinates, indexing="ij")
        columns = {name: g.ravel() for name, g in zip(("alpha", "beta"), grids)}
        columns["loss"] = self.losses.ravel()
        if self.accuracies is not None:
            columns["accuracy"] = self.accuracies.ravel()
        return pd.DataFrame(columns)

    def plot(self, ax=None, *, kind: Optional[PlotKind] = None):
        """The landscape with its minimum marked (a red star). Needs matplotlib.

        Args:
            ax: a matplotlib Axes (3-D for "surface"); default a new figure.
            kind: "line" (1-D; accuracy on a second axis when there is one), "contour"
                (2-D; the PCA trajectory drawn on it, as Li et al. figure 9) or "surface"
                (2-D, 3-D axes); default "line" for a line, "contour" for a plane.

        Returns:
            The Axes.
        """
        kind = kind or ("line" if self.dims == 1 else "contour")
        wanted = {"line": 1, "contour": 2, "surface": 2}
        if wanted.get(kind) != self.dims:
            raise invalid("LossLandscapeResult.plot()",
                          f"kind {'line' if self.dims == 1 else 'contour or surface'} for a "
                          f"{self.dims}-D landscape", f"kind={kind!r}",
                          "omit kind for the default plot")
        return {"line": _plot_line, "contour": _plot_contour, "surface": _plot_surface}[kind](
            self, ax)


def _norm_mode_of_bn(bn: Any) -> str:
    """bn="frozen" becomes norm_mode="eval" (running statistics), bn="recompute" becomes
    norm_mode="train" (each batch's statistics)."""
    if not isinstance(bn, str) or bn not in typing.get_args(BatchNormHandling):
        raise invalid("loss_landscape()", "bn in ('frozen', 'recompute') (deprecated: "
                      "norm_mode says it alone)", f"bn={bn!r}",
                      "pass norm_mode='eval', 'frozen' or 'train' instead of bn")
    return "train" if bn == "recompute" else "eval"


def _bn_with_norm_mode(bn: Any, norm_mode: Any) -> Any:
    """bn="frozen" with norm_mode "eval" or "frozen" keeps that norm_mode; bn="recompute"
    with a norm_mode is refused (as before the rename)."""
    if norm_mode is None:
        return _norm_mode_of_bn(bn)
    _norm_mode_of_bn(bn)
    if bn != "frozen" or norm_mode not in ("eval", "frozen"):
        raise invalid("loss_landscape()", "norm_mode 'eval' or 'frozen', only with "
                      "bn='frozen' (bn is deprecated)", f"norm_mode={norm_mode!r} with bn={bn!r}",
                      "drop bn: norm_mode='train' uses each batch's statistics")
    return norm_mode


@renamed(steps="resolution", modules="layers", bn=("norm_mode", _norm_mode_of_bn,
                                                   _bn_with_norm_mode))
@constrained(dims=Maybe(Choice(1, 2)), loss=LOSS, accuracy=Flag(), include_bias_bn=Flag(),
             count_regions=Flag())
@model_options("output", norm_mode="eval", after={"norm_mode": "count_regions"})
def loss_landscape(
    model: nn.Module,
    data: Any,
    labels: Any = None,
    *,
    directions: Union[DirectionKind, Direction, Sequence[Direction]] = "filter",
    dims: Optional[int] = None,
    resolution: Union[int, Sequence[int], None] = None,
    span: Union[float, Sequence[float], Sequence[Sequence[float]]] = 1.0,
    loss: Loss = "auto",
    accuracy: bool = True,
    include_bias_bn: bool = False,
    layers: Optional[Sequence[str]] = None,
    count_regions: bool = False,
    trajectory: Optional[Sequence[Mapping[str, Any]]] = None,
    batch_size: int = 1024,
    chunk_size: Optional[int] = None,
    options: ModelOptions,
    generator: Optional[torch.Generator | int] = None,
) -> LossLandscapeResult:
    """The loss on a line or plane of weight space around theta: L(theta + a d_1 + b d_2).

    Directions (``directions=``):

    - ``"filter"`` (default; Li et al. 2018, section 4): Gaussian, each filter rescaled to the
      norm of the weights' filter (see the module docstring). The paper's choice because it
      makes landscapes of different networks, and sharpness along them, comparable;
    - ``"layer"``: Gaussian, each parameter tensor rescaled to that tensor's norm;
    - ``"random"``: Gaussian over the moved parameters, scaled to unit total norm;
    - ``"hessian"``: the top-1 (line) or top-2 (plane) eigenvectors of the Hessian of the
      loss (unit norm, largest eigenvalues first, signed), by Lanczos
      (:func:`~nngauge.measures.curvature.hessian` with the same loss, batchnorm statistics,
      batches, output and generator; its other settings at their defaults);
    - ``"pca"`` (Li et al. 2018, section 7): with ``trajectory`` the weights theta_0 ..
      theta_{n-1} recorded during training and theta the final (current) weights, the first
      principal components of the rows theta_i - theta (centered, as the authors' code does):
      unit, orthogonal directions; ``explained_variance`` gives each one's fraction of the
      variance and ``trajectory_coordinates`` the path in the plane;
    - a dict name -> tensor (a line) or a pair of them (a plane), used as given; parameters
      not named are not moved.

    "filter", "layer", "random" and "pca" move only parameters of two or more dimensions
    (weights), unless ``include_bias_bn=True``: then one-dimensional parameters count as one
    filter each (Li et al.'s code sets those directions equal to the parameters instead).
    Gaussians are drawn from ``generator`` (on the CPU), direction by direction, parameter by
    parameter in ``named_parameters()`` order, one ``torch.randn`` of the parameter's shape.

    Batchnorm (``norm_mode=``), stated in ``mode.norm_mode``:

    - ``"eval"`` (default): the running statistics, fixed at every grid point;
    - ``"frozen"``: statistics of the data at theta, fixed at every grid point (with "eval",
      the grid is a slice of one function of the weights);
    - ``"train"``: batch statistics of each evaluation batch of ``batch_size`` points,
      recomputed at every grid point (a train-mode forward pass; the running statistics are
      not updated). The loss then depends on ``batch_size``; Li et al. plot such landscapes.

    Args:
        model: the network; left exactly as found (parameters, buffers, modes).
        data: ``(inputs, labels)``, inputs with ``labels=``, or a Dataset / DataLoader of
            pairs; all of it is evaluated at every grid point.
        labels: the labels when ``data`` holds only inputs: integer classes (b,) (or (b, seq)
            for per-position outputs) or floating targets shaped like the outputs.
        directions: "filter", "layer", "random", "hessian", "pca", or given directions.
        dims: 1 or 2; default from the given directions, else from ``resolution``, else 2.
        resolution: grid points per axis (>= 2): an int, or one per axis; default 21.
        span: the range of every axis: a > 0 for [-a, a], a pair (lo, hi), or one pair per
            axis; in units of the directions.
        loss: "auto" (default: the mean cross-entropy for integer labels, per position for
            sequence outputs; for floating targets the squared error summed over each
            sample's entries and averaged over samples), "cross_entropy" (integer labels
            only), "mse" (the mean over every entry; integer labels one-hot), or a callable
            ``loss(outputs, labels)`` returning the batch's mean loss as one number, with
            ``outputs`` the measured output tensor (``output=``); it is traced by
            ``torch.func`` (no ``.item()``, no branching on values). The same rule in every
            measure: docs/api.md, "The loss". Changed in 0.2: "auto" on floating targets was
            "mse"; its values are now the output width times those.
            A callable receives the tensor ``output=`` selects (the ``"logits"`` entry of a dict or
            ModelOutput by default, never the whole output): docs/api.md, "What a loss callable
            receives".
        accuracy: also report accuracies (integer labels only).
        include_bias_bn: also move one-dimensional parameters (see above).
        layers: "filter", "layer", "random" and "pca" move only the parameters of these
            modules (names from ``named_modules()``, their submodules included); default all.
            One module and a line make ``count_regions`` exact.
        count_regions: also measure where the activation patterns of the data change on the
            slice (Raghu et al., ICML 2017, Theorem 2, in weight space: the loss is smooth
            between those changes): exact along a line that moves one module's parameters of a
            piecewise-linear network with fixed batchnorm statistics (each pre-activation is
            affine in alpha; :func:`weight_transitions`), sampled at the grid points
            otherwise (smooth activations by the sign of their pre-activations). Fills
            ``regions_method``, ``pattern_distance``, ``region_changes``,
            ``region_breakpoints`` and ``smooth_interval``; :meth:`~LossLandscapeResult.plot`
            draws them. Stores two 64-bit hashes per sample and grid point.
        norm_mode: "eval" (default; None means it too), "frozen" or "train" (see above).
        trajectory: ``directions="pca"``: at least 3 snapshots, each a mapping from parameter
            name to tensor (a ``state_dict()``; other entries such as buffers are ignored).
        batch_size: points per forward pass (the statistics' batch for ``norm_mode="train"``).
        chunk_size: grid points per vmapped pass; default as many as keep a chunk's parameter
            copies under 2**25 elements and its widest layer output under 2**21 (a batched
            pass larger than the caches is slower per point).
        output: which output the loss reads for dict / tuple / ModelOutput outputs.
        generator: for the Gaussian directions (deterministic): a torch.Generator or an int
            seed.

    Returns:
        :class:`LossLandscapeResult`.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
        ...                           torch.nn.Linear(8, 3))
        >>> x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
        >>> r = loss_landscape(net, (x, y), resolution=(5, 5), span=0.5, generator=0)
        >>> r.losses.shape, bool(abs(r.losses[2, 2] - r.center_loss) < 1e-6)
        ((5, 5), True)
    """
    where = "loss_landscape()"
    data = with_labels(data, labels, where)
    dims = _dims(directions, dims, resolution, where)
    axes = _axes(dims, resolution, span, where)
    options = replace(options, norm_mode=options.norm_mode or "eval")
    kind = directions if isinstance(directions, str) else "given"
    _check_kind(kind, trajectory, where)
    _check_layers(model, kind, layers, where)
    adapter = ModelAdapter(model, options, where=where)
    eigen = (_hessian_eigenvectors(adapter, data, loss, top_k=dims, batch_size=batch_size,
                                   generator=generator) if kind == "hessian" else None)
    with adapter.active(data=data), torch.no_grad():
        x, y, loss_fn, loss_name = labelled_tensors(adapter, data, loss)
        params = adapter.weights(MOVED)
        dirs, extra = _directions(kind, directions, params, dims, where, eigen=eigen,
                                  trajectory=trajectory, include_bias_bn=include_bias_bn,
                                  layers=layers, generator=generator)
        moved = _moved(dirs, where)
        points = _points(axes, params[moved[0]])
        chunk = chunk_size or _default_chunk(adapter, x, params, moved, len(points), batch_size)
        probe = pattern_probe(adapter, x, batch_size) if count_regions else None
        losses, hits, patterns = _evaluate(
            adapter, loss_fn, params, dirs, moved, points, x, y, batch_size=batch_size,
            chunk_size=chunk, classes=accuracy and not y.is_floating_point(),
            recompute=options.norm_mode == "train", probe=probe)
        regions = _regions(adapter, x, dirs, axes, probe, patterns) if count_regions else None
    settings = {"directions": kind, "loss": loss_name, "norm_mode": options.norm_mode,
                "include_bias_bn": include_bias_bn, "layers": layers,
                "count_regions": count_regions, "resolution": [len(a) for a in axes],
                "span": [[float(a[0]), float(a[-1])] for a in axes],
                "batch_size": batch_size, "chunk_size": chunk, "n_samples": len(y)}
    return _result(axes, losses, hits, dirs, params, extra, settings, adapter.mode, regions)


# ---------------------------------------------------------------------------------- checks


def _dims(directions: Any, dims: Optional[int], resolution: Any, where: str) -> int:
    """dims from the argument, the given directions or the resolution (which must agree),
    else 2."""
    if dims is not None and (isinstance(dims, bool) or dims not in (1, 2)):
        raise invalid(where, "dims 1 (a line) or 2 (a plane)", f"dims={dims!r}",
                      "pass dims=1 or dims=2")
    implied = {"dims": dims}
    if isinstance(directions, Mapping):
        implied["directions"] = 1
    elif isinstance(directions, (tuple, list)):
        implied["directions"] = len(directions)
    if isinstance(resolution, (tuple, list)):
        implied["resolution"] = len(resolution)
    known = {k: v for k, v in implied.items() if v is not None}
    resolved = next(iter(known.values()), 2)
    if resolved not in (1, 2) or any(v != resolved for v in known.values()):
        raise invalid(where, "1 or 2 axes, the same number from dims, directions and "
                      "resolution", ", ".join(f"{k} giving {v}" for k, v in known.items()),
                      "give one direction (a dict) or a pair of them, and one point count per "
                      "axis")
    return resolved


def _axes(dims: int, resolution: Any, span: Any, where: str) -> tuple[np.ndarray, ...]:
    counts = [DEFAULT_RESOLUTION] * dims if resolution is None else (
        list(resolution) if isinstance(resolution, (tuple, list)) else [resolution] * dims)
    for k in counts:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
            raise invalid(where, "resolution >= 2 points per axis (an integer, or one per "
                          "axis)", f"resolution={resolution!r}",
                          "pass e.g. resolution=21 or resolution=(21, 21)")
    return tuple(np.linspace(lo, hi, int(k)) for (lo, hi), k in zip(_ranges(dims, span, where),
                                                                   counts))


def _ranges(dims: int, span: Any, where: str) -> list[tuple[float, float]]:
    """[-span, span], (lo, hi), or one (lo, hi) per axis."""
    if _is_number(span):
        if not (span > 0 and math.isfinite(span)):
            raise invalid(where, "span > 0 (finite)", f"span={span!r}",
                          "pass e.g. span=1.0 for [-1, 1], or (lo, hi)")
        return [(-float(span), float(span))] * dims
    pairs = ([span] * dims if isinstance(span, (tuple, list)) and len(span) == 2
             and all(map(_is_number, span)) else span)
    if not isinstance(pairs, (tuple, list)) or len(pairs) != dims or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 and all(map(_is_number, p))
            and math.isfinite(p[0]) and math.isfinite(p[1]) and p[0] < p[1] for p in pairs):
        raise invalid(where, f"span a number > 0, a pair (lo, hi) with lo < hi, or {dims} such "
                      "pairs", f"span={span!r}", "pass e.g. span=1.0 or span=(-0.5, 1.5)")
    return [(float(lo), float(hi)) for lo, hi in pairs]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)



def _check_kind(kind: str, trajectory: Any, where: str) -> None:
    if kind not in KINDS + ("given",):
        raise invalid(where, f"directions in {KINDS}, a dict name -> tensor, or a pair of them",
                      f"directions={kind!r}", "pass e.g. directions='filter'")
    if (kind == "pca") != (trajectory is not None):
        raise invalid(where, "trajectory= exactly when directions='pca'",
                      f"directions={kind!r} and trajectory "
                      f"{'given' if trajectory is not None else 'not given'}",
                      "pass directions='pca' with trajectory=[state_dict, ...], or drop "
                      "trajectory")


def _check_layers(model: nn.Module, kind: str, layers: Any, where: str) -> None:
    """``layers`` names modules with parameters, and only with drawn or PCA directions."""
    if layers is None:
        return
    if kind in ("given", "hessian"):
        raise invalid(where, "layers= with directions 'filter', 'layer', 'random' or 'pca'",
                      f"layers={layers!r} with directions={kind!r}",
                      "give directions that are zero outside those layers instead, or drop "
                      "layers=")
    names = [layers] if isinstance(layers, str) else layers
    known = {n for n, m in model.named_modules() if next(m.parameters(), None) is not None}
    wrong = ([layers] if not isinstance(names, (list, tuple)) or not names
             else [n for n in names if n not in known])
    if wrong:
        raise invalid(where, "layers= names of modules with parameters",
                      f"layers={layers!r} ({wrong[:5]} unknown or empty)",
                      f"pick from {sorted(known)[:12]}")


# ------------------------------------------------------------------------------ directions


def _directions(kind: str, directions: Any, params: dict, dims: int, where: str, *, eigen,
                trajectory, include_bias_bn: bool, layers, generator
                ) -> tuple[list[dict], dict]:
    """The directions of ``kind`` and what the result reports about them (eigenvalues,
    explained variance, trajectory coordinates)."""
    if eigen is not None:
        return (_given_directions(eigen.eigenvectors, params, where),
                {"eigenvalues": tuple(float(e) for e in eigen.eigenvalues)})
    if kind == "given":
        return _given_directions(directions, params, where), {}
    names = [n for n, w in params.items() if (include_bias_bn or w.dim() > 1)
             and _in_layers(n, layers)]
    if kind == "pca":
        return _pca_directions(trajectory, params, names, dims, where)
    return [_random_direction(kind, params, names, generator) for _ in range(dims)], {}


def _in_layers(name: str, layers: Any) -> bool:
    """Whether parameter ``name`` belongs to one of the modules ``layers`` (None: all)."""
    if layers is None:
        return True
    prefixes = [layers] if isinstance(layers, str) else layers
    return any(p == "" or name.startswith(f"{p}.") for p in prefixes)


def _random_direction(kind: str, params: dict, names: list[str],
                      generator: Optional[torch.Generator]) -> dict[str, torch.Tensor]:
    """A Gaussian direction over ``names``, normalized per filter, per tensor or in total."""
    d = {n: torch.randn(params[n].shape, generator=generator, dtype=params[n].dtype
                        ).to(params[n].device) for n in names}
    if kind == "random":
        total = torch.sqrt(sum(v.square().sum() for v in d.values()))
        return {n: v / total for n, v in d.items()}
    return {n: rescaled(v, params[n], per_filter=kind == "filter") for n, v in d.items()}


def rescaled(d: torch.Tensor, w: torch.Tensor, *, per_filter: bool) -> torch.Tensor:
    """``d`` with each filter (slice along dimension 0; a tensor of one dimension or less is
    one filter) or, with ``per_filter=False``, the whole tensor rescaled to the norm of the
    same part of ``w``: d_j <- d_j / ||d_j|| * ||w_j|| (Li et al. 2018, section 4).

    Example:
        >>> w, d = torch.tensor([[3.0, 4.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        >>> rescaled(d, w, per_filter=True).norm(dim=1).tolist()
        [5.0, 1.0]
    """
    if per_filter and w.dim() > 1:
        d_norm, w_norm = d.flatten(1).norm(dim=1), w.flatten(1).norm(dim=1)
        shape = (-1,) + (1,) * (w.dim() - 1)
    else:
        d_norm, w_norm, shape = d.norm(), w.norm(), ()
    return d * (w_norm / d_norm.clamp_min(torch.finfo(d.dtype).tiny)).reshape(shape)


def _given_directions(directions: Any, params: dict, where: str) -> list[dict]:
    """Given directions checked (known names, parameter shapes) in the parameters' dtype."""
    items = [directions] if isinstance(directions, Mapping) else list(directions)
    if not all(isinstance(d, Mapping) for d in items):
        raise invalid(where, "a direction as a dict name -> tensor, or a pair of them",
                      f"{[type(d).__name__ for d in items]}",
                      "pass {name: tensor} or ({name: tensor}, {name: tensor})")
    return [_given_direction(d, params, where) for d in items]


def _given_direction(direction: Mapping, params: dict, where: str) -> dict[str, torch.Tensor]:
    unknown = [n for n in direction if n not in params]
    if unknown:
        raise invalid(where, "directions keyed by parameter names (model.named_parameters())",
                      f"unknown names {unknown[:5]}", f"use names among {list(params)[:8]}")
    out = {}
    for name, value in direction.items():
        tensor = torch.as_tensor(value)
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise invalid(where, f"the direction of {name!r} shaped like the parameter, "
                          f"{tuple(params[name].shape)}", f"shape {tuple(tensor.shape)}",
                          "give one entry per parameter entry")
        out[name] = tensor.detach().to(dtype=params[name].dtype, device=params[name].device)
    return out


def _hessian_eigenvectors(adapter: ModelAdapter, data: Any, loss: Any, **settings: Any):
    """The top Hessian eigenpairs, by Lanczos (:func:`~nngauge.measures.curvature.hessian`,
    no trace) with the landscape's loss, batchnorm statistics, output and batches. Labels
    and the loss are checked here first, so that errors name loss_landscape()."""
    with adapter.active(data=data), torch.no_grad():
        labelled_tensors(adapter, data, loss)
        adapter.weights(MOVED)
    return hessian(adapter.user_model, data, loss=loss, options=adapter.options, trace=False,
                   return_eigenvectors=True, **settings)


def _pca_directions(trajectory: Any, params: dict, names: list[str], dims: int, where: str
                    ) -> tuple[list[dict], dict]:
    """The first ``dims`` principal components of the snapshots' offsets from theta (rows
    centered), via the n x n Gram matrix accumulated parameter by parameter (float64)."""
    snapshots = _snapshots(trajectory, params, names, where)

    def offsets(name: str) -> torch.Tensor:
        theta = params[name].to(torch.float64).flatten()
        return torch.stack([s[name].to(torch.float64).flatten() for s in snapshots]) - theta

    gram = sum(c @ c.T for c in (o - o.mean(0) for o in map(offsets, names)))
    values, vectors = torch.linalg.eigh(gram)
    values, vectors = values.flip(0).clamp_min(0), vectors.flip(1)
    total = float(values.sum())
    if not total > 0 or float(values[dims - 1]) <= 1e-12 * total:
        raise invalid(where, f"a trajectory whose offsets vary in at least {dims} directions",
                      f"variances {values[:2].tolist()} along the first two",
                      "record snapshots at different training steps, or pass dims=1")
    mix = vectors[:, :dims] / values[:dims].sqrt()
    dirs = [{} for _ in range(dims)]
    coords = torch.zeros(len(snapshots), dims, dtype=torch.float64)
    for name in names:
        o = offsets(name)
        components = (o - o.mean(0)).T @ mix  # (numel, dims), unit columns overall
        coords += o @ components
        for k in range(dims):
            dirs[k][name] = components[:, k].reshape(params[name].shape).to(params[name].dtype)
    return dirs, {"explained_variance": tuple((values[:dims] / total).tolist()),
                  "trajectory_coordinates": coords.numpy()}


def _snapshots(trajectory: Any, params: dict, names: list[str], where: str) -> list[Mapping]:
    items = list(trajectory) if isinstance(trajectory, (tuple, list)) else None
    if items is None or len(items) < 3 or not all(isinstance(s, Mapping) for s in items):
        got = (f"{len(items)} snapshots" if items is not None
               else f"a {type(trajectory).__name__}")
        raise invalid(where, "trajectory= a list of at least 3 snapshots (state_dicts)", got,
                      "record the weights at 3 or more points of training "
                      "(e.g. [copy.deepcopy(model.state_dict()) each epoch])")
    for i, snapshot in enumerate(items):
        for name in names:
            value = snapshot.get(name)
            if value is None or tuple(value.shape) != tuple(params[name].shape):
                raise invalid(where, f"snapshots holding every moved parameter with its shape "
                              f"({name!r}: {tuple(params[name].shape)})",
                              f"snapshot {i} with {name!r} "
                              f"{'missing' if value is None else tuple(value.shape)}",
                              "pass state_dicts of this model")
    return items


def _moved(dirs: list[dict], where: str) -> list[str]:
    """Names some direction moves; every direction must move something."""
    for k, d in enumerate(dirs):
        if not any(bool(v.any()) for v in d.values()):
            raise invalid(where, "directions with a nonzero entry", f"direction {k + 1} all zero",
                          "pass include_bias_bn=True for a model of one-dimensional "
                          "parameters, or give a nonzero direction")
    names = dict.fromkeys(n for d in dirs for n, v in d.items() if bool(v.any()))
    return list(names)


# ------------------------------------------------------------------------------ evaluation


def _points(axes: tuple[np.ndarray, ...], like: torch.Tensor) -> torch.Tensor:
    """Every grid point (row-major over the axes), then the centre (all zeros)."""
    grid = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    grid = np.concatenate([grid, np.zeros((1, len(axes)))])
    return torch.as_tensor(grid, dtype=like.dtype, device=like.device)


def _default_chunk(adapter: ModelAdapter, x: torch.Tensor, params: dict, moved: list[str],
                   n_points: int, batch_size: int) -> int:
    """Points per chunk keeping a chunk's parameter copies under ELEMENT_BUDGET elements and
    its widest layer output under CHUNK_ELEMENTS."""
    size = sum(params[n].numel() for n in moved)
    batch = min(batch_size, len(x))
    return max(1, min(n_points, ELEMENT_BUDGET // size,
                      CHUNK_ELEMENTS // (batch * _widest_output(adapter, x[:2]))))


def _widest_output(adapter: ModelAdapter, x: torch.Tensor) -> int:
    """The largest tensor output of any module, in elements per sample of ``x``."""
    sizes = [1]

    def record(module, args, out):
        if isinstance(out, torch.Tensor):
            sizes.append(out.numel() // len(x))

    handles = [m.register_forward_hook(record) for m in adapter.model.modules()]
    try:
        adapter(x)
    finally:
        for handle in handles:
            handle.remove()
    return max(sizes)


def _evaluate(adapter: ModelAdapter, loss_fn: LossFn, params: dict, dirs: list[dict],
              moved: list[str], points: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *,
              batch_size: int, chunk_size: int, classes: bool, recompute: bool,
              probe: Optional[PatternProbe]):
    """Mean loss (and accuracy) over the data at theta + sum_k points[:, k] d_k, one vmap
    over the points of a chunk per data batch; with ``probe``, also each sample's pattern
    hash and its units out of theta's regions at every point (read in the same pass)."""
    stacked = {n: torch.stack([d[n] if n in d else torch.zeros_like(params[n]) for d in dirs]
                              ).flatten(1) for n in moved}
    norms = _norm_buffers(adapter.model) if recompute else {}

    def at(theta, xb, yb, centre):
        if probe is None:
            out, read = adapter.select(functional_call(adapter.model, theta, (xb,))), ()
        else:
            with SiteRecorder(adapter.model, probe.sites, inputs=True) as recorder:
                out = adapter.select(functional_call(adapter.model, theta, (xb,)))
            read = probe.read(recorder.values, centre)
        value = scalar_loss(loss_fn, out, yb, adapter.where)
        hits = (out.argmax(-1) == yb).to(value.dtype).mean() if classes else value.new_zeros(())
        return (value, hits, *read)

    batched = Vectorizer(adapter.note)(at, in_dims=(0, None, None, None))
    losses, hits, hashes, away, m = [], [], [], [], len(y)
    for start in range(0, len(points), chunk_size):
        coeffs = points[start:start + chunk_size]
        c = len(coeffs)
        theta = {n: torch.addmm(params[n].reshape(1, -1), coeffs, stacked[n]).view(
            c, *params[n].shape) for n in moved}
        # batch statistics: each point updates its own copy of the running statistics
        theta.update({n: b.expand(c, *b.shape).clone() for n, b in norms.items()})
        chunk_loss = chunk_hits = 0
        for b in range(0, m, batch_size):
            centre = [] if probe is None else [code[b:b + batch_size] for code in probe.centre]
            value, hit, *read = batched(theta, x[b:b + batch_size], y[b:b + batch_size], centre)
            weight = len(y[b:b + batch_size]) / m
            chunk_loss, chunk_hits = chunk_loss + value * weight, chunk_hits + hit * weight
            if read:
                hashes.append(read[0])
                away.append(read[1])
        losses.append(chunk_loss)
        hits.append(chunk_hits)
    patterns = None
    if probe is not None:  # batches of a chunk side by side, chunks one after another
        per_chunk = -(-m // batch_size)
        patterns = tuple(torch.cat([torch.cat(parts[i:i + per_chunk], 1)
                                    for i in range(0, len(parts), per_chunk)])
                         for parts in (hashes, away))
    return torch.cat(losses), (torch.cat(hits) if classes else None), patterns


def _regions(adapter: ModelAdapter, x: torch.Tensor, dirs: list[dict],
             axes: tuple[np.ndarray, ...], probe: PatternProbe, patterns) -> SliceRegions:
    """The slice's region boundaries: exact on a line moving one module when the network
    allows, else sampled from the grid points' patterns (the centre point dropped)."""
    hashes, away = (p[:-1] for p in patterns)
    sampled = sampled_regions(probe, hashes, away, axes)
    if len(axes) > 1:
        return sampled
    exact, why = exact_line(adapter, x, dirs[0], axes[0], sampled.pattern_distance)
    return exact if exact is not None else replace(sampled, method=f"sampled ({why})")


def _norm_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """The buffers of batchnorm modules (running statistics), by name."""
    return {f"{prefix}.{n}" if prefix else n: b for prefix, module in model.named_modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm)
            for n, b in module.named_buffers(recurse=False) if b is not None}


def _result(axes, losses, hits, dirs, params, extra, settings, mode,
            regions: Optional[SliceRegions]) -> LossLandscapeResult:
    shape = tuple(len(a) for a in axes)
    values = losses.double().cpu().numpy()
    grid, center = values[:-1].reshape(shape), float(values[-1])
    accuracies = None if hits is None else hits.double().cpu().numpy()
    best = np.unravel_index(np.nanargmin(grid), shape) if np.isfinite(grid).any() else None
    full = tuple({n: d.get(n, torch.zeros_like(w)) for n, w in params.items()} for d in dirs)
    return LossLandscapeResult(
        losses=grid, accuracies=None if accuracies is None else accuracies[:-1].reshape(shape),
        coordinates=axes, center_loss=center,
        center_accuracy=None if accuracies is None else float(accuracies[-1]),
        min_loss=float(grid[best]) if best else math.nan,
        min_coordinates=tuple(float(a[i]) for a, i in zip(axes, best)) if best
        else (math.nan,) * len(axes),
        dims=len(axes),
        direction_norms=tuple(float(torch.sqrt(sum(v.double().square().sum()
                                                   for v in d.values()))) for d in dirs),
        explained_variance=extra.get("explained_variance"),
        eigenvalues=extra.get("eigenvalues"),
        trajectory_coordinates=extra.get("trajectory_coordinates"),
        settings=settings, mode=mode, directions=full,
        **({} if regions is None else {
            "regions_method": regions.method, "pattern_distance": regions.pattern_distance,
            "region_changes": regions.region_changes,
            "region_breakpoints": regions.region_breakpoints,
            "smooth_interval": regions.smooth_interval}))


# ----------------------------------------------------------------------------------- plots


def _mark_minimum(ax, r: LossLandscapeResult, *where: float) -> None:
    ax.plot(*where, marker="*", color="red", markersize=14, linestyle="none",
            label=f"minimum {r.min_loss:.4g}")


def _plot_line(r: LossLandscapeResult, ax):
    ax = new_axes(ax)
    ax.plot(r.coordinates[0], r.losses, color="C0", label="loss")
    _mark_minimum(ax, r, r.min_coordinates[0], r.min_loss)
    ax.set_xlabel("alpha (direction 1)")
    ax.set_ylabel("loss")
    if r.regions_method is not None:
        _draw_line_regions(ax, r)
    ax.legend(loc="upper left", fontsize=7)
    if r.accuracies is not None:
        twin = ax.twinx()
        twin.plot(r.coordinates[0], r.accuracies, color="C1", linestyle="--")
        twin.set_ylabel("accuracy", color="C1")
    return ax


MAX_DRAWN_BREAKPOINTS = 300
"""Exact boundaries drawn one line each up to this many; past it only their density."""


def _draw_line_regions(ax, r: LossLandscapeResult) -> None:
    """Region boundaries under a line landscape, in the bottom quarter: exact, every
    breakpoint as a thin vertical line (up to :data:`MAX_DRAWN_BREAKPOINTS`) and the changes
    per grid interval as grey bars; sampled, the fraction of the data's regions that differ
    from theta's as a grey area (neighbouring grid points often differ for every sample);
    theta's smooth interval shaded."""
    a = r.coordinates[0]
    if r.smooth_interval is not None:
        ax.axvspan(*r.smooth_interval, color="C2", alpha=0.12,
                   label="no pattern of the data changes")
    breaks = r.region_breakpoints
    if breaks is not None and 0 < len(breaks) <= MAX_DRAWN_BREAKPOINTS:
        for t in breaks:
            ax.axvline(t, color="0.5", linewidth=0.4, alpha=0.6)
    below = ax.twinx()
    below.set_yticks([])
    if r.regions_method == "exact":
        below.bar((a[1:] + a[:-1]) / 2, r.region_changes, width=np.diff(a), color="0.6",
                  alpha=0.4)
        below.set_ylim(0, 4 * max(1, int(np.max(r.region_changes, initial=0))))
        label = "pattern changes per step (exact)"
    else:
        below.fill_between(a, r.pattern_distance, color="0.6", alpha=0.4)
        below.set_ylim(0, 4 * max(float(np.max(r.pattern_distance)), 1e-12))
        label = (f"regions changed from theta's (sampled; up to "
                 f"{float(np.max(r.pattern_distance)):.0%})")
    ax.plot([], [], color="0.6", linewidth=6, alpha=0.4, label=label)


def _plot_contour(r: LossLandscapeResult, ax):
    ax = new_axes(ax)
    a, b = r.coordinates
    lines = ax.contour(a, b, r.losses.T, levels=20, cmap="viridis")
    ax.clabel(lines, fontsize=7)
    ax.plot(0, 0, marker="+", color="black", markersize=10, linestyle="none", label="theta")
    if r.trajectory_coordinates is not None:
        path = r.trajectory_coordinates
        ax.plot(path[:, 0], path[:, 1], marker=".", color="C3", label="trajectory")
    if r.pattern_distance is not None:
        _draw_plane_regions(ax, r)
    _mark_minimum(ax, r, *r.min_coordinates)
    labels = (("alpha (direction 1)", "beta (direction 2)") if r.explained_variance is None
              else tuple(f"PC{k + 1} ({v:.1%})" for k, v in enumerate(r.explained_variance)))
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.legend(loc="upper right", fontsize=7)
    return ax


def _draw_plane_regions(ax, r: LossLandscapeResult) -> None:
    """Where the data leaves theta's activation regions: the edge of theta's piece (red,
    dashed) and contours of the fraction of changed regions (grey, dotted)."""
    a, b = r.coordinates
    distance = r.pattern_distance.T
    if distance.min() == 0 < distance.max():  # half the smallest change: the piece's edge
        ax.contour(a, b, distance, levels=[0.5 * distance[distance > 0].min()], colors="red", linestyles="--",
                   linewidths=1.0)
        ax.plot([], [], color="red", linestyle="--", label="edge of theta's piece")
    levels = [v for v in (0.01, 0.05, 0.2) if distance.min() < v < distance.max()]
    if levels:
        lines = ax.contour(a, b, distance, levels=levels, colors="0.4", linestyles=":",
                           linewidths=0.8)
        ax.clabel(lines, fmt=lambda v: f"{v:.0%} changed", fontsize=6)


def _plot_surface(r: LossLandscapeResult, ax):
    if ax is None:
        require_extra("matplotlib", "report", "LossLandscapeResult.plot()")
        import matplotlib.pyplot as plt

        ax = plt.figure(figsize=(6, 5)).add_subplot(projection="3d")
    elif not hasattr(ax, "plot_surface"):
        raise invalid("LossLandscapeResult.plot()", "3-D axes for kind='surface'",
                      f"a {type(ax).__name__}", "pass fig.add_subplot(projection='3d') or no ax")
    grid_a, grid_b = np.meshgrid(*r.coordinates, indexing="ij")
    ax.plot_surface(grid_a, grid_b, r.losses, cmap="viridis", alpha=0.8)
    ax.plot([r.min_coordinates[0]], [r.min_coordinates[1]], [r.min_loss], marker="*",
            color="red", markersize=14, linestyle="none", label=f"minimum {r.min_loss:.4g}")
    ax.set_xlabel("alpha")
    ax.set_ylabel("beta")
    ax.set_zlabel("loss")
    return ax


__all__ = ["LossLandscapeResult", "loss_landscape", "rescaled"]
