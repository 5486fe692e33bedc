"""``CriteriaEnv``: one reply per prompt, graded against the prompt's own weighted criteria (RaR, HealthBench,
RLCF's checklists; ``rubrics.criteria.example.CriteriaExample``).

The reward is the autograder's score (``rubrics.criteria.autograders.scoring``: normalised by the positive
weights and clipped to [0, 1] per rollout, the all-negative rule, or the holistic score), or with
``clip_reward=False`` HealthBench's unclipped per-example score (the points met over the positive points,
``criteria_reward``); criteria that carry a rule are judged offline by it, the others by the LLM
autograder (``RuleFirstGrader``).
Every rollout keeps its verdicts in ``rollout.criteria`` (``rubrics.types.CriteriaVerdicts``, written to
``rollouts.jsonl``): the example id, the autograder's score, the raw points, the positive points, the
example's tags and one verdict per criterion (name, weight, tags, met, judged_by).
Step metrics add the share of criteria met, of pitfalls made, and per-tag scores (``tag/<tag>/score``,
``rubrics.criteria.tag_scores.step_tag_metrics``).
With ``scaffold`` (``env.scaffold``) training groups are rubric-scaffolded (``envs.criteria.scaffold``): each
rollout's prompt carries some positive criteria as hints, its own share of them, and the loss trains on the
prompt it was sampled from; the hints a rollout was shown are in ``info["scaffold_hints"]``, and the step
metrics add ``scaffold/share_shown`` and ``scaffold/share_scheduled``. Groups without a training step
(held-out evaluation) never see a hint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from envs.backends.base import InferenceBackend, SamplingParams
from envs.config import ScaffoldConfig
from envs.criteria import scaffold as scaffolding
from envs.environment import SingleTurnEnv, TrainingStep
from envs.examples import Example
from envs.rollout import ScoredRollout
from rubrics.criteria.autograders.mixed import RuleFirstGrader
from rubrics.criteria.criterion import Criterion
from rubrics.criteria.example import CriteriaExample
from rubrics.criteria.tag_scores import format_tag_table, metric_name, step_tag_metrics, tag_scores
from rubrics.judges.base import response_text
from rubrics.multistep.probe import PolicyScore, ProbeRollout, score_rollouts
from rubrics.rubric import Rubric
from rubrics.types import CriteriaVerdicts, CriterionVerdict, Messages, RewardWithMetrics, Rollout

HINTS_KEY = "scaffold_hints"
"""The key of ``Rollout.info`` listing the criteria a scaffolded rollout was shown (``scaffold.hint_key``)."""
SHARE_KEY = "scaffold_share"
"""The key of ``Rollout.info`` that holds the share of positive criteria a scaffolded rollout was to be shown
(the schedule's, spread over its group), before rounding to a count."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful, knowledgeable assistant. Answer the user's question directly and specifically, "
    "in a few clear sentences."
)


