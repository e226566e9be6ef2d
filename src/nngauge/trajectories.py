"""Input trajectories x(t), t in [0, 1] (Raghu et al. 2017, section 2), and input planes.

- :func:`line`: x(t) = (1 - t) x0 + t x1, the affine trajectory of Corollary 1;
- :func:`arc`: x(t) = cos(pi t / 2) x0 + sin(pi t / 2) x1, the circular trajectory of the
  paper's figures (a quarter great circle when x0 and x1 are orthogonal of equal norm);
- :func:`through`: the piecewise-linear path through data points, as trajectory
  regularization (section 3) interpolates between inputs;
- :func:`as_trajectory`: a user tensor of points (n, ...), read as the polyline through them;
- :func:`plane`: the 2-D slice x(u, v) = x0 + u (x1 - x0) + v (x2 - x0) through three inputs,
  on which figure 1 draws a network's linear regions (Theorem 2).

Inputs may have any shape (vectors, images): points have shape (n, *x0.shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from nngauge._constraints import Instance, Integer, constrained
from nngauge.data._checks import require_representable
from nngauge.errors import invalid

Kind = Literal["line", "arc", "through", "points"]

__all__ = ["Plane", "Trajectory", "arc", "as_trajectory", "line", "plane", "polyline_length",
           "through"]


@dataclass(frozen=True)
class Trajectory:
    """Points of a trajectory x(t) at parameters t.

    Attributes:
        points: (n, ...) tensor, x(t_i) for each t_i.
        t: (n,) float64 tensor of increasing parameters in [0, 1].
        kind: "line", "arc", "through" or "points" (a user tensor).
        anchors: the defining points: (x0, x1) for line and arc, the data points for
            through / points, shape (m, ...).
    """

    points: torch.Tensor = field(repr=False)
    t: torch.Tensor = field(repr=False)
    kind: Kind
    anchors: torch.Tensor = field(repr=False)

    def __len__(self) -> int:
        return len(self.points)

    @property
    def n_points(self) -> int:
        return len(self.points)

    def at(self, t: torch.Tensor) -> torch.Tensor:
        """x(t) (len(t), ...) at any parameters t in [0, 1], by the trajectory's formula."""
        return evaluate(self.kind, self.anchors, t)

    def refine(self) -> "Trajectory":
        """The same trajectory with every interval halved (2n - 1 points)."""
        return _build(self.kind, self.anchors, 2 * (len(self) - 1) + 1)

    def polyline(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(vertices, t) of the piecewise-linear path the exact transition count follows:
        the segment (x0, x1) for a line, the data points for through / points, and the n
        points themselves for an arc (a polygon inscribed in the arc)."""
        if self.kind == "line":
            return self.anchors, torch.tensor([0.0, 1.0], dtype=torch.float64)
        if self.kind == "arc":
            return self.points, self.t
        return self.anchors, _anchor_times(len(self.anchors))


@constrained(n=Integer(2))
def line(x0: Any, x1: Any, n: int = 1000) -> Trajectory:
    """The segment x(t) = (1 - t) x0 + t x1 at n equally spaced t in [0, 1].

    Args:
        x0, x1: endpoints of the same shape (any shape; tensors or arrays).
        n: number of points (>= 2).

    Returns:
        A :class:`Trajectory` with points of shape (n, *x0.shape).

    Example:
        >>> import torch
        >>> traj = line(torch.zeros(3), torch.ones(3), 5)
        >>> traj.points[2].tolist(), traj.kind
        ([0.5, 0.5, 0.5], 'line')
    """
    return _build("line", _endpoints(x0, x1, "line()"), int(n))


@constrained(n=Integer(2))
def arc(x0: Any, x1: Any, n: int = 1000) -> Trajectory:
    """The arc x(t) = cos(pi t / 2) x0 + sin(pi t / 2) x1 at n equally spaced t in [0, 1]
    (Raghu et al. 2017, figures 2 and 13: a circular trajectory between two inputs).

    Args:
        x0, x1: endpoints of the same shape, neither all zeros (the arc would be a segment).
        n: number of points (>= 2).

    Example:
        >>> import torch
        >>> traj = arc(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), 3)
        >>> [round(v, 4) for v in traj.points[1].tolist()]
        [0.7071, 0.7071]
    """
    anchors = _endpoints(x0, x1, "arc()")
    zero = [name for name, a in zip(("x0", "x1"), anchors) if not bool(a.any())]
    if zero:
        raise invalid("arc()", "nonzero endpoints (the arc turns about the origin from x0 to "
                      "x1)", f"{' and '.join(zero)} all zeros, which makes the arc a straight "
                      "segment", "pass nonzero inputs, or line(x0, x1) for a segment")
    return _build("arc", anchors, int(n))


@constrained(n=Integer(2))
def through(points: Any, n: int = 1000) -> Trajectory:
    """The piecewise-linear path through data points p_0, ..., p_{m-1}, p_j at t = j / (m - 1)
    (trajectory regularization, Raghu et al. 2017 section 3, interpolates between inputs).

    ``n`` is rounded up to 1 + (m - 1) ceil((n - 1) / (m - 1)) so that every data point lies
    on the equally spaced grid of t.

    Args:
        points: (m, ...) data points, m >= 2, consecutive points distinct.
        n: number of points (>= 2; rounded up as above, so at least m).

    Example:
        >>> import torch
        >>> traj = through(torch.tensor([[0.0], [1.0], [3.0]]), 5)
        >>> traj.points.reshape(-1).tolist()
        [0.0, 0.5, 1.0, 2.0, 3.0]
    """
    return _build("through", _anchor_points(points, "through()"), int(n))


@constrained(where=Instance((str,), "the name of the calling function (for error messages), "
                                 "e.g. 'trajectory_length()'", (3, None, ("f()",))))
def as_trajectory(value: Any, where: str = "as_trajectory()") -> Trajectory:
    """A :class:`Trajectory` as given, or the polyline through a user tensor of points (n, ...)
    (kind "points", parameters t_i = i / (n - 1))."""
    if isinstance(value, Trajectory):
        return value
    anchors = _anchor_points(value, where)
    return Trajectory(anchors, _anchor_times(len(anchors)), "points", anchors)


@dataclass(frozen=True)
class Plane:
    """The plane x(u, v) = origin + u d1 + v d2 of input space, in coordinates (u, v).

    Attributes:
        origin: x(0, 0), the shape of one input.
        directions: (2, *origin.shape): d1 = x(1, 0) - x(0, 0) and d2 = x(0, 1) - x(0, 0),
            linearly independent.
    """

    origin: torch.Tensor = field(repr=False)
    directions: torch.Tensor = field(repr=False)

    @property
    def anchors(self) -> torch.Tensor:
        """(3, ...) the reference points x(0, 0), x(1, 0), x(0, 1)."""
        return torch.cat([self.origin.unsqueeze(0), self.origin + self.directions])

    def at(self, uv: Any) -> torch.Tensor:
        """x(u, v) (n, ...) at plane coordinates ``uv`` (n, 2)."""
        uv = torch.as_tensor(uv, dtype=self.origin.dtype, device=self.origin.device)
        flat = self.directions.reshape(2, -1)
        return (self.origin.reshape(1, -1) + uv @ flat).reshape(len(uv), *self.origin.shape)

    def coordinates(self, points: Any) -> torch.Tensor:
        """(n, 2) float64 coordinates (u, v) of the orthogonal projections of ``points``
        (n, ...) onto the plane (least squares)."""
        x = torch.as_tensor(points).to(dtype=torch.float64, device=self.origin.device)
        flat = self.directions.reshape(2, -1).to(torch.float64)
        offset = (x.reshape(len(x), -1) - self.origin.reshape(1, -1).to(torch.float64))
        return torch.linalg.solve(flat @ flat.T, flat @ offset.T).T


def plane(x0: Any, x1: Any = None, x2: Any = None, *, directions: Any = None) -> Plane:
    """The plane through three inputs, x(u, v) = x0 + u (x1 - x0) + v (x2 - x0), or through
    ``x0`` along ``directions`` = (d1, d2), x(u, v) = x0 + u d1 + v d2: the 2-D slice of input
    space on which Raghu et al. (2017), figure 1, draw a network's linear regions (Theorem 2:
    convex polytopes, here polygons in (u, v)).

    Args:
        x0, x1, x2: three inputs of one shape (no batch dimension), not on one line: x0 is
            (0, 0), x1 is (1, 0), x2 is (0, 1).
        directions: instead of x1 and x2, two linearly independent directions (d1, d2) of
            x0's shape (a tensor (2, ...) or a pair).

    Returns:
        A :class:`Plane`.

    Raises:
        InvalidInputError: shapes that differ, non-finite values, or points on one line
            (directions that are parallel or zero).

    Example:
        >>> import torch
        >>> p = plane(torch.zeros(3), torch.tensor([2.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 1.0]))
        >>> p.at(torch.tensor([[0.5, 1.0]])).tolist()
        [[1.0, 1.0, 1.0]]
        >>> p.coordinates(torch.tensor([[1.0, 3.0, 3.0]])).tolist()
        [[0.5, 3.0]]
    """
    return make_plane(x0, x1, x2, directions, "plane()")


def make_plane(x0: Any, x1: Any, x2: Any, directions: Any, where: str) -> Plane:
    """:func:`plane`, its errors naming ``where`` (the measure the points were given to)."""
    if (directions is None) == (x1 is None or x2 is None) or (x1 is None) != (x2 is None):
        raise invalid(where, "three points plane(x0, x1, x2) or plane(origin, directions=(d1, "
                      "d2))", f"x1={'set' if x1 is not None else None}, "
                      f"x2={'set' if x2 is not None else None}, "
                      f"directions={'set' if directions is not None else None}",
                      "pass either x1 and x2, or directions")
    origin = _as_tensor(x0, "x0", where)
    if directions is None:
        points = [origin] + [_as_tensor(x, name, where) for x, name in ((x1, "x1"), (x2, "x2"))]
        _same_shapes(points, ("x0", "x1", "x2"), where)
        spans = torch.stack([points[1].to(origin.dtype) - origin,
                             points[2].to(origin.dtype) - origin])
    else:
        pair = list(directions) if isinstance(directions, (tuple, list)) else directions
        spans = [_as_tensor(d, f"directions[{i}]", where) for i, d in enumerate(pair)]
        if len(spans) != 2:
            raise invalid(where, "two directions (d1, d2)", f"{len(spans)}",
                          "pass directions=(d1, d2)")
        _same_shapes([origin] + spans, ("origin", "d1", "d2"), where)
        spans = torch.stack([d.to(origin.dtype) for d in spans])
    flat = spans.reshape(2, -1).to(torch.float64)
    gram = flat @ flat.T
    if float(torch.linalg.det(gram)) <= 1e-12 * float(gram[0, 0] * gram[1, 1]) \
            or float(gram.diagonal().min()) == 0.0:
        raise invalid(where, "three points not on one line (independent directions)",
                      "points on one line (parallel or zero directions)",
                      "pass three inputs spanning a plane, e.g. x2 off the line through x0, x1")
    return Plane(origin, spans)


def _same_shapes(tensors: list, names: tuple, where: str) -> None:
    shapes = [tuple(t.shape) for t in tensors]
    if len(set(shapes)) > 1:
        raise invalid(where, f"{', '.join(names)} of one shape",
                      ", ".join(f"{n} {s}" for n, s in zip(names, shapes)),
                      "pass inputs of one shape (no batch dimension)")


def polyline_length(points: torch.Tensor) -> torch.Tensor:
    """sum_i ||x_{i+1} - x_i||_2 over consecutive rows of ``points`` (n, ...) (0 when n < 2):
    the length of the polygon through them (Raghu et al. section 2.2), differentiable.

    Raises:
        InvalidInputError: ``points`` not a tensor with a point dimension first and at least
            one coordinate dimension (a 1-D tensor is ambiguous: n numbers or one point)."""
    if not isinstance(points, torch.Tensor) or points.dim() < 2:
        got = (f"a {points.dim()}-D tensor of shape {tuple(points.shape)}"
               if isinstance(points, torch.Tensor) else type(points).__name__)
        raise invalid("polyline_length()", "points as a tensor (n, ...): one point per row, "
                      "each with at least one dimension", got,
                      "pass points[:, None] for n points of one coordinate, or points[None] "
                      "for one point")
    flat = points.reshape(points.shape[0], -1)
    return torch.linalg.vector_norm(flat[1:] - flat[:-1], dim=1).sum()


def _build(kind: Kind, anchors: torch.Tensor, n: int) -> Trajectory:
    if kind in ("through", "points"):
        segments = len(anchors) - 1
        n = segments * max(1, math.ceil((n - 1) / segments)) + 1
    t = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    return Trajectory(evaluate(kind, anchors, t), t, kind, anchors)


def evaluate(kind: Kind, anchors: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x(t) (len(t), ...) of a trajectory of ``kind`` defined by ``anchors``, t in [0, 1]."""
    t = t.to(torch.float64)
    shape = (-1,) + (1,) * (anchors.dim() - 1)
    if kind == "line":
        tt = t.reshape(shape).to(anchors.dtype)
        return (1 - tt) * anchors[0] + tt * anchors[1]
    if kind == "arc":
        angle = (math.pi / 2) * t.reshape(shape)
        return (torch.cos(angle).to(anchors.dtype) * anchors[0]
                + torch.sin(angle).to(anchors.dtype) * anchors[1])
    scaled = t * (len(anchors) - 1)
    j = scaled.floor().long().clamp(0, len(anchors) - 2)
    u = (scaled - j).reshape(shape).to(anchors.dtype)
    return anchors[j] + u * (anchors[j + 1] - anchors[j])


