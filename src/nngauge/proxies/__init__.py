"""Zero-cost proxies: one number per network at initialization, from one batch, that ranks
architectures without training them (compared by Abdelfattah, Mehrotra, Dudziak & Lane,
"Zero-Cost Proxies for Lightweight NAS", ICLR 2021).

Every proxy is ``proxy(model, data, labels=None, *, ..., generator=None) -> float``, runs on
any network the measures run on (through the same model adapter: output selection, token
models through their embedding, batchnorm as found unless ``norm_mode`` is given, dropout off)
and leaves the model exactly as given (parameters, buffers, modes, ``requires_grad``,
``.grad``):

- gradient saliencies: :func:`synflow` (data-free), :func:`snip`, :func:`grasp`,
  :func:`grad_norm`, :func:`fisher` (these four need labels);
- activation statistics: :func:`naswot` (kernel of the units' linear pieces), :func:`swap`
  (sample-wise activation patterns), :func:`jacob_cov`;
- TE-NAS: :func:`te_nas` (NTK condition number), :func:`te_nas_regions`, combined over
  architectures by :func:`te_nas_rank`;
- the newer proxies: :func:`zico` (gradient statistics over mini-batches; needs labels),
  :func:`meco` and :func:`meco_opt` (feature-map correlation), :func:`zen_score`
  (perturbation response at Gaussian weights);
- cost baselines: :func:`n_params`, :func:`flops` (multiply-accumulates);
- nngauge's own predictors in the same form: :func:`nlc_score`, :func:`output_bias`,
  :func:`nlc_rule`, :func:`jacobian_growth`, :func:`rho_max`, :func:`kernel_condition`,
  :func:`trajectory_growth`, :func:`region_density`; :data:`DIRECTIONS` gives each proxy's
  sign (+1: higher predicts higher accuracy).
"""

from nngauge.proxies._activation import jacob_cov, naswot
from nngauge.proxies._cost import flops, n_params
from nngauge.proxies._meco import meco, meco_opt
from nngauge.proxies._ours import (
    DIRECTIONS,
    jacobian_growth,
    kernel_condition,
    nlc_rule,
    nlc_score,
    output_bias,
    region_density,
    rho_max,
    trajectory_growth,
)
from nngauge.proxies._saliency import fisher, grad_norm, grasp, snip, synflow
from nngauge.proxies._swap import swap
from nngauge.proxies._te_nas import te_nas, te_nas_rank, te_nas_regions
from nngauge.proxies._zen import zen_score
from nngauge.proxies._zico import zico

__all__ = ["DIRECTIONS", "fisher", "flops", "grad_norm", "grasp", "jacob_cov", "jacobian_growth",
           "kernel_condition", "meco", "meco_opt", "n_params", "naswot", "nlc_rule", "nlc_score",
           "output_bias", "region_density", "rho_max", "snip", "swap", "synflow", "te_nas",
           "te_nas_rank", "te_nas_regions", "trajectory_growth", "zen_score", "zico"]
