"""The local backend's sampling loop (``envs.backends.decode``): the draws follow the distribution the
logprobs describe, ``min_tokens`` and top-p restrict the choice but not the logprobs, and the oneDNN
weights compute what ``nn.Linear`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envs.backends.decode import Decoding, _inverse_cdf, _pick, decode, packed_linears  # noqa: E402
from envs.models.kv_cache import cache_name  # noqa: E402

PROBS = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])


def _frequencies(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab).float() / tokens.numel()


def test_inverse_cdf_draws_follow_the_probabilities_and_never_a_zero() -> None:
    torch.manual_seed(0)
    logprobs = PROBS.log().expand(40_000, -1)
    freq = _frequencies(_inverse_cdf(logprobs, top_p=1.0), 5)
    assert torch.allclose(freq, PROBS, atol=0.01)
    assert freq[4] == 0


def test_top_p_keeps_the_nucleus_renormalised() -> None:
    torch.manual_seed(0)
    logprobs = PROBS.log().expand(40_000, -1)
    # 0.7 of the mass: tokens 0 (0.5 before it: 0) and 1 (0.5 before it < 0.7) and 2 (0.75 before: cut)
    freq = _frequencies(_inverse_cdf(logprobs, top_p=0.7), 5)
    assert torch.allclose(freq, torch.tensor([2 / 3, 1 / 3, 0, 0, 0]), atol=0.01)


def test_min_tokens_keeps_stop_tokens_out_but_logprobs_are_over_the_whole_vocabulary() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([[3.0, 1.0, 0.5, 0.0]]).expand(2_000, -1)
    how = Decoding(8, 1, temperature=0.7, top_p=1.0, stop_ids=[0], pad_id=3)
    token, logprob = _pick(logits, how, allow_stop=False)
    assert not bool((token == 0).any())
    assert torch.allclose(logprob, torch.log_softmax(logits / 0.7, dim=-1).gather(1, token[:, None])[:, 0])
    greedy, _ = _pick(logits[:1], Decoding(8, 1, 0.0, 1.0, [0], 3), allow_stop=False)
    assert greedy.tolist() == [1]  # the stop token 0 is the argmax but not allowed yet


class _Scripted(torch.nn.Module):
    """A "model" whose next token is fixed per row and step (a cache-free stand-in for the decode loop's
    bookkeeping): row r emits ``script[r][step]``."""

    def __init__(self, script: list[list[int]], vocab: int = 6) -> None:
        super().__init__()
        self.script, self.vocab, self.fed = script, vocab, []

    def forward(self, input_ids, attention_mask, position_ids, use_cache, logits_to_keep, **cache):  # type: ignore[no-untyped-def]
        assert list(cache) == [cache_name()], cache  # the KV cache under transformers' name for it
        step = len(self.fed)
        self.fed.append((input_ids.clone(), position_ids.clone(), attention_mask.shape[1]))
        logits = torch.full((len(self.script), 1, self.vocab), -20.0)
        for r, tokens in enumerate(self.script):
            logits[r, 0, tokens[min(step, len(tokens) - 1)]] = 20.0

        class Out:
            pass

        out = Out()
        out.logits = logits
        setattr(out, cache_name(), ("cache", step))
        return out


def test_rows_stop_alone_are_padded_and_positions_continue_from_the_prompt() -> None:
    model = _Scripted([[1, 0, 2, 2], [1, 1, 1, 0]])  # stop token 0: row 0 at step 1, row 1 at step 3
    ids = torch.tensor([[5, 4, 3], [9, 4, 3]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])  # row 0 left-padded
    tokens, logprobs = decode(model, ids, mask, None, Decoding(10, 0, 1.0, 1.0, stop_ids=[0], pad_id=5))
    assert tokens.tolist() == [[1, 0, 5, 5], [1, 1, 1, 0]]  # stopped after 4 steps, not 10
    assert logprobs.shape == (2, 4) and bool((logprobs[1] > -1e-3).all())
    first_ids, first_positions, _ = model.fed[0]
    assert first_ids.tolist() == ids.tolist() and first_positions.tolist() == [[0, 0, 1], [0, 1, 2]]
    second_ids, second_positions, width = model.fed[1]
    assert second_ids.tolist() == [[1], [1]] and second_positions.tolist() == [[2], [3]] and width == 4
    assert model.fed[3][0].tolist() == [[5], [1]]  # the finished row is fed padding


def test_a_shared_prefill_cache_feeds_only_the_last_prompt_token() -> None:
    model = _Scripted([[0], [0]])
    ids, mask = torch.tensor([[5, 4, 3], [9, 4, 2]]), torch.ones(2, 3, dtype=torch.long)
    decode(model, ids, mask, "prefilled", Decoding(4, 0, 0.0, 1.0, stop_ids=[0], pad_id=5))
    assert model.fed[0][0].tolist() == [[3], [2]] and model.fed[0][1].tolist() == [[2], [2]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_linears_compute_what_linear_does_and_restore_it(
    tiny_model_dir: Path, dtype: torch.dtype
) -> None:
    from transformers import AutoModelForCausalLM

    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("bf16 weights are packed only where the CPU computes bf16 natively")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype).eval()
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.inference_mode():
        plain = model(ids).logits
        with packed_linears(model):
            assert sum("forward" in m.__dict__ for m in model.modules()) > 0
            packed = model(ids).logits
        again = model(ids).logits
    # bf16 sums in a different order: within a few bf16 steps of logits of order 1
    assert torch.allclose(packed.float(), plain.float(), atol=1e-4 if dtype == torch.float32 else 3e-2)
    assert torch.equal(again, plain)
    assert not any("forward" in m.__dict__ for m in model.modules() if isinstance(m, torch.nn.Linear))


def _backend(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from envs.backends.local import LocalBackend

    return LocalBackend.from_pretrained(str(tiny_model_dir))


def test_requests_with_different_budgets_share_one_batch_and_stop_at_their_own(tiny_model_dir: Path) -> None:
    import asyncio

    from envs.backends.base import SamplingParams

    backend = _backend(tiny_model_dir)

    async def run() -> list[int]:
        calls = [
            backend.generate([5, 6, 7], SamplingParams(n=1, max_tokens=t, min_tokens=t, temperature=1.0))
            for t in (3, 7, 5)
        ]
        groups = await asyncio.gather(*calls)
        await backend.close()
        return [len(g[0].completion_ids) for g in groups]

    assert asyncio.run(run()) == [3, 7, 5]
    assert (
        backend.decode_stats.batches == 1 and backend.decode_stats.forwards == 7
    )  # the longest row's tokens
    assert backend.decode_stats.live_rows == 3 + 7 + 5  # every row counted while it was live


def test_rollouts_reprompted_after_judging_decode_in_one_batch(tiny_model_dir: Path) -> None:
    """Rollouts whose replies arrive together, are judged (a few event-loop turns, no I/O) and ask again,
    join one batch again rather than a batch each: two turns of 6 rollouts are two batches."""
    import asyncio

    from envs.backends.base import SamplingParams

    backend = _backend(tiny_model_dir)
    params = SamplingParams(n=1, max_tokens=4, min_tokens=4, temperature=1.0)

    async def rollout(i: int) -> None:
        (first,) = await backend.generate([5, 6, i], params)
        for _ in range(i):  # judging takes a different number of loop turns per rollout
            await asyncio.sleep(0)
        await backend.generate([5, 6, i, *first.completion_ids, 9], params)

    async def run() -> None:
        await asyncio.gather(*(rollout(i) for i in range(6)))
        await backend.close()

    asyncio.run(run())
    assert backend.decode_stats.batches == 2 and backend.decode_stats.rows == 2 * 6 * 4


def test_keys_in_place_match_concatenation_and_fall_back_out_of_room() -> None:
    from transformers.cache_utils import DynamicCache

    from envs.backends.decode import keys_in_place

    gen = torch.Generator().manual_seed(0)
    parts = [torch.randn(2, 3, n, 4, generator=gen) for n in (5, 1, 1, 1)]  # [rows, heads, positions, dim]
    cache = DynamicCache()
    cache.update(parts[0], -parts[0], 0)
    assert keys_in_place(cache, room=2) is cache and type(cache.layers[0]).__name__ == "InPlaceLayer"
    for i, part in enumerate(parts[1:], start=1):  # the third new token is past the room: concatenated
        keys, values = cache.update(part, -part, 0)
        want = torch.cat(parts[: i + 1], dim=-2)
        assert torch.equal(keys, want) and torch.equal(values, -want)
        assert cache.get_seq_length() == want.shape[-2]
    assert keys_in_place(("not", "a cache"), room=2) == ("not", "a cache")  # nothing to replace


@pytest.mark.parametrize("prefilled", [False, True])
def test_decode_with_keys_in_place_samples_what_concatenation_samples(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, prefilled: bool
) -> None:
    """The same seed, left-padded rows, with or without a prefill cache: the same tokens and logprobs bit for
    bit whether each token's keys are written into kept room or concatenated onto the cache."""
    from transformers import AutoModelForCausalLM

    from envs.backends import decode as decode_module

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[0, 0, 5, 9, 13], [1, 5, 9, 13, 2], [0, 7, 7, 3, 11]])
    mask = (torch.arange(5) >= torch.tensor([[2], [0], [1]])).long()
    how = Decoding(12, 12, temperature=1.0, top_p=1.0, stop_ids=[0], pad_id=0)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(3)
        with torch.inference_mode():
            cache = None
            if prefilled:  # every prompt token but the last, as the local backend's prefill leaves it
                positions = (mask[:, :-1].cumsum(-1) - 1).clamp(min=0)
                out = model(
                    input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions, use_cache=True
                )
                cache = getattr(out, cache_name())
            return decode(model, ids, mask, cache, how)

    in_place = run()
    monkeypatch.setattr(decode_module, "keys_in_place", lambda cache, room: cache)
    concatenated = run()
    assert in_place[0].shape == (3, 12)
    assert torch.equal(in_place[0], concatenated[0]) and torch.equal(in_place[1], concatenated[1])
