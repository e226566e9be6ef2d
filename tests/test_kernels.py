"""Infinite-width NNGP / NTK kernels against wide random torch networks, quadrature and algebra."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from nngauge.activations import FAST_QUADRATURE, Activation, Quadrature, get
from nngauge.errors import InvalidInputError, NNGaugeError
from nngauge.theory._kernels import KernelTrace, nngp, ntk

TANH = get("tanh")  # no closed forms: the quadrature path


def without_closed_forms(act: Activation) -> Activation:
    """The same function, forced onto the quadrature path (its derivative too)."""
    return dataclasses.replace(act, mean_fn=None, covariance_fn=None, derivative_factory=None)


def inputs(n=5, d=4, seed=0):
    """Gaussian inputs with deliberately unequal norms (row i scaled by 0.5 + 0.4 i)."""
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X * (0.5 + 0.4 * np.arange(n))[:, None]


def rel_frobenius(A, B):
    return np.linalg.norm(A - B) / np.linalg.norm(B)


# ---------------------------------------------------------------- wide random networks (torch)


def dense_params(widths, sigma_w, sigma_b, parameterization, generator):
    """[(W, b)] for Dense layers widths[0] -> widths[1] -> ...; float64."""
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:]):
        W = torch.randn(fan_out, fan_in, generator=generator, dtype=torch.float64)
        b = torch.randn(fan_out, generator=generator, dtype=torch.float64)
        if parameterization == "standard":
            W, b = W * sigma_w / math.sqrt(fan_in), b * sigma_b
        params.append((W, b))
    return params


def forward(params, X, act_fn, sigma_w, sigma_b, parameterization):
    """stax.serial(Dense, *[act, Dense] * depth) in the given parameterization."""
    h = X
    for k, (W, b) in enumerate(params):
        a = h if k == 0 else act_fn(h)
        if parameterization == "ntk":
            h = sigma_w / math.sqrt(a.shape[1]) * a @ W.T + sigma_b * b
        else:
            h = a @ W.T + b
    return h


def empirical_nngp(X, act, depth, width, sigma_w, sigma_b, seeds):
    """[K_1..K_depth]: mean over seeds of H_l H_l^T / width, H_l the pre-activations of layer l."""
    X = torch.as_tensor(X, dtype=torch.float64)
    total = 0.0
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        params = dense_params([X.shape[1]] + [width] * (depth + 1), sigma_w, sigma_b, "ntk", g)
        H = forward(params[:1], X, act.torch_fn, sigma_w, sigma_b, "ntk")
        kernels = []
        for layer in params[1:]:
            H = _dense_on_act(H, layer, act, sigma_w, sigma_b)
            kernels.append((H @ H.T / width).numpy())
        total = total + np.stack(kernels)
    return total / len(seeds)


def _dense_on_act(H, layer, act, sigma_w, sigma_b):
    W, b = layer
    return sigma_w / math.sqrt(H.shape[1]) * act.torch_fn(H) @ W.T + sigma_b * b


def empirical_ntk(X, act, depth, width, sigma_w, sigma_b, parameterization, seeds):
    """[Theta_0..Theta_depth]: mean over seeds of J_l J_l^T, J_l = d f_l / d theta by
    torch.func.jacrev, f_l a scalar readout Dense layer on act(h_{l-1}) (f_0 on the inputs)."""
    X = torch.as_tensor(X, dtype=torch.float64)
    total = 0.0
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        hidden = dense_params([X.shape[1]] + [width] * depth, sigma_w, sigma_b,
                              parameterization, g)
        kernels = []
        for l in range(depth + 1):
            readout = dense_params([X.shape[1] if l == 0 else width, 1], sigma_w, sigma_b,
                                   parameterization, g)
            flat = [p for pair in hidden[:l] + readout for p in pair]

            def f(*theta):
                pairs = list(zip(theta[0::2], theta[1::2]))
                return forward(pairs, X, act.torch_fn, sigma_w, sigma_b, parameterization)[:, 0]

            jac = torch.func.jacrev(f, argnums=tuple(range(len(flat))))(*flat)
            kernels.append(sum(J.reshape(len(X), -1) @ J.reshape(len(X), -1).T
                               for J in jac).numpy())
            del jac
        total = total + np.stack(kernels)
    return total / len(seeds)


ACTS = {"relu": get("relu"), "erf": get("erf"), "tanh (quadrature)": TANH}
SIGMA_W, SIGMA_B = 1.5, 0.3


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ACTS))
def test_nngp_matches_wide_network(name):
    """The infinite-width NNGP kernels K_1..K_3 (relu, erf closed forms; tanh by quadrature)
    equal the empirical H H^T / width of pre-activations of depth-3 networks of width 4096,
    averaged over 2 seeds, to 5% relative Frobenius error."""
    act, X = ACTS[name], inputs()
    theory = nngp(X, act, 3, sigma_w=SIGMA_W, sigma_b=SIGMA_B).kernels
    mc = empirical_nngp(X, act, 3, 4096, SIGMA_W, SIGMA_B, seeds=range(2))
    errors = [rel_frobenius(mc[l - 1], theory[l]) for l in (1, 2, 3)]
    assert max(errors) < 0.05, errors


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ACTS))
def test_ntk_matches_wide_network(name):
    """The infinite-width NTK Theta_1..Theta_3 in NTK parameterization (relu, erf, tanh by
    quadrature) equals the empirical J J^T, J from torch.func.jacrev over every parameter of
    networks of width 2048, averaged over 3 seeds, to 5% relative Frobenius error."""
    act, X = ACTS[name], inputs()
    theory = ntk(X, act, 3, sigma_w=SIGMA_W, sigma_b=SIGMA_B).kernels
    mc = empirical_ntk(X, act, 3, 2048, SIGMA_W, SIGMA_B, "ntk", seeds=range(3))
    errors = [rel_frobenius(mc[l], theory[l]) for l in (1, 2, 3)]
    assert max(errors) < 0.05, errors


@pytest.mark.slow
def test_standard_parameterization_ntk_matches_wide_network():
    """The finite-width-scaled NTK in standard parameterization (relu, depth 2, width 2048)
    equals the empirical parameter-Jacobian Gram J J^T of such networks, averaged over 4 seeds,
    to 5% relative Frobenius error."""
    act, X, width = get("relu"), inputs(), 2048
    theory = ntk(X, act, 2, sigma_w=1.2, sigma_b=0.5, parameterization="standard",
                 width=width).kernels
    mc = empirical_ntk(X, act, 2, width, 1.2, 0.5, "standard", seeds=range(4))
    errors = [rel_frobenius(mc[l], theory[l]) for l in (1, 2)]
    assert max(errors) < 0.05, errors


def test_ntk_param_gradient_of_first_layer_is_exact():
    """Depth 0 is linear in the parameters: the empirical NTK equals the theory at any width."""
    X = inputs()
    mc = empirical_ntk(X, get("relu"), 0, 7, 1.3, 0.4, "ntk", seeds=[0])[0]
    np.testing.assert_allclose(ntk(X, "relu", 0, sigma_w=1.3, sigma_b=0.4).kernels[0], mc,
                               rtol=1e-12, atol=1e-12)
    mc_std = empirical_ntk(X, get("relu"), 0, 7, 1.3, 0.4, "standard", seeds=[0])[0]
    theory_std = ntk(X, "relu", 0, sigma_w=1.3, sigma_b=0.4, parameterization="standard",
                     width=7).kernels[0]
    np.testing.assert_allclose(theory_std, mc_std, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- recursion and closed forms


@pytest.mark.parametrize("fn", [nngp, ntk])
def test_first_kernel_is_the_scaled_gram_matrix(fn):
    X = inputs(6, 3)
    K0 = fn(X, "relu", 2, sigma_w=1.7, sigma_b=0.6).kernels[0]
    np.testing.assert_allclose(K0, 1.7**2 * X @ X.T / 3 + 0.6**2, rtol=1e-14)


def test_standard_parameterization_first_ntk_and_shared_nngp():
    X = inputs(6, 3)
    std = ntk(X, "relu", 1, sigma_w=1.7, sigma_b=0.6, parameterization="standard", width=50)
    np.testing.assert_allclose(std.kernels[0], X @ X.T + 1.0, rtol=1e-14)
    for l in range(2):
        np.testing.assert_allclose(
            nngp(X, "relu", 1, parameterization="standard").kernels[l],
            nngp(X, "relu", 1).kernels[l], rtol=0)


def test_relu_one_layer_by_hand():
    """Two orthogonal inputs of norm 1 in d = 2: K_0 = I / 2; relu of N(0, 1/2) by hand."""
    X = np.eye(2)
    K1 = nngp(X, "relu", 1).kernels[1]
    T1 = ntk(X, "relu", 1).kernels[1]
    # E relu(u)^2 = q / 2; E relu(u) relu(v) at rho = 0 is (E relu u)^2 = q / (2 pi).
    np.testing.assert_allclose(K1, [[0.25, 0.25 / np.pi], [0.25 / np.pi, 0.25]], rtol=1e-14)
    # Theta_1 = K_1 + Theta_0 * E[step step]: diagonal 1/4 + 1/2 * 1/2, off-diagonal K_1.
    np.testing.assert_allclose(T1, [[0.5, 0.25 / np.pi], [0.25 / np.pi, 0.5]], rtol=1e-14)


@pytest.mark.parametrize("name", ["relu", "erf"])
@pytest.mark.parametrize("fn", [nngp, ntk])
def test_closed_form_and_quadrature_paths_agree(fn, name):
    X = inputs(7, 3, seed=1)
    closed = fn(X, name, 4, sigma_w=1.3, sigma_b=0.2)
    quad = fn(X, without_closed_forms(get(name)), 4, sigma_w=1.3, sigma_b=0.2)
    for a, b in zip(closed.kernels, quad.kernels):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rule, rtol", [(FAST_QUADRATURE, 1e-5), (Quadrature("hermite", 25), 1e-3)])
def test_cheaper_rules_are_close_at_unit_variance(rule, rtol):
    """The accuracy the nngp() docstring promises for cheaper rules at unit variances."""
    X = unit_norm_inputs(6, 3)
    fine = ntk(X, TANH, 3)
    cheap = ntk(X, TANH, 3, quadrature=rule)
    for a, b in zip(fine.kernels, cheap.kernels):
        assert np.abs(b - a).max() < rtol * np.abs(a).max()


def test_identity_network_is_linear():
    """With act = identity: K_l = sigma_w^2 K_{l-1} + sigma_b^2 and Theta_l = (l + 1) K_l at
    sigma_b = 0 (each layer contributes the same kernel)."""
    X = inputs()
    K = nngp(X, "identity", 3, sigma_w=1.1, sigma_b=0.3).kernels
    for l in range(1, 4):
        np.testing.assert_allclose(K[l], 1.1**2 * K[l - 1] + 0.3**2, rtol=1e-13)
    T = ntk(X, "identity", 3).kernels
    G = X @ X.T / X.shape[1]
    for l in range(4):
        np.testing.assert_allclose(T[l], (l + 1) * G, rtol=1e-13)


def test_zero_input_row_with_no_bias():
    X = np.vstack([np.zeros(3), inputs(3, 3)])
    trace = ntk(X, "relu", 2)
    for K in trace.kernels:
        assert np.all(K[0] == 0) and np.all(np.isfinite(K))
    assert np.all(np.isnan(trace.mean_normalized_dot_product()))


# ---------------------------------------------------------------- conditioning (deep-conditioning)


def normalized_relu() -> Activation:
    """(relu - E relu) / std relu under N(0, 1): mean 0, second moment 1 (deep-conditioning eq. 2)."""
    mean, std = 1.0 / np.sqrt(2 * np.pi), np.sqrt(0.5 - 1.0 / (2 * np.pi))
    return Activation(
        name="normalized_relu_test",
        value=lambda x: (np.maximum(x, 0.0) - mean) / std,
        derivative_fn=lambda x: (x > 0) / std,
        torch_fn=lambda x: (torch.relu(x) - mean) / std,
        breakpoints=(0.0,),
    )


def unit_norm_inputs(n, d, seed=0):
    """Rows of norm sqrt(d), so that K_0 = X X^T / d has a unit diagonal (paper's assumption)."""
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True) * np.sqrt(d)


