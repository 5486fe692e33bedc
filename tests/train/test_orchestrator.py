"""The orchestrator with a fake environment (no model): data order, cursor positions, resume, groups kept and
dropped, advantages per group; and with the progressive-reveal environment: the ideal path once per
scenario, the batch trains on the advantages scoring wrote."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")  # the orchestrator seeds torch's sampling per step

from envs.backends.base import InProcessWeights
from envs.rollout import ScoredRollout
from rubrics import Rubric
from rubrics.types import Rollout, State
from tests.support.rollouts import scored
from tests.support.scripted_backend import ScriptedBackend
from train.config import AdvantageConfig, TrainConfig
from train.orchestrator import Orchestrator, StepRollouts
from train.sampling import DataCursor
from train.types import RolloutGroup


def _score(completion: str) -> float:
    if completion == "boom":
        raise RuntimeError("judge unavailable")
    return float(completion)


class FakeEnv:
    """Returns each example's fixed completions, scored by a real ``Rubric``; records what it was asked."""

    def __init__(self) -> None:
        self.rubric = Rubric(funcs=[_score])
        self.calls: list[int] = []

    async def run_group(
        self, example: dict[str, Any], backend: Any, n: int, training: Any = None
    ) -> list[Rollout]:
        self.calls.append(example["id"])
        rollouts = [
            Rollout(
                prompt=f"play {example['id']}",
                completion=c,
                info={"id": example["id"], "scenario": str(example["id"])},
                stop_reason="completed",
            )
            for c in example["completions"][:n]
        ]
        await self.rubric.score_rollouts(rollouts)  # as Environment.run_group: advantages are the step's
        return rollouts

    def stratum(self, example: dict[str, Any]) -> str | None:
        return example.get("stratum")


class NoBackend(InProcessWeights):
    """The fake environment samples nothing: a backend that is never asked."""

    async def generate(self, prompt_ids: list[int], params: Any) -> list[Any]:
        raise AssertionError("the fake environment never generates")

    async def close(self) -> None:
        return None


def _orchestrator(
    examples: list[dict[str, Any]],
    prompts_per_step: int,
    advantage: AdvantageConfig | None = None,
    cursor: dict[str, int] | None = None,
    process: tuple[int, int] = (0, 1),
) -> tuple[Orchestrator, FakeEnv]:
    env = FakeEnv()
    orch = Orchestrator(
        env,  # type: ignore[arg-type]
        backend=NoBackend(),
        examples=examples,
        prompts_per_step=prompts_per_step,
        group_size=4,
        advantage=advantage or AdvantageConfig(),
        seed=7,
        cursor=cursor,
        process=process,
    )
    return orch, env


def _examples(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "completions": ["1", "0", "1", "0"]} for i in range(n)]


def _id(group: RolloutGroup) -> int:
    """The example id of a group (``FakeEnv`` names each example's scenario after it)."""
    return int(group.rollouts[0].scenario)


def _produced_ids(orch: Orchestrator, steps: range) -> list[list[int]]:
    out = []
    for step in steps:
        rollouts = asyncio.run(orch.produce(step, policy_version=step))
        out.append([_id(g) for g in rollouts.groups])
    return out


def test_produce_takes_the_examples_at_call_time() -> None:
    orch, env = _orchestrator(_examples(5), prompts_per_step=2)
    coroutine = orch.produce(0, policy_version=0)
    # the cursor moved before the coroutine ran: this is the state a checkpoint of step 0 holds
    assert orch.cursor.state() == {"epoch": 0, "position": 2}
    assert env.calls == []
    second = orch.produce(1, policy_version=0)  # taken before the first step's rollouts exist
    assert orch.cursor.state() == {"epoch": 0, "position": 4}
    first = asyncio.run(coroutine)
    assert [_id(g) for g in first.groups] == [3, 0]  # epoch 0 order [3, 0, 2, 4, 1]
    assert [_id(g) for g in asyncio.run(second).groups] == [2, 4]
    assert first.policy_version == 0 and first.generate_s >= 0.0


def test_a_restored_cursor_continues_the_uninterrupted_sequence() -> None:
    uninterrupted, _ = _orchestrator(_examples(5), prompts_per_step=2)
    want = _produced_ids(uninterrupted, range(5))  # 10 examples: two epochs of 5
    first, _ = _orchestrator(_examples(5), prompts_per_step=2)
    got = _produced_ids(first, range(3))  # steps 0-2: crosses into epoch 1
    saved = first.cursor.state()
    assert saved == {"epoch": 1, "position": 1}
    resumed, _ = _orchestrator(_examples(5), prompts_per_step=2, cursor=saved)
    got += _produced_ids(resumed, range(3, 5))
    assert got == want == [[3, 0], [2, 4], [1, 0], [2, 3], [4, 1]]


