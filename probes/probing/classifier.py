"""The head-selection probe as a plain scikit-learn classifier over pair features.

:class:`HeadSelectionProbe` scores (dependent, candidate) rows built by
:func:`~probes.probing.features.pair_features`: ``y = 1`` for the gold head.
It is a :class:`~sklearn.linear_model.LogisticRegression` behind the standard
classifier contract, so it works with pipelines, grid search and
``cross_val_score``; :meth:`HeadSelectionProbe.select_heads` turns row scores
into one head per dependent (the structured step kept out of ``score``, which
stays scikit-learn's row accuracy). For whole corpora, prefer the streaming
torch probes (:mod:`probes.probing.parsers`): this one holds its rows in memory.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["HeadSelectionProbe"]


class HeadSelectionProbe(ClassifierMixin, BaseEstimator):
    """Clark et al. (2019) §5 attention probe as a pairwise classifier.

    Args:
        C: inverse L2 regularisation strength.
        max_iter: solver iterations.
        class_weight: as LogisticRegression (``"balanced"`` counters the one-positive-per-group skew).
        random_state: seed passed to the solver.

    Attributes:
        model_: the fitted LogisticRegression.
        classes_: labels seen in ``fit``.
        n_features_in_: number of features.
        n_iter_: solver iterations run.
    """

    def __init__(
        self,
        *,
        C: float = 1.0,
        max_iter: int = 200,
        class_weight: dict | str | None = None,
        random_state: int | None = None,
    ) -> None:
        self.C = C
        self.max_iter = max_iter
        self.class_weight = class_weight
        self.random_state = random_state

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> HeadSelectionProbe:
        """Fit on pair rows ``X`` ``(n_pairs, n_features)`` and labels ``y`` ``(n_pairs,)``; returns ``self``."""
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.model_ = LogisticRegression(
            C=self.C, max_iter=self.max_iter, class_weight=self.class_weight, random_state=self.random_state
        ).fit(X, y)
        self.classes_ = self.model_.classes_
        self.n_iter_ = self.model_.n_iter_
        return self

    def decision_function(self, X: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Confidence scores, as LogisticRegression."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.model_.decision_function(X)

    def predict_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``(n_pairs, n_classes)`` class probabilities."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.model_.predict_proba(X)

    def predict_log_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``(n_pairs, n_classes)`` log-probabilities."""
        return np.log(self.predict_proba(X))

    def predict(self, X: npt.ArrayLike) -> npt.NDArray:
        """Predicted label of each row."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return self.model_.predict(X)

    def select_heads(
        self, X: npt.ArrayLike, groups: npt.ArrayLike, candidates: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """One head per dependent: the candidate with the highest probability of the positive class.

        Args:
            X: ``(n_pairs, n_features)`` pair rows.
            groups: ``(n_pairs,)`` dependent id of each row.
            candidates: ``(n_pairs,)`` candidate id of each row (0 = ROOT).

        Returns:
            ``(group_ids, heads)``: sorted unique groups and the chosen candidate of each
            (ties to the first row).
        """
        score = self.predict_proba(X)[:, -1]  # positive class = the largest label (1)
        groups = np.asarray(groups)
        candidates = np.asarray(candidates)
        order = np.lexsort((np.arange(len(score)), -score, groups))  # by group, best score, then row order
        first = np.r_[True, groups[order][1:] != groups[order][:-1]]
        return groups[order][first], candidates[order][first].astype(np.int64)
