"""The report's "Linear regions" section: the partition of a plane through three data points
into the network's linear regions (Raghu et al., "On the Expressive Power of Deep Neural
Networks", ICML 2017, section 2.1, Theorem 2, figure 1), how finely the network cuts the
space near the data (Humayun et al., "Deep Networks Always Grok and Here is Why", ICML 2024),
and, for nngauge ReLU MLPs, the literature's bounds on the number of regions beside the
measured counts (Montufar et al. NeurIPS 2014, Serra et al. ICML 2018, Hanin & Rolnick ICML
2019).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from nngauge._citations import short
from nngauge.errors import BudgetExceededError, NNGaugeError
from nngauge.measures.expressivity._density import region_density
from nngauge.measures.expressivity._regions import regions
from nngauge.report._context import (
    Context,
    Figure,
    NotApplicable,
    SectionOutput,
    Table,
    format_value,
    mode_notes,
)
from nngauge.report._figures import png_data_uri
from nngauge.trajectories import plane

ZOOM = 8.0
"""The second exact attempt's box is this many times smaller (a side) around the first point."""
DENSITY_POINTS = 8
"""Data points whose neighbourhoods the density reads."""
DENSITY_DIRECTIONS = 4
"""Segments through each of them."""
DENSITY_RADIUS = 0.05
"""The segments' half-length, as a fraction of the RMS distance between the plane's points."""


def regions_section(ctx: Context) -> SectionOutput:
    """Exact regions on the plane of the first three data points (activation patterns on a
    grid where the network is not piecewise linear or has too many pieces for the budget), the
    regions per unit length near data, and the bounds for nngauge ReLU MLPs."""
    s = ctx.settings
    points, embedded = ctx.measured_points(3)
    if len(points) < 3:
        raise NotApplicable("a plane needs three data points; the data has fewer")
    per_point, notes = ctx.per_point()
    options = {key: per_point[key] for key in ("output", "norm_mode", "norm_data")}
    if s.dropout:
        notes.append("dropout off: a region is where the network is one affine map")
    try:
        through = plane(points[0], points[1], points[2])
    except NNGaugeError as exc:
        raise NotApplicable(f"the first three data points span no plane ({exc})") from None
    if embedded:
        notes.append(f"the plane lies in the output of {embedded['input_module']!r} (the "
                     "inputs are token ids), through the first three embedded samples; the "
                     "model runs on the first sample with that output replaced; distinct "
                     f"activation patterns on a {s.region_resolution} x "
                     f"{s.region_resolution} grid (the exact method traces the model from its "
                     "own input)")
        result = regions(ctx.model, through, method="grid", resolution=s.region_resolution,
                         **options, **embedded)
    else:
        result = _exact_or_grid(ctx, through, options, notes)
    if not result.layers:
        raise NotApplicable("the network has no activation modules or sites nngauge reads (an "
                            "LSTM's gates act inside its cell): its input space is one region "
                            "to the patterns measured here")
    ctx.results["regions"] = result
    out = SectionOutput(result, [_partition_figure(result, points)],
                        [_per_depth_table(ctx, result)], notes + mode_notes(result))
    density = _density(ctx, points, options, notes) if result.method == "exact" else None
    if density is not None:
        ctx.results["region_density"] = density
        out.tables.append(Table("Regions near the data", ("quantity", "value"), (
            ("linear regions per unit length", format_value(density.density)),
            ("boundaries crossed per unit length", format_value(_crossings(density))),
            ("segment half-length r", format_value(density.radius)),
            ("segments", f"{density.n_samples} points x {density.n_directions} directions"),
            (f"local complexity ({short('humayun')})", format_value(density.local_complexity)),
        )))
    bounds = _bounds_table(ctx, result)
    if bounds is not None:
        out.tables.append(bounds)
    return out