def _step_of_processes(orchs: list[Orchestrator], step: int) -> list[int]:
    """The examples of ``step`` of every process, rank 0's first; asserts the processes' cursors agree."""
    ids = [i for orch in orchs for i in _produced_ids(orch, range(step, step + 1))[0]]
    assert len({json.dumps(orch.cursor.state()) for orch in orchs}) == 1, "the processes' cursors differ"
    return ids


def test_processes_share_one_walk_and_a_checkpoint_resumes_on_another_count() -> None:
    one, _ = _orchestrator(_examples(5), prompts_per_step=4)
    want = _produced_ids(one, range(5))  # 20 examples: four epochs of 5, 4 a step
    two = [_orchestrator(_examples(5), 2, process=(rank, 2))[0] for rank in (0, 1)]
    got = [_step_of_processes(two, step) for step in range(2)]  # each process its 2 of the step's 4
    saved = two[0].cursor.state()
    assert saved == {"epoch": 1, "position": 3}  # 8 examples taken: an epoch of 5, then 3
    alone, _ = _orchestrator(_examples(5), prompts_per_step=4, cursor=saved)  # 2 processes -> 1
    got += _produced_ids(alone, range(2, 3))
    four = [_orchestrator(_examples(5), 1, cursor=alone.cursor.state(), process=(r, 4))[0] for r in range(4)]
    got += [_step_of_processes(four, step) for step in range(3, 5)]  # 1 process -> 4
    assert got == want
    # within each epoch every example once: nothing repeated or skipped across the changes of count
    walk = [i for ids in got for i in ids]
    assert [sorted(walk[k : k + 5]) for k in range(0, 20, 5)] == [[0, 1, 2, 3, 4]] * 4


def _from_config(sampler: str, examples: list[dict[str, Any]], cursor: Any = None) -> Orchestrator:
    cfg = TrainConfig.model_validate({"rollout": {"sampler": sampler, "prompts_per_step": 2}})
    return Orchestrator.from_config(cfg, FakeEnv(), NoBackend(), examples, 7, cursor)  # type: ignore[arg-type]


def test_the_balanced_sampler_takes_one_example_of_each_stratum_a_step_and_logs_the_shares() -> None:
    examples = [{**e, "stratum": "safe" if e["id"] < 4 else "unsafe"} for e in _examples(6)]
    orch = _from_config("balanced", examples)
    assert orch.shares() == {"sampler/stratum/safe": 0.0, "sampler/stratum/unsafe": 0.0}  # nothing taken yet
    steps = _produced_ids(orch, range(6))
    assert [[i < 4 for i in ids] for ids in steps] == [[True, False]] * 6  # "safe" sorts first
    assert orch.shares() == {"sampler/stratum/safe": 1.0, "sampler/stratum/unsafe": 1.0}
    # each stratum is walked whole before repeating: the 4 safe ones, then the 2 unsafe ones three times
    safe, unsafe = [ids[0] for ids in steps], [ids[1] for ids in steps]
    assert sorted(safe[:4]) == [0, 1, 2, 3] and sorted(unsafe[:2]) == sorted(unsafe[2:4]) == [4, 5]
    resumed = _from_config("balanced", examples, orch.cursor.state())
    assert _produced_ids(resumed, range(6, 8)) == _produced_ids(orch, range(6, 8))
    # the shuffle sampler takes its own order whatever the strata, and logs their shares too
    shuffled = _from_config("shuffle", examples)
    first = DataCursor(6, seed=7).take(2)
    assert _produced_ids(shuffled, range(1)) == [first]
    safe_ones = sum(i < 4 for i in first)
    assert shuffled.shares() == {"sampler/stratum/safe": safe_ones, "sampler/stratum/unsafe": 2 - safe_ones}


# ids: 0 has signal, 1 has zero variance, 2 is all errored, 3 has signal and one errored rollout
MIXED = [
    {"id": 0, "completions": ["1", "0", "1", "0"]},
    {"id": 1, "completions": ["1", "1", "1", "1"]},
    {"id": 2, "completions": ["boom"] * 4},
    {"id": 3, "completions": ["1", "0", "0", "boom"]},
]