class CriteriaEnv(SingleTurnEnv):
    """Per-prompt criteria; the whole group of a prompt is sampled in one request."""

    def __init__(
        self,
        examples: Sequence[CriteriaExample],
        grader: RuleFirstGrader,
        tokenizer: Any,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        sampling: SamplingParams | None = None,
        max_total_tokens: int = 1024,
        show_reference: bool = True,
        judge_client: Any = None,
        clip_reward: bool = True,
        scaffold: ScaffoldConfig | None = None,
    ) -> None:
        self.examples: dict[str, CriteriaExample] = {}
        """Every example the environment may be asked to play, by id."""
        for example in examples:
            if example.id in self.examples and self.examples[example.id] != example:
                raise ValueError(f"two different examples share the id {example.id!r}")
            self.examples[example.id] = example
        self.grader = grader
        """Rules first, the LLM autograder for the rest."""
        self.show_reference = show_reference
        """Whether the LLM judge sees an example's reference answer."""
        self.judge_client = judge_client
        """The LLM judge's client (None when every criterion carries a rule): its counters are logged."""
        self._judge_seen: dict[str, float] = {}
        self.clip_reward = clip_reward
        """The reward is the autograder's score, clipped to [0, 1] (True), or the unclipped per-example
        score."""
        self.scaffold = scaffold
        """Rubric scaffolding of training groups (None: none)."""
        super().__init__(
            [Example(criteria=e) for e in self.examples.values()],
            self._rubric(),
            tokenizer,
            system_prompt=system_prompt,
            sampling=sampling,
            max_total_tokens=max_total_tokens,
        )

    def example_named(self, key: str) -> CriteriaExample:
        """The ``CriteriaExample`` with id ``key`` (``Example.name``)."""
        try:
            return self.examples[key]
        except KeyError:
            raise KeyError(f"no criteria example with id {key!r} in this environment") from None

    def _rubric(self) -> Rubric:
        async def criteria(
            completion: Messages | str | None, rollout: Rollout, example: Example
        ) -> RewardWithMetrics:
            if example is None or example.criteria is None:
                raise ValueError(
                    "the criteria reward scores rollouts of a criteria example (an environment's)"
                )
            rollout.criteria = await self.grade(example.criteria, response_text(completion))
            return RewardWithMetrics(self.reward_of(rollout.criteria))

        return Rubric(funcs=[criteria], weights=[1.0])

    async def grade(self, example: CriteriaExample, text: str) -> CriteriaVerdicts:
        """The verdicts on ``text`` as the reply to ``example``."""
        reference = example.reference_answer if self.show_reference else None
        report = await self.grader.grade(example.criteria, text, query=example.query, reference=reference)
        return CriteriaVerdicts(
            example=example.id,
            score=report.score,
            raw_score=report.raw_score,
            possible=example.positive_points,
            example_tags=list(example.tags),
            verdicts=[
                CriterionVerdict(r.name, r.weight, list(r.tags), r.verdict == "MET", r.judged_by)
                for r in report.report or []
            ],
        )

    def reward_of(self, verdicts: CriteriaVerdicts) -> float:
        """The reward of a graded reply (``criteria_reward`` under ``clip_reward``)."""
        return criteria_reward(verdicts.score, verdicts.raw_score, verdicts.possible, self.clip_reward)

    async def rollout_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep | None = None
    ) -> list[Rollout]:
        """The group of ``example``; a training group under ``scaffold`` is ``scaffolded_group``."""
        if self.scaffold is None or training is None:
            return await super().rollout_group(example, backend, n, training)
        return await self.scaffolded_group(example, backend, n, training)

    async def scaffolded_group(
        self, example: Example, backend: InferenceBackend, n: int, training: TrainingStep
    ) -> list[Rollout]:
        """``n`` rollouts of ``example`` at ``training``'s step, rollout ``i`` shown the hints
        ``scaffold.chosen_hints`` picks for its share; rollouts shown the same hints are sampled in one
        request, the requests at once (a batching backend decodes them together)."""
        assert self.scaffold is not None
        criteria = self.example_named(example.name)
        share = scaffolding.scheduled_share(self.scaffold, training.step, training.max_steps)
        shares = scaffolding.rollout_shares(self.scaffold, share, n)
        hints = [
            scaffolding.chosen_hints(criteria, s, training.seed, training.step, i)
            for i, s in enumerate(shares)
        ]
        keys = [tuple(scaffolding.hint_key(c) for c in h) for h in hints]
        distinct = list(dict.fromkeys(keys))
        plain = self.initial_messages(example)
        requests = [
            self.sample_group(example, backend, _with_hints(plain, hints[keys.index(k)]), keys.count(k))
            for k in distinct
        ]
        sampled = {k: iter(g) for k, g in zip(distinct, await asyncio.gather(*requests), strict=True)}
        rollouts = [next(sampled[k]) for k in keys]
        for rollout, key, aimed in zip(rollouts, keys, shares, strict=True):
            rollout.info[HINTS_KEY], rollout.info[SHARE_KEY] = list(key), aimed
        return rollouts

    # -- what the trainer and ``rubric-grpo eval`` ask every environment ------------------------------

    async def probe(self, train: Sequence[Example], held: Sequence[Example]) -> list[PolicyScore]:
        """The trivial policies on the held-out examples, scored as the model is (``trivial_replies``)."""
        examples = [self.example_named(e.name) for e in held]
        rows = []
        for policy in TRIVIAL_POLICIES:
            rollouts = []
            for example in examples:
                text = trivial_reply(policy, example)
                if text is None:
                    continue
                reward = self.reward_of(await self.grade(example, text))
                rollouts.append(ProbeRollout(example.id, reward, []))
            if rollouts:
                rows.append(score_rollouts(policy, rollouts, []))
        return rows

    def report_sections(self, evaluations: Mapping[str, Sequence[ScoredRollout]]) -> list[str]:
        """Per-tag scores of each evaluated model, HealthBench's way (``rubrics.criteria.tag_scores``): the
        mean of the unclipped example scores, clipped to [0, 1], with its bootstrap std and the 95% interval
        clustered by example, and the share of each tag's criteria passed; first, which reward the held-out
        means above them are (``clip_reward``)."""
        reward = (
            "the autograder's score, clipped to [0, 1] per reply (`env.clip_reward: true`)"
            if self.clip_reward
            else "HealthBench's per-example score, unclipped, below 0 where pitfalls outweigh what was "
            "earned (`env.clip_reward: false`)"
        )
        lines = [f"The held-out rewards above are {reward}.", ""]
        for model, rollouts in evaluations.items():
            scores = tag_scores(_graded(rollouts))
            if scores:
                lines += [f"## Held-out by tag: {model}", "", *format_tag_table(scores), ""]
        return lines

    def summary_metrics(self, rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
        """HealthBench's numbers of an evaluation: the overall score (the mean of the unclipped example
        scores, clipped to [0, 1]) and each tag's, as ``healthbench/<tag>``."""
        return {
            f"healthbench/{metric_name(name)}": score.mean_clipped
            for name, score in tag_scores(_graded(rollouts)).items()
        }

    def step_metrics(self, rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
        """The step's criteria and per-tag metrics (``step_tag_metrics``), and the LLM judge's calls,
        requests, retries, cache hits, failures, tokens and seconds since the last step."""
        out = step_tag_metrics(_graded(rollouts))
        if self.scaffold is not None:
            out.update(self._scaffold_metrics(rollouts))
        if self.judge_client is not None:
            out.update(self.judge_client.stats.since(self._judge_seen))
            self._judge_seen = self.judge_client.stats.snapshot()
        return out

    def _scaffold_metrics(self, rollouts: Sequence[ScoredRollout]) -> dict[str, float]:
        """``scaffold/share_shown``: the mean over ``rollouts`` of the share of its example's positive
        criteria each was shown (0 for a rollout shown none, an evaluation's included);
        ``scaffold/share_scheduled``: the mean of the shares they were to be shown (``SHARE_KEY``), before
        rounding to a count."""
        shown = []
        for r in rollouts:
            positive = scaffolding.positive_criteria(self.example_named(str(r.info.get("scenario"))))
            shown.append(len(r.info.get(HINTS_KEY, [])) / len(positive) if positive else 0.0)
        if not shown:
            return {}
        aimed = [float(r.info.get(SHARE_KEY, 0.0)) for r in rollouts]
        return {
            "scaffold/share_shown": sum(shown) / len(shown),
            "scaffold/share_scheduled": sum(aimed) / len(aimed),
        }


def _with_hints(messages: list[dict[str, Any]], hints: Sequence[Criterion]) -> list[dict[str, Any]]:
    """``messages`` with ``hints`` appended to the last user message (a copy; ``messages`` unchanged)."""
    text = scaffolding.hint_text(hints)
    if not text:
        return messages
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = f"{out[last]['content']}{text}"
    return out


def criteria_reward(score: float, raw_score: float, possible: float, clip: bool) -> float:
    """A reply's reward from its grading: the autograder's ``score`` (clipped to [0, 1]) when ``clip``, else
    HealthBench's per-example score, ``raw_score / possible``, unclipped. Without positive points
    (``possible`` 0) it is ``score`` either way: the all-negative rule's."""
    return score if clip or possible <= 0 else raw_score / possible


def _graded(rollouts: Sequence[ScoredRollout]) -> list[CriteriaVerdicts]:
    """The verdicts of the rollouts that were graded and did not error."""
    return [r.criteria for r in rollouts if r.criteria is not None and not r.error]


TRIVIAL_POLICIES = ("empty reply", "prompt echoed", "every rule phrase", "one sentence looped", "reference")
"""The probe's policies: what a reward hacker would try first, and the reference answer (a ceiling when the
examples have one)."""


def trivial_reply(policy: str, example: CriteriaExample) -> str | None:
    """The reply ``policy`` gives to ``example`` (None: it has none, e.g. no reference answer)."""
    if policy == "empty reply":
        return ""
    if policy == "prompt echoed":
        return example.query
    if policy == "every rule phrase":  # keyword stuffing: every phrase any positive rule looks for
        phrases = [
            p
            for c in example.criteria
            if c.rule is not None and c.weight > 0
            for key in ("any", "all")
            for p in c.rule.get(key, [])
        ]
        return ", ".join(dict.fromkeys(phrases)) or None
    if policy == "one sentence looped":
        first = _first_rule_phrase(example)
        return None if first is None else " ".join([f"You should {first}."] * 10)
    if policy == "reference":
        return example.reference_answer
    raise ValueError(f"unknown trivial policy {policy!r} (one of {', '.join(TRIVIAL_POLICIES)})")


def _first_rule_phrase(example: CriteriaExample) -> str | None:
    """The first phrase of the heaviest positive rule-judged criterion."""
    ruled = sorted(
        (c for c in example.criteria if c.rule is not None and c.weight > 0 and c.rule.get("any")),
        key=lambda c: -c.weight,
    )
    return str(ruled[0].rule["any"][0]) if ruled and ruled[0].rule else None