@pytest.mark.parametrize("fn", [nngp, ntk])
def test_condition_number_improves_with_depth_for_a_normalized_activation(fn):
    X = unit_norm_inputs(8, 3)  # n > d: the input kernel is singular
    trace = fn(X, normalized_relu(), 20)
    kappa, mndp = trace.condition_numbers(), trace.mean_normalized_dot_product()
    assert kappa[0] == np.inf  # rank 3 < 8
    assert np.all(np.isfinite(kappa[1:]))
    assert np.all(np.diff(kappa[1:]) < 0)  # strictly better at every depth
    assert kappa[-1] < 1.1
    assert abs(mndp[-1]) < 0.01
    worst_cosine = [np.abs(k / np.sqrt(np.outer(k.diagonal(), k.diagonal())) - np.eye(8)).max()
                    for k in trace.kernels]
    assert np.all(np.diff(worst_cosine) < 0)  # every pair decorrelates (Theorem 3.2)
    if fn is nngp:  # unit diagonal: Gershgorin, as in the proof of Corollary 3.3
        spread = 7 * np.array(worst_cosine)
        ok = spread < 1
        assert ok[-1] and np.all(kappa[ok] <= (1 + spread[ok]) / (1 - spread[ok]) * (1 + 1e-12))


def test_normalized_dual_contracts_correlations_at_the_papers_rate():
    """deep-conditioning Thm 3.2: for a normalized activation (a_0 = 0, sum a_k^2 = 1 in its
    normalized Hermite coefficients) the dual f(rho) = sum a_k^2 rho^k obeys
    |f(rho)| <= a_1^2 |rho| + (1 - a_1^2) rho^2 = |rho| (1 - mu (1 - |rho|)), mu = 1 - a_1^2
    the coefficient of non-linearity. For normalized relu a_1 = E[relu(z) z] / std(relu(z)),
    so a_1^2 = (1/4) / (1/2 - 1/(2 pi))."""
    a1_sq = 0.25 / (0.5 - 1.0 / (2 * np.pi))
    mu = 1.0 - a1_sq
    X = unit_norm_inputs(8, 3, seed=2)
    K = nngp(X, normalized_relu(), 6).kernels
    off = ~np.eye(8, dtype=bool)
    for before, after in zip(K[:-1], K[1:]):
        np.testing.assert_allclose(np.diagonal(after), 1.0, rtol=1e-10)
        r = np.abs(before[off])
        assert np.all(np.abs(after[off]) <= r * (1.0 - mu * (1.0 - r)) + 1e-12)


