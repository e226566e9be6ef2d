"""The report's "Loss surface" section (when the data has labels): the curvature of the loss
at the current weights (the Hessian's top eigenvalue by Lanczos and its trace by Hutch++ or
Hutchinson, with intervals over data batches; Yao et al., "PyHessian", IEEE BigData 2020) and
a 1-D filter-normalized slice of the loss (Li et al., "Visualizing the Loss Landscape of Neural
Nets", NeurIPS 2018, section 4) with the places where the activation patterns of the data
change on it (Raghu et al., ICML 2017, Theorem 2 read in weight space: between those places
the loss is smooth).
"""

from __future__ import annotations

import torch

from nngauge._citations import short
from nngauge._internal.adapter import ModelAdapter
from nngauge._internal.data import collect
from nngauge._internal.losses import check_labels
from nngauge._internal.options import ModelOptions
from nngauge.errors import InvalidInputError
from nngauge.measures.curvature import hessian, loss_landscape
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

SPAN = 1.0
"""The slice runs over alpha in [-SPAN, SPAN] in units of the filter-normalized direction
(alpha = 1 moves every filter by its own norm)."""


def loss_section(ctx: Context) -> SectionOutput:
    """Top Hessian eigenvalue and trace on the labelled data, and a 1-D filter-normalized
    loss slice through the current weights with the data's region changes marked."""
    s = ctx.settings
    batch = _labelled(ctx)
    data = (batch.inputs, batch.labels)
    size = -(-len(batch.labels) // s.loss_batches)  # the interval is over batches
    loss = "mse" if batch.labels.is_floating_point() else "cross_entropy"
    notes = [f"the first {len(batch.labels)} labelled samples, {loss} loss"]
    if ctx.coupled:  # batch statistics: the same batches for both
        hessian_mode, slice_mode = {"norm_mode": "train"}, {"norm_mode": "train"}
        notes.append(f"batchnorm with the statistics of each batch of {size} "
                     "samples, in the Hessian and at every slice point")
    else:
        hessian_mode = {"norm_mode": s.norm_mode}
        slice_mode = {"norm_mode": s.norm_mode if s.norm_mode == "frozen" else "eval"}
    try:
        curvature = hessian(ctx.model, data, loss=loss, top_k=1, trace=True,
                            batch_size=size, n_iter=s.hessian_steps,
                            n_probes=s.hessian_probes, per_batch=s.hessian_per_batch,
                            output=s.output,
                            generator=ctx.generator(), **hessian_mode)
        ctx.results["hessian"] = curvature
    except InvalidInputError as exc:  # e.g. an op without a second derivative in torch
        curvature = None
        notes.append(f"Hessian not measured: {exc}")
    counted = bool(ctx.activation_sites)
    if not counted:
        notes.append("no activation modules (an LSTM's gates act inside its cell): no region "
                     "changes to mark on the slice")
    slice_ = loss_landscape(ctx.model, data, loss=loss, dims=1, resolution=s.landscape_steps,
                            span=SPAN, directions="filter", count_regions=counted,
                            batch_size=size, output=s.output,
                            generator=ctx.generator(), **slice_mode)
    ctx.results["loss_landscape"] = slice_
    notes += _regions_notes(slice_) + mode_notes(curvature or slice_)
    return SectionOutput(curvature or slice_, [_slice_figure(slice_)],
                         [_table(curvature, slice_)], notes)


def _labelled(ctx: Context):
    """The first ``loss_samples`` samples with their labels; NotApplicable without labels, or
    with labels the loss cannot pair with the measured output (one label per sample for a
    model with an output per position: a language model's (batch, positions, vocabulary)),
    saying which labels it needs."""
    batch = collect(ctx.data, where="nngauge report", max_samples=ctx.settings.loss_samples,
                    require_float=False)
    if batch.labels is None:
        raise NotApplicable("the data has no labels: the loss needs (inputs, labels)")
    adapter = ModelAdapter(ctx.model, ModelOptions(output=ctx.settings.output,
                                                   norm_mode="eval"), where="the loss")
    with adapter.active(), torch.no_grad():
        output = adapter.select(adapter.call_model(adapter.prepare_raw(batch.inputs[:1])))
    try:  # one sample's output, as a view of the whole batch's shape
        check_labels(output.expand(len(batch.labels), *output.shape[1:]), batch.labels,
                     "the loss")
    except InvalidInputError as exc:
        raise NotApplicable(f"the labels do not fit the model's output: {exc}") from None
    return batch


def _curvature_rows(curvature) -> list[tuple[str, str, str]]:
    """The top eigenvalue (with the spread of the batches' own), its residual, the trace."""
    top = float(curvature.eigenvalues[0])
    ci = curvature.eigenvalues_ci
    spread = (f"of all {curvature.n_samples} samples; each batch's own: mean "
              f"{curvature.batch_eigenvalues_mean[0]:.4g}, 95% interval {ci[0][0]:.4g} .. "
              f"{ci[0][1]:.4g} over {curvature.n_batches} batches of {curvature.batch_size} "
              "(one batch's estimate is not the full data's)"
              if ci is not None else f"of all {curvature.n_samples} samples (one batch)")
    return [
        ("top Hessian eigenvalue lambda_max", format_value(top), spread),
        ("Lanczos residual (converged)",
         f"{curvature.residuals[0]:.2g} ({curvature.converged})", "||H u - lambda u||"),
        ("Hessian trace", format_value(curvature.trace),
         f"+- {curvature.trace_stderr:.3g} (standard error, {curvature.trace_method})"),
    ]


def _table(curvature, slice_) -> Table:
    """Curvature rows (when the Hessian was measured), then the slice's."""
    rows = [] if curvature is None else _curvature_rows(curvature)
    rows += [
        ("loss at the weights", format_value(slice_.center_loss), f"{slice_.settings['loss']}"),
        ("lowest loss on the slice", format_value(slice_.min_loss),
         f"at alpha = {slice_.min_coordinates[0]:.3g}"),
    ]
    if slice_.pattern_distance is not None:
        rows += [
            ("unit regions changed at alpha = -1 / +1",
             f"{slice_.pattern_distance[0]:.1%} / {slice_.pattern_distance[-1]:.1%}",
             "fraction of the (sample, unit) regions that differ from theirs at theta"),
            ("smooth piece around the weights", _interval(slice_.smooth_interval),
             "alpha range where no sample changes pattern (grid outer bound)")]
    return Table("Curvature and the loss slice", ("quantity", "value", "meaning"), tuple(rows))


def _interval(interval) -> str:
    if interval is None:
        return "None"
    return f"[{interval[0]:.3g}, {interval[1]:.3g}]"


def _regions_notes(slice_) -> list[str]:
    notes = [f"slice: {slice_.settings['resolution'][0]} points on alpha in [-{SPAN:g}, {SPAN:g}] "
             f"along one filter-normalized Gaussian direction over every weight tensor "
             f"(biases and normalization parameters fixed); {slice_.settings['n_samples']} "
             f"samples" + (f"; region changes {slice_.regions_method}"
                            if slice_.regions_method else "")]
    if slice_.regions_method and slice_.regions_method.startswith("sampled"):
        notes.append("region changes are compared between neighbouring slice points: changes "
                     "that undo each other between two points are not seen")
    return notes


def _slice_figure(slice_) -> Figure:
    def draw(axes):
        slice_.plot(ax=axes)

    return Figure("Loss along a filter-normalized direction, with the data's region changes",
                  png_data_uri(draw),
                  "Loss (blue) and accuracy (orange, dashed) at theta + alpha d, d a Gaussian "
                  f"direction normalized filter by filter ({short('li-landscape', 'section 4')}"
                  "); grey area: the fraction of the data's unit regions that differ from "
                  "theirs at theta; green: the piece around theta where no pattern of the data changes, "
                  "inside which the loss is a smooth function of alpha "
                  f"({short('expressivity', 'Theorem 2')}).")


__all__ = ["loss_section"]