def _step(advantage: AdvantageConfig) -> tuple[StepRollouts, dict[int, RolloutGroup]]:
    orch, _ = _orchestrator(MIXED, prompts_per_step=4, advantage=advantage)
    rollouts = asyncio.run(orch.produce(0, policy_version=0))
    return rollouts, {_id(g): g for g in rollouts.groups}


def test_zero_variance_and_all_errored_groups_are_dropped() -> None:
    rollouts, by_id = _step(AdvantageConfig())
    assert {i: g.kept for i, g in by_id.items()} == {0: True, 1: False, 2: False, 3: True}
    assert {i: g.zero_variance for i, g in by_id.items()} == {0: False, 1: True, 2: True, 3: False}
    assert (rollouts.zero_variance_groups, rollouts.dropped_groups) == (2, 2)
    assert sorted(_id(g) for g in rollouts.kept_groups) == [0, 3]
    assert len(rollouts.all_rollouts) == 16  # every rollout, dropped groups included
    assert [bool(r.error) for r in by_id[3].rollouts] == [False, False, False, True]
    assert all(r.error and math.isnan(r.reward) for r in by_id[2].rollouts)
    # zero-variance groups kept when asked; an all-errored group never is
    _, keep_all = _step(AdvantageConfig(drop_zero_variance_groups=False))
    assert {i: g.kept for i, g in keep_all.items()} == {0: True, 1: True, 2: False, 3: True}


def _advantages(group: RolloutGroup) -> list[float]:
    return [r.advantage for r in group.rollouts]


def test_advantages_per_group() -> None:
    rollouts, by_id = _step(AdvantageConfig(scale_rewards="group"))
    # id 0: [1, 0, 1, 0], mean 0.5, sample std sqrt(1/3) = 0.577350: +-0.5 / (0.577350 + 1e-4) = +-0.865875
    assert _advantages(by_id[0]) == pytest.approx([0.865875, -0.865875, 0.865875, -0.865875], abs=1e-6)
    # id 3: healthy [1, 0, 0], mean 1/3, squares 4/9 + 1/9 + 1/9 = 2/3, / 2 = 1/3, std 0.577350:
    # [2/3, -1/3, -1/3] / 0.577450 = [1.154501, -0.577250, -0.577250], the errored rollout 0.0
    assert _advantages(by_id[3]) == pytest.approx([1.154501, -0.577250, -0.577250, 0.0], abs=1e-6)
    assert _advantages(by_id[1]) == [0.0] * 4 and _advantages(by_id[2]) == [0.0] * 4
    assert sorted(rollouts.kept_advantages) == sorted(_advantages(by_id[0]) + _advantages(by_id[3]))


def test_unscaled_trainer_advantages_equal_the_rubric_api() -> None:
    # scale "none": the step's advantages are exactly what Rubric.score_group writes for each group alone
    _, by_id = _step(AdvantageConfig(scale_rewards="none", drop_zero_variance_groups=False))
    for i, group in by_id.items():
        alone: list[State] = [{"completion": c} for c in MIXED[i]["completions"]]
        asyncio.run(Rubric(funcs=[_score]).score_group(alone))
        assert _advantages(group) == [s["advantage"] for s in alone]
    # id 3: healthy [1, 0, 0], mean 1/3: [2/3, -1/3, -1/3, 0]
    assert _advantages(by_id[3]) == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0])


def test_off_policy_lag_is_measured_from_the_versions_stamped_at_generation() -> None:
    def rollout(*versions: int) -> ScoredRollout:
        return scored(trajectory=[{"weight_version": v} for v in versions])

    groups = [RolloutGroup([rollout(3, 4), rollout(4)], zero_variance=False, kept=True)]
    rollouts = StepRollouts(groups=groups, generate_s=1.0, policy_version=3)  # requested: 3
    # at step 4: the oldest turn is 1 step behind, the mean turn (3 + 4 + 4) / 3 is 1/3 of a step behind
    assert rollouts.off_policy_steps(4) == (1.0, pytest.approx(1 / 3))
    unstamped = StepRollouts(
        groups=[RolloutGroup([rollout()], zero_variance=True, kept=False)],
        generate_s=1.0,
        policy_version=2,
    )
    assert unstamped.off_policy_steps(4) == (2.0, 2.0)  # no stamps: the requested version


class AlternatingBackend(ScriptedBackend):
    """Replies ``replies[k % len(replies)]`` to its k-th request, whatever the turn: rollouts of one scenario
    differ, so their groups carry signal."""

    async def generate(self, prompt_ids: list[int], params: Any) -> list[Any]:
        self.replies = self.replies[1:] + self.replies[:1]
        return await super().generate(prompt_ids, params)