def test_condition_number_conventions():
    X = np.array([[1.0, 0.0], [2.0, 0.0]])  # parallel inputs: rank 1
    trace = nngp(X, "relu", 1)
    assert trace.condition_numbers()[0] == np.inf
    Y = np.diag([1.0, 2.0])  # K_0 = diag(1, 4) / 2
    assert nngp(Y, "relu", 0).condition_numbers()[0] == pytest.approx(4.0, rel=1e-14)
    assert np.isnan(nngp(np.zeros((2, 2)), "relu", 0).condition_numbers()[0])


def test_mean_normalized_dot_product_by_hand():
    X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    cos = np.array([1 / np.sqrt(2), 0.0, 1 / np.sqrt(2)])  # pairs (0,1), (0,2), (1,2)
    assert nngp(X, "relu", 0).mean_normalized_dot_product()[0] == pytest.approx(cos.mean())
    assert np.isnan(nngp(X[:1], "relu", 0).mean_normalized_dot_product()[0])


# ---------------------------------------------------------------- result object


def test_trace_is_immutable_and_serializable():
    trace = ntk(inputs(), "relu", 2, sigma_w=1.2)
    assert isinstance(trace, KernelTrace) and trace.depth == 2 and len(trace.kernels) == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.sigma_w = 2.0
    with pytest.raises(ValueError):
        trace.kernels[1][0, 0] = 1.0
    d = trace.to_dict()
    assert d["kind"] == "ntk" and d["activation"] == "relu" and d["sigma_w"] == 1.2
    assert np.allclose(d["kernels"][2], trace.kernels[2])
    assert d["condition_numbers"] == trace.condition_numbers().tolist()
    frame = trace.to_frame()
    assert list(frame["depth"]) == [0, 1, 2]


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("fn", [nngp, ntk])
@pytest.mark.parametrize(
    "X, kwargs, fragment",
    [
        (np.ones(3), {}, "shape (n, d)"),
        (np.ones((0, 3)), {}, "shape (n, d)"),
        (np.array([[1.0, np.nan]]), {}, "finite X"),
        ("abc", {}, "X"),
        (np.ones((2, 2)), {"depth": -1}, "depth"),
        (np.ones((2, 2)), {"depth": 1.5}, "depth"),
        (np.ones((2, 2)), {"sigma_w": 0.0}, "sigma_w"),
        (np.ones((2, 2)), {"sigma_w": [1.0, 2.0]}, "sigma_w"),
        (np.ones((2, 2)), {"sigma_b": -0.1}, "sigma_b"),
        (np.ones((2, 2)), {"parameterization": "mup"}, "parameterization"),
        (np.ones((2, 2)), {"quadrature": "hermite"}, "Quadrature"),
        (np.ones((2, 2)), {"act": np.tanh}, "Activation"),
    ],
)
def test_bad_input_says_expected_got_fix(fn, X, kwargs, fragment):
    args = {"act": "relu", "depth": 2, **kwargs}
    with pytest.raises(InvalidInputError) as err:
        fn(X, args.pop("act"), args.pop("depth"), **args)
    message = str(err.value)
    assert fragment in message and "expected" in message and "got" in message and "Fix:" in message


