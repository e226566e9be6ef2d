"""The report's sections: one :class:`SectionBuilder` each, in :data:`SECTION_BUILDERS`.

A builder gets the shared :class:`Context` and returns a :class:`SectionOutput` (the measure
result, figures, tables, notes); it raises :class:`NotApplicable` when its section does not
apply to the model. Every measure gets its own ``torch.Generator().manual_seed(seed)``, so each
number equals the functional measure called with the same options and that generator.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import torch

from nngauge._catalogue import catalogue
from nngauge._citations import cite, short
from nngauge._internal.sites import evenly_thinned
from nngauge.errors import NNGaugeError
from nngauge.measures.expressivity._trajectory import trajectory_length
from nngauge.measures.expressivity._transitions import transitions
from nngauge.report._context import (
    Context,
    Figure,
    NotApplicable,
    SectionBuilder,
    SectionOutput,
    Table,
    format_value,
    mode_notes,
    rows_table,
)
from nngauge.report._figures import per_layer_lines, png_data_uri
from nngauge.report._loss_section import loss_section
from nngauge.report._region_section import regions_section
from nngauge.trajectories import line


def _nlc_section(ctx: Context) -> SectionOutput:
    from nngauge import nlc_profile

    s = ctx.settings
    result = nlc_profile(ctx.model, ctx.data, layers=ctx.profile_layers,
                         batch_size=s.batch_size, n_batches=s.n_batches, method="forward",
                         generator=ctx.generator(), **s.options)
    ctx.results["nlc"] = result
    uri = png_data_uri(lambda ax: per_layer_lines(ax, _names(result.layers),
        {"NLC of input -> layer": [r.nlc for r in result.layers]},
        ylabel="NLC", log=True, kinds=ctx.kinds, labels=ctx.labels))
    return SectionOutput(result, [Figure("NLC profile", uri, "NLC of the sub-network from the "
                                         "input to each layer (log scale); the last point is "
                                         "the whole network.")],
                         [rows_table("NLC per layer", result.layers, ctx.labels)],
                         mode_notes(result))


def _correlation_section(ctx: Context) -> SectionOutput:
    from nngauge import correlations

    s = ctx.settings
    result = correlations(ctx.model, ctx.data, layers=ctx.profile_layers,
                          max_samples=s.correlation_samples, generator=ctx.generator(),
                          **s.options)
    ctx.results["correlations"] = result
    names = [row.name for row in result.layers]
    series = {"measured mean correlation": [row.mean for row in result.layers],
              "measured min correlation": [row.min for row in result.layers]}
    notes = mode_notes(result)
    theory = _theory_correlations(ctx, names)
    if theory is not None:
        series["infinite-width prediction (mean)"] = theory
    else:
        notes.append("no infinite-width overlay: the model is not an nngauge MLP without skip "
                     "connections and batchnorm, or its correlation map is undefined (see the "
                     "theory section)")
    uri = png_data_uri(lambda ax: per_layer_lines(ax, _names(result.layers), series,
                                                  ylabel="cosine similarity", kinds=ctx.kinds,
                                                  labels=ctx.labels))
    return SectionOutput(result, [Figure("Correlations per layer", uri, "Mean and minimum "
                                         "pairwise cosine similarity; rho_max is the largest "
                                         "per-layer minimum.")],
                         [rows_table("Correlations per layer", result.layers, ctx.labels)],
                         notes)


def _names(rows) -> list[str]:
    return [row.name for row in rows]


THEORY_GRID = np.linspace(-1.0, 1.0, 401)
"""Correlations at which the theory's map is iterated for the overlay (then interpolated)."""


