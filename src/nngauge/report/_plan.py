"""How much each report section measures, chosen from what the model costs to run.

A report on a 10-layer MLP can afford every sample and every layer; on a ResNet-18 or a ViT
the same settings take many minutes. Before the sections run, the report times one forward
and backward pass of the model on a few samples (after a warm-up pass) and gives each section
a share of a time budget (``ReportSettings.budget``, seconds): the NLC's samples, the
correlation and Jacobian samples, the trajectory's points, the sampled transitions'
evaluations. Deep networks (more than 50 layers of the kinds a section reads) are measured
at the outputs of their blocks (residual blocks, transformer layers) plus the layers outside
blocks. Every choice is written down, with its reason, in the settings the report prints.

The cost model is coarse on purpose: it is linear in samples, in passes and in measured
layers; an NLC sample counts as :data:`NLC_PASSES` forward and backward passes, a Lanczos
step of a layer's Jacobian (a forward-mode and a backward product through the layer's prefix,
half the network on average) as one, a sampled-transitions evaluation as
:data:`SAMPLED_PASSES`, an exact linear piece (of a segment or of a plane) as five further
samples of a batch (the per-pass overhead, timed on two samples, is shared by a chunk of
pieces), a grid cell of the regions' picture as four, a Hessian-vector product as ten
(per-pass overhead included), a point of the loss slice as one.

The budget is shared in two steps (:func:`allot`). Each section has a least amount of work
(a few samples, ten Lanczos steps, sixteen labelled samples...: :func:`least_seconds`), below
which its numbers mean little. If the least work of every section fits the budget, each
section gets its least work plus its share (:data:`SHARES`) of the rest; if not, the sections
with the costliest least work are given up first, each skipped with the seconds it needs and
the budget that would run it, until the rest fits. The sizes are then chosen within each
section's seconds, and the sections that bound their own time (exact transitions and regions)
are given those seconds as a limit. While the report runs, a section is skipped when the
sections before it have overrun so far that its seconds no longer fit within
:data:`OVERRUN` times the budget.

Before anything else, :func:`check_affordable` times one pass of two samples and refuses a
report on which not even the cheapest section's least work fits :data:`REFUSE_FACTOR` times
the budget (:class:`~nngauge.errors.BudgetExceededError`, with the budget that would run it),
instead of spending minutes finding the layers of a network it cannot measure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from nngauge._internal.threads import one_thread
from nngauge.errors import BudgetExceededError, invalid

SHARES = {"nlc": 0.2, "correlations": 0.1, "jacobian": 0.2, "trajectory": 0.15,
          "transitions": 0.15, "regions": 0.1, "loss": 0.1}
"""Fraction of the budget each section may spend (the kernel and theory sections are cheap)."""
KEPT_LONGEST = ("nlc",)
"""Sections given up only when nothing else is left to give up (or when they do not fit the
budget alone): the NLC, whose verdicts open the report."""
TIMING_SAMPLES = 16
"""Samples of the timed forward and backward pass."""
JACOBIAN_POSITIONS = 12
"""Most layers the Jacobian section measures (a Lanczos run per layer)."""
MIN_JACOBIAN_POSITIONS = 5
"""Fewest layers the Jacobian section keeps when the budget is short: the output and four
weight layers, the read-out and three hidden ones (the growth verdict reads the hidden ones)."""
LANCZOS_STEP_PASSES = 1.0
"""A Lanczos step's cost at one layer, in forward and backward passes of the whole network
(a forward-mode and a backward product through the layer's prefix; measured 0.7 on a
ResNet-18 at 3 x 32 x 32 with batch statistics, warm starts included)."""
MIN_ITERATIONS = 10
"""Fewest Lanczos steps the Jacobian section is given when the budget is short."""
LOSS_MIN_SAMPLES = 16
"""Fewest labelled samples the loss-surface section is given when the budget is short (four
batches of four: a ViT-tiny's least curvature work at 32 samples took 45 s)."""
LOSS_BATCHES = 4
"""Batches the loss-surface section splits its samples into (the Hessian's interval)."""
PRODUCT_PASSES = 10
"""A Hessian-vector product's cost in forward and backward passes (see :func:`_loss_plan`)."""
CAPTURE_ELEMENTS = 2**26
"""Largest number of values the correlation section may hold (samples x layer outputs)."""
CODE_ELEMENTS = 2**30
"""Largest number of activation codes (one byte each) the exact regions of a plane may hold
(pieces x the layer outputs a sample records, a proxy for its activation units: a ResNet-50
at 224 x 224 records 6 million values a sample at its block outputs and has about 10 million
ReLU units)."""
SAMPLED_PASSES = 1.5
"""A sampled-transitions evaluation's cost in forward and backward passes of one sample (every
activation recorded and hashed, small batches: measured 1.4 on a ResNet-50 at 224 x 224)."""
NLC_PASSES = 4.0
"""An NLC sample's cost in forward and backward passes: a forward-mode probe with every
measured layer's statistics (measured 3.7 on a ResNet-50 at 224 x 224, batch 32, 20 layers;
1.7 for the output alone)."""
LOSS_MIN_STEPS = 8
"""Fewest Lanczos steps the loss-surface section is given when the budget is short."""
LOSS_MIN_PROBES = 6
"""Fewest Hessian-trace products the loss-surface section is given when the budget is short."""
LOSS_MIN_POINTS = 21
"""Fewest points of the loss slice when the budget is short (odd: alpha = 0 is one)."""
MIN_CORRELATION_SAMPLES = 16
"""Fewest samples of the correlation section."""
MIN_JACOBIAN_SAMPLES = 4
"""Fewest samples of the Jacobian section without batch statistics."""
MIN_TRAJECTORY_POINTS = 65
"""Fewest points of the trajectory section (2^6 + 1)."""
MIN_EVALUATIONS = 256
"""Fewest evaluations of the sampled transitions."""
MIN_TRANSITION_PIECES = 128
"""Fewest pieces the exact transitions may follow."""
MIN_REGION_PIECES = 64
"""Fewest pieces the exact regions of a plane may hold."""
MIN_RESOLUTION = 16
"""Fewest cells per side of the regions' grid."""
REFUSE_FACTOR = 10.0
"""A report whose cheapest section's least work (:func:`least_seconds`) is estimated at more
than this many times its budget is refused rather than run."""
OVERRUN = 1.5
"""While the report runs, a section whose seconds would end past this many times the budget
(the sections before it having overrun their estimates) is skipped, saying so."""


@dataclass(frozen=True)
class Cost:
    """Seconds per sample of one forward and backward pass of the model, the seconds each
    further sample of a batch adds (without the per-pass overhead of hooks and Python, which
    dominates on small networks), and the number of values one sample's recorded layer
    outputs hold."""

    per_sample: float
    recorded_per_sample: int
    marginal_per_sample: float


TIMING_REPEATS = 3
"""Timed passes of each size; the fastest counts (a single pass on a busy machine can take
several times its cost, and the difference of two such times is the per-sample cost)."""


def measure_cost(adapter, raw: torch.Tensor, sites) -> Cost:
    """Time a forward and backward pass on ``TIMING_SAMPLES`` raw samples (after a warm-up)
    and on two samples, the fastest of :data:`TIMING_REPEATS` each, taken in turn, inside
    ``adapter.active()``."""
    raw = raw[:TIMING_SAMPLES]
    n = len(raw)
    _timed_pass(adapter, raw, sites)
    full, pairs = [], []
    for _ in range(TIMING_REPEATS):
        full.append(_timed_pass(adapter, raw, sites))
        pairs.append(_timed_pass(adapter, raw[:2], sites)[0])  # two: batchnorm in train mode
    seconds, values = min(full, key=lambda timed: timed[0])
    pair = min(pairs)
    recorded = sum(v[0].numel() for v in values.values() if v is not None)
    per_sample = seconds / n
    marginal = (seconds - pair) / (n - 2) if n > 2 else per_sample
    return Cost(per_sample, recorded, min(per_sample, max(marginal, per_sample / 100)))


def _timed_pass(adapter, batch: torch.Tensor, sites) -> tuple[float, dict]:
    """Seconds of a forward and backward pass on ``batch`` recording ``sites``, and the
    recorded values."""
    start = time.perf_counter()
    x = adapter.measured(batch, requires_grad=True)
    y, values = adapter.run(x, sites, raw=batch)
    if y.requires_grad:
        torch.autograd.grad(y.float().pow(2).sum(), x)
        return time.perf_counter() - start, values
    # no gradient path (the sections will say so): count a backward as two forwards
    return 3 * (time.perf_counter() - start), values


def least_seconds(settings: Any, cost: Cost, keys: Sequence[str], *, n_data: int,
                  n_jacobian: int, labelled: bool, coupled: bool) -> dict[str, float]:
    """Seconds of each section's least work (the sizes the plan never goes below), by
    section, for the sections ``keys`` that run the model (the theory section does not): the
    NLC's first batch (:data:`NLC_PASSES` a sample), the fewest correlation samples, the
    Jacobian's :data:`MIN_ITERATIONS` Lanczos steps at :data:`MIN_JACOBIAN_POSITIONS` layers
    on its fewest samples (the whole batch with batch statistics), the kernels' samples, the
    fewest trajectory points, sampled-transition evaluations and exact pieces, the smallest
    grid and fewest exact pieces of regions (the ``MIN_*`` constants, the floors of
    :func:`plan`), and on labelled data the loss surface at its least (:func:`_loss_plan`)."""
    c, piece = max(cost.per_sample, 1e-9), _piece(cost)
    least = {
        "nlc": NLC_PASSES * min(n_data, settings.batch_size) * (settings.n_batches or 1) * c,
        "correlations": min(settings.correlation_samples, MIN_CORRELATION_SAMPLES) * c,
        "jacobian": ((settings.jacobian_samples if coupled
                      else min(MIN_JACOBIAN_SAMPLES, settings.jacobian_samples))
                     * min(max(1, n_jacobian), MIN_JACOBIAN_POSITIONS)
                     * min(settings.power_iterations, MIN_ITERATIONS) * LANCZOS_STEP_PASSES * c),
        "kernels": settings.kernel_samples * c,
        "trajectory": min(MIN_TRAJECTORY_POINTS, settings.trajectory_points) * c,
        "transitions": (MIN_EVALUATIONS * SAMPLED_PASSES * c
                        + MIN_TRANSITION_PIECES * piece),
        "regions": MIN_RESOLUTION**2 * _cell(cost) + MIN_REGION_PIECES * piece,
        "loss": _loss_seconds(cost, LOSS_MIN_SAMPLES, steps=LOSS_MIN_STEPS,
                              probes=LOSS_MIN_PROBES,
                              points=min(LOSS_MIN_POINTS, settings.landscape_steps),
                              per_batch=False, coupled=coupled) if labelled else 0.0,
    }
    return {key: least[key] for key in keys if key in least}


def allot(least: dict[str, float], budget: float) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds for each section, and the sections given up with the budget that would run
    each.

    While the least work of the sections left exceeds ``budget``, the section with the
    costliest least work is given up, the NLC (the report's first verdict) only when it is
    the last one left or does not fit the budget on its own. Each section left gets its least
    work plus its share (:data:`SHARES`) of the seconds that remain. A section given up runs
    under a budget of at least the least work of itself and of every section no costlier than
    it (and of the NLC).
    """
    running = dict(least)
    given_up: dict[str, int] = {}
    while running and sum(running.values()) > budget:
        droppable = [k for k in running if k not in KEPT_LONGEST or least[k] > budget
                     ] or list(running)
        key = max(droppable, key=lambda k: (running[k], list(least).index(k)))
        running.pop(key)
        given_up[key] = math.ceil(sum(v for k, v in least.items()
                                      if v <= least[key] or k in KEPT_LONGEST))
    shares = {key: SHARES.get(key, 0.0) for key in running}
    spare = budget - sum(running.values())
    total = sum(shares.values())
    return ({key: running[key] + (spare * shares[key] / total if total else 0.0)
             for key in running}, given_up)


def check_affordable(adapter, raw: torch.Tensor, settings: Any, keys: Sequence[str],
                     labelled: bool, where: str) -> float:
    """Refuse a report on which not even the cheapest section's least work
    (:func:`least_seconds`) fits :data:`REFUSE_FACTOR` times its budget, inside
    ``adapter.active()`` after a first (warm-up) forward pass, from the seconds of a forward
    and backward pass of two samples (the faster of two, on one thread): the check that runs
    before the work that grows with depth (finding the sites, timing the profile).

    One thread: a pass of two samples gains little from more, and on a busy machine threads
    waiting for each other make the time of a small multi-threaded pass erratic (measured on
    two cores under load: 100 times slower, for seconds, on a small convolutional network),
    which would refuse reports that run in seconds.

    Returns:
        The least work of the cheapest section, seconds (0 when no section runs the model).

    Raises:
        BudgetExceededError: the estimate and the budget that would run it.
    """
    with one_thread():
        pass_seconds = min(_timed_pass(adapter, raw[:2], ())[0] for _ in range(2))
    per_sample = pass_seconds / 2
    least = least_seconds(settings, Cost(per_sample, 0, per_sample), keys, n_data=len(raw),
                          n_jacobian=MIN_JACOBIAN_POSITIONS, labelled=labelled, coupled=False)
    if not least:
        return 0.0
    cheapest = min(least, key=least.get)
    if least[cheapest] > REFUSE_FACTOR * settings.budget:
        needed = math.ceil(least[cheapest])
        raise invalid(where, f"a report of about its budget, {settings.budget:g} s (at most "
                      f"{REFUSE_FACTOR:g} times over)",
                      f"at least {least[cheapest]:.0f} s on this model for its cheapest "
                      f"section, {cheapest!r} (a forward and backward pass of two samples "
                      f"takes {pass_seconds:.3g} s)",
                      f"to run it anyway, give it the time: budget={needed} (nngauge report "
                      f"--budget {needed}); or measure a shallower or narrower network",
                      error=BudgetExceededError)
    return least[cheapest]


def _piece(cost: Cost) -> float:
    """Seconds of an exact linear piece of a segment or of a plane: measured on ResNets and
    MLPs, about 5 forward and backward passes of a further sample in a batch (reference rows
    through every op, cuts, max-pooling refinement, checks); the per-pass overhead is shared
    by a chunk of pieces."""
    return 5 * max(cost.marginal_per_sample, 1e-9)


def _cell(cost: Cost) -> float:
    """Seconds of a grid cell of the regions' picture: about 4 further samples (measured on
    ViT and GPT: every activation site recorded and hashed, then the cells of the distinct
    patterns run again to keep them), and at least one sample's whole pass on small
    networks, where the recording and grouping dominate (measured 1.3 passes a cell on a
    depth-10 width-100 MLP: a 256 x 256 grid priced at 0.5 s took 17 s)."""
    return max(4 * cost.marginal_per_sample, cost.per_sample, 1e-9)


def power_of_two_plus_one(limit: float, low: int, high: int) -> int:
    """The largest 2^k + 1 within [low, high] not above ``limit`` (``low`` if none)."""
    best = low
    k = 1
    while 2**k + 1 <= high:
        if 2**k + 1 <= limit and 2**k + 1 >= low:
            best = 2**k + 1
        k += 1
    return best


def plan(settings: Any, cost: Cost, *, n_data: int, n_sites: int, n_jacobian: int,
         grouped: bool, coupled: bool = False, keys: Sequence[str] = tuple(SHARES) + ("kernels",),
         labelled: bool = True) -> tuple[dict[str, Any], list[str]]:
    """The section sizes that fit ``settings.budget`` and why (sentences for the page), for
    the sections ``keys``: each section's seconds from :func:`allot`, then its sizes within
    them. ``coupled``: the model runs on batch statistics, so the Jacobian's batch is never
    cut (its norms would change with it: the demo's growth read 427 on 4 samples, 13 on 50).

    Returns:
        (changes to apply to the settings, the choices in words). The changes include
        ``allotted`` (section, seconds) and ``given_up`` (section, why), the sections skipped
        because their least work does not fit the budget.
    """
    budget = settings.budget
    c = max(cost.per_sample, 1e-7)
    least = least_seconds(settings, cost, keys, n_data=n_data, n_jacobian=n_jacobian,
                          labelled=labelled, coupled=coupled)
    seconds, given_up = allot(least, budget)
    changes: dict[str, Any] = {
        "allotted": tuple(seconds.items()),
        "given_up": tuple((key, f"its least work takes about {least[key]:.3g} s on this model; "
                           f"the budget of {budget:g} s does not hold it beside the cheaper "
                           f"sections (--budget {needed} / budget={needed} runs it)")
                          for key, needed in given_up.items())}
    choices = [f"one forward and backward pass costs {1e3 * c:.3g} ms per sample "
               f"(timed on {TIMING_SAMPLES} samples; {1e3 * cost.marginal_per_sample:.3g} ms "
               f"per further sample); budget {budget:g} s: "
               + ", ".join(f"{key} {value:.3g} s" for key, value in seconds.items())
               + "".join(f"; {key} skipped (needs --budget {needed})"
                         for key, needed in given_up.items())]
    if grouped:
        choices.append(f"{n_sites} layers measured: the outputs of the network's blocks and "
                       "the layers outside blocks (more than 50 layers in all)")

    def has(key: str) -> bool:
        return key in seconds

    if settings.n_batches is None and has("nlc"):
        affordable = seconds["nlc"] / (NLC_PASSES * c)
        batches = max(1, min(math.ceil(n_data / settings.batch_size),
                             int(affordable // settings.batch_size)))
        changes["n_batches"] = batches
        choices.append(f"NLC: {batches} batch(es) of {settings.batch_size} "
                       f"({min(n_data, batches * settings.batch_size)} samples), one "
                       "forward-mode probe each")
    if has("correlations"):
        memory = CAPTURE_ELEMENTS // max(cost.recorded_per_sample, 1)
        correlations = int(min(settings.correlation_samples, memory,
                               max(MIN_CORRELATION_SAMPLES, seconds["correlations"] / c)))
        changes["correlation_samples"] = max(2, correlations)
        choices.append(f"correlations: {changes['correlation_samples']} samples")
    if has("jacobian"):
        jacobian, iterations, positions = _jacobian_plan(settings, seconds["jacobian"], c,
                                                         n_jacobian, coupled)
        if iterations != settings.power_iterations:
            changes["power_iterations"] = iterations
        changes["jacobian_samples"] = jacobian
        changes["jacobian_positions"] = positions
        choices.append(f"Jacobian norms: {jacobian} samples at {positions} layers"
                       + (f" (of {n_jacobian}, evenly spaced)" if positions < n_jacobian else "")
                       + f", at most {iterations} Lanczos steps to relative error "
                       f"{settings.jacobian_tol:g}" + (
                           " (batch statistics: the norms depend on the batch size, so it is "
                           "kept and the iterations, then the layers, are cut instead)"
                           if coupled else ""))
    if has("trajectory"):
        points = power_of_two_plus_one(seconds["trajectory"] / c, MIN_TRAJECTORY_POINTS,
                                       settings.trajectory_points)
        changes["trajectory_points"] = points
        choices.append(f"trajectory length: at most {points} points")
    if has("transitions"):  # half the seconds for each method: the exact one first
        half = seconds["transitions"] / 2
        evaluations = int(min(settings.transition_evaluations,
                              max(MIN_EVALUATIONS, half / (SAMPLED_PASSES * c))))
        changes["transition_evaluations"] = evaluations
        pieces = int(min(settings.transition_pieces,
                         max(MIN_TRANSITION_PIECES, half / _piece(cost))))
        changes["transition_pieces"] = pieces
        choices.append(f"transitions: exact up to {pieces} linear pieces (at most {half:.3g} s),"
                       f" else sampled with at most {evaluations} evaluations")
    if has("regions"):  # a plane's piece carries a polygon as a segment's piece does
        share = seconds["regions"]
        memory = CODE_ELEMENTS // max(cost.recorded_per_sample, 1)
        changes["region_pieces"] = int(min(settings.region_pieces,
                                           max(MIN_REGION_PIECES, memory),
                                           max(MIN_REGION_PIECES, share / _piece(cost))))
        changes["region_resolution"] = int(min(settings.region_resolution,
                                               max(MIN_RESOLUTION,
                                                   math.sqrt(share / _cell(cost)))))
        choices.append(f"linear regions: exact up to {changes['region_pieces']} pieces, else a "
                       f"{changes['region_resolution']} x {changes['region_resolution']} grid")
    if has("loss") and labelled:
        changes.update(_loss_plan(settings, cost, seconds["loss"], coupled))
        choices.append(f"loss surface (labelled data only): {changes['loss_samples']} samples "
                       f"in {changes['loss_batches']} batch(es), {changes['hessian_steps']} "
                       f"Lanczos steps, {changes['hessian_probes']} trace products, a slice of "
                       f"{changes['landscape_steps']} points" + (
                           "" if changes["hessian_per_batch"] else
                           "; no per-batch top eigenvalues (their interval would cost as much "
                           "as the top eigenvalue itself)"))
    return changes, choices


def _jacobian_plan(settings: Any, share: float, c: float, n_jacobian: int, coupled: bool
                   ) -> tuple[int, int, int]:
    """Samples, Lanczos steps and layers (the output included) of the Jacobian section
    within ``share`` seconds. Without batch statistics the samples are cut first (to at least
    :data:`MIN_JACOBIAN_SAMPLES`); with them the batch is kept (the norms depend on its
    size). Then the steps are cut to :data:`MIN_ITERATIONS`, then the layers to
    :data:`MIN_JACOBIAN_POSITIONS`."""
    iterations, positions = settings.power_iterations, max(1, n_jacobian)
    per_sample = positions * iterations * LANCZOS_STEP_PASSES * c
    if coupled:
        jacobian = settings.jacobian_samples
    else:
        jacobian = int(min(settings.jacobian_samples,
                           max(MIN_JACOBIAN_SAMPLES, share / per_sample)))
    if jacobian * per_sample > share:  # fewer iterations, then
        iterations = max(min(iterations, MIN_ITERATIONS),
                         int(iterations * share / (jacobian * per_sample)))
    at_least = jacobian * positions * iterations * LANCZOS_STEP_PASSES * c
    if at_least > share:  # fewer layers, then
        positions = min(positions, max(MIN_JACOBIAN_POSITIONS,
                                       int(positions * share / at_least)))
    return jacobian, iterations, positions


def _loss_seconds(cost: Cost, samples: int, *, steps: int, probes: int, points: int,
                  per_batch: bool, coupled: bool) -> float:
    """Seconds of the loss-surface section: a curvature product runs every batch
    (:data:`LOSS_BATCHES`, or one batch without the per-batch runs and without batch
    statistics) and costs about :data:`PRODUCT_PASSES` passes of its samples plus as many
    per-pass overheads (measured on ResNets: a double backward through convolutions and
    batchnorm); Lanczos runs on all samples and, for the interval (``per_batch``), again on
    each batch; a point of the slice is one pass."""
    overhead = max(cost.per_sample - cost.marginal_per_sample, 0.0) * TIMING_SAMPLES
    batches = LOSS_BATCHES if per_batch or coupled else 1
    passes = ((2 if per_batch else 1) * steps + probes) * PRODUCT_PASSES + points
    return passes * (batches * overhead + samples * cost.marginal_per_sample)


def _loss_plan(settings: Any, cost: Cost, share: float, coupled: bool = False
               ) -> dict[str, Any]:
    """Samples, Lanczos steps, trace products, slice points and whether each batch gets its
    own top eigenvalue (the interval over batches), within ``share`` seconds
    (:func:`_loss_seconds`). Past the share at the fewest samples
    (:data:`LOSS_MIN_SAMPLES`), steps and products shrink together (to at least
    :data:`LOSS_MIN_STEPS` and :data:`LOSS_MIN_PROBES`); past it still, the per-batch runs go
    (the top eigenvalue of all samples stays) and, without batch statistics (``coupled``
    False), the samples run as one batch (saving the per-pass overhead of the others), then
    the slice shrinks to :data:`LOSS_MIN_POINTS` points."""
    steps, probes = settings.hessian_steps, settings.hessian_probes
    points, per_batch = settings.landscape_steps, True

    def seconds(samples: int) -> float:
        return _loss_seconds(cost, samples, steps=steps, probes=probes, points=points,
                             per_batch=per_batch, coupled=coupled)

    def batches() -> int:
        return LOSS_BATCHES if per_batch or coupled else 1

    fewest = seconds(LOSS_MIN_SAMPLES)
    if fewest <= share:
        more = int((share - fewest) / max(seconds(1) - seconds(0), 1e-12))
        return {"loss_samples": int(min(settings.loss_samples, LOSS_MIN_SAMPLES + more)),
                "hessian_steps": steps, "hessian_probes": probes,
                "hessian_per_batch": per_batch, "landscape_steps": points,
                "loss_batches": batches()}
    unit = fewest / (((2 if per_batch else 1) * steps + probes) * PRODUCT_PASSES + points)
    shrink = max(share / unit - points, 0.0) / (fewest / unit - points)  # the products' part
    steps = max(LOSS_MIN_STEPS, int(steps * shrink))
    probes = max(LOSS_MIN_PROBES, int(probes * shrink))
    if seconds(LOSS_MIN_SAMPLES) > share:
        per_batch = False
    if seconds(LOSS_MIN_SAMPLES) > share:
        points = min(points, LOSS_MIN_POINTS)
    return {"loss_samples": LOSS_MIN_SAMPLES, "hessian_steps": steps, "hessian_probes": probes,
            "hessian_per_batch": per_batch, "landscape_steps": points,
            "loss_batches": batches()}
