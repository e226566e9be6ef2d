"""``predictors-cnn``: the predictor benchmark of ``predictors`` on its second architecture
family, small CNNs (:func:`nngauge.nn.sample_cnn`: 2-8 convolutional blocks of width 8-32,
optional batchnorm, skips and pooling) on scikit-learn's 8x8 digits images (see
:mod:`nngauge.reproduce._predictors`)."""

from __future__ import annotations

import functools

from nngauge._citations import cite
from nngauge.reproduce._base import Reproduction
from nngauge.reproduce._predictors import CLAIM, PUBLISHED_ELSEWHERE, compute, judge, plot

REPRODUCTION = Reproduction(
    name="predictors-cnn",
    paper=cite("nlc") + "; " + cite("zero-cost"),
    target="section 4's claim against the zero-cost proxies, on small CNNs",
    description="the predictor benchmark on the second family: small CNNs "
                "(nngauge.nn.sample_cnn) on the 8x8 digits images",
    differences={
        "small": (
            "60 sampled CNNs (depth 2-8, width 8-32) on scikit-learn's 1,797 digits "
            "(60/20/20), 2 starting rates (0.03, 0.3), at most 3 epochs per run, float32",
            "the NLC paper studies fully-connected networks only; this family is ours",
            PUBLISHED_ELSEWHERE,
        ),
        "paper": (
            "250 sampled CNNs with E.2's full protocol (40 rates, float64): 10,000 training "
            "runs, hence --ray ADDRESS for a cluster",
            PUBLISHED_ELSEWHERE,
        ),
    },
    small_runtime="~18 min",
    compute=functools.partial(compute, "cnn"),
    plot=plot,
    claim=CLAIM,
    judge=judge,
    n_seeds=3,
)
