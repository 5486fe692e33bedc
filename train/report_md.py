"""``report.md``: the held-out evaluations of a run before and after training (and after the warm start),
beside the rubric probe's trivial policies, with intervals clustered by scenario, for the held-out set and for
each further held-out set (``env.extra_eval_scenarios``); and sample replies before and after. It is written
from the run's held-out results as the trainer kept them (``train.run_folder.HeldOutResults``), or as
``read_held_out`` reads them back from a finished run's folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from envs.evaluation import Evaluation
from envs.rollout import ScoredRollout
from rubrics.multistep.probe import (
    PolicyScore,
    ProbeRollout,
    format_table,
    paired_difference,
    score_rollouts,
)
from train.config import TRAIN_SET
from train.rollout_metrics import diversity_metrics
from train.run_folder import AFTER, BEFORE, WARM_START, EvalPoint, HeldOutResults, RunFolder


def model_score(name: str, evaluated: Sequence[ScoredRollout]) -> PolicyScore:
    """The probe's statistics (``rubrics.multistep.probe.PolicyScore``) of a model's evaluated rollouts: the
    mean reward with its interval clustered by scenario, over the rollouts that did not fail (as the
    evaluation's own summary)."""
    rollouts = _healthy_rollouts(evaluated)
    roots = sorted({res.name for r in rollouts for res in r.results if res.level == 0})
    return score_rollouts(name, rollouts, roots)


def _healthy_rollouts(evaluated: Sequence[ScoredRollout]) -> list[ProbeRollout]:
    """The rollouts that did not fail (no error, a finite reward), as the probe's ``ProbeRollout``s: the ones
    every statistic of the report is computed over, keyed by the same scenario names."""
    return [r.for_probe() for r in evaluated if r.healthy]


def write_report_md(
    run: RunFolder,
    held_out: HeldOutResults,
    samples: int = 3,
    sections: Callable[[Mapping[str, Sequence[ScoredRollout]]], list[str]] | None = None,
    estimator: str = "",
) -> Path:
    """``report.md`` of ``run``: the held-out evaluation before and after training side by side (and after the
    supervised warm start when the run had one), and sample replies before and after on the same scenarios;
    then ``sections`` (the environment's ``report_sections``) of the evaluations. ``estimator``
    (``AdvantageConfig.describe``) is named under the title.

    ``held_out`` holds the evaluations and the probe's rows of every held-out set. Every mean reward is given
    with its 95% interval clustered by scenario (the rollouts of one scenario are not independent), the same
    number in the headline and in each table; the change in mean reward with the interval of the mean of its
    per-scenario differences (``paired_difference``). Diversity and repetition are those of
    ``diversity_metrics`` over every held-out reply; the repetition rate also over each rollout's replies
    joined (a reply that restates the previous one counts there). Returns the file's path.

    Raises:
        ValueError: the held-out set has no evaluation before or after training.
    """
    evals, scores = _evaluations(held_out)
    before_rows, after = evals[BEFORE].rollouts, evals[AFTER]
    before_score, after_score = scores[BEFORE], scores[AFTER]
    change, change_ci, _ = paired_difference(after_score, before_score)
    verdict = "rose by more than" if change > change_ci else "did not rise by more than"
    lines = [
        f"# Run report: {run.root.name}",
        "",
        *([f"Advantage estimator: {estimator}.", ""] if estimator else []),
        f"Held-out mean reward {verdict} its 95% interval: {before_score.reward_mean:.3f} ± "
        f"{before_score.reward_ci95:.3f} before, "
        f"{after_score.reward_mean:.3f} ± {after_score.reward_ci95:.3f} after, "
        f"change {change:+.3f} ± {change_ci:.3f} ({after.summary.rollouts} rollouts on "
        f"{after.summary.examples} scenarios; intervals clustered by scenario).",
        "",
        *_summary_table(evals, scores),
        "",
        *_beside_trivial_policies(held_out, scores, evals),
        *_training_set(held_out),
        *_further_sets(held_out),
        *_pooled(held_out),
        *(sections({_MODEL_ROWS[when]: e.rollouts for when, e in evals.items()}) if sections else []),
        f"![curves]({run.report_png.name})",
        "",
        "## Sample replies, before and after",
        "",
        *_sample_replies(before_rows, after.rollouts, samples),
    ]
    run.report_md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run.report_md


def _evaluations(
    held_out: HeldOutResults, name: str = ""
) -> tuple[dict[EvalPoint, Evaluation], dict[EvalPoint, PolicyScore]]:
    """The evaluations of the held-out set (``name`` ""), or of the further set ``name``: before, after the
    warm start when there was one, and after training, and their scores."""
    evals = {p: e for p in _MODEL_ROWS if (e := held_out.evaluation(p, name)) is not None}
    for when in (BEFORE, AFTER):
        if when not in evals:
            raise ValueError(f"{when.folder_name(name)}: no such held-out evaluation in the run")
    scores = {when: model_score(_MODEL_ROWS[when], e.rollouts) for when, e in evals.items()}
    return evals, scores


def _evaluated(held_out: HeldOutResults, name: str) -> bool:
    """Whether the set ``name`` was evaluated before and after training."""
    return None not in (held_out.evaluation(BEFORE, name), held_out.evaluation(AFTER, name))


def _further_names(held_out: HeldOutResults) -> list[str]:
    """The further held-out sets evaluated before and after training, by name (not the training sample)."""
    return sorted(
        name for name in held_out.sets if name not in ("", TRAIN_SET) and _evaluated(held_out, name)
    )


def _training_set(held_out: HeldOutResults) -> list[str]:
    """The fixed sample of training scenarios (``logging.train_eval_sample``), evaluated as the held-out sets:
    its table, the trained model minus each earlier evaluation and each trivial policy, paired by scenario,
    and whether the reward rose beyond its interval there. Empty without the sample."""
    if not _evaluated(held_out, TRAIN_SET):
        return []
    evals, scores = _evaluations(held_out, TRAIN_SET)
    start = WARM_START if WARM_START in scores else BEFORE
    diff, half, n = paired_difference(scores[AFTER], scores[start])
    verdict = "rose by more than" if diff - half > 0 else "did not rise by more than"
    lines = [
        f"## Training scenarios: a fixed sample of {n}",
        "",
        f"On scenarios it trained on, the reward {verdict} its interval from the {scores[start].policy} "
        f"model: {scores[start].reward_mean:.3f} to {scores[AFTER].reward_mean:.3f}, {diff:+.3f} ± "
        f"{half:.3f}, paired by scenario. Where the held-out sets do not follow a rise here, the policy "
        "learned these scenarios and not the task.",
        "",
        *_summary_table(evals, scores, "training"),
        "",
    ]
    others = [row for when, row in scores.items() if when != AFTER] + (held_out.probe(TRAIN_SET) or [])
    lines += [_versus(other.policy, *paired_difference(scores[AFTER], other)) for other in others]
    return [*lines, *_first_decision(evals), ""]


def _further_sets(held_out: HeldOutResults) -> list[str]:
    """A section per further held-out set: its table, and the trained model minus each earlier evaluation,
    paired by scenario."""
    lines = []
    for name in _further_names(held_out):
        evals, scores = _evaluations(held_out, name)
        lines += [f"## Further held-out set: {name}", "", *_summary_table(evals, scores), ""]
        for when, score in scores.items():
            if when != AFTER:
                diff, half, n = paired_difference(scores[AFTER], score)
                lines.append(f"- trained minus {score.policy}: {diff:+.3f} ± {half:.3f} over {n} scenarios")
        lines += [*_first_decision(evals), ""]
    return lines


def _versus(policy: str, diff: float, half: float, n: int) -> str:
    """One line: the trained model minus ``policy``, paired by scenario, and whether it is beyond the
    interval."""
    verdict = "above" if diff - half > 0 else "below" if diff + half < 0 else "not distinguishable from"
    return f"- {policy}: {diff:+.3f} ± {half:.3f} over {n} scenarios: trained is {verdict} it"


def _pooled(held_out: HeldOutResults) -> list[str]:
    """With further held-out sets: the trained model minus every other row (the earlier evaluations, and each
    trivial policy probed on every set), paired by scenario over every held-out set together. Empty with one
    set."""
    names = ["", *_further_names(held_out)]
    if len(names) < 2:
        return []
    pooled: dict[str, list[PolicyScore]] = {}
    for name in names:
        rows = list(_evaluations(held_out, name)[1].values())
        rows += held_out.probe(name) or []
        for row in rows:  # scenario keys carry their set: two sets may hold scenarios of one name
            keyed = {f"{name or 'held-out'}/{k}": v for k, v in row.scenario_rewards.items()}
            pooled.setdefault(row.policy, []).append(replace(row, scenario_rewards=keyed))

    def merged(parts: list[PolicyScore]) -> PolicyScore:
        return replace(
            parts[0], scenario_rewards={k: v for p in parts for k, v in p.scenario_rewards.items()}
        )

    complete = {policy: merged(parts) for policy, parts in pooled.items() if len(parts) == len(names)}
    trained = complete.pop(_MODEL_ROWS[AFTER])
    sets = ", ".join(name or "held-out" for name in names)
    lines = [
        f"## Pooled over every held-out set ({sets})",
        "",
        "Trained minus each row, paired by scenario:",
        "",
    ]
    for policy, other in complete.items():
        lines.append(_versus(policy, *paired_difference(trained, other)))
    return [*lines, ""]


def _first_decision(evals: dict[EvalPoint, Evaluation]) -> list[str]:
    """The trained model minus each earlier evaluation in how often the first decision (the DAG's level-0
    requirements, all judged right) is right, paired by scenario over the same rollouts as the reward: the
    part of the reward GRPO sees first."""

    def right(rows: Sequence[ScoredRollout]) -> PolicyScore:
        """The probe's statistics with each rollout's reward replaced by 1 if its first decision is right."""
        scored = []
        for rollout in _healthy_rollouts(rows):
            roots = [r for r in rollout.results if r.level == 0]
            scored.append(replace(rollout, reward=float(bool(roots) and all(r.correct for r in roots))))
        return score_rollouts("", scored, [])

    if not any(r.results for e in evals.values() for r in _healthy_rollouts(e.rollouts)):
        return []  # no requirement DAG (a criteria environment): no first decision
    after = right(evals[AFTER].rollouts)
    lines = []
    for when, e in evals.items():
        if when != AFTER:
            diff, half, n = paired_difference(after, right(e.rollouts))
            lines.append(
                f"- first decision right, trained minus {_MODEL_ROWS[when]}: {diff:+.3f} ± {half:.3f} "
                f"over {n} scenarios (fraction of rollouts)"
            )
    return lines


_MODEL_ROWS = {BEFORE: "untrained", WARM_START: "warm start only", AFTER: "trained"}
"""The evaluations of the model the report sets side by side, in this order, and the name of each."""


def _beside_trivial_policies(
    held_out: HeldOutResults, model: dict[EvalPoint, PolicyScore], evals: dict[EvalPoint, Evaluation]
) -> list[str]:
    """The model's evaluations (untrained, after the warm start when there was one, trained) beside the
    rubric probe's policies (probed by the trainer before training) on the held-out scenarios: rewards with
    intervals clustered by scenario, root accuracy per branch, pass rates per level, and the trained model's
    paired difference against each other row, in reward and in the first decision."""
    probe_rows = held_out.probe()
    if probe_rows is None:
        return []
    table = [*model.values(), *probe_rows]
    lines = ["## Held-out, beside the trivial policies", "", *format_table(table), ""]
    lines += [
        "Trained minus each row, paired by scenario (mean of the per-scenario differences, 95% t-interval); "
        "`ideal` is the ceiling, not a trivial policy:",
        "",
    ]
    for other in [row for when, row in model.items() if when != AFTER] + probe_rows:
        lines.append(_versus(other.policy, *paired_difference(model[AFTER], other)))
    return [*lines, *_first_decision(evals), ""]


def _summary_table(
    evals: dict[EvalPoint, Evaluation], scores: dict[EvalPoint, PolicyScore], label: str = "held-out"
) -> list[str]:
    """The side-by-side table of the evaluations (before, maybe after the warm start, after): reward (with
    its clustered interval, ``scores``), replies, diversity and repetition, tokens, requirement pass rates."""
    summaries = {when: e.summary for when, e in evals.items()}
    replies = {when: [m for r in e.rollouts for m in r.replies] for when, e in evals.items()}
    diversity = {when: diversity_metrics(texts) for when, texts in replies.items()}
    # a rollout's replies joined: a loop across turns (a reply restating the previous one) shows here
    whole = {when: diversity_metrics([_replies(r) for r in e.rollouts]) for when, e in evals.items()}
    names = {BEFORE: "before", WARM_START: "after the warm start", AFTER: "after"}

    def row(label: str, cell: Callable[[EvalPoint], str]) -> str:
        return f"| {label} | " + " | ".join(cell(when) for when in evals) + " |"

    lines = [
        row(label, lambda when: names[when]),
        "|---|" + "---|" * len(evals),
        row(
            "reward mean ± 95% CI (clustered)",
            lambda when: f"{scores[when].reward_mean:.3f} ± {scores[when].reward_ci95:.3f}",
        ),
        row("replies", lambda when: str(len(replies[when]))),
    ]
    for key in ("distinct_fraction", "distinct_2", "repetition_rate"):

        def share(when: EvalPoint, key: str = key) -> str:
            return f"{diversity[when][key]:.3f}"

        lines.append(row(f"{key} (per reply)", share))
    lines.append(row("repetition_rate (whole rollout)", lambda when: f"{whole[when]['repetition_rate']:.3f}"))
    lines.append(row("completion tokens", lambda when: str(summaries[when].completion_tokens)))
    for name in sorted({n for summary in summaries.values() for n in summary.pass_rates}):

        def rate(when: EvalPoint, name: str = name) -> str:
            tally = summaries[when].pass_rates.get(name)
            return f"{tally[0]}/{tally[1]}" if tally else "-"

        lines.append(row(f"requirement {name} passed", rate))
    return lines


def _sample_replies(
    before_rows: Sequence[ScoredRollout], after_rows: Sequence[ScoredRollout], samples: int
) -> list[str]:
    """Up to ``samples`` scenarios: the first rollout's replies before and after training."""
    lines: list[str] = []
    after_by_prompt = {_prompt_key(r): r for r in reversed(after_rows)}  # the first rollout of each scenario
    shown: set[str] = set()
    for row in before_rows:
        key = _prompt_key(row)
        if key in shown or key not in after_by_prompt or len(shown) == samples:
            continue
        shown.add(key)
        lines += [f"### {_quote(key, 300)}", ""]
        for when, sample in (("before", row), ("after", after_by_prompt[key])):
            lines.append(f"**{when}** (reward {sample.reward:.3f}):")
            lines += ["", *(f"> {text}" for text in _quote(_replies(sample), 1200).splitlines()), ""]
    return lines


def _replies(rollout: ScoredRollout) -> str:
    """The model's replies of one rollout, joined by blank lines."""
    return "\n\n".join(rollout.replies)


def _prompt_key(rollout: ScoredRollout) -> str:
    """The scenario a rollout played: its last prompt message."""
    prompt = rollout.prompt
    return str(prompt[-1].get("content", "")) if isinstance(prompt, list) and prompt else str(prompt)


def _quote(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
