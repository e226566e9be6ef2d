"""Bundled data: waveform-noise against Breiman's definition, digits, Gaussian, D.2, splits."""

import numpy as np
import pytest
import torch

from nngauge.data import (LabelledData, base_waves, confusion_set, digits, gaussian, preprocess,
                          random_labels, split, standardize, waveform_noise)
from nngauge.errors import NNGaugeError

# Breiman et al. (1984) section 2.6.2, written out by hand: h1 peaks at i=7, h2 at 15, h3 at 11.
H1 = [0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
H2 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0]
H3 = [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0]
PAIRS = [(H1, H2), (H1, H3), (H2, H3)]  # classes 1, 2, 3 of the book -> labels 0, 1, 2


def test_base_waves_are_breimans_triangles():
    np.testing.assert_array_equal(base_waves(), np.array([H1, H2, H3], dtype=float))


@pytest.fixture(scope="module")
def big_waveform():
    return waveform_noise(30000, generator=1)


def test_waveform_class_conditional_moments_match_the_mixture(big_waveform):
    x, y = big_waveform.inputs.double().numpy(), big_waveform.labels.numpy()
    assert x.shape == (30000, 40)
    for label, (ha, hb) in enumerate(PAIRS):
        xs = x[y == label]
        ha, hb = np.array(ha, float), np.array(hb, float)
        # E u = 1/2: mean (h_a + h_b) / 2; Var u = 1/12: variance (h_a - h_b)^2 / 12 + 1.
        # Standard errors: mean <= sqrt(4 / 10000) = 0.02, variance <= 0.04: tolerance 5 se.
        np.testing.assert_allclose(xs[:, :21].mean(0), (ha + hb) / 2, atol=0.1)
        np.testing.assert_allclose(xs[:, :21].var(0), (ha - hb) ** 2 / 12 + 1, atol=0.2)
        # the last 19 features are pure N(0, 1) noise in every class
        np.testing.assert_allclose(xs[:, 21:].mean(0), 0, atol=0.06)
        np.testing.assert_allclose(xs[:, 21:].var(0), 1, atol=0.1)


def test_waveform_noise_features_are_standard_gaussian(big_waveform):
    noise = big_waveform.inputs[:, 21:].double().numpy().ravel()
    from scipy import stats

    assert stats.kstest(noise, "norm").pvalue > 1e-3
    # and independent across features: correlation matrix ~ identity (se 1/sqrt(30000))
    corr = np.corrcoef(big_waveform.inputs[:, 21:].double().numpy(), rowvar=False)
    assert np.abs(corr - np.eye(19)).max() < 0.03


def test_waveform_mixing_weight_is_uniform(big_waveform):
    # class 0 with noise removed along h1 - h2: (x - h2).(h1 - h2) / |h1 - h2|^2 = u + noise
    x, y = big_waveform.inputs.double().numpy(), big_waveform.labels.numpy()
    h1, h2 = np.array(H1, float), np.array(H2, float)
    d = h1 - h2
    u_hat = (x[y == 0, :21] - h2) @ d / (d @ d)
    # u ~ U(0,1) plus N(0, 1/|d|^2) noise: mean 1/2, variance 1/12 + 1/|d|^2
    assert abs(u_hat.mean() - 0.5) < 0.01
    assert abs(u_hat.var() - (1 / 12 + 1 / (d @ d))) < 0.005


def test_waveform_is_balanced_deterministic_and_typed():
    a, b = waveform_noise(301, generator=3), waveform_noise(301, generator=3)
    c = waveform_noise(301, generator=4)
    assert isinstance(a, LabelledData) and a.inputs.dtype == torch.float32
    assert a.labels.dtype == torch.int64 and sorted(a.labels.bincount().tolist()) == [100, 100, 101]
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.inputs, c.inputs)
    inputs, labels = a  # a plain (inputs, labels) pair
    assert inputs is a.inputs and labels is a.labels


def test_digits_is_sklearns_bundled_set():
    data = digits()
    assert data.inputs.shape == (1797, 64) and data.inputs.dtype == torch.float32
    assert data.labels.dtype == torch.int64 and sorted(data.labels.unique().tolist()) == list(range(10))
    assert float(data.inputs.min()) == 0 and float(data.inputs.max()) == 16