def test_standard_ntk_needs_a_width():
    with pytest.raises(InvalidInputError, match="width"):
        ntk(np.ones((2, 2)), "relu", 1, parameterization="standard")
    with pytest.raises(InvalidInputError, match="width"):
        ntk(np.ones((2, 2)), "relu", 1, parameterization="standard", width=0)


def test_unknown_activation_name_is_an_nngauge_error():
    with pytest.raises(NNGaugeError):
        nngp(np.ones((2, 2)), "no_such_activation", 1)


def test_kernel_summaries_reject_non_square_input():
    from nngauge.theory._kernels import condition_number, mean_normalized_dot_product

    for fn in (condition_number, mean_normalized_dot_product):
        with pytest.raises(InvalidInputError, match="expected a square kernel"):
            fn(np.ones((2, 3)))
    assert condition_number(np.diag([1.0, 4.0])) == 4.0
    assert mean_normalized_dot_product(np.array([[1.0, 0.5], [0.5, 4.0]])) == 0.25


# ---------------------------------------------------------------- one call for both kernels


def awkward_inputs():
    """Unequal norms, an exact duplicate, an antipodal pair and a zero row (relu's in-place
    dual needs every variance > 0: without bias the zero row takes the generic path)."""
    X = inputs(9, 4, seed=3)
    X[4], X[5], X[8] = X[1], -X[2], 0.0
    return X


