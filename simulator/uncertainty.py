"""How well the rows pin each fitted parameter: standard errors and correlations from the fit's
linearisation.

Near the fitted values theta the rows' weighted log errors move as w r(theta + d) ~ w (r + J d)
(J: the Jacobian the fit steered by, w: each row's weight under the loss). Their scatter left
around the fit, s^2 = |w r|^2 / (n - p) over the n rows that some free parameter moves and
the p free parameters, carried through J gives the covariance of the fitted values,

    cov = s^2 (J' W J)^-1,   W = diag(w^2),

whose diagonal's square roots are the standard errors and whose normalised off-diagonal are
the correlations: two parameters that speed up the same rows in the same proportion trade
against each other (correlation near -1), and the rows fix only their combination. The
scatter is mostly the model's own error on rows whose mechanism it lacks, not measurement
noise, so a standard error says how far the parameter could move before the rows object, not
a confidence interval in the statistical sense. A parameter at one of its bounds, or whose
column no row moves, has none; one that only a combination with others determines (J' W J
singular) has an infinite one; with no more rows than free parameters there is no scatter
to measure and none has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

# Within this share of its range from a bound a parameter counts as at the bound.
AT_BOUND = 1e-3
# Singular values below this share of the largest leave a combination undetermined.
SINGULAR = 1e-9
# Correlations at least this strong are reported.
CORRELATED = 0.8

NO_ROW, AT_A_BOUND, NOT_IDENTIFIABLE = "no row", "at a bound", "not identifiable"
TOO_FEW_ROWS = "no more rows than free parameters"
NOT_MEASURED = "Jacobian column not measured"


@dataclass(frozen=True, slots=True, kw_only=True)
class Spread:
    """Standard error per parameter key (NaN where `undetermined` says why there is none,
    inf where only a combination with others is determined), and the pairs whose fitted values
    correlate at least CORRELATED, strongest first."""

    std_errors: dict[str, float] = field(default_factory=dict)
    undetermined: dict[str, str] = field(default_factory=dict)
    correlations: tuple[tuple[str, str, float], ...] = ()


def _reasons(jacobian: np.ndarray, x: np.ndarray, lower: np.ndarray, upper: np.ndarray,
             measured: np.ndarray) -> list[str | None]:
    """Why each column has no standard error, None where it may have one."""
    width = upper - lower
    return [NOT_MEASURED if not done else NO_ROW if not np.any(column) else
            AT_A_BOUND if min(value - low, high - value) <= AT_BOUND * span else None
            for column, value, low, high, span, done
            in zip(jacobian.T, x, lower, upper, width, measured)]


def _covariance(weighted: np.ndarray, residual: np.ndarray, scale: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(covariance of the free parameters, which of them only a combination determines), from
    the weighted Jacobian's SVD in units of each parameter's range (`scale`)."""
    rows, free = weighted.shape
    _, singular, vt = np.linalg.svd(weighted * scale, full_matrices=False)
    kept = singular > SINGULAR * singular[0]
    variance = float(residual @ residual) / (rows - free)
    basis = vt[kept].T / singular[kept]
    covariance = variance * (basis @ basis.T) * np.outer(scale, scale)
    return covariance, np.any(np.abs(vt[~kept]) > 0.1, axis=0)


def parameter_spread(keys: list[str], jacobian: np.ndarray, residual: np.ndarray,
                     weights: np.ndarray, x: np.ndarray, lower: np.ndarray,
                     upper: np.ndarray, measured: np.ndarray) -> Spread:
    """The standard errors and strong correlations of the fitted values `x` of `keys` (see the
    module docstring); `jacobian` is d residual / d parameter, one row per row of `residual`
    (log errors) and `weights` (each row's weight under the loss), its columns where
    `measured` is False never measured."""
    reasons = _reasons(jacobian, x, lower, upper, measured)
    free = [i for i, reason in enumerate(reasons) if reason is None]
    undetermined = {keys[i]: reason for i, reason in enumerate(reasons) if reason is not None}
    std = dict.fromkeys(keys, math.nan)
    informing = np.any(jacobian[:, free] != 0, axis=1)
    if free and np.count_nonzero(informing) <= len(free):
        undetermined.update((keys[i], TOO_FEW_ROWS) for i in free)
        free = []
    if not free:
        return Spread(std_errors=std, undetermined=undetermined)
    covariance, blind = _covariance(jacobian[np.ix_(informing, free)]
                                    * weights[informing, None],
                                    (residual * weights)[informing], (upper - lower)[free])
    for a, i in enumerate(free):
        std[keys[i]] = math.inf if blind[a] else math.sqrt(max(float(covariance[a, a]), 0.0))
        if blind[a]:
            undetermined[keys[i]] = NOT_IDENTIFIABLE
    seen = [a for a in range(len(free)) if not blind[a]]
    return Spread(std_errors=std, undetermined=undetermined,
                  correlations=_strong_pairs([keys[free[a]] for a in seen],
                                             covariance[np.ix_(seen, seen)]))


def _strong_pairs(names: list[str], covariance: np.ndarray) -> tuple[tuple[str, str, float], ...]:
    """The pairs of `names` whose correlation is at least CORRELATED, strongest first (none
    for a value of zero spread)."""
    deviation = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    pairs = [(names[a], names[b], float(covariance[a, b] / (deviation[a] * deviation[b])))
             for a, b in combinations(range(len(names)), 2) if deviation[a] and deviation[b]]
    return tuple(sorted((pair for pair in pairs if abs(pair[2]) >= CORRELATED),
                        key=lambda pair: -abs(pair[2])))
