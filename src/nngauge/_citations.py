"""The papers nngauge implements and builds on, cited by authors, title and venue wherever a
user reads a number (report sections and verdicts, reproductions' tables and figures)."""

from __future__ import annotations

PAPERS: dict[str, tuple[str, str]] = {
    "nlc": ("Philipp & Carbonell (arXiv 2018)",
            'Philipp & Carbonell, "The Nonlinearity Coefficient - Predicting Generalization '
            'in Deep Neural Networks", arXiv:1806.00179'),
    "expressivity": ("Raghu et al. (ICML 2017)",
                     'Raghu, Poole, Kleinberg, Ganguli & Sohl-Dickstein, "On the Expressive '
                     'Power of Deep Neural Networks", ICML 2017'),
    "generalization": ("Neyshabur et al. (NIPS 2017)",
                       'Neyshabur, Bhojanapalli, McAllester & Srebro, "Exploring '
                       'Generalization in Deep Learning", NIPS 2017'),
    "shrinkage": ("Gradient explosion and representation shrinkage (under review, ICLR)",
                  '"Gradient Explosion and Representation Shrinkage in Infinite Networks" '
                  "(anonymous, under review at ICLR)"),
    "conditioning": ("Agarwal et al. (ALT 2021)",
                     'Agarwal, Awasthi & Kale, "A Deep Conditioning Treatment of Neural '
                     'Networks", ALT 2021'),
    "poole": ("Poole et al. (NIPS 2016)",
              'Poole, Lahiri, Raghu, Sohl-Dickstein & Ganguli, "Exponential Expressivity in '
              'Deep Neural Networks through Transient Chaos", NIPS 2016, arXiv:1606.05340'),
    "montufar": ("Montufar et al. (NeurIPS 2014)",
                 'Montufar, Pascanu, Cho & Bengio, "On the Number of Linear Regions of Deep '
                 'Neural Networks", NeurIPS 2014'),
    "serra": ("Serra et al. (ICML 2018)",
              'Serra, Tjandraatmadja & Ramalingam, "Bounding and Counting Linear Regions of '
              'Deep Neural Networks", ICML 2018'),
    "hanin-rolnick": ("Hanin & Rolnick (ICML 2019)",
                      'Hanin & Rolnick, "Complexity of Linear Regions in Deep Networks", '
                      "ICML 2019"),
    "humayun": ("Humayun et al. (ICML 2024)",
                'Humayun, Balestriero & Baraniuk, "Deep Networks Always Grok and Here is '
                'Why", ICML 2024'),
    "keskar": ("Keskar et al. (ICLR 2017)",
               'Keskar, Mudigere, Nocedal, Smelyanskiy & Tang, "On Large-Batch Training for '
               'Deep Learning: Generalization Gap and Sharp Minima", ICLR 2017'),
    "li-landscape": ("Li et al. (NeurIPS 2018)",
                     'Li, Xu, Taylor, Studer & Goldstein, "Visualizing the Loss Landscape of '
                     'Neural Nets", NeurIPS 2018'),
    "pyhessian": ("Yao et al. (IEEE BigData 2020)",
                  'Yao, Gholami, Keutzer & Mahoney, "PyHessian: Neural Networks Through the '
                  'Lens of the Hessian", IEEE BigData 2020'),
    # the zero-cost proxies' papers (nngauge.proxies)
    "zero-cost": ("Abdelfattah et al. (ICLR 2021)",
                  'Abdelfattah, Mehrotra, Dudziak & Lane, "Zero-Cost Proxies for Lightweight '
                  'NAS", ICLR 2021'),
    "synflow": ("Tanaka et al. (NeurIPS 2020)",
                'Tanaka, Kunin, Yamins & Ganguli, "Pruning Neural Networks without Any Data by '
                'Iteratively Conserving Synaptic Flow", NeurIPS 2020'),
    "snip": ("Lee et al. (ICLR 2019)",
             'Lee, Ajanthan & Torr, "SNIP: Single-shot Network Pruning based on Connection '
             'Sensitivity", ICLR 2019'),
    "grasp": ("Wang et al. (ICLR 2020)",
              'Wang, Zhang & Grosse, "Picking Winning Tickets Before Training by Preserving '
              'Gradient Flow", ICLR 2020'),
    "fisher-pruning": ("Theis et al. (2018); Turner et al. (ICLR 2020)",
                       'Theis, Korshunova, Tejani & Huszar, "Faster gaze prediction with dense '
                       'networks and Fisher pruning", arXiv:1801.05787; Turner, Crowley, '
                       "O'Boyle, Storkey & Gray, \"BlockSwap: Fisher-guided Block Substitution "
                       'for Network Compression on a Budget", ICLR 2020'),
    "naswot": ("Mellor et al. (ICML 2021)",
               'Mellor, Turner, Storkey & Crowley, "Neural Architecture Search without '
               'Training", ICML 2021'),
    "jacob-cov": ("Mellor et al. (arXiv 2020, v1)",
                  'Mellor, Turner, Storkey & Crowley, "Neural Architecture Search without '
                  'Training", arXiv:2006.04647v1 (2020)'),
    "swap": ("Peng et al. (ICLR 2024)",
             'Peng, Song, Fayek, Ciesielski & Chang, "SWAP-NAS: Sample-Wise Activation '
             'Patterns for Ultra-fast NAS", ICLR 2024'),
    "te-nas": ("Chen et al. (ICLR 2021)",
               'Chen, Gong & Wang, "Neural Architecture Search on ImageNet in Four GPU Hours: '
               'A Theoretically Inspired Perspective", ICLR 2021'),
    # scoring generalization measures over a family of networks (nngauge.studies), and the
    # measures Jiang et al. compare (distance_from_init, norm_measures, flatness, gradient_noise)
    "fantastic": ("Jiang et al. (ICLR 2020)",
                  'Jiang, Neyshabur, Mobahi, Krishnan & Bengio, "Fantastic Generalization '
                  'Measures and Where to Find Them", ICLR 2020, arXiv:1912.02178'),
    "pgdl": ("Jiang et al. (NeurIPS 2020 competition)",
             'Jiang, Foret, Yak, Roy, Mobahi, Dziugaite, Bengio, Gunasekar, Guyon & Neyshabur, '
             '"NeurIPS 2020 Competition: Predicting Generalization in Deep Learning", '
             "arXiv:2012.07976"),
    "robust-generalization": ("Dziugaite et al. (NeurIPS 2020)",
                              'Dziugaite, Drouin, Neal, Rajkumar, Caballero, Wang, Mitliagkas '
                              '& Roy, "In Search of Robust Measures of Generalization", NeurIPS '
                              "2020, arXiv:2010.11924"),
    # data-free layer spectra (nngauge.layer_spectra)
    "martin-mahoney": ("Martin & Mahoney (JMLR 2021)",
                       'Martin & Mahoney, "Implicit Self-Regularization in Deep Neural Networks: '
                       'Evidence from Random Matrix Theory and Implications for Learning", JMLR '
                       "22(165), 2021, arXiv:1810.01075"),
    "martin-mahoney-trends": ("Martin, Peng & Mahoney (Nature Communications 2021)",
                              'Martin, Peng & Mahoney, "Predicting trends in the quality of '
                              "state-of-the-art neural networks without access to training or "
                              'testing data", Nature Communications 12, 4122 (2021), '
                              "arXiv:2002.06716"),
    "clauset-power-law": ("Clauset, Shalizi & Newman (SIAM Review 2009)",
                          'Clauset, Shalizi & Newman, "Power-Law Distributions in Empirical '
                          'Data", SIAM Review 51(4), 2009, arXiv:0706.1062'),
    # the newer zero-cost proxies (nngauge.proxies.zico, meco, meco_opt, zen_score)
    "zico": ("Li et al. (ICLR 2023)",
             'Li, Yang, Bhardwaj & Marculescu, "ZiCo: Zero-shot NAS via Inverse Coefficient '
             'of Variation on Gradients", ICLR 2023'),
    "meco": ("Jiang et al. (NeurIPS 2023)",
             'Jiang, Wang & Bie, "MeCo: Zero-Shot NAS with One Data and Single Forward Pass '
             'via Minimum Eigenvalue of Correlation", NeurIPS 2023'),
    "zen-nas": ("Lin et al. (ICCV 2021)",
                'Lin, Wang, Sun, Chen, Sun, Qian, Li & Jin, "Zen-NAS: A Zero-Shot NAS for '
                'High-Performance Image Recognition", ICCV 2021'),
}
"""Key -> (short citation, full citation)."""


def cite(key: str, where: str = "") -> str:
    """The full citation of paper ``key``, followed by ``where`` (a section, theorem, figure).

    Example:
        >>> cite("expressivity", "section 2.1")[:38]
        'Raghu, Poole, Kleinberg, Ganguli & Soh'
    """
    return PAPERS[key][1] + (f", {where}" if where else "")


def short(key: str, where: str = "") -> str:
    """The short citation of paper ``key`` (authors and venue), followed by ``where``."""
    return PAPERS[key][0] + (f", {where}" if where else "")