def _theory_correlations(ctx: Context, names: list[str]) -> Optional[list[Optional[float]]]:
    """Mean over pairs of P^l(rho_1(pair)) at each linear layer of an nngauge MLP, rho_1 the
    pair's measured correlation after the first linear layer; None where not applicable.
    Without normalization the "mlp" map assumes the pre-activation variance at its fixed point
    q*, so the first layers deviate until the variance gets there."""
    from nngauge.measures.propagation._correlations import cosine_matrix
    from nngauge.theory import correlation_map

    cfg = ctx.config
    # batchnorm centers every unit over the batch, which the correlation maps do not model
    if cfg is None or cfg.skip is not None or cfg.depth < 2 or cfg.norm == "batch":
        return None
    sigma_w, sigma_b, arch = _theory_setting(cfg)
    try:
        cmap = correlation_map(cfg.activation, sigma_w, sigma_b, arch=arch)
        grid_trace = cmap.iterate(THEORY_GRID, cfg.depth - 1)
    except NNGaugeError:
        return None
    x = ctx.inputs[:ctx.settings.correlation_samples]
    with torch.no_grad():
        first = ctx.model.layers[0].linear(x.to(next(ctx.model.parameters())))
    cos = cosine_matrix(first).cpu().numpy()
    pairs = np.clip(cos[np.triu_indices(len(cos), 1)], -1.0, 1.0)
    # P^l is monotone on [-1, 1]: interpolating it on a fine grid is exact to plotting accuracy
    trace = [float(np.interp(pairs, THEORY_GRID, level).mean()) for level in grid_trace]
    # the read-out (last linear layer, d_out units) is not wide: no infinite-width prediction
    by_name = {f"layers.{i}.linear": trace[i] for i in range(cfg.depth - 1)}
    return [by_name.get(name) for name in names]


def _jacobian_section(ctx: Context) -> SectionOutput:
    from nngauge import jacobian_norm

    s = ctx.settings
    layers = ctx.jacobian_layers
    if s.jacobian_positions is not None:  # the output is measured besides the layers
        layers = evenly_thinned(layers, s.jacobian_positions - 1)
    result = jacobian_norm(ctx.model, ctx.data, ord="op", rms=True, layers=layers,
                           batch_size=s.jacobian_samples, n_batches=1, n_iter=s.power_iterations,
                           tol=s.jacobian_tol, generator=ctx.generator(), **s.options)
    ctx.results["jacobian"] = result
    uri = png_data_uri(lambda ax: per_layer_lines(ax, _names(result.layers),
        {"||J||_op (RMS-normalized)": [row.norm for row in result.layers]},
        ylabel="Jacobian operator norm", log=True, kinds=ctx.kinds, labels=ctx.labels))
    return SectionOutput(result, [Figure("Jacobian norms", uri, "RMS-normalized operator norm "
                                         "of the input -> layer Jacobian (shrinkage paper "
                                         "section 2.1).")],
                         [rows_table("Jacobian norm per layer", result.layers, ctx.labels)],
                         mode_notes(result))


def _kernel_section(ctx: Context) -> SectionOutput:
    from nngauge import kernel_conditioning

    s = ctx.settings
    result = kernel_conditioning(ctx.model, ctx.data, layers=ctx.jacobian_layers,
                                 max_samples=s.kernel_samples, generator=ctx.generator(),
                                 **s.options)
    ctx.results["kernels"] = result
    series = {"condition number": [row.condition_number for row in result.layers]}
    theory = [row.theory_condition_number for row in result.layers]
    if any(v is not None for v in theory):
        series["infinite-width condition number"] = theory
    uri = png_data_uri(lambda ax: per_layer_lines(ax, _names(result.layers), series,
                                                  ylabel="condition number", log=True,
                                                  kinds=ctx.kinds, labels=ctx.labels))
    return SectionOutput(result, [Figure("Kernel conditioning", uri, "Condition number of the "
                                         "conjugate kernel per layer (Agarwal, Awasthi & "
                                         "Kale, ALT 2021, section 3); a rank-deficient "
                                         "kernel's infinite condition number is marked "
                                         "\"inf\" at the top of the axis.")],
                         [rows_table("Kernel per layer", result.layers, ctx.labels)],
                         mode_notes(result))


def _theory_setting(cfg) -> tuple[float, float, str]:
    """(sigma_w, sigma_b, arch) of an MLPConfig for the correlation maps: batchnorm and
    layernorm both normalize the pre-activations to unit variance at infinite width, so both
    use the "layernorm" map; without normalization the "mlp" map at q*."""
    arch = "mlp" if cfg.norm is None else "layernorm"
    return cfg.sigma_w * cfg.scale, cfg.bias_std * cfg.scale, arch


