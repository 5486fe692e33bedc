"""The end-of-run PNG report of the main curves, and the diversity metrics a run logs every step.

``write_report`` plots whatever keys ``metrics.jsonl`` holds, one panel per family of metric, so that each
panel holds values of one scale. A key joins the first panel, in the order below, whose regular expression
it contains (``re.search``); ``reward/mean`` and ``reward/std`` make the first panel, and the figure shows the
panels in a reading order (reward, evaluation, requirements, diversity, ..., time):

==================================  ================================================  ==========================
panel                               pattern                                           e.g.
==================================  ================================================  ==========================
Reward (mean ± std)                 ``reward/mean`` with a band from ``reward/std``   ``reward/mean``
Held-out evaluation                 ``^eval``                                         ``eval_final/reward_mean``
Time split (s per step)             ``^time/``                                        ``time/train_s``
Throughput (tokens/s)               ``per_s|throughput``                              ``tokens_per_s/generate``
Memory (GiB)                        ``^memory/``                                      ``memory/peak_rss_gib``
Diversity and repetition            ``distinct|repetition|diversity``                 ``diversity/distinct_2``
Requirements: pass rate and depth   ``requirement|^req/|depth``                       ``req/call_ems``
Reward per function                 ``^reward/|^reward_fn/``                          ``reward_fn/keywords``
Advantages and groups               ``advantage|zero_var|^groups/``                   ``advantage/std``
Policy and importance ratios        ``ratio``                                         ``train/is/ratio_mean``
KL and clip fractions               ``kl`` between separators, ``clip``, ``is/``      ``train/clip/low_frac``
Entropy                             ``entropy``                                       ``train/entropy``
Stop reasons and errors             ``^stop/|error``                                  ``stop/length``
Turns and truncation                ``turns|truncat``                                 ``turns/mean``
Lengths (tokens)                    ``length|tokens``                                 ``length/completion_...``
Loss                                ``loss``                                          ``train/loss``
Gradient norm                       ``grad``                                          ``train/grad_norm``
Learning rate                       ``learning_rate`` or ``lr`` between separators    ``train/learning_rate``
Other                               anything else (the first 8 keys)                  ``rollouts``
==================================  ================================================  ==========================
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")

_REWARD_TITLE = "Reward (mean ± std)"
_PANELS: tuple[tuple[str, str], ...] = (  # (title, pattern) in matching order: the first match wins
    ("Held-out evaluation", r"^eval"),
    ("Time split (s per step)", r"^time/"),
    ("Throughput (tokens/s)", r"per_s|throughput"),
    ("Memory (GiB)", r"^memory/"),
    ("Diversity and repetition", r"distinct|repetition|diversity"),
    ("Requirements: pass rate and depth", r"requirement|^req/|depth"),
    ("Reward per function", r"^reward/|^reward_fn/"),
    ("Advantages and groups", r"advantage|zero_var|^groups/"),
    ("Policy and importance ratios", r"ratio"),
    ("KL and clip fractions", r"(^|[/_])kl([/_]|$)|clip|(^|/)is/"),
    ("Entropy", r"entropy"),
    ("Stop reasons and errors", r"^stop/|error"),
    ("Turns and truncation", r"turns|truncat"),
    ("Lengths (tokens)", r"length|tokens"),
    ("Loss", r"loss"),
    ("Gradient norm", r"grad"),
    ("Learning rate", r"learning_rate|(^|[/_])lr([/_]|$)"),
)
_DISPLAY_ORDER = (  # reading order of the figure
    _REWARD_TITLE,
    "Held-out evaluation",
    "Requirements: pass rate and depth",
    "Reward per function",
    "Diversity and repetition",
    "Lengths (tokens)",
    "Turns and truncation",
    "Stop reasons and errors",
    "KL and clip fractions",
    "Policy and importance ratios",
    "Entropy",
    "Advantages and groups",
    "Loss",
    "Gradient norm",
    "Learning rate",
    "Time split (s per step)",
    "Throughput (tokens/s)",
    "Memory (GiB)",
    "Other",
)
_REWARD_MEAN, _REWARD_STD = "reward/mean", "reward/std"
_NOT_METRICS = {"step", "wall_time"}
_MAX_OTHER = 8
_MAX_LEGEND = 12


def diversity_metrics(texts: list[str], *, n: int = 4, min_count: int = 3) -> dict[str, float]:
    """Diversity and repetition of a batch of completions (pass each rollout's model text, joined).

    Words are ``\\w+`` runs of the lower-cased text.

    - ``distinct_fraction`` = (distinct completions) / (completions), comparing texts with surrounding
      whitespace stripped and inner whitespace runs collapsed to one space. 1.0: no two are alike.
    - ``distinct_2`` = (distinct word bigrams over the whole batch) / (word bigrams over the whole batch),
      the corpus-level distinct-2 of Li et al. (2016); 0.0 when the batch has no bigram at all.
    - ``repetition_rate`` = fraction of completions in which some word ``n``-gram occurs at least
      ``min_count`` times (default: a 4-gram three times), the signature of a repetition loop.

    Raises:
        ValueError: ``texts`` is empty.
    """
    if not texts:
        raise ValueError("diversity_metrics needs at least one completion")
    normalised = [_SPACE.sub(" ", text).strip() for text in texts]
    words = [_WORD.findall(text.lower()) for text in texts]
    bigrams = [tuple(w[i : i + 2]) for w in words for i in range(len(w) - 1)]
    looping = sum(1 for w in words if _has_repeated_ngram(w, n, min_count))
    return {
        "distinct_fraction": len(set(normalised)) / len(texts),
        "distinct_2": len(set(bigrams)) / len(bigrams) if bigrams else 0.0,
        "repetition_rate": looping / len(texts),
    }


def _has_repeated_ngram(words: list[str], n: int, min_count: int) -> bool:
    counts = Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return any(count >= min_count for count in counts.values())


def read_metrics(metrics_jsonl: str | Path) -> list[dict[str, Any]]:
    """The lines of a ``metrics.jsonl``, one per step (the last line of a step wins), sorted by step."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in Path(metrics_jsonl).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            by_step[int(row["step"])] = row
    return [by_step[step] for step in sorted(by_step)]


def panel_keys(keys: list[str]) -> dict[str, list[str]]:
    """Assign metric keys to panels (see the module docstring), in display order; empty panels are left out."""
    panels: dict[str, list[str]] = {}
    if _REWARD_MEAN in keys:
        panels[_REWARD_TITLE] = [_REWARD_MEAN]
    other: list[str] = []
    for key in sorted(keys):
        if key in _NOT_METRICS or key in (_REWARD_MEAN, _REWARD_STD):
            continue
        title = next((t for t, pattern in _PANELS if re.search(pattern, key)), None)
        if title is None:
            other.append(key)
        else:
            panels.setdefault(title, []).append(key)
    if other:
        panels["Other"] = other[:_MAX_OTHER]
    return {title: panels[title] for title in _DISPLAY_ORDER if title in panels}


def write_report(metrics_jsonl: str | Path, out_png: str | Path) -> Path:
    """Plot the run's curves from ``metrics_jsonl`` into ``out_png``; returns the PNG's path."""
    from matplotlib.figure import Figure

    rows = read_metrics(metrics_jsonl)
    keys = sorted({key for row in rows for key in row})
    panels = panel_keys(keys)
    cols = min(3, max(1, len(panels)))
    nrows = max(1, math.ceil(len(panels) / cols))
    fig = Figure(figsize=(5.2 * cols, 3.4 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, (title, panel) in zip(axes, panels.items(), strict=False):
        if title == _REWARD_TITLE:
            _plot_reward(ax, rows)
        else:
            for key in panel:
                steps, values = _series(rows, key)
                ax.plot(steps, values, label=key, marker="." if len(steps) < 30 else None)
            if len(panel) <= _MAX_LEGEND:
                ax.legend(fontsize="x-small")
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    if not panels:
        axes[0].text(0.5, 0.5, "no metrics logged", ha="center", va="center")
    fig.suptitle(f"{Path(metrics_jsonl).parent.name}: {len(rows)} steps")
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` where it was logged with a number."""
    pairs = [(row["step"], float(row[key])) for row in rows if isinstance(row.get(key), int | float)]
    return [s for s, _ in pairs], [v for _, v in pairs]


def _plot_reward(ax: Any, rows: list[dict[str, Any]]) -> None:
    steps, means = _series(rows, _REWARD_MEAN)
    ax.plot(steps, means, label=_REWARD_MEAN, color="C0", marker="." if len(steps) < 30 else None)
    std_by_step = dict(zip(*_series(rows, _REWARD_STD), strict=True))
    band = [(s, m, std_by_step[s]) for s, m in zip(steps, means, strict=True) if s in std_by_step]
    if band:
        ax.fill_between(
            [s for s, _, _ in band],
            [m - d for _, m, d in band],
            [m + d for _, m, d in band],
            color="C0",
            alpha=0.2,
            label="± std",
        )
    ax.legend(fontsize="x-small")


def write_summary(run_dir: str | Path, samples: int = 3) -> Path:
    """``report.md`` of a run: the held-out evaluation before and after training side by side (and after the
    supervised warm start, ``eval_warm_start/``, when the run had one), and sample replies before and after
    on the same scenarios.

    Reads ``eval_before/`` and ``eval_after/`` (``summary.json`` and ``rollouts.jsonl`` of each). The
    change in mean reward is given with the 95% interval of a difference of two independent means,
    ``1.96 * sqrt(se_before^2 + se_after^2)`` (each ``se`` from its own ``reward_ci95 / 1.96``). Diversity
    and repetition are those of ``diversity_metrics`` over every held-out reply; the repetition rate also
    over each rollout's replies joined (a reply that restates the previous one counts there). Returns the
    file's path.

    Raises:
        FileNotFoundError: an evaluation folder is missing (a run resumed after its last step has none new).
    """
    run_dir = Path(run_dir)
    evals = {when: _read_eval(run_dir / f"eval_{when}") for when in ("before", "after")}
    if (run_dir / "eval_warm_start" / "summary.json").is_file():
        evals = {"before": evals["before"], "warm_start": _read_eval(run_dir / "eval_warm_start"), **evals}
    (before, before_rows), (after, after_rows) = evals["before"], evals["after"]
    change = after["reward_mean"] - before["reward_mean"]
    change_ci = 1.96 * math.hypot(before["reward_ci95"] / 1.96, after["reward_ci95"] / 1.96)
    verdict = "rose by more than" if change > change_ci else "did not rise by more than"
    lines = [
        f"# Run report: {run_dir.name}",
        "",
        f"Held-out mean reward {verdict} its 95% interval: {before['reward_mean']:.3f} ± "
        f"{before['reward_ci95']:.3f} before, {after['reward_mean']:.3f} ± {after['reward_ci95']:.3f} after, "
        f"change {change:+.3f} ± {change_ci:.3f} ({after['rollouts']} rollouts on {after['examples']} scenarios).",
        "",
        *_summary_table(evals),
        "",
        *_beside_trivial_policies(run_dir, {when: rows for when, (_, rows) in evals.items()}),
        "![curves](report.png)",
        "",
        "## Sample replies, before and after",
        "",
        *_sample_replies(before_rows, after_rows, samples),
    ]
    out = run_dir / "report.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


_MODEL_ROWS = {"before": "untrained", "warm_start": "warm start only", "after": "trained"}
"""The report's name of each evaluation of the model."""


def _beside_trivial_policies(run_dir: Path, evals: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The model's evaluations (untrained, after the warm start when there was one, trained) beside the
    rubric probe's policies (``probe.json``, written by the trainer before training) on the held-out
    scenarios: rewards with intervals clustered by scenario, root accuracy per branch, pass rates per level,
    and the trained model's paired difference against each other row."""
    from rubrics.multistep.probe import PolicyScore, Rollout, format_table, paired_difference, score_rollouts

    probe_file = run_dir / "probe.json"
    if not probe_file.is_file():
        return []
    probe_rows = [PolicyScore.from_dict(r) for r in json.loads(probe_file.read_text(encoding="utf-8"))]
    model = {}
    for when, rows in evals.items():
        rollouts = [Rollout.from_state(r) for r in rows]
        roots = sorted({str(res["name"]) for r in rollouts for res in r.results if res.get("level") == 0})
        model[when] = score_rollouts(_MODEL_ROWS[when], rollouts, roots)
    table = [*model.values(), *probe_rows]
    lines = ["## Held-out, beside the trivial policies", "", *format_table(table), ""]
    lines += [
        "Trained minus each row, paired by scenario (mean of the per-scenario differences, 95% t-interval); "
        "`ideal` is the ceiling, not a trivial policy:",
        "",
    ]
    for other in [row for when, row in model.items() if when != "after"] + probe_rows:
        diff, half, n = paired_difference(model["after"], other)
        verdict = "above" if diff - half > 0 else "below" if diff + half < 0 else "not distinguishable from"
        lines.append(
            f"- {other.policy}: {diff:+.3f} ± {half:.3f} over {n} scenarios: trained is {verdict} it"
        )
    return [*lines, ""]


def _summary_table(evals: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> list[str]:
    """The side-by-side table of the evaluations (before, maybe after the warm start, after): reward,
    replies, diversity and repetition, tokens, requirement pass rates."""
    summaries = {when: summary for when, (summary, _) in evals.items()}
    replies = {when: [m for r in rows for m in _reply_list(r)] for when, (_, rows) in evals.items()}
    diversity = {when: diversity_metrics(texts) for when, texts in replies.items()}
    # a rollout's replies joined: a loop across turns (a reply restating the previous one) shows here
    whole = {when: diversity_metrics([_replies(r) for r in rows]) for when, (_, rows) in evals.items()}
    names = {"before": "before", "warm_start": "after the warm start", "after": "after"}

    def row(label: str, cell: Callable[[str], str]) -> str:
        return f"| {label} | " + " | ".join(cell(when) for when in evals) + " |"

    lines = [
        row("held-out", lambda when: names[when]),
        "|---|" + "---|" * len(evals),
        row(
            "reward mean ± 95% CI",
            lambda when: f"{summaries[when]['reward_mean']:.3f} ± {summaries[when]['reward_ci95']:.3f}",
        ),
        row("replies", lambda when: str(len(replies[when]))),
    ]
    for key in ("distinct_fraction", "distinct_2", "repetition_rate"):

        def share(when: str, key: str = key) -> str:
            return f"{diversity[when][key]:.3f}"

        lines.append(row(f"{key} (per reply)", share))
    lines.append(row("repetition_rate (whole rollout)", lambda when: f"{whole[when]['repetition_rate']:.3f}"))
    lines.append(row("completion tokens", lambda when: str(summaries[when]["completion_tokens"])))
    for name in sorted({n for summary in summaries.values() for n in summary.get("pass_rates", {})}):

        def rate(when: str, name: str = name) -> str:
            tally = summaries[when].get("pass_rates", {}).get(name)
            return f"{tally['passed']}/{tally['judged']}" if tally else "-"

        lines.append(row(f"requirement {name} passed", rate))
    return lines


def _sample_replies(
    before_rows: list[dict[str, Any]], after_rows: list[dict[str, Any]], samples: int
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
            lines.append(f"**{when}** (reward {sample.get('reward', math.nan):.3f}):")
            lines += ["", *(f"> {text}" for text in _quote(_replies(sample), 1200).splitlines()), ""]
    return lines


def _read_eval(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    rows = [json.loads(x) for x in (folder / "rollouts.jsonl").read_text(encoding="utf-8").splitlines() if x]
    return summary, rows


def _reply_list(row: dict[str, Any]) -> list[str]:
    """The model's replies of one rollout."""
    return [m.get("content", "") for m in row.get("completion", []) if m.get("role") == "assistant"]


def _replies(row: dict[str, Any]) -> str:
    """The model's replies of one rollout, joined by blank lines."""
    return "\n\n".join(_reply_list(row))


def _prompt_key(row: dict[str, Any]) -> str:
    """The scenario a rollout played: its last prompt message."""
    prompt = row.get("prompt", "")
    return str(prompt[-1].get("content", "")) if isinstance(prompt, list) and prompt else str(prompt)


def _quote(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
