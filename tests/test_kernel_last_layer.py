"""``layers="last"`` of nngauge.theory.nngp / ntk: the deepest kernels only, computed in place in
one set of (n, n) arrays, equal to the last layer of the every-layer call; and the upper-triangle
passes of the erf / relu duals with several row blocks and threads."""

import dataclasses

import numpy as np
import pytest

from nngauge.activations import FAST_QUADRATURE, get
from nngauge.theory import _kernel_maps
from nngauge.theory._kernels import nngp, ntk


def awkward_inputs(n=9):
    """Unequal norms, an exact duplicate, an antipodal pair and a zero row (without bias the
    zero row sends relu to the generic closed-form path: its in-place dual needs q > 0)."""
    X = np.random.default_rng(3).normal(size=(n, 4)) * (0.5 + 0.4 * np.arange(n))[:, None]
    X[n - 3], X[n - 2], X[n - 1] = X[0], -X[1], 0.0
    return X


def assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())


# gelu: closed-form NNGP, quadrature derivative; tanh: quadrature for both (the cheap rule:
# both calls use the same one, so they must agree whatever its accuracy).
CASES = {"erf": ("erf", {}, 9, 6), "relu": ("relu", {}, 9, 6),
         "gelu": ("gelu", {}, 5, 2), "tanh": ("tanh", {"quadrature": FAST_QUADRATURE}, 5, 2)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("parameterization, width", [("ntk", None), ("standard", 64)])
@pytest.mark.parametrize("sigma_b", [0.0, 0.3])
def test_last_layer_equals_the_last_of_all_layers(case, parameterization, width, sigma_b):
    """ntk(with_nngp=True), ntk and nngp with layers="last" return the deepest NTK and NNGP of
    the every-layer call to 1e-13 (the in-place erf / relu passes, generic closed forms,
    quadrature; both parameterizations; with and without bias; duplicate, antipodal and zero
    rows), exactly symmetric, with the trace fields of a one-kernel trace at that depth."""
    name, extra, n, depth = CASES[case]
    X = awkward_inputs(n)
    kw = dict(sigma_w=1.4, sigma_b=sigma_b, parameterization=parameterization, width=width,
              **extra)
    every = ntk(X, name, depth, with_nngp=True, **kw)
    last = ntk(X, name, depth, with_nngp=True, layers="last", **kw)
    for got, want in ((last, every), (last.nngp, every.nngp)):
        assert len(got.kernels) == 1 and got.first_depth == depth and got.depth == depth
        assert list(got.depths) == [depth]
        assert dataclasses.replace(got, kernels=(), nngp=None, first_depth=0) == \
            dataclasses.replace(want, kernels=(), nngp=None)
        assert_close(got.kernels[0], want.kernels[-1])
        assert np.array_equal(got.kernels[0], got.kernels[0].T)
    assert_close(ntk(X, name, depth, layers="last", **kw).kernels[0], every.kernels[-1])
    assert_close(nngp(X, name, depth, layers="last", **kw).kernels[0], every.nngp.kernels[-1])


@pytest.mark.parametrize("fn", [nngp, ntk])
def test_depth_zero_keeps_the_input_kernel(fn):
    """With depth 0 the last layer is the first: the scaled Gram matrix, as with every layer
    kept, read-only."""
    X = awkward_inputs()
    last = fn(X, "erf", 0, sigma_w=1.2, sigma_b=0.5, layers="last")
    every = fn(X, "erf", 0, sigma_w=1.2, sigma_b=0.5)
    assert last.first_depth == 0 and np.array_equal(last.kernels[0], every.kernels[0])
    assert not last.kernels[0].flags.writeable


def test_last_layer_trace_is_read_only_and_serializable():
    """The one-kernel trace is immutable like every trace; its summaries, dict and frame are
    indexed by its depth, not from 0."""
    trace = ntk(awkward_inputs(), "relu", 3, sigma_b=0.2, with_nngp=True, layers="last")
    with pytest.raises(ValueError):
        trace.kernels[0][0, 0] = 1.0
    with pytest.raises(ValueError):
        trace.nngp.kernels[0][0, 0] = 1.0
    assert trace.condition_numbers().shape == (1,)
    d = trace.to_dict()
    assert d["depth"] == 3 and d["first_depth"] == 3 and len(d["kernels"]) == 1
    assert d["nngp"]["first_depth"] == 3
    assert list(trace.to_frame()["depth"]) == [3]


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of up to 8 rows of 70 inputs (9 blocks), so the upper-triangle passes and the
    mirrored lower triangle cross many block boundaries."""
    monkeypatch.setattr(_kernel_maps, "_BLOCK_ENTRIES", 70 * 8)
    return monkeypatch


@pytest.mark.parametrize("name", ["erf", "relu"])
def test_blocks_and_threads_give_one_kernel_in_place_or_not(name, small_blocks):
    """With 9 row blocks, one thread or three (forced) and in place or not give the same
    kernels bit for bit, exactly symmetric, equal to the activation's own closed forms under
    another name (the generic path over the full matrix) to 1e-13."""
    X = np.random.default_rng(4).normal(size=(70, 5)) * np.linspace(0.3, 2.0, 70)[:, None]
    X[7], X[40] = X[60], -X[11]  # a duplicate and an antipodal pair in distant blocks
    kw = dict(sigma_w=1.5, sigma_b=0.1, with_nngp=True)
    one = ntk(X, name, 4, **kw)
    one_last = ntk(X, name, 4, layers="last", **kw)
    small_blocks.setattr(_kernel_maps, "_threads", lambda n: 3)
    three_last = ntk(X, name, 4, layers="last", **kw)
    generic = ntk(X, dataclasses.replace(get(name), name=f"{name}_copy"), 4, **kw)
    for kernels in ((one.kernels[-1], one_last.kernels[0], three_last.kernels[0]),
                    (one.nngp.kernels[-1], one_last.nngp.kernels[0], three_last.nngp.kernels[0])):
        assert all(np.array_equal(kernels[0], k) for k in kernels[1:])
        assert np.array_equal(kernels[0], kernels[0].T)
    assert_close(one.kernels[-1], generic.kernels[-1])
    assert_close(one.nngp.kernels[-1], generic.nngp.kernels[-1])


def test_a_packed_state_continues_on_the_generic_path():
    """An in-place step on the erf passes (which leaves the kernels packed) followed by one on
    the generic closed forms (erf under another name) gives the kernels of the same two steps
    on new arrays, to 1e-13, as (n, n) matrices."""
    X = np.random.default_rng(5).normal(size=(40, 3))
    kw = dict(with_ntk=True, sigma_w=1.3, sigma_b=0.2, parameterization="ntk", width=None,
              quadrature=FAST_QUADRATURE)
    fast = _kernel_maps.block(get("erf"), **kw)
    generic = _kernel_maps.block(dataclasses.replace(get("erf"), name="erf_copy"), **kw)
    assert fast.fast is not None and generic.fast is None
    start = _kernel_maps.input_state(X, fast, with_ntk=True)
    with _kernel_maps.workspace(40) as ws:
        packed = _kernel_maps.step(start, fast, ws, in_place=True)
        assert packed.packed
        got = _kernel_maps.step(packed, generic, ws, in_place=True)
        want = _kernel_maps.step(_kernel_maps.step(start, fast, ws), generic, ws)
    assert not got.packed and got.nngp.shape == (40, 40)
    for a, b in ((got.nngp, want.nngp), (got.ntk, want.ntk), (got.diag, want.diag)):
        assert_close(a, b)
