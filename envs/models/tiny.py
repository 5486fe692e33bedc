"""A tiny random Qwen2-style causal LM with a locally trained byte-level BPE tokenizer.

The fixture model of unit and integration tests (``docs/architecture.md``: models without a hub): built
from a config in about a second, no hub download, loadable by both transformers and vLLM (head_dim 32, which
vLLM's CPU attention kernel supports). The weights are random, so its output is gibberish, but it is
deterministic for a given seed, which is what tests comparing two engines need.

torch, transformers and tokenizers are imported inside the functions: ``envs`` may depend on them, but
importing this module stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)

# ChatML, as Qwen2 instruct models format conversations.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# A small built-in corpus: enough distinct words and digits for a few hundred merges.
_CORPUS = """
You are a helpful assistant. Answer the question step by step and give the final answer at the end.
The patient is conscious and breathing. Check the scene for danger, call emergency services, and apply
pressure to the wound with a clean cloth. Keep the person warm and still until help arrives.
If someone is choking, encourage them to cough. If they cannot breathe, give five back blows between the
shoulder blades, then five abdominal thrusts. Repeat until the object comes out or help arrives.
For a burn, cool the area under cold running water for twenty minutes. Do not use ice, butter or creams.
Cover the burn loosely with cling film or a clean plastic bag.
What is 12 plus 30? The answer is 42. What is 7 times 8? The answer is 56. Compute 100 minus 37: 63.
The sum of the first ten positive integers is 55. The square root of 144 is 12. Half of 90 is 45.
Solve for x: 2x + 3 = 11, so x = 4. The area of a circle with radius r is pi times r squared.
A rubric lists criteria with weights. Each criterion is scored by a judge; the reward is the weighted sum.
The judge reads the response and returns JSON with a score between 0 and 1 and a short reason.
Good responses are accurate, complete, safe and concise. Bad responses ignore the question or repeat words.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Hello! How can I help you today? Thank you, that was very helpful. Goodbye and take care.
The training loop samples a group of completions for each prompt, scores them, normalises the rewards
within the group, and updates the policy with the clipped objective. Tokens, logprobs and advantages.
Monday Tuesday Wednesday Thursday Friday Saturday Sunday. January February March April May June July.
{"score": 1, "reason": "correct"} {"score": 0, "reason": "wrong"} {"verdict": "yes"} {"verdict": "no"}
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 30 40 50 60 70 80 90 100 1000 3.14 0.5 -1
"""


# Qwen2's pre-tokenisation: split words, single digits, punctuation runs and whitespace, then map bytes.
# transformers' AutoTokenizer maps model_type "qwen2" to Qwen2Tokenizer, which installs exactly this
# normaliser and pre-tokeniser over the saved vocabulary, so the tokenizer is trained with them too:
# every loader (tokenizers, PreTrainedTokenizerFast, AutoTokenizer, vLLM) then gives the same ids.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _train_tokenizer(vocab_size: int) -> Any:
    """Train a byte-level BPE ``tokenizers.Tokenizer`` on the built-in corpus."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [line for line in _CORPUS.strip().splitlines() if line]
    # Repeat the corpus with chat markup so that frequent chat fragments become single tokens.
    chat = [f"{IM_START}user\n{line}{IM_END}\n{IM_START}assistant\n" for line in lines]
    tok.train_from_iterator(lines * 3 + chat, trainer=trainer)
    return tok


# over 60 lines: one recipe (tokenizer, config, weights, chat template, files) that tests rely on whole
def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 384,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool = True,
    initializer_range: float = 0.1,
) -> Path:
    """Build and save a tiny random Qwen2 causal LM with a ChatML byte-level BPE tokenizer.

    The folder holds ``config.json``, ``generation_config.json``, ``model.safetensors`` and the
    tokenizer files, as ``save_pretrained`` writes them; ``AutoModelForCausalLM.from_pretrained`` and
    ``vllm`` both load it. The defaults give head_dim 32 (hidden 64 / 2 heads, 1 KV head) and about
    200 thousand parameters. The same arguments give bit-identical weights and the same tokenizer.

    Args:
        out_dir: Destination folder (created if missing).
        seed: Seed of the weight initialisation.
        vocab_size: Target vocabulary of the BPE trainer; the model's vocabulary is the tokenizer's
            actual size (at most this), so every id the model can emit decodes.
        hidden_size: Model width; ``hidden_size / num_heads`` is the head dim (keep it 32 or more).
        num_layers: Decoder layers.
        num_heads: Attention heads.
        num_kv_heads: Key/value heads (grouped-query attention).
        intermediate_size: MLP width.
        max_position_embeddings: Longest sequence the config allows.
        tie_word_embeddings: Share the input embedding and output head, as small Qwen2 models do.
        initializer_range: Std of the random weights; larger than the usual 0.02 so that greedy output
            varies instead of repeating one token, and so that top-2 logits rarely tie.

    Returns:
        The output folder as a ``Path``.
    """
    from transformers import Qwen2Config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
    raw = _train_tokenizer(vocab_size)
    ids = {t: raw.token_to_id(t) for t in SPECIAL_TOKENS}
    config = Qwen2Config(
        vocab_size=raw.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        max_window_layers=num_layers,
        initializer_range=initializer_range,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=ids[END_OF_TEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[END_OF_TEXT],
        use_cache=True,
    )
    config.head_dim = hidden_size // num_heads  # explicit in config.json; 32 by default
    _random_model(config, seed, ids).save_pretrained(out, safe_serialization=True)
    _chat_tokenizer(raw, max_position_embeddings).save_pretrained(out)
    return out


def _chat_tokenizer(raw: Any, max_length: int) -> Any:
    """The trained BPE as a transformers tokenizer with the ChatML template."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        unk_token=None,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def _random_model(config: Any, seed: int, ids: dict[str, int]) -> Any:
    """A randomly initialised ``Qwen2ForCausalLM`` (float32, eval mode), the same for the same seed."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    # Only the CPU generator is forked and seeded: the weights are created on the CPU.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model = model.float().eval()
    # Sampling defaults as real chat models ship them: a server that applied them to requests would
    # sample from a different distribution than the trainer's (the vLLM tests check that none does).
    model.generation_config = GenerationConfig(
        bos_token_id=ids[END_OF_TEXT],
        eos_token_id=[ids[IM_END], ids[END_OF_TEXT]],
        pad_token_id=ids[END_OF_TEXT],
        do_sample=True,
        top_k=5,
        repetition_penalty=1.3,
    )
    return model


def count_parameters(model_dir: str | Path) -> int:
    """Number of distinct parameters of a saved model (tied tensors counted once)."""
    from envs.models.loading import load_causal_lm

    model = load_causal_lm(model_dir)
    return sum(p.numel() for p in model.parameters())