def _anchor_times(m: int) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, m, dtype=torch.float64)


def _as_tensor(value: Any, name: str, where: str) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise invalid(where, f"{name} as a tensor or numpy array", type(value).__name__,
                      f"pass {name} as torch.tensor(...)")
    if not torch.is_floating_point(value):
        raise invalid(where, f"{name} with a floating dtype", f"dtype {value.dtype}",
                      f"convert real-valued inputs with {name}.float(); for token ids, take "
                      "the points in an embedding's output and pass input_module= and "
                      "template= to the measure")
    if not torch.isfinite(value).all():
        raise invalid(where, f"finite {name}", "NaN or inf values", "remove them")
    points = value if name == "points" and value.dim() > 1 else value.reshape(1, -1)
    require_representable(points, where, name)
    return value.detach().clone()


def _endpoints(x0: Any, x1: Any, where: str) -> torch.Tensor:
    a, b = _as_tensor(x0, "x0", where), _as_tensor(x1, "x1", where)
    if a.shape != b.shape:
        raise invalid(where, "x0 and x1 of the same shape", f"{tuple(a.shape)} and "
                      f"{tuple(b.shape)}", "pass two inputs of one shape (no batch dimension)")
    if torch.equal(a, b):
        raise invalid(where, "distinct endpoints x0 != x1", "x0 == x1",
                      "pass two different inputs (a trajectory of length 0 has no transitions)")
    return torch.stack([a, b.to(a.dtype)])


def _anchor_points(points: Any, where: str) -> torch.Tensor:
    anchors = _as_tensor(points, "points", where)
    if anchors.dim() < 2 or len(anchors) < 2:
        raise invalid(where, "points of shape (m, ...) with m >= 2", f"shape "
                      f"{tuple(anchors.shape)}", "stack at least two inputs along dimension 0")
    steps = (anchors[1:] - anchors[:-1]).reshape(len(anchors) - 1, -1)
    if (steps.abs().amax(1) == 0).any():
        raise invalid(where, "consecutive points that differ", "a repeated point",
                      "drop repeated consecutive points")
    return anchors