def test_a_step_computes_each_ideal_path_once_and_trains_on_the_advantages_scoring_wrote(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers import AutoTokenizer

    import rubrics.multistep.rubric as multistep_rubric
    from envs.multistep_env import MultiStepMultiTurnEnv
    from rubrics.multistep import Scenario
    from tests.envs.helpers import SCENARIO, reveal_rubric
    from train.batching import rollouts_to_batch

    ideal_walks: list[str] = []

    def counted(graph: Any, answers: Any) -> Any:
        ideal_walks.append(str(sorted(answers)))
        return ground_truth_walk(graph, answers)

    ground_truth_walk = multistep_rubric.ground_truth_walk
    monkeypatch.setattr(multistep_rubric, "ground_truth_walk", counted)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    short = Scenario(prompt="A woman fell.", answers={"safety": {"answer": 0.0}}, name="fall")
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO, short], tokenizer, max_turns=3)
    replies = ["The scene is safe, I check vitals.", "It is not safe here.", "Give oxygen, transport."]
    orch = Orchestrator(
        env,
        AlternatingBackend(tokenizer, replies),
        env.dataset,
        prompts_per_step=2,
        group_size=4,
        advantage=AdvantageConfig(scale_rewards="group", drop_zero_variance_groups=False),
        seed=7,
    )
    for step in range(2):  # two steps of 2 scenarios x 4 rollouts: 16 rollouts, 2 ideal walks in all
        rollouts = asyncio.run(orch.produce(step, policy_version=step))
        assert len(rollouts.all_rollouts) == 8 and not any(r.error for r in rollouts.all_rollouts)
        batch = rollouts_to_batch(rollouts.kept_groups, pad_token_id=0)
        assert batch is not None
        scored = [r.advantage for g in rollouts.kept_groups for r in g.rollouts]
        assert torch.equal(batch.advantages_BT[:, 0], torch.tensor(scored)) and any(scored)  # float32 both
        assert rollouts.kept_advantages == scored
    assert len(ideal_walks) == 2 and len(set(ideal_walks)) == 2