def test_gaussian_inputs_and_linear_teacher_labels():
    data = gaussian(2000, 6, generator=2, n_classes=3)
    x = data.inputs.double()
    assert data.inputs.shape == (2000, 6) and data.labels.dtype == torch.int64
    assert float(x.mean(0).abs().max()) < 0.1 and float((x.var(0) - 1).abs().max()) < 0.15
    assert set(data.labels.tolist()) == {0, 1, 2}
    # labels from a linear teacher without bias: a linear classifier separates them exactly
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=1e6, fit_intercept=False, max_iter=5000)
    clf.fit(x.numpy(), data.labels.numpy())
    assert clf.score(x.numpy(), data.labels.numpy()) > 0.995
    assert torch.equal(gaussian(50, 6, generator=2).inputs, gaussian(50, 6, generator=2).inputs)


def _point_normalized(x):
    x = np.asarray(x, dtype=float)
    return (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)


def test_preprocess_d2_properties_against_sklearn_pca():
    from sklearn.decomposition import PCA

    train, val, test = split(digits(), (0.6, 0.2, 0.2), generator=0)
    (ptrain, pval, ptest), t = preprocess(train, val, test, generator=1)
    z = _point_normalized(train.inputs)
    pca = PCA().fit(z)  # independent: sklearn centers and diagonalizes
    k = int(np.searchsorted(np.cumsum(pca.explained_variance_ratio_), 0.99) + 1)
    assert t.n_components == k and ptrain.inputs.shape == (len(train.labels), k) and k < 64
    assert t.explained_variance >= 0.99
    out = ptrain.inputs.double().numpy()
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-5)  # centered
    assert abs(np.sqrt((out ** 2).mean()) - 1) < 1e-6  # Q_{x,i} x(i) = 1
    # the map is the k leading principal directions, rotated: distances equal those of the
    # sklearn PCA coordinates, times the global scale
    coords = pca.transform(z)[:, :k]
    d_ours = np.linalg.norm(out[:50, None] - out[None, :50], axis=-1)
    d_pca = np.linalg.norm(coords[:50, None] - coords[None, :50], axis=-1)
    np.testing.assert_allclose(d_ours, t.scale * d_pca, rtol=1e-4, atol=1e-4)
    # applied consistently: val and test through the train fit, labels untouched
    np.testing.assert_allclose(pval.inputs, t(val.inputs), atol=0)
    expected = (_point_normalized(test.inputs) - t.mean.numpy()) @ t.matrix.numpy() * t.scale
    np.testing.assert_allclose(ptest.inputs.double().numpy(), expected, atol=1e-5)
    assert torch.equal(ptest.labels, test.labels)


def test_preprocess_haar_projection_is_a_random_orthonormal_frame():
    x = torch.randn(200, 12, generator=torch.Generator().manual_seed(0))
    (out,), t = preprocess(x, variance=1.0, projection="haar", generator=3)
    m = t.matrix.numpy()
    assert m.shape == (12, t.n_components)
    np.testing.assert_allclose(m.T @ m, np.eye(m.shape[1]), atol=1e-10)
    # variance 1.0 on centered, point-normalized rows (rank 11: each row sums to 0): k = 11
    z = _point_normalized(x) - _point_normalized(x).mean(0)
    assert t.n_components == np.linalg.matrix_rank(z) == 11
    # an orthonormal frame preserves distances between vectors of its span
    span = z[:6] @ m @ m.T
    d_in = np.linalg.norm(span[:, None] - span[None], axis=-1)
    d_out = np.linalg.norm((span @ m)[:, None] - (span @ m)[None], axis=-1)
    np.testing.assert_allclose(d_out, d_in, atol=1e-10)
    assert not np.allclose(preprocess(x, projection="haar", generator=4).transform.matrix, m)