@pytest.mark.parametrize("name", ["erf", "relu", "leaky_relu(negative_slope=0.2)", "gelu"])
@pytest.mark.parametrize("parameterization, width", [("ntk", None), ("standard", 64)])
@pytest.mark.parametrize("sigma_b", [0.0, 0.4])
def test_one_call_equals_separate_nngp_and_ntk_calls(name, parameterization, width, sigma_b):
    """ntk(..., with_nngp=True) carries the NNGP trace of nngp() and the NTK of ntk() with the
    same arguments, to 1e-13 relative, with nngp()'s settings fields (fast erf / relu paths,
    generic closed forms of leaky_relu, gelu's quadrature derivative; both parameterizations;
    with and without bias)."""
    X = awkward_inputs()[:6] if name == "gelu" else awkward_inputs()
    depth = 2 if name == "gelu" else 5
    kw = dict(sigma_w=1.4, sigma_b=sigma_b, parameterization=parameterization, width=width)
    both = ntk(X, name, depth, with_nngp=True, **kw)
    alone_K, alone_T = nngp(X, name, depth, **kw), ntk(X, name, depth, **kw)
    assert both.nngp.kind == "nngp" and both.nngp.width is None and both.nngp.nngp is None
    assert dataclasses.replace(both.nngp, kernels=()) == dataclasses.replace(alone_K, kernels=())
    for got, want in zip(both.nngp.kernels + both.kernels, alone_K.kernels + alone_T.kernels):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    assert alone_T.nngp is None and ntk(X, name, 1, **kw).to_dict()["nngp"] is None
    assert both.to_dict()["nngp"]["kernels"] == [k.tolist() for k in both.nngp.kernels]


def arc_cosine_by_hand(kxx, kyy, kxy):
    """(E relu(u) relu(v), E step(u) step(v)) for (u, v) ~ N(0, [[kxx, kxy], [kxy, kyy]]),
    entry by entry with the math module (Cho & Saul 2009)."""
    cos = max(-1.0, min(1.0, kxy / math.sqrt(kxx * kyy)))
    theta = math.acos(cos)
    value = math.sqrt(kxx * kyy) * (math.sin(theta) + (math.pi - theta) * cos) / (2 * math.pi)
    return value, (math.pi - theta) / (2 * math.pi)


