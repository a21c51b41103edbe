"""Fixture models for the rehearsal of the paper scale: the papers' architectures at their published sizes with
random weights, saved where a real download would leave them.

:func:`write_models` saves each Hugging Face model of :data:`MODELS` with ``save_pretrained`` into the project cache's
``models/<name>/`` (the folder ``layersim.inputs.fetch.load_model`` reads first), from the registry's published
configuration, with a tokenizer where the model has one: the real WordPiece vocabulary of BERT-base uncased where a
package carries it (the offline MiniLM's, which BERT and ELECTRA share), else a fixture one of the same kind
(:data:`TOKENIZERS`). Models too large for a 24 GiB CPU machine (the 7B-class LLaMAs) keep their published width
and vocabulary with fewer layers (:data:`FEWER_LAYERS`). :func:`write_weights` saves torchvision's pretrained
weights files (random) where torchvision keeps downloads (see docs/modules.md, ``layersim.tools.fixture_models``).
"""

from __future__ import annotations

from pathlib import Path

from layersim.inputs import assets, fetch
from layersim.tools.fixtures import sentences

__all__ = ["FEWER_LAYERS", "MODELS", "TOKENIZERS", "WEIGHTS", "fixture_tokenizer", "write_models", "write_weights"]

#: registry name -> (the transformers class it is saved as, its tokenizer: a key of :data:`TOKENIZERS` or None)
MODELS = {
    "bert-base-uncased": ("BertForPreTraining", "wordpiece-uncased"),
    "roberta-base": ("RobertaForMaskedLM", "byte-bpe"),
    "albert-large-v2": ("AlbertForMaskedLM", "small-wordpiece"),
    "electra-base-discriminator": ("ElectraForPreTraining", "wordpiece-uncased"),
    "gpt2": ("GPT2LMHeadModel", "byte-bpe"),
    "llama-3.2-3b": ("LlamaForCausalLM", "byte-bpe"),
    "llama-3.1-8b": ("LlamaForCausalLM", "byte-bpe"),
    "clip-vit-base-patch32": ("CLIPModel", "byte-bpe"),
    "vit-small-patch16-224": ("ViTModel", None),
    "vit-base-patch16-224": ("ViTModel", None),
    "dinov2-small": ("Dinov2Model", None),
    "dinov2-base": ("Dinov2Model", None),
    "deit-small-patch16-224-hf": ("ViTModel", None),
}
#: the tokenizers of the fixtures: the real one a package carries, else one of the same kind
TOKENIZERS = {
    "wordpiece-uncased": "BERT-base uncased's own WordPiece vocabulary (30,522 tokens), from the offline MiniLM-L6 "
                         "package, which shares it (BERT and ELECTRA use it)",
    "byte-bpe": "a byte-level BPE (SmolLM2's, 49,152 tokens, from its offline package) standing in for GPT-2's, "
                "RoBERTa's, CLIP's and LLaMA-3's, which no package carries",
    "small-wordpiece": "a WordPiece of 2,000 tokens trained on the fixture texts, standing in for ALBERT's "
                       "SentencePiece model (its 30,000 tokens need the sentencepiece package)",
}
#: the models rehearsed with fewer layers than published (their width, heads and vocabulary kept), and why
FEWER_LAYERS = {"llama-3.2-3b": 2, "llama-3.1-8b": 2}
WHY_FEWER = "at 28 and 32 layers they need 12.9 and 32 GB in float32, more than a 24 GiB CPU machine has"
#: torchvision's pretrained weights the paper presets ask for (``torchvision:<arch>.<weights>``)
WEIGHTS = ("torchvision:resnet18.IMAGENET1K_V1", "torchvision:resnet101.IMAGENET1K_V1")


def fixture_tokenizer(kind: str):
    """The tokenizer of kind ``kind`` (:data:`TOKENIZERS`), a transformers fast tokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if kind == "wordpiece-uncased":
        return AutoTokenizer.from_pretrained(fetch.resolve("all-minilm-l6-v2"), local_files_only=True)
    if kind == "byte-bpe":
        tok = AutoTokenizer.from_pretrained(fetch.resolve("smollm2-135m"), local_files_only=True)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return tok
    if kind != "small-wordpiece":
        raise ValueError(f"unknown fixture tokenizer {kind!r}; use one of {sorted(TOKENIZERS)}")
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sentences(2000, 1), trainers.WordPieceTrainer(vocab_size=2000, special_tokens=special,
                                                                          show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def _config(name: str):
    """The published configuration of ``name`` from the registry, with :data:`FEWER_LAYERS` applied (LLaMA in
    bfloat16, as published)."""
    from transformers import AutoConfig

    cfg = dict(assets.get_asset(name).config)
    model_type = cfg.pop("model_type")
    if name in FEWER_LAYERS:
        cfg.update(num_hidden_layers=FEWER_LAYERS[name], dtype="bfloat16")
    return AutoConfig.for_model(model_type, **cfg)


def write_models(cache: Path, names: list[str] | None = None, progress: bool = True) -> dict[str, Path]:
    """Save every model of :data:`MODELS` (or ``names``) into ``<cache>/models/<name>/`` (weights, config and
    tokenizer files); a folder already holding ``config.json`` is kept. Returns ``{name: folder}``."""
    import torch
    import transformers

    out, made = {}, {}
    for name in names or list(MODELS):
        cls_name, kind = MODELS[name]
        folder = Path(cache) / "models" / name
        out[name] = folder
        if (folder / "config.json").is_file():
            continue
        if progress:
            print(f"fixture model {name} ({cls_name})", flush=True)
        cfg = _config(name)
        torch.manual_seed(0)
        model = getattr(transformers, cls_name)._from_config(cfg, dtype=getattr(cfg, "dtype", None) or torch.float32)
        tmp = folder.with_name(folder.name + ".partial")
        model.save_pretrained(tmp)
        if kind is not None:
            if kind not in made:
                made[kind] = fixture_tokenizer(kind)
            made[kind].save_pretrained(tmp)
        tmp.rename(folder)
        del model
    return out


def write_weights(names: tuple[str, ...] = WEIGHTS) -> dict[str, Path]:
    """Save random weights of each torchvision model of ``names`` at the file torchvision would download them to
    (``layersim.inputs.fetch.weights_file``: ``$TORCH_HOME/hub/checkpoints/``); a file already there is kept."""
    import torch
    import torchvision

    out = {}
    for name in names:
        file = fetch.weights_file(name)
        out[name] = file
        if file.is_file():
            continue
        arch = name.removeprefix("torchvision:").partition(".")[0]
        torch.manual_seed(0)
        file.parent.mkdir(parents=True, exist_ok=True)
        torch.save(getattr(torchvision.models, arch)(weights=None).state_dict(), file.with_suffix(".partial"))
        file.with_suffix(".partial").rename(file)
    return out
