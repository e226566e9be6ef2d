"""The piecewise-linear engine: the exact linear pieces of a network on a slice of input space
(Raghu, Poole, Kleinberg, Ganguli and Sohl-Dickstein, "On the Expressive Power of Deep Neural
Networks", ICML 2017, section 2.1: transitions, activation patterns, Theorem 2, Corollary 1).

A *slice* of dimension k maps slice coordinates s in R^k affinely into input space: a segment
x(t) = (1 - t) a + t b, t in [0, 1] (a polyline is one slice per segment), or a plane. A network
of affine maps, piecewise-linear activations and max pooling is piecewise affine on a slice: on
every *piece* (an interval, a convex polygon) each node v of its graph is affine in s,

    v(s) = v_0 + sum_i s_i (v_i - v_0),

where v_0, ..., v_k are its values at the slice's k + 1 *reference points* (1-D: t = 0, t = 1;
2-D: (0, 0), (1, 0), (0, 1)), the extrapolation of the piece's affine map. Every piece carries
these reference values for every live node; those of the input are the slice's anchors.

:class:`PiecewiseEngine` walks the ops of the model's ``torch.fx`` graph
(:mod:`nngauge._internal.graph`) in topological order, each op evaluated once for all pieces of
a chunk as one batch of shape (pieces * (k + 1), ...):

- an affine op maps the reference values of an affine function to those of its image
  (A v(s) + c has reference values A v_i + c), so it is evaluated on the batch as it is: a
  Linear is one batched matmul for all pieces (over the input features nonzero on some piece:
  after a ReLU about half the units are off throughout a chunk of consecutive pieces);
- at a piecewise-linear activation phi with breakpoints c_1 < ... < c_r, the geometry cuts
  every piece wherever a unit's pre-activation h_u(s) meets a c_j strictly inside it
  (crossings closer than ``merge_tol`` merge and are counted as near-coincident); children
  inherit their parent's reference values (no interpolation). Each unit's region
  r = #{j : h_u > c_j}, read at the piece's interior, selects the linear branch
  phi(h) = a_r h + b_r, applied to the reference values (phi itself never is: they may lie
  outside the piece). The (a_r, b_r) come from phi evaluated at two points inside each region
  on a tensor shaped like one sample, so per-channel PReLU slopes are read as well;
- at a max pooling y_o = max_{i in window(o)} x_i, pieces are cut where an entry of a window
  meets the entry i* maximal at the piece's interior, x_i(s) = x_{i*}(s), until every window's
  arg-max is constant on every piece; y_o is then the arg-max entry's reference values. The
  arg-max index is the site's code (a change of arg-max is a boundary; a cut where the
  arg-max does not change leaves two pieces with equal codes).

Regions and codes are those of :mod:`nngauge._internal.patterns`. Pieces are independent: when
a cut yields more pieces than a chunk holds (:data:`MAX_ELEMENTS`), the rest of the graph runs
chunk by chunk, depth first, so final pieces stream out in slice order (:class:`Chunk`) and
memory stays bounded. The slice's geometry is isolated in a :class:`Geometry` (``n_refs``,
``slice_index``, ``len``, ``take``, ``interior``, ``sizes``, ``cut``): the 1-D
:class:`Intervals` (a polyline's segments) and the 2-D :class:`Polygons` (convex polygons in a
plane's coordinates, cut along the lines where affine functions meet their levels: Theorem 2's
convex polytopes); the propagation is the same for both.

The package: :mod:`~nngauge._internal.piecewise.geometry` (the protocol, intervals, cuts),
:mod:`~nngauge._internal.piecewise.polygons` (the 2-D geometry),
:mod:`~nngauge._internal.piecewise.rules` (where pieces are cut and how each site acts on them)
and :mod:`~nngauge._internal.piecewise.engine` (the propagation); the names below are
re-exported here.
"""

from __future__ import annotations

from nngauge._internal.piecewise.engine import (
                                                MAX_ELEMENTS,
                                                Chunk,
                                                EngineReport,
                                                PiecewiseEngine,
                                                WeightLine,
                                                float64_copy,
)
from nngauge._internal.piecewise.geometry import (
                                                Cut,
                                                Geometry,
                                                Intervals,
                                                PieceLimit,
                                                polyline_slices,
)
from nngauge._internal.piecewise.polygons import Polygons, plane_slice, plane_weights
from nngauge._internal.piecewise.rules import EngineSite, combine

__all__ = ["Chunk", "Cut", "EngineReport", "EngineSite", "Geometry", "Intervals",
           "MAX_ELEMENTS", "PieceLimit", "PiecewiseEngine", "Polygons", "WeightLine", "combine",
           "float64_copy", "plane_slice", "plane_weights", "polyline_slices"]