def test_credit_per_reply_puts_each_replys_advantage_on_its_tokens(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    from envs.multistep_env import MultiStepMultiTurnEnv
    from tests.envs.helpers import SCENARIO, reveal_rubric
    from train.batching import rollouts_to_batch

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    env = MultiStepMultiTurnEnv(reveal_rubric(), [SCENARIO], tokenizer, max_turns=3)
    # the rotating replies give the four rollouts different paths, so deeper nodes have more than one reply
    replies = ["The scene is safe, I check vitals.", "It is not safe here.", "I check vitals, give oxygen."]
    turn = AdvantageConfig(scale_rewards="group", drop_zero_variance_groups=False, credit="turn")
    orch = Orchestrator(env, AlternatingBackend(tokenizer, replies), env.dataset, 1, 4, turn, seed=7)
    rollouts = asyncio.run(orch.produce(0, policy_version=0))
    scored = rollouts.all_rollouts
    assert any(len(r.reply_advantages or []) > 1 for r in scored)
    batch = rollouts_to_batch(rollouts.kept_groups, pad_token_id=0)
    assert batch is not None
    for row, r in enumerate(scored):
        assert r.sequence is not None and r.reply_advantages is not None and r.reply_credit
        for (start, end), advantage in zip(r.sequence.replies, r.reply_advantages, strict=True):
            assert torch.equal(batch.advantages_BT[row, start:end], torch.full((end - start,), advantage))
        assert r.reply_credit[0].node == "safety" and r.advantage == r.reply_advantages[0]
    # mixed: the same rollouts (the same seed), each reply's advantage the episode one plus the node term
    mixed = AdvantageConfig(
        scale_rewards="group", drop_zero_variance_groups=False, credit="mixed", node_weight=0.5
    )
    orch = Orchestrator(env, AlternatingBackend(tokenizer, replies), env.dataset, 1, 4, mixed, seed=7)
    again = asyncio.run(orch.produce(0, policy_version=0)).all_rollouts
    for per_reply, both in zip(scored, again, strict=True):
        assert both.advantage == per_reply.advantage  # the episode advantage (= the first reply's above)
        expected = [both.advantage + 0.5 * a for a in per_reply.reply_advantages or []]
        assert both.reply_advantages == pytest.approx(expected)
    # an environment without per-reply verdicts is refused up front
    from envs.environment import SingleTurnEnv
    from rubrics import Rubric

    single = SingleTurnEnv([{"prompt": "hi"}], Rubric(funcs=[lambda completion, **_: 1.0]), tokenizer)
    with pytest.raises(
        ValueError, match=r"advantage\.credit: 'turn' needs an environment that credits each reply"
    ):
        Orchestrator(single, AlternatingBackend(tokenizer, replies), single.dataset, 1, 4, turn, seed=7)


def test_a_guided_group_holds_the_demonstration_played_as_a_rollout(
    tiny_model_dir: Path, monkeypatch
) -> None:
    """``rollout.guide``: a group whose sampled rollouts all fail the first step (no variance, dropped
    without a guide) gets its scenario's ideal conversation replayed through the environment: judged by the
    same walk (reward 1.0, the ideal), in the baseline with the largest advantage, in the batch with its
    replies on the loss mask and no sampling logprob; never in the step's rollouts or their metrics."""
    import torch
    from transformers import AutoTokenizer

    from train.batching import rollouts_to_batch
    from train.config_files import load_config
    from train.demonstrations import load_demonstrations
    from train.task import build_task

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    config = root / "configs/train/first_responder_cpu.yaml"
    # the tiny model's tokenizer spends more tokens than SmolLM2's: room for the whole ideal conversation
    overrides = [
        "rollout.prompts_per_step=1",
        "advantage.drop_zero_variance_groups=true",
        "env.max_total_tokens=4096",
        "rollout.max_tokens=256",
    ]
    cfg = load_config(config, [*overrides, "rollout.guide=false"])
    env, train, _ = build_task(cfg, tokenizer)
    wrong = ScriptedBackend(tokenizer, ["I am not sure what is going on here."])
    unguided = asyncio.run(Orchestrator.from_config(cfg, env, wrong, train, seed=3).produce(0, 0))
    assert not unguided.kept_groups  # every sampled rollout earned 0: nothing to learn from
    guided_cfg = load_config(config, [*overrides, "rollout.guide=true"])
    step = asyncio.run(Orchestrator.from_config(guided_cfg, env, wrong, train, seed=3).produce(0, 0))
    (group,) = step.kept_groups
    (guide,) = group.guides
    assert len(step.all_rollouts) == 4 and all(r.reward == 0.0 for r in step.all_rollouts)
    assert guide.reward == 1.0 and guide.stop_reason == "terminal"
    assert guide.advantage > 0 > max(r.advantage for r in group.rollouts)
    demo = {d.scenario: d for d in load_demonstrations(cfg.warm_start.demonstrations)}[guide.scenario]
    assert guide.replies == [m["content"] for m in demo.messages if m["role"] == "assistant"]
    batch = rollouts_to_batch(step.kept_groups, pad_token_id=0)
    assert batch is not None and batch.num_sequences == 5
    row = batch.loss_mask_BT[4].bool()
    assert torch.isnan(batch.inference_logprobs_BT[4][row]).all()  # the IS weight reads NaN as no mismatch
    trained = tokenizer.decode(batch.input_ids_BT[4][row].tolist(), skip_special_tokens=True)
    assert trained == "".join(guide.replies)  # only the replies train, never the reveals or the template


def test_guided_groups_need_a_demonstration_of_every_training_example(tmp_path: Path, monkeypatch) -> None:
    from rubrics.loading import FileLoadError
    from train.config_files import load_config
    from train.orchestrator import guide_messages

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    with pytest.raises(ValueError, match=r"rollout.guide: guided groups play each example's demonstration"):
        load_config(root / "configs/train/tiny_test.yaml", ["rollout.guide=true"])
    demos = root / "configs/scenarios/first_responder_train_demos.jsonl"
    short = tmp_path / "demos.jsonl"
    short.write_text("".join(demos.read_text().splitlines(keepends=True)[:3]))
    cfg = load_config(
        root / "configs/train/first_responder_cpu.yaml",
        ["rollout.guide=true", f"rollout.guide_demonstrations={short}"],
    )

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    names = [json.loads(line)["scenario"] for line in demos.read_text().splitlines()[:4]]
    assert list(guide_messages(cfg, [Named(n) for n in names[:3]])) == names[:3]  # type: ignore[arg-type]
    with pytest.raises(
        FileLoadError, match=rf"1 training example\(s\) have no demonstration \(the first: '{names[3]}'\)"
    ):
        guide_messages(cfg, [Named(n) for n in names])  # type: ignore[arg-type]