def test_relu_depth_two_by_hand():
    """Depth-2 relu NNGP and NTK of three inputs (sigma_w = 1.3, sigma_b = 0.2) equal a scalar
    recursion written entry by entry with the arc-cosine kernel, to 1e-13."""
    X = np.array([[1.0, 0.0, 2.0], [0.5, -1.0, 1.0], [-2.0, 0.3, 0.1]])
    sw2, sb2, n = 1.3**2, 0.2**2, 3
    K = [[sw2 * float(X[i] @ X[j]) / 3 + sb2 for j in range(n)] for i in range(n)]
    T = [row[:] for row in K]
    both = ntk(X, "relu", 2, sigma_w=1.3, sigma_b=0.2, with_nngp=True)
    for depth in (1, 2):
        pairs = [[arc_cosine_by_hand(K[i][i], K[j][j], K[i][j]) for j in range(n)]
                 for i in range(n)]
        K = [[sw2 * pairs[i][j][0] + sb2 for j in range(n)] for i in range(n)]
        T = [[K[i][j] + sw2 * T[i][j] * pairs[i][j][1] for j in range(n)] for i in range(n)]
        np.testing.assert_allclose(both.nngp.kernels[depth], K, rtol=1e-13)
        np.testing.assert_allclose(both.kernels[depth], T, rtol=1e-13)


@pytest.mark.parametrize("name", ["erf", "relu"])
@pytest.mark.parametrize("sigma_b", [0.0, 0.3])
def test_in_place_duals_equal_the_activations_closed_forms(name, sigma_b):
    """The in-place erf / relu passes equal the same activation under another name (which
    takes the generic covariance_fn path over the full matrix) to 1e-13, on inputs with a
    duplicate, an antipodal pair and a zero row; every kernel is exactly symmetric."""
    X = awkward_inputs()
    fast = ntk(X, name, 6, sigma_w=1.5, sigma_b=sigma_b, with_nngp=True)
    generic = ntk(X, dataclasses.replace(get(name), name=f"{name}_copy"), 6, sigma_w=1.5,
                  sigma_b=sigma_b, with_nngp=True)
    for got, want in zip(fast.kernels + fast.nngp.kernels, generic.kernels + generic.nngp.kernels):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
        assert np.array_equal(got, got.T)


def test_a_borrowed_name_does_not_take_the_in_place_path():
    """An activation named "relu" that is another function (leaky relu's closed forms) gets
    its own kernels, not relu's: the in-place dual is checked against covariance_fn."""
    impostor = dataclasses.replace(get("leaky_relu", negative_slope=0.3), name="relu", params={})
    X = inputs()
    got = ntk(X, impostor, 3, with_nngp=True)
    want = ntk(X, "leaky_relu(negative_slope=0.3)", 3, with_nngp=True)
    relu = nngp(X, "relu", 3).kernels[3]
    np.testing.assert_allclose(got.kernels[3], want.kernels[3], rtol=1e-13)
    np.testing.assert_allclose(got.nngp.kernels[3], want.nngp.kernels[3], rtol=1e-13)
    assert np.abs(got.nngp.kernels[3] - relu).max() > 0.01 * np.abs(relu).max()


@pytest.mark.parametrize("name", ["erf", "relu"])
def test_threads_give_the_same_kernels_bit_for_bit(name, monkeypatch):
    """Row blocks shared among 3 threads (forced, whatever the CPU count) give exactly the
    kernels of one thread."""
    from nngauge.theory import _kernel_maps

    X = inputs(70, 5, seed=4)
    monkeypatch.setattr(_kernel_maps, "_BLOCK_ENTRIES", 70 * 8)  # 9 blocks of up to 8 rows
    one = ntk(X, name, 4, sigma_b=0.1, with_nngp=True)
    monkeypatch.setattr(_kernel_maps, "_threads", lambda n: 3)
    three = ntk(X, name, 4, sigma_b=0.1, with_nngp=True)
    for a, b in zip(one.kernels + one.nngp.kernels, three.kernels + three.nngp.kernels):
        assert np.array_equal(a, b)
