"""The distillation's batched decoder: every row's answer equals the model's own one-prompt greedy answer while
rows finish at different steps and are dropped from the batch; on a CPU the prompts run through the model in parts
only as wide as their own longest prompt; a preallocated cache layer refuses to overflow and joins ragged parts
right-aligned, zeros before; sampling is reproducible for a seed; follow-up turns are answered after the first
turn, on the target's own answer, from the first turn's keys and values where the chat template re-tokenizes that
answer as the target wrote it, and equal to answering the whole conversation afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dart_core.train.batch_decode as BD
import tests.helpers_ckpt as C
from dart_core.engine.kv_cache import PreallocatedLayer
from dart_core.train.batch_decode import batch_answers, batch_answers_keeping, continue_answers
from dart_core.train.distill import distill, followup_records

V = 97


def _prompts(n: int) -> list[list[int]]:
    return [[(5 * i + 3 * j) % (V - 3) + 3 for j in range(3 + (i * 7) % 11)] for i in range(n)]


def _greedy(model: torch.nn.Module, prompt: list[int], steps: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(steps):
            nxt = model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return ids[0, len(prompt):].tolist()


# (family, CPU prefill tokens): at 30 tokens a time, the prompts run through the model a few rows at a time, joined
PREFILLS = [("llama", 2400), ("qwen3", 2400), ("llama", 30)]


Run = tuple[torch.nn.Module, list[list[int]], list[list[int]], set[int]]


def _ragged_run(family: str, prefill_tokens: int, monkeypatch: pytest.MonkeyPatch, n: int, steps: int,
                cuts: tuple[tuple[int, int], ...]) -> Run:
    """A tiny model, ``n`` prompts, their ``steps``-token greedy answers and stop tokens taken from those answers
    at ``cuts`` (row, step), so rows end at many different steps (some never) and the batch shrinks often."""
    monkeypatch.setattr(BD, "CPU_PREFILL_TOKENS", prefill_tokens)
    model = C.tiny_target(family, vocab=V, layers=3, seed=4).float()
    prompts = _prompts(n)
    full = [_greedy(model, p, steps) for p in prompts]
    return model, prompts, full, {full[i][k] for i, k in cuts}


@pytest.mark.parametrize(("family", "prefill_tokens"), PREFILLS)
def test_rows_that_finish_early_are_dropped_and_every_answer_is_the_models_own(
        family: str, prefill_tokens: int, monkeypatch: pytest.MonkeyPatch) -> None:
    model, prompts, full, stops = _ragged_run(family, prefill_tokens, monkeypatch, 20, 24, ((0, 3), (5, 9), (11, 15)))
    want = []
    for seq in full:
        cut = next((i + 1 for i, t in enumerate(seq) if t in stops), len(seq))
        want.append(seq[:cut])
    assert len({len(w) for w in want}) >= 4, "the rows should finish at several different steps"
    got = batch_answers(model, prompts, max_new_tokens=24, stop_ids=stops, pad_id=0)
    assert got == want


@pytest.mark.parametrize(("family", "prefill_tokens"), PREFILLS)
def test_a_kept_conversation_goes_on_as_if_run_again_from_its_start(
        family: str, prefill_tokens: int, monkeypatch: pytest.MonkeyPatch) -> None:
    model, prompts, _, stops = _ragged_run(family, prefill_tokens, monkeypatch, 16, 12, ((0, 2), (5, 6), (11, 9)))
    keep = list(range(0, 16, 2))
    answers, kept = batch_answers_keeping(model, prompts, max_new_tokens=12, stop_ids=stops, pad_id=0, keep=keep)
    assert answers == batch_answers(model, prompts, max_new_tokens=12, stop_ids=stops, pad_id=0)
    assert sorted(kept) == keep
    lengths = {len(answers[i]) for i in keep}
    assert len(lengths) >= 3 and 12 in lengths, "kept rows should end at several steps, some at the limit"
    # each kept row: its prompt and its answer but the last token, which never went through the model
    assert all(kept[i].length == len(prompts[i]) + len(answers[i]) - 1 for i in keep)
    turns = {i: [(7 * i) % (V - 3) + 3, 40 + i % 5, 60][: 1 + i % 3] for i in keep}  # ragged next turns
    got = continue_answers(model, [kept[i] for i in keep], [[answers[i][-1], *turns[i]] for i in keep],
                           max_new_tokens=10, stop_ids=stops, pad_id=0)
    afresh = [prompts[i] + answers[i] + turns[i] for i in keep]
    assert got == batch_answers(model, afresh, max_new_tokens=10, stop_ids=stops, pad_id=0)
    assert got == [_greedy(model, p, 10)[: len(g)] for p, g in zip(afresh, got, strict=True)]
    with pytest.raises(ValueError, match="2 kept conversations but 1 inputs"):
        continue_answers(model, [kept[0], kept[2]], [[3]], max_new_tokens=2, stop_ids=stops, pad_id=0)
    with pytest.raises(ValueError, match="empty input"):
        continue_answers(model, [kept[0]], [[]], max_new_tokens=2, stop_ids=stops, pad_id=0)
    with pytest.raises(ValueError, match="keep names rows outside the 16 prompts"):
        batch_answers_keeping(model, prompts, max_new_tokens=2, stop_ids=stops, pad_id=0, keep=[16])
    other = C.tiny_target(family, vocab=V, layers=2, seed=4).float()
    with pytest.raises(ValueError, match="model's 2 layers"):
        continue_answers(other, [kept[0]], [[3]], max_new_tokens=2, stop_ids=stops, pad_id=0)


def test_prompts_are_prefilled_in_parts_only_as_wide_as_their_longest_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BD, "CPU_PREFILL_TOKENS", 30)
    # rows x longest prompt <= 30; a prompt longer than that alone is a part of its own
    assert BD._prefill_parts([3, 3, 4, 10, 12, 3, 40]) == [(0, 3), (3, 5), (5, 6), (6, 7)]
    model = C.tiny_target("llama", vocab=V, layers=2, seed=2).float()
    prompts = [[5] * n for n in (3, 3, 4, 10, 12, 3)]
    shapes: list[tuple[int, int]] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    got = batch_answers(model, prompts, max_new_tokens=2, stop_ids={1}, pad_id=0)
    assert shapes[:3] == [(3, 4), (2, 12), (1, 3)]  # not three parts 12 wide
    assert got == [_greedy(model, p, 2) for p in prompts]


@pytest.mark.parametrize("prefill_tokens", [2400, 40])
def test_a_prefix_every_prompt_shares_goes_through_the_model_once(prefill_tokens: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 tokens at a time: the suffixes run in several parts after the shared prefix, and are joined
    monkeypatch.setattr(BD, "CPU_PREFILL_TOKENS", prefill_tokens)
    model = C.tiny_target("qwen3", vocab=V, layers=2, seed=6).float()
    system = [(11 * j) % (V - 3) + 3 for j in range(10)]
    prompts = [system + [(5 * i + 3 * j) % (V - 3) + 3 for j in range(1 + (i * 7) % 9)] for i in range(12)]
    assert BD.shared_prefix(prompts) == 10
    shapes: list[tuple[int, int]] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    got = batch_answers(model, prompts, max_new_tokens=10, stop_ids={V + 1}, pad_id=0)
    assert shapes[0] == (1, 10), "the shared prefix first, for one row"
    assert all(s[1] <= 9 for s in shapes[1:]), "then only the suffixes"
    assert (len(shapes) - 9 > 2) == (prefill_tokens == 40)  # several parts, or one
    assert got == [_greedy(model, p, 10) for p in prompts]


def test_the_shared_prefix_leaves_each_prompt_a_token_and_is_used_only_when_long() -> None:
    assert BD.shared_prefix([[7] * 12, [7] * 15]) == 11  # the shortest prompt's last token stays its own
    assert BD.shared_prefix([[7] * 9 + [1, 4], [7] * 9 + [2]]) == 9
    assert BD.shared_prefix([[7] * 7 + [1], [7] * 7 + [2]]) == 0  # below MIN_PREFIX: not worth a forward
    assert BD.shared_prefix([[3] * 20]) == 19


def test_the_cache_layer_refuses_to_overflow_and_keeps_selected_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = PreallocatedLayer(capacity=4)
    k = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).view(2, 1, 3, 2)
    keys, _ = layer.update(k, k + 100)
    assert torch.equal(keys, k) and layer.get_seq_length() == 3
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys, k[1:]) and torch.equal(layer.values, k[1:] + 100)
    with pytest.raises(ValueError, match="holds 4 positions"):
        layer.update(k[:1, :, :2], k[:1, :, :2])
    # parts of a batch run apart are joined row after row, into a buffer with room to grow
    other = PreallocatedLayer(capacity=3)
    other.update(k[:1] + 7, k[:1] + 107)
    joined = PreallocatedLayer.joined([layer, other], capacity=6)
    assert joined.get_seq_length() == 3 and joined.key_buffer.shape[2] == 6
    assert torch.equal(joined.keys, torch.cat([k[1:], k[:1] + 7])) and torch.equal(joined.values[1], k[0] + 107)
    # a shorter part is right-aligned, the columns before it zeros (the left padding the mask hides), even where
    # the fresh buffer held NaN: a masked NaN would still reach the attention's output
    short = PreallocatedLayer(capacity=2)
    short.update(k[:1, :, 1:] + 9, k[:1, :, 1:] + 109)
    monkeypatch.setattr(torch.Tensor, "new_empty",
                        lambda self, size, **kw: torch.full(size, float("nan"), dtype=self.dtype))
    ragged = PreallocatedLayer.joined([layer, short], capacity=6)
    assert ragged.get_seq_length() == 3
    assert torch.equal(ragged.keys[0], k[1]) and torch.equal(ragged.keys[1, :, 1:], k[0, :, 1:] + 9)
    assert torch.equal(ragged.values[1, :, 1:], k[0, :, 1:] + 109)
    assert torch.equal(ragged.keys[1, :, :1], torch.zeros(1, 1, 2))
    assert torch.equal(ragged.values[1, :, :1], torch.zeros(1, 1, 2))
    with pytest.raises(ValueError, match="only filled parts"):
        PreallocatedLayer.joined([layer, PreallocatedLayer(capacity=3)], capacity=6)
    with pytest.raises(ValueError, match="holds 2 positions"):
        PreallocatedLayer.joined([layer], capacity=2)


def test_sampling_is_reproducible_for_a_seed_and_not_greedy() -> None:
    model = C.tiny_target("llama", vocab=V, layers=2, seed=1).float()
    prompts = _prompts(6)

    def sample(seed: int) -> list[list[int]]:
        return batch_answers(model, prompts, max_new_tokens=12, stop_ids={1}, pad_id=0, temperature=1.5,
                             generator=torch.Generator().manual_seed(seed))

    assert sample(3) == sample(3)
    assert sample(3) != batch_answers(model, prompts, max_new_tokens=12, stop_ids={1}, pad_id=0)


def test_bad_requests_are_refused() -> None:
    model = C.tiny_target("llama", vocab=V, layers=1).float()
    with pytest.raises(ValueError, match="empty prompt"):
        batch_answers(model, [[3], []], max_new_tokens=4, stop_ids={1}, pad_id=0)
    with pytest.raises(ValueError, match="no stop token"):
        batch_answers(model, [[3]], max_new_tokens=4, stop_ids=set(), pad_id=0)
    assert batch_answers(model, [], max_new_tokens=4, stop_ids={1}, pad_id=0) == []


def test_followups_are_asked_after_the_targets_own_first_answer(tmp_path: Path) -> None:
    from tests.test_train_any_target import CHAT

    model = C.tiny_target("llama", vocab=V, layers=2, seed=2).float()
    tok = C.word_tokenizer(V)
    tok.chat_template = CHAT
    recs = [{"id": "a", "prompt": "w3 w4 w5", "followups": ["w9 w10"]}, {"id": "b", "prompt": "w6 w7"}]
    out = tmp_path / "d.jsonl"
    stats = distill(model, tok, recs, out, stop_ids=[1], max_new_tokens=6, batch_size=2, progress=False)
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"a", "b", "a/2"} and stats["followups"] == 1 and rows["a/2"]["parent"] == "a"
    assert stats["continued"] == 1  # asked from the first turn's keys and values
    second = rows["a/2"]["ids"]
    assert second[rows["a/2"]["n_prompt"]:] == batch_answers(model, [second[: rows["a/2"]["n_prompt"]]],
                                                             max_new_tokens=6, stop_ids=[1], pad_id=0)[0]
    convo = [{"role": "user", "content": "w3 w4 w5"}, {"role": "assistant", "content": rows["a"]["answer"]},
             {"role": "user", "content": "w9 w10"}]
    want = tok.apply_chat_template(convo, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert rows["a/2"]["ids"][: rows["a/2"]["n_prompt"]] == list(want)
    assert followup_records(recs, {"a": "x"})[0]["messages"][1] == {"role": "assistant", "content": "x"}
    # A resumed run answers nothing twice, second turns included.
    again = distill(model, tok, recs, out, stop_ids=[1], max_new_tokens=6, batch_size=2, progress=False)
    assert again["answered"] == 0 and again["skipped_done"] == 3


def test_a_followup_whose_prompt_retokenizes_the_answer_goes_on_from_the_tokens_both_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept keys and values are reused only as far as the second turn's prompt repeats the tokens the target
    wrote; from the first token the template tokenizes otherwise, the conversation goes through the model again."""
    import dart_core.train.distill as D
    from tests.test_train_any_target import CHAT

    model = C.tiny_target("llama", vocab=V, layers=2, seed=2).float()
    tok = C.word_tokenizer(V)
    tok.chat_template = CHAT
    real = D.prompt_ids

    def retokenized(tokenizer: object, rec: dict) -> list[int]:
        ids = real(tokenizer, rec)
        return [*ids[:2], 5, *ids[2:]] if rec.get("parent") else ids  # one token more, early in the first turn

    monkeypatch.setattr(D, "prompt_ids", retokenized)
    recs = [{"id": "a", "prompt": "w3 w4 w5", "followups": ["w9 w10"]}, {"id": "b", "prompt": "w6 w7"}]
    out = tmp_path / "d.jsonl"
    stats = distill(model, tok, recs, out, stop_ids=[1], max_new_tokens=6, batch_size=2, progress=False)
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert stats["followups"] == 1 and stats["continued"] == 1
    n = rows["a/2"]["n_prompt"]
    assert rows["a/2"]["ids"][2] == 5
    assert rows["a/2"]["ids"][n:] == batch_answers(model, [rows["a/2"]["ids"][:n]], max_new_tokens=6,
                                                   stop_ids=[1], pad_id=0)[0]


def test_vocab_coverage_counts_the_answer_tokens_inside_each_draft_vocabulary() -> None:
    from dart_core.train.vocab_coverage import coverage

    train = [[5, 5, 5, 6, 6, 7], [5, 6, 8]]  # counts: 5×4, 6×3, 7×1, 8×1
    held = [[5, 9, 9, 6]]
    rows = coverage(train, {"train": train, "held": held}, [1, 2, 3], vocab_size=12, eos_token_id=None)
    assert rows == [{"size": 1, "train": 4 / 9, "held": 1 / 4}, {"size": 2, "train": 7 / 9, "held": 2 / 4},
                    {"size": 3, "train": 8 / 9, "held": 2 / 4}]
    # EOS always takes a place: with size 1 only EOS is in, and no answer token is covered.
    assert coverage(train, {"train": train}, [1], vocab_size=12, eos_token_id=0)[0]["train"] == 0
