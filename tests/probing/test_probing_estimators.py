"""The probes follow scikit-learn's estimator contract."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from probes.probing import (
    AttnEmbParser,
    AttnParser,
    DistancesEmbParser,
    GloveVectors,
    HeadSelectionProbe,
    PerHeadLabelProbe,
    PerHeadProbe,
    RightBranching,
)
from probes.probing.synthetic import planted_pairs


@parametrize_with_checks([HeadSelectionProbe(), HeadSelectionProbe(C=0.1, class_weight="balanced", random_state=0)])
def test_head_selection_probe_passes_sklearn_checks(estimator, check):
    check(estimator)


def _vectors() -> GloveVectors:
    rng = np.random.default_rng(0)
    return GloveVectors({f"w{i}": i for i in range(40)}, rng.normal(size=(40, 4)).astype(np.float32), "syn")


STREAMING = [
    AttnParser(progress=False),
    AttnEmbParser(_vectors(), progress=False),
    DistancesEmbParser(_vectors(), hidden=8, progress=False),
    PerHeadProbe(progress=False),
    PerHeadLabelProbe(progress=False),
]


@pytest.mark.parametrize("estimator", STREAMING, ids=lambda e: type(e).__name__)
def test_streaming_probes_follow_the_contract(estimator):
    """The checks of parametrize_with_checks that apply to estimators whose X is a stream of
    (Sentence, WordAttention) pairs: constructor stores parameters only, clone / get_params /
    set_params round-trip, fit returns self, fitted attributes end in '_', unfitted use raises
    NotFittedError, refitting gives the same result (seeded)."""
    pairs = list(planted_pairs(12, random_state=0))
    params = estimator.get_params()
    fresh = clone(estimator)
    assert fresh.get_params().keys() == params.keys()
    assert not [a for a in vars(fresh) if a.endswith("_")]  # nothing learned before fit
    assert fresh.set_params(random_state=3) is fresh and fresh.random_state == 3
    s, a = pairs[0]
    with pytest.raises(NotFittedError):
        fresh.predict_one(s, a) if isinstance(fresh, PerHeadLabelProbe) else fresh.predict_log_proba_one(s, a)
    assert fresh.fit(pairs) is fresh
    learned = [k for k in vars(fresh) if k.endswith("_") and not k.startswith("_")]
    assert learned
    again = clone(fresh).fit(pairs)
    if isinstance(fresh, PerHeadLabelProbe):
        assert np.array_equal(fresh.predict_one(s, a), again.predict_one(s, a))
    else:
        assert np.allclose(fresh.predict_log_proba_one(s, a), again.predict_log_proba_one(s, a))


def test_right_branching_contract():
    rb = RightBranching()
    assert rb.get_params() == {}
    pairs = list(planted_pairs(2, random_state=0))
    with pytest.raises(NotFittedError):
        rb.predict(pairs)
    assert rb.fit(pairs) is rb