def _exact_or_grid(ctx: Context, through, options: dict[str, Any], notes: list[str]):
    """Exact regions on the box of the three points; past the piece budget, exact on a box
    :data:`ZOOM` times smaller around the first point (a quarter of the budget); else (or for networks that are not
    piecewise linear) distinct activation patterns on a grid of the first box."""
    s = ctx.settings
    try:
        return regions(ctx.model, through, max_regions=s.region_pieces, **options)
    except BudgetExceededError as exc:
        half = 1.0 / ZOOM
        try:
            result = regions(ctx.model, through, bounds=(-half, half, -half, half),
                             max_regions=max(1, s.region_pieces // 4), **options)
            notes.append(f"the box of the three points holds more regions than the budget "
                         f"({exc}); drawn exactly on the box {ZOOM:g} times smaller around the "
                         "first point")
            return result
        except BudgetExceededError:
            reason = f"more regions than the budget, also {ZOOM:g} times closer ({exc})"
    except NNGaugeError as exc:
        reason = str(exc)
    notes.append(f"exact regions do not apply ({reason}); distinct activation patterns on a "
                 f"{s.region_resolution} x {s.region_resolution} grid instead (regions "
                 "narrower than a cell are missed)")
    return regions(ctx.model, through, method="grid", resolution=s.region_resolution,
                   **options)


def _density(ctx: Context, points, options: dict[str, Any], notes: list[str]):
    """Exact regions per unit length on segments through data points, within a quarter of
    the section's seconds (None, with a note, past them)."""
    spread = (points[1:] - points[0]).flatten(1).pow(2).sum(1).mean().sqrt()
    radius = DENSITY_RADIUS * float(spread) or DENSITY_RADIUS
    limit = ctx.settings.seconds("regions")
    timed = {} if limit is None else {"max_seconds": max(1.0, limit / 4)}
    try:
        return region_density(ctx.model, ctx.inputs[:DENSITY_POINTS], radius=radius,
                              n_directions=DENSITY_DIRECTIONS, generator=ctx.generator(),
                              **timed, **options)
    except BudgetExceededError as exc:
        notes.append(f"regions near the data not counted: over a quarter of the section's "
                     f"seconds ({exc})")
        return None


def _crossings(density) -> float:
    """Region boundaries crossed per unit length: (regions on a segment - 1) / its length."""
    return float((density.regions - 1).mean()) / (2 * density.radius)


def _partition_figure(result, points) -> Figure:
    depths = [layer.depth for layer in result.layers]
    shown = sorted({depths[0], depths[len(depths) // 2], depths[-1]})

    def draw(axes):
        result.plot(depths=shown, ax=axes, points=points)

    how = ("exact: each polygon one affine map of the input (Theorem 2)"
           if result.method == "exact" else "activation patterns on a grid")
    return Figure("Linear regions on a plane through three data points",
                  png_data_uri(draw, size=(3.2 * len(shown), 3.4), panes=len(shown)),
                  f"{result.n_regions} regions in the box ({how}); panes: after the first, "
                  "a middle and the last activation site, boundaries coloured by the layer "
                  "that makes them; the three data points marked. Raghu et al. (ICML 2017), "
                  "figure 1.")


def _per_depth_table(ctx: Context, result) -> Table:
    return Table("Regions after each layer", ("layer", "kind", "units", "regions"), tuple(
        (ctx.labels.get(layer.name, layer.name), layer.kind, str(layer.units),
         str(layer.regions)) for layer in result.layers))


def _bounds_table(ctx: Context, result) -> Optional[Table]:
    """The bounds on the number of regions of an nngauge ReLU MLP's architecture, beside the
    measured counts; None for other models."""
    from nngauge.theory import (
        expected_regions_per_length,
        gaussian_region_constants,
        max_regions_lower_bound,
        max_regions_upper_bound,
    )

    cfg = ctx.config
    if cfg is None or cfg.activation != "relu" or cfg.norm is not None or cfg.skip is not None:
        return None
    widths = [cfg.width] * (cfg.depth - 1)
    if not widths:
        return None
    upper = max_regions_upper_bound(cfg.d_in, widths).bound
    lower = max_regions_lower_bound(cfg.d_in, widths).bound
    rows = [("regions on the plane (measured)", str(result.n_regions),
             short("expressivity", "Theorem 2")),
            ("most regions of the architecture in R^d (upper bound)", _big(upper),
             short("serra", "Theorem 1")),
            ("regions some weights achieve (lower bound)", _big(lower),
             short("montufar", "Theorem 4")),]
    density = ctx.results.get("region_density")
    if cfg.init == "gaussian" and cfg.bias_std > 0 and density is not None:
        constants = gaussian_region_constants(len(widths), sigma_w=cfg.sigma_w * cfg.scale,
                                              sigma_b=cfg.bias_std * cfg.scale)
        expected = expected_regions_per_length(widths, c_grad=constants.c_grad_per_layer,
                                               c_bias=constants.c_bias)
        rows += [("boundaries crossed per unit length near data (measured)",
                  format_value(_crossings(density)), "this report"),
                 ("expected at initialization (upper bound)",
                  format_value(expected.crossings_per_length),
                  short("hanin-rolnick", "Theorem 1"))]
    return Table("Bounds on the number of regions", ("quantity", "value", "source"),
                 tuple(rows))


def _big(value: int) -> str:
    """An exact integer, or its power of ten when it has more than 12 digits."""
    return str(value) if value < 10**12 else f"10^{math.log10(value):.1f}"
