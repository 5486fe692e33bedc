"""``MultiStepMultiTurnEnv``: the progressive-reveal environment of multi-step rubrics.

Each model reply is judged against the current frontier of requirements (concurrently). A requirement
judged correct unlocks the requirements of its ground-truth answer. Those unlocked by a requirement
without ``revealed_info`` are judged on the same reply at once (one reply can cover several steps); those
unlocked by a requirement with ``revealed_info`` wait: the revealed text becomes the next user message and
they are judged on the model's next reply. A requirement judged incorrect closes its branch. No turn is
spent without a model reply, no two assistant messages follow each other, and every reply is judged.

The walk (``rubrics.multistep.walk.Walk``) owns that routing and the stop reason; this environment
is a plain ``MultiTurnEnv`` that asks it, after each reply, what to reveal (``env_response``) or whether
it is done (``is_completed``). A rollout stops when nothing is left to judge (``terminal``: every branch
reached its end; ``incorrect``: some branch was closed; ``missing_ground_truth``), at ``max_turns`` or at
the token budget (``token_budget``). The walk in progress is the environment's bookkeeping of the rollout
(``Progress``, what ``setup`` returns and the other hooks receive); when the rollout ends its verdicts, with
the stop reason, are left in ``rollout.multistep`` (an ``EvaluationResult``) so the rubric computes the
reward without judging anything twice; judging time adds up in ``rollout.timing["judge_ms"]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.backends.base import SamplingParams
from envs.environment import MultiTurnEnv
from envs.examples import Example
from rubrics.advantages import ReplyCredit
from rubrics.multistep.probe import PolicyScore
from rubrics.multistep.rubric import MultiStepRubric
from rubrics.multistep.scenario import Scenario
from rubrics.multistep.walk import Walk, truth_of
from rubrics.rubric import Rubric
from rubrics.types import Rollout, StopReason

DEFAULT_SYSTEM_PROMPT = (
    "You are working through a real situation that unfolds over several turns. In each reply, say what you "
    "observe, what you decide and what you do next, specifically for this situation. New information will "
    "arrive as the situation develops."
)


def scenario_of(example: Example) -> Scenario:
    """The scenario ``example`` holds.

    Raises:
        ValueError: it holds none (a criteria example or a plain prompt)."""
    if example.scenario is None:
        raise ValueError(f"example {example.name!r} holds no multi-step scenario")
    return example.scenario


class MultiStepMultiTurnEnv(MultiTurnEnv["Progress"]):
    """Progressive reveal: satisfied requirements reveal the next piece of the scenario."""

    def __init__(
        self,
        multistep_rubric: MultiStepRubric,
        scenarios: Sequence[Scenario],
        tokenizer: Any,
        rubric: Rubric | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        sampling: SamplingParams | None = None,
        max_turns: int = 6,
        max_total_tokens: int = 4096,
    ) -> None:
        for s in scenarios:
            s.validate(multistep_rubric)
        super().__init__(
            [Example(scenario=s) for s in scenarios],
            rubric if rubric is not None else multistep_rubric,
            tokenizer,
            system_prompt=system_prompt,
            sampling=sampling,
            max_turns=max_turns,
            max_total_tokens=max_total_tokens,
        )
        self.multistep_rubric = multistep_rubric
        """Whose requirements are judged turn by turn."""

    async def probe(self, train: Sequence[Example], held: Sequence[Example]) -> list[PolicyScore]:
        """The rubric probe's rows on the held-out scenarios, as the model plays them (``max_turns``); the
        majority answers are the training scenarios' (what a policy that learned only them would say)."""
        from rubrics.multistep.probe import probe

        return await probe(
            self.multistep_rubric,
            [scenario_of(e) for e in held],
            self.max_turns,
            majority_from=[scenario_of(e) for e in train],
        )

    def stratum(self, example: Example) -> str | None:
        """The ground truth of the rubric's roots, ``root=answer`` joined by ``,`` in the roots' order (the
        branches of ``report.md``'s root accuracy): ``scene_safety=1.0`` for a safe scene."""
        keys = []
        for root in self.multistep_rubric.roots:
            truth = truth_of(scenario_of(example).answers, root)
            keys.append(f"{root}={truth['answer'] if truth is not None else None}")
        return ",".join(keys)

    def new_rollout(self, example: Example, messages: list[dict[str, Any]]) -> Rollout:
        """A fresh rollout that also counts judging time (``timing["judge_ms"]``)."""
        rollout = super().new_rollout(example, messages)
        rollout.timing["judge_ms"] = 0.0
        return rollout

    @property
    def credits_replies(self) -> bool:
        """Yes, when the reward is the multi-step rubric's own (its verdicts are what is credited)."""
        return self.rubric is self.multistep_rubric

    def reply_credit(self, example: Example, rollout: Rollout) -> list[ReplyCredit]:
        """Per reply: the node it answered (the requirements the walk was waiting on, ``reply_nodes``) and its
        reward-to-go, the rubric's reward strategy over the verdicts made on this reply and every later one,
        against the scenario's ideal walk. The first reply's is the rollout's reward."""
        if rollout.multistep is None or rollout.reply_nodes is None:
            raise ValueError("reply_credit: the rollout has no walk (it failed before its first reply)")
        results = rollout.multistep.results
        ideal = self.multistep_rubric.ideal_walk(scenario_of(example).answers).results
        strategy = self.multistep_rubric.reward_strategy
        return [
            ReplyCredit(node, strategy([r for r in results if r.turn > k], ideal))
            for k, node in enumerate(rollout.reply_nodes)  # verdicts of reply k carry turn k + 1
        ]

    async def setup(self, example: Example, rollout: Rollout) -> Progress:
        """A fresh walk over the scenario's ground truth and reveals; the node each reply answers is kept in
        ``rollout.reply_nodes``."""
        scenario = scenario_of(example)
        rollout.reply_nodes = []
        return Progress(self.multistep_rubric.walk(scenario.answers, scenario.revealed_info))

    async def is_completed(
        self, example: Example, rollout: Rollout, progress: Progress, messages: list[dict[str, Any]]
    ) -> bool | StopReason:
        """Judge the latest reply as far as it goes; done when the walk has nothing left to judge."""
        assert rollout.reply_nodes is not None  # setup made it
        rollout.reply_nodes.append("+".join(sorted(progress.walk.frontier)))
        start = time.perf_counter()
        advance = await progress.walk.advance(messages[:-1], messages[-1:], rollout.turn)
        rollout.timing["judge_ms"] += (time.perf_counter() - start) * 1000.0
        progress.reveals = advance.reveals
        return advance.stop_reason or False

    async def env_response(
        self, example: Example, rollout: Rollout, progress: Progress, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The texts the latest reply revealed, as one user message."""
        return [{"role": "user", "content": "\n\n".join(progress.reveals)}]

    def finish(self, example: Example, rollout: Rollout, progress: Progress) -> None:
        """Leave the verdicts, with the rollout's stop reason, in ``rollout.multistep``."""
        result = progress.walk.result
        assert rollout.stop_reason is not None  # the loop set it before the teardown
        result.stop_reason = StopReason(rollout.stop_reason)
        rollout.multistep = result


@dataclass
class Progress:
    """Where one rollout's walk stands while it runs."""

    walk: Walk
    """The walk over the scenario, advanced once per model reply."""
    reveals: list[str] = field(default_factory=list)
    """Texts the latest reply revealed: the next user message."""
