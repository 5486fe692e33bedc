"""Results by tag, HealthBench's way, from the verdicts a ``criteria`` rollout keeps in ``rollout.criteria``
(``rubrics.types.CriteriaVerdicts``).

The per-example numbers and their aggregation follow OpenAI simple-evals' ``healthbench_eval.py``
(``calculate_score``, ``HealthBenchEval.grade_sample``, ``_compute_clipped_stats``):

- an example's ``overall_score`` is the points of the criteria met over the positive points, *not* clipped
  (pitfalls can push it below 0); it is undefined without positive points;
- each example tag (``theme:...``) scores the example's overall score;
- each criterion tag (``axis:accuracy``) scores the same formula over only the criteria carrying it, and
  only where those have positive points (a tag found only on pitfalls has no score);
- a tag's reported score is the mean of its unclipped values, clipped to [0, 1] after averaging, with
  ``n`` and the standard deviation of 1000 bootstrap resamples of that clipped mean.

Two departures: the bootstrap draws from a seeded generator (simple-evals uses numpy's global one), and each
tag also gets the project's 95% interval of the unclipped mean, clustered by example
(``rubrics.intervals.clustered_mean_ci``): several rollouts of one example are one piece of evidence,
which HealthBench's i.i.d. bootstrap ignores.

The training reward (``CriteriaVerdicts.score``) is clipped per rollout instead; these numbers are
for reports and logs, never for advantages.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rubrics.intervals import clustered_mean_ci
from rubrics.types import CriteriaVerdicts, CriterionVerdict

OVERALL = "overall"
"""The key of the score over all criteria in ``tag_scores``."""
BOOTSTRAP_SAMPLES = 1000
"""Resamples behind ``TagScore.bootstrap_std`` (simple-evals' number)."""


@dataclass(frozen=True)
class TagScore:
    """One row of the by-tag table: a tag's (or ``overall``'s) score over an evaluation."""

    name: str
    """The tag (``theme:emergency_referrals``, ``axis:accuracy``) or ``overall``."""
    n: int
    """Values averaged: rollouts in which the tag has a score (HealthBench's ``n_samples``)."""
    examples: int
    """Distinct examples among them (the clusters of ``ci95``)."""
    mean_clipped: float
    """HealthBench's reported score: the mean of the unclipped values, then clipped to [0, 1]."""
    mean_unclipped: float
    """The mean of the unclipped values (below 0 when pitfalls outweigh what was earned)."""
    bootstrap_std: float
    """Standard deviation of ``mean_clipped`` over 1000 resamples of the values with replacement (seeded)."""
    ci95: float
    """Half-width of the 95% interval of ``mean_unclipped``, clustered by example; NaN under two examples."""
    pass_rate: tuple[int, int]
    """(passed, judged) over the criteria carrying the tag (for ``overall`` and example tags: all criteria of
    those rollouts). A criterion passes when met; a pitfall (negative weight) when not met."""


# -- one example ------------------------------------------------------------------------------------------


def _score(verdicts: Iterable[CriterionVerdict]) -> float | None:
    """Points of the criteria met over the positive points, unclipped; None without positive points."""
    verdicts = list(verdicts)
    possible = math.fsum(float(v.weight) for v in verdicts if float(v.weight) > 0)
    if possible <= 0:
        return None
    return math.fsum(float(v.weight) for v in verdicts if v.met) / possible


def _tags(verdict: CriterionVerdict) -> list[str]:
    return list(dict.fromkeys(str(t) for t in verdict.tags))


def example_metrics(verdicts: Sequence[CriterionVerdict], example_tags: Sequence[str]) -> dict[str, float]:
    """One graded reply's metrics, as HealthBench's ``grade_sample`` makes them: ``overall_score``, each
    example tag at the overall score, and each criterion tag over its own criteria where those have positive
    points. ``verdicts`` carry ``weight``, ``met`` and ``tags``. Without positive points there is no overall
    score, hence no example-tag scores either. A criterion tag that is also an example tag takes the
    criterion-level value, as in simple-evals (where the later update wins)."""
    out: dict[str, float] = {}
    overall = _score(verdicts)
    if overall is not None:
        out["overall_score"] = overall
        out.update(dict.fromkeys(example_tags, overall))
    by_tag: dict[str, list[CriterionVerdict]] = defaultdict(list)
    for verdict in verdicts:
        for tag in _tags(verdict):
            by_tag[tag].append(verdict)
    for tag, subset in by_tag.items():
        score = _score(subset)
        if score is not None:
            out[tag] = score
    return out


def _passed(verdict: CriterionVerdict) -> bool:
    return verdict.met == (float(verdict.weight) >= 0)


# -- an evaluation ----------------------------------------------------------------------------------------


@dataclass
class _Tally:
    """What one tag gathers over the rollouts before the statistics."""

    values: list[float] = field(default_factory=list)
    clusters: list[str] = field(default_factory=list)
    passed: int = 0
    judged: int = 0


def _tallies(graded: Iterable[CriteriaVerdicts]) -> dict[str, _Tally]:
    """Per tag (``overall`` first, then sorted): its values with their example ids, and its pass counts."""
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    for criteria in graded:
        verdicts = criteria.verdicts
        example_tags = list(dict.fromkeys(str(t) for t in criteria.example_tags))
        metrics = example_metrics(verdicts, example_tags)
        for name, value in metrics.items():
            tally = tallies[OVERALL if name == "overall_score" else name]
            tally.values.append(value)
            tally.clusters.append(criteria.example)
        criterion_tags: dict[str, list[CriterionVerdict]] = defaultdict(list)
        for verdict in verdicts:
            for tag in _tags(verdict):
                criterion_tags[tag].append(verdict)
        for name in dict.fromkeys((OVERALL, *example_tags, *criterion_tags)):
            counted = verdicts if name == OVERALL else criterion_tags.get(name, verdicts)
            tallies[name].passed += sum(_passed(v) for v in counted)
            tallies[name].judged += len(counted)
    names = sorted(name for name, t in tallies.items() if t.values and name != OVERALL)
    head = [OVERALL] if tallies.get(OVERALL) and tallies[OVERALL].values else []
    return {name: tallies[name] for name in (*head, *names)}


def clipped_mean(values: Sequence[float]) -> float:
    """HealthBench's score: the mean, clipped to [0, 1] after averaging."""
    return float(np.clip(np.mean(values), 0.0, 1.0))


def bootstrap_std(values: Sequence[float], seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> float:
    """The standard deviation (population, as ``np.std``) of ``clipped_mean`` over ``samples`` resamples of
    ``values`` with replacement, each as long as ``values``, from ``np.random.default_rng(seed)``."""
    values_N = np.asarray(values, dtype=float)  # [N]
    rng = np.random.default_rng(seed)
    picks_SN = rng.integers(0, len(values_N), size=(samples, len(values_N)))  # [samples, N]
    means_S = np.clip(values_N[picks_SN].mean(axis=1), 0.0, 1.0)  # [samples]
    return float(np.std(means_S))


def tag_scores(graded: Sequence[CriteriaVerdicts], seed: int = 0) -> dict[str, TagScore]:
    """Every tag's ``TagScore`` over the verdicts of an evaluation's graded rollouts (the caller leaves out
    errored ones): ``overall`` first, then the tags sorted. Every tag's bootstrap starts from ``seed``, so a
    tag's numbers do not depend on which other tags exist."""
    out = {}
    for name, tally in _tallies(graded).items():
        mean, ci = clustered_mean_ci(tally.values, tally.clusters)
        out[name] = TagScore(
            name=name,
            n=len(tally.values),
            examples=len(set(tally.clusters)),
            mean_clipped=clipped_mean(tally.values),
            mean_unclipped=mean,
            bootstrap_std=bootstrap_std(tally.values, seed),
            ci95=ci,
            pass_rate=(tally.passed, tally.judged),
        )
    return out


# -- reports ----------------------------------------------------------------------------------------------


def _cells(score: TagScore) -> list[str]:
    passed, judged = score.pass_rate
    rate = f"{passed}/{judged} ({passed / judged:.0%})" if judged else "-"
    ci = "-" if math.isnan(score.ci95) else f"±{score.ci95:.3f}"
    n = f"{score.n} ({score.examples} ex.)" if score.examples != score.n else str(score.n)
    return [score.name, n, f"{score.mean_clipped:.3f}", f"±{score.bootstrap_std:.3f}", ci, rate]


_HEADER = ["tag", "n", "score (clipped mean)", "± bootstrap std", "95% CI clustered", "criteria passed"]


def format_tag_table(scores: Mapping[str, TagScore]) -> list[str]:
    """A markdown table, one row per tag (``overall`` first)."""
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(_cells(s)) + " |" for s in scores.values()]
    return lines


def metric_name(tag: str) -> str:
    """``tag`` with every character other than ``[A-Za-z0-9_:.-]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_:.\-]", "_", tag)


def step_tag_metrics(graded: Sequence[CriteriaVerdicts]) -> dict[str, float]:
    """One training step's criteria metrics over the verdicts of its graded rollouts (the caller leaves out
    errored ones; no bootstrap, cheap): ``criteria/score_clipped_mean``
    (HealthBench's score of the step's rollouts), ``criteria/met_fraction`` (criteria met over judged),
    ``criteria/pitfalls_met_fraction`` (negative-weight criteria met over judged),
    ``criteria/rule_judged_fraction`` (verdicts given by a rule, not the LLM), and per tag
    ``tag/<tag>/score`` (clipped mean) and ``tag/<tag>/pass_rate`` (as ``TagScore.pass_rate``). A metric
    without a denominator is left out."""
    verdicts = [v for criteria in graded for v in criteria.verdicts]
    pitfalls = [v for v in verdicts if float(v.weight) < 0]
    out: dict[str, float] = {}
    tallies = _tallies(graded)
    if OVERALL in tallies:
        out["criteria/score_clipped_mean"] = clipped_mean(tallies[OVERALL].values)
    if verdicts:
        out["criteria/met_fraction"] = sum(v.met for v in verdicts) / len(verdicts)
        out["criteria/rule_judged_fraction"] = sum(v.judged_by == "rule" for v in verdicts) / len(verdicts)
    if pitfalls:
        out["criteria/pitfalls_met_fraction"] = sum(v.met for v in pitfalls) / len(pitfalls)
    for name, tally in tallies.items():
        if name == OVERALL:
            continue
        out[f"tag/{metric_name(name)}/score"] = clipped_mean(tally.values)
        if tally.judged:
            out[f"tag/{metric_name(name)}/pass_rate"] = tally.passed / tally.judged
    return out