def _theory_section(ctx: Context) -> SectionOutput:
    from nngauge.theory import profile

    cfg = ctx.config
    if cfg is None:
        raise NotApplicable("the model is not an nngauge MLP, so its activation and "
                            "initialization are not known to the theory engine")
    if cfg.skip is not None:
        raise NotApplicable("skip connections: the theory engine's maps describe the plain "
                            "normalized or unnormalized stack, not this residual layout")
    sigma_w, sigma_b, arch = _theory_setting(cfg)
    info: dict[str, Any] = dict(activation=cfg.activation, sigma_w=sigma_w, sigma_b=sigma_b,
                                arch=arch, depth=cfg.depth - 1, fix=_critical_fix(cfg, arch))
    out = SectionOutput()
    try:
        summary = profile(cfg.activation, sigma_w, sigma_b, arch=arch)
    except NNGaugeError as exc:
        info["error"] = _theory_error(exc)
    else:
        info.update(summary.to_dict())
        out.tables.append(Table("Activation profile", ("quantity", "value", "source"),
                                tuple((q, format_value(v), src) for q, v, src in summary.rows())))
        out.figures.append(Figure("Correlation map over depth", _iteration_figure(summary,
                                  cfg.depth - 1), "1 - rho_l (log scale) of the map iterated "
                                  "from several input correlations."))
    if cfg.norm == "batch":
        out.notes.append("batchnorm is approximated by the LayerNorm correlation map (both "
                         "normalize pre-activations to unit variance at infinite width)")
    out.result = {k: v for k, v in info.items()}
    ctx.results["theory"] = info
    return out


def _iteration_figure(summary, depth: int) -> str:
    from nngauge.theory._plots import DEFAULT_STARTS

    rhos = summary.correlation_map.iterate(np.asarray(DEFAULT_STARTS), max(depth, 1))

    def draw(ax):
        for k, rho0 in enumerate(DEFAULT_STARTS):
            ax.plot(np.clip(1.0 - rhos[:, k], 1e-16, None), label=f"rho_0 = {rho0:g}")
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("1 - rho")
        ax.legend(fontsize=8)

    return png_data_uri(draw)


SAME = 1e-6
"""Relative difference below which a critical setting is the model's own (no advice)."""


def _critical_fix(cfg, arch: str) -> str:
    """The critical initialization in mlp() terms, checked against the model's setting: keep
    sigma_b and solve sigma_w, else keep sigma_w and solve sigma_b, else a small positive
    sigma_b (0.05 ** 0.5). A candidate is advised only when it differs from the current
    setting and the theory holds there (a positive variance fixed point, phase critical), so
    the advice never repeats the setting it judges nor one where the theory breaks down;
    empty when the current setting is critical already."""
    from nngauge.theory import critical_init, profile

    sigma_w, sigma_b, _ = _theory_setting(cfg)
    try:
        if profile(cfg.activation, sigma_w, sigma_b, arch=arch).phase == "critical":
            return ""
    except NNGaugeError:
        pass  # the theory breaks down here: look for a critical setting where it holds
    for given in ({"sigma_b": sigma_b}, {"sigma_w": sigma_w}, {"sigma_b": 0.05 ** 0.5}):
        try:
            sw, sb = critical_init(cfg.activation, arch=arch, **given)
            if _same(sw, sigma_w) and _same(sb, sigma_b):
                continue
            if profile(cfg.activation, sw, sb, arch=arch).phase != "critical":
                continue
        except NNGaugeError:
            continue
        sw_mlp, sb_mlp = sw / cfg.scale, sb / cfg.scale
        return (f"Critical initialization (critical_init, shrinkage paper appendix B): "
                f"sigma_w = {sw:.6g}, sigma_b = {sb:.6g} (now {sigma_w:.6g}, {sigma_b:.6g}), "
                f"i.e. mlp(..., sigma_w={sw_mlp:.6g}, bias_std={sb_mlp:.6g}) "
                f"(nngauge report mlp:...,sigma_w={sw_mlp:.6g},bias_std={sb_mlp:.6g}).")
    return (f"No critical initialization with a defined infinite-width limit exists for "
            f"{cfg.activation} with the {arch} map: use another activation (e.g. tanh or erf) "
            "or add normalization.")


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME * max(abs(a), abs(b), 1.0)


def _theory_error(exc: NNGaugeError) -> str:
    """The theory engine's reason, without its own fix (the verdict's fix is the one checked
    against the model's setting)."""
    reason = str(exc).split(". Fix:")[0].rstrip(".")
    return f"The infinite-width theory does not hold at this setting: {reason}."