def test_standardize_features():
    train, val = split(waveform_noise(600), (0.5, 0.5))
    (strain, sval), t = standardize(train, val)
    np.testing.assert_allclose(strain.inputs.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(strain.inputs.std(0, unbiased=False), 1, atol=1e-5)
    expected = (val.inputs - train.inputs.mean(0)) / train.inputs.std(0, unbiased=False)
    torch.testing.assert_close(sval.inputs, expected, atol=1e-5, rtol=1e-5)


def test_split_partitions_the_data():
    data = LabelledData(torch.arange(1000.0)[:, None], torch.arange(1000))
    parts = split(data, (0.6, 0.2, 0.2), generator=5)
    assert [len(p.labels) for p in parts] == [600, 200, 200]
    ids = torch.cat([p.labels for p in parts])
    assert sorted(ids.tolist()) == list(range(1000))  # disjoint and complete
    for p in parts:
        assert torch.equal(p.inputs[:, 0].long(), p.labels)  # rows stay paired
    again = split(data, (0.6, 0.2, 0.2), generator=5)
    assert all(torch.equal(a.labels, b.labels) for a, b in zip(parts, again))
    assert [len(p.labels) for p in split(data, (1 / 3, 1 / 3, 1 / 3))] == [333, 334, 333]


@pytest.mark.parametrize("call", [
    lambda: waveform_noise(0),
    lambda: waveform_noise(2.5),
    lambda: gaussian(10, 0),
    lambda: gaussian(10, 3, n_classes=1),
    lambda: split(waveform_noise(10), (0.5, 0.4)),
    lambda: split(waveform_noise(10), (1.2, -0.2)),
    lambda: split(waveform_noise(3), (0.5, 0.25, 0.25)),
    lambda: split(torch.randn(10, 2), (0.5, 0.5)),
    lambda: preprocess(torch.ones(5, 4)),
    lambda: preprocess(torch.randn(5, 4), variance=0),
    lambda: preprocess(torch.randn(5, 4), projection="random"),
    lambda: preprocess(torch.randn(20, 4)).transform(torch.randn(3, 5)),
    lambda: preprocess(torch.tensor([[1.0, float("nan"), 2.0]])),
])
def test_bad_input_raises_with_expected_got_fix(call):
    with pytest.raises(NNGaugeError, match="expected .*got .*Fix"):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: waveform_noise(10, generator=-1), "generator None or a torch.Generator or an int seed"),
    (lambda: gaussian(10, 3, generator=1.5), "generator None or a torch.Generator or an int seed"),
    (lambda: split(waveform_noise(10), "abc"), "fractions a non-empty sequence"),
    (lambda: split(waveform_noise(10), (0.5, float("nan"))), "fractions a non-empty sequence"),
    (lambda: preprocess(torch.randn(5, 4), variance=float("nan")), "variance a number in"),
    (lambda: random_labels(torch.arange(4), 0.5, n_classes=1), "n_classes None or an integer"),
    (lambda: random_labels(torch.arange(4), 0.5, n_classes=3), "n_classes >= 4"),
    (lambda: confusion_set(torch.randn(4, 2), torch.arange(4), n_train=0, n_confusion=1),
     "n_train an integer >= 1"),
    (lambda: confusion_set(torch.randn(4, 2), torch.arange(4), n_train=3, n_confusion=2),
     "n_train \\+ n_confusion <= 4"),
])
def test_declared_options_are_refused_with_their_range(call, match):
    with pytest.raises(NNGaugeError, match=f"expected {match}.*got .*Fix"):
        call()


def test_numpy_integers_are_accepted_as_counts_and_seeds():
    i = np.int64
    assert torch.equal(gaussian(i(10), i(3), generator=i(2), n_classes=i(3)).inputs,
                       gaussian(10, 3, generator=2, n_classes=3).inputs)
    assert len(waveform_noise(i(9), generator=i(1)).labels) == 9
    assert [len(p.labels) for p in split(waveform_noise(10), np.array([0.5, 0.5]),
                                         generator=i(3))] == [5, 5]
    new = random_labels(torch.arange(6) % 2, 1.0, n_classes=i(5),
                        generator=torch.Generator().manual_seed(0))
    assert int(new.max()) < 5
    s = confusion_set(torch.randn(6, 2), torch.arange(6) % 2, n_train=i(3), n_confusion=i(2))
    assert int(s.is_confusion.sum()) == 2
