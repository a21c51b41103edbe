"""Tests of layersim.tools.bench_lens: the logit-lens benchmark (``python -m layersim.tools.bench lens``) times
layersim's token lens beside plain transformers on a random-init tiny LLaMA and GPT-2, and builds a random model
from a folder without weights."""

import pytest
import torch

from layersim.nets import readout
from layersim.tools import bench_lens
from builders import near_top, text_batch, tiny


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_lens_benchmark_times_token_lens_beside_plain_transformers(arch):
    t = tiny(arch)
    model, batch = t.model.eval(), text_batch()
    plain = bench_lens.plain_lens(model, [batch])
    ours = readout.token_lens(model, [batch], device="cpu").top
    assert plain.shape == ours.shape
    with torch.no_grad():  # plain transformers' last layer is the model's own top-1, as token_lens's is
        near_top(plain[-1], model(**batch).logits[batch["attention_mask"].bool()])
    rows = bench_lens.compare(model, [batch], repeat=1)
    assert [r["recipe"] for r in rows] == ["layersim token_lens", "plain transformers"]
    assert rows[0]["agreement"] == 1.0 and rows[1]["agreement"] >= 0.95  # a random-init model has near ties
    assert all(r["seconds"] > 0 and r["positions"] == ours.shape[1] for r in rows)
    lines = bench_lens.markdown(rows).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| layersim token_lens |")
    with pytest.raises(ValueError, match="repeat"):
        bench_lens.compare(model, [batch], repeat=0)


def test_the_lens_benchmark_builds_a_random_model_from_a_folder_without_weights(tmp_path):
    """``bench lens --random-weights DIR``: the architecture of DIR's config.json with seeded random weights, in
    float32, and DIR's tokenizer; the same weights on every call (the timings of a machine without the checkpoint)."""
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    t = tiny("llama")
    t.model.config.save_pretrained(tmp_path)
    vocab = {"[UNK]": 0, "[PAD]": 1, "the": 2, "cat": 3}
    raw = Tokenizer(tok_models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.safetensors")) and not list(tmp_path.glob("*.bin"))
    model, tokenizer = bench_lens.random_lm(str(tmp_path))
    again, _ = bench_lens.random_lm(str(tmp_path))
    assert type(model).__name__ == type(t.model).__name__
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert tokenizer("the cat sat")["input_ids"] == [2, 3, 0]