def _trajectory_section(ctx: Context) -> SectionOutput:
    """Trajectory length per layer along a line between two data points (expressivity paper
    section 2.2)."""
    s = ctx.settings
    options, notes = ctx.per_point()
    x0, x1, start = ctx.endpoints()
    points = min(200, s.trajectory_points)
    with warnings.catch_warnings():  # the section notes a length that did not converge
        warnings.simplefilter("ignore", UserWarning)
        result = trajectory_length(ctx.model, line(x0, x1, points), layers=ctx.profile_layers,
                                   max_points=s.trajectory_points, **{**options, **start})
    ctx.results["trajectory"] = result
    uri = png_data_uri(lambda ax: per_layer_lines(
        ax, _names(result.layers), {"trajectory length": list(result.lengths)},
        ylabel="length", log=True, kinds=ctx.kinds, labels=ctx.labels))
    if not result.converged:
        notes.append(f"lengths not converged to {result.settings['tol']:g} with "
                     f"{result.n_points} points (the budget's limit): true lengths are larger")
    return SectionOutput(result, [Figure("Trajectory length", uri, "Length of the image of "
                                         "the line between two inputs at each layer.")],
                         [rows_table("Trajectory length per layer", result.layers, ctx.labels)],
                         notes + mode_notes(result))


def _transitions_section(ctx: Context) -> SectionOutput:
    """Neuron transitions along the segment between two data points (expressivity paper
    section 2.1): exact for piecewise-linear networks, sampled otherwise."""
    s = ctx.settings
    options, notes = ctx.per_point()
    x0, x1, start = ctx.endpoints()
    options.update(start)
    limit = s.seconds("transitions")  # half of it for the exact method
    if limit is not None:
        options["max_seconds"] = max(1.0, limit / 2)
    try:
        result = transitions(ctx.model, x0, x1, method="exact", max_pieces=s.transition_pieces,
                             **options)
    except NNGaugeError as exc:
        notes.append(f"exact transitions do not apply ({exc}); sampled instead")
        evaluations = s.transition_evaluations
        options.pop("max_seconds", None)  # the evaluations bound the sampled method
        result = transitions(ctx.model, x0, x1, method="sampled",
                             n_initial=min(1025, evaluations), max_evaluations=evaluations,
                             **options)
    ctx.results["transitions"] = result
    uri = png_data_uri(lambda ax: per_layer_lines(ax, _names(result.layers),
                                                  {"transitions": list(result.per_layer)},
                                                  ylabel="neuron transitions", kinds=ctx.kinds,
                                                  labels=ctx.labels))
    return SectionOutput(result, [Figure("Neuron transitions", uri, f"{result.n_patterns} "
                                         "distinct activation patterns along the segment.")],
                         [rows_table("Transitions per layer", result.layers, ctx.labels)],
                         notes + mode_notes(result))


SECTION_BUILDERS: list[SectionBuilder] = [
    SectionBuilder.of_measure("nlc", "Nonlinearity coefficient", "nlc_profile", _nlc_section),
    SectionBuilder.of_measure("correlations", "Correlations and representation shrinkage",
                              "correlations", _correlation_section),
    SectionBuilder.of_measure("jacobian", "Jacobian norms", "jacobian_norm", _jacobian_section),
    SectionBuilder.of_measure("kernels", "Kernel conditioning", "kernel_conditioning",
                              _kernel_section),
    SectionBuilder("theory", "Infinite-width theory",
                   cite("shrinkage", "sections 2-3, appendix B"), _theory_section),
    SectionBuilder.of_measure("trajectory", "Trajectory length", "trajectory_length",
                              _trajectory_section),
    SectionBuilder.of_measure("transitions", "Neuron transitions", "transitions",
                              _transitions_section),
    SectionBuilder.of_measure("regions", "Linear regions", "regions", regions_section,
                              short("serra"), short("montufar"), short("hanin-rolnick"),
                              short("humayun")),
    SectionBuilder.of_measure("loss", "Loss surface", "hessian", loss_section,
                              catalogue()["loss_landscape"].citation,
                              short("expressivity", "Theorem 2")),
]
"""The report's sections in page order; add a :class:`SectionBuilder` to add a section (a
measure's with :meth:`SectionBuilder.of_measure`, which cites the catalogue entry's paper)."""
