"""Tiny models and data shared by the unit tests (import with ``from builders import ...``)."""

from __future__ import annotations

import gzip
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

import torch
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import TensorDataset

# the project's own model families register their adapters where they are defined: import them, so that every test
# that walks layersim.nets.adapters.REGISTRY sees them
import layersim.train.mlp  # noqa: F401
import layersim.train.small_nets  # noqa: F401
from layersim.nets import cnn

#: the repository's root (tests may sit at any depth of tests/)
REPO = Path(__file__).resolve().parents[1]

#: blocks of the tiny test ViT
DEPTH = 3


def tiny_vit(perturb: bool = False, **kw) -> VisionTransformer:
    """A seeded 3-block ViT for 28x28 grey images (eval mode). ``perturb`` adds noise to every
    1-D parameter, so that biases and norm affines are not the zeros / ones of a fresh init."""
    torch.manual_seed(0)
    args = dict(img_size=28, patch_size=7, in_chans=1, depth=DEPTH, embed_dim=32, num_heads=2,
                num_classes=10, global_pool="token")
    args.update(kw)
    model = VisionTransformer(**args).eval()
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 1:
                    p.add_(0.1 * torch.randn_like(p))
    return model


def toy_data(n: int = 64, seed: int = 0) -> TensorDataset:
    """Two classes of 8x8 images that differ in the brightness of the left half."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    x[:, :, :, :4] += (2 * y - 1).float()[:, None, None, None]
    return TensorDataset(x, y)


# ----------------------------------------------------------------------------- one tiny model per adapter


class Tiny:
    """A random-init tiny model of one adapter family with a batch it takes.

    ``output(m)``: the model's own output on the batch (logits, or CLIP's embedding) for ``m`` =
    the model or a ``layersim.nets.surgery`` model of it; ``readout(m)``: what the readout of the last
    layer at the adapter's default token must equal (None where the family has no head).
    """

    def __init__(self, model, batch, output, readout=None, n_layers=3):
        self.model, self.batch, self._output, self._readout, self.n_layers = model, batch, output, readout, n_layers

    def output(self, m=None):
        with torch.no_grad():
            return self._output(self.model if m is None else m, self.batch)

    def readout(self):
        if self._readout is None:
            return None
        with torch.no_grad():
            return self._readout(self.model, self.batch)


def _perturbed(model):
    """Noise on every 1-D parameter (norm weights are not ones, biases not zeros), eval mode."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


#: right-padded token ids (pad 0); every sequence ends with 98, the tiny CLIP's EOS token, so
#: that CLIP's pooled position (the first EOS) and token="last" are the same
TEXT_IDS = [[5, 9, 3, 7, 98, 0], [7, 1, 2, 8, 4, 98], [11, 12, 98, 0, 0, 0], [3, 3, 4, 98, 0, 0]]
LAST = [4, 5, 2, 3]


def text_batch():
    ids = torch.tensor(TEXT_IDS)
    return {"input_ids": ids, "attention_mask": (ids != 0).long()}


def image_batch(side=16, chans=3, n=4):
    return torch.randn(n, chans, side, side, generator=torch.Generator().manual_seed(2))


_SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64)


def _seeded(build):
    torch.manual_seed(0)
    return _perturbed(build())


def _tensor(out):
    """A tensor, or the projected ``pooler_output`` that transformers 5 returns in its place."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def _logits(m, batch):
    return (m(**batch) if isinstance(batch, dict) else m(pixel_values=batch)).logits


def _last_logits(m, batch):
    return _logits(m, batch)[torch.arange(len(LAST)), LAST]


def tiny(name):
    """The :class:`Tiny` of adapter ``name`` (every registered adapter has one; test_adapters checks)."""
    import transformers as tr

    from layersim.nets import adapters

    if name == "timm_vit":
        return Tiny(tiny_vit(perturb=True), image_batch(28, 1), lambda m, x: m(x), lambda m, x: m(x))
    if name in ("hf_vit", "hf_deit", "dinov2"):
        if name == "hf_vit":
            model = _seeded(lambda: tr.ViTForImageClassification(
                tr.ViTConfig(image_size=16, patch_size=4, num_labels=5, **_SMALL)))
            ref = _logits
        elif name == "hf_deit":
            model = _seeded(lambda: tr.DeiTForImageClassificationWithTeacher(
                tr.DeiTConfig(image_size=16, patch_size=4, num_labels=5, **_SMALL)))
            ref = lambda m, x: m(pixel_values=x).cls_logits  # noqa: E731
        else:
            model = _seeded(lambda: tr.Dinov2ForImageClassification(tr.Dinov2Config(
                image_size=16, patch_size=4, num_labels=5, hidden_size=32, num_hidden_layers=3,
                num_attention_heads=2, mlp_ratio=2)))
            ref = None
        return Tiny(model, image_batch(), _logits, ref)
    text_models = {
        "bert": (tr.BertConfig, tr.BertForSequenceClassification, {}),
        "albert": (tr.AlbertConfig, tr.AlbertForSequenceClassification, dict(embedding_size=16)),
        "distilbert": (tr.DistilBertConfig, tr.DistilBertForSequenceClassification,
                       dict(dim=32, n_layers=3, n_heads=2, hidden_dim=64)),
    }
    if name in text_models:
        cfg_cls, model_cls, extra = text_models[name]
        kw = dict(_SMALL) if name != "distilbert" else {}
        cfg = cfg_cls(vocab_size=99, max_position_embeddings=40, num_labels=3, pad_token_id=0, **kw, **extra)
        return Tiny(_seeded(lambda: model_cls(cfg)), text_batch(), _logits, _logits)
    if name in ("gpt2", "llama"):
        if name == "gpt2":
            cfg = tr.GPT2Config(vocab_size=99, n_embd=32, n_layer=3, n_head=2, n_positions=40,
                                bos_token_id=0, eos_token_id=0, pad_token_id=0)
            model = _seeded(lambda: tr.GPT2LMHeadModel(cfg))
        else:
            cfg = tr.LlamaConfig(vocab_size=99, num_key_value_heads=1, max_position_embeddings=40,
                                 bos_token_id=0, eos_token_id=0, pad_token_id=0, **_SMALL)
            model = _seeded(lambda: tr.LlamaForCausalLM(cfg))
        return Tiny(model, text_batch(), _logits, _last_logits)
    if name in ("clip_vision", "clip_text"):
        cfg = tr.CLIPConfig(text_config=dict(vocab_size=99, max_position_embeddings=40, eos_token_id=98,
                                             bos_token_id=97, pad_token_id=0, **_SMALL),
                            vision_config=dict(image_size=16, patch_size=4, **_SMALL), projection_dim=8)
        clip = _seeded(lambda: tr.CLIPModel(cfg))
        which = name.split("_")[1]
        tower = adapters.clip_tower(clip, which)
        batch = image_batch() if which == "vision" else text_batch()
        if which == "vision":
            def embeds(m, x):
                return m(pixel_values=x)
            def ref(m, x):
                return _tensor(clip.get_image_features(pixel_values=x))
        else:
            def embeds(m, b):
                return m(**b)
            def ref(m, b):
                return _tensor(clip.get_text_features(**b))
        return Tiny(tower, batch, embeds, ref)
    if name == "mlp":  # input of the blocks' width (2 x 4 x 4 = 32), so index 0 stacks with the rest
        from layersim.train import mlp

        model = _perturbed(mlp.build_mlp(mlp.MLPConfig(in_features=32, num_classes=5, width=32, depth=3,
                                                       residual=True, final_norm=True)))
        return Tiny(model, image_batch(4, 2), lambda m, x: m(x), lambda m, x: m(x))
    if name in RAGGED:
        model, batch = RAGGED[name]()
        n = len(adapters.get(model).blocks(model))
        return Tiny(model, batch, lambda m, x: m(x), lambda m, x: m(x), n_layers=n)
    raise KeyError(f"no tiny model for adapter {name!r}: add one to tests/builders.py")


# ----------------------------------------------------------------------------- models whose layers differ in shape


def _rbf_net():
    from layersim.train import small_nets

    g = torch.Generator().manual_seed(2)
    x = torch.rand(6, 5, generator=g)
    return _seeded(lambda: small_nets.RBFNet(x[:4].numpy(), width=0.7, out_dim=2)), x


def _small_cnn():
    cfg = cnn.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(4, 6), fc=(10, 7))
    return _perturbed(cnn.build_cnn(cfg, seed=0)), image_batch(8, 1)


#: a small CNN of 8 x 8 grey images: two conv blocks (2, 4 channels), fully connected layers of 6 and 5, 3 classes
TINY_CNN = cnn.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(2, 4), fc=(6, 5))


def blobs(n=120, seed=0):
    """``(X [n, 1, 8, 8], y [n])``: three classes, class 0 bright at the top left, class 1 at the bottom right."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 3
    X = torch.randn(n, 1, 8, 8, generator=g) * 0.3
    X[:, 0, :4, :4] += (y == 0).float().view(-1, 1, 1) * 2
    X[:, 0, 4:, 4:] += (y == 1).float().view(-1, 1, 1) * 2
    return X, y


def _resnet():
    from torchvision.models.resnet import BasicBlock, ResNet

    return _seeded(lambda: ResNet(BasicBlock, [1, 1, 1, 1], num_classes=3)), image_batch(32, 3)


def _vgg():
    """A VGG with a small feature stack and classifier of VGG's layout (built on the meta device
    first: VGG's own 25088 x 4096 classifier would cost 400 MB)."""
    from torch import nn
    from torchvision.models.vgg import VGG

    with torch.device("meta"):
        model = VGG(nn.Sequential(), num_classes=3, init_weights=False)

    def parts():
        feats = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        head = nn.Sequential(nn.Linear(8 * 7 * 7, 16), nn.ReLU(True), nn.Dropout(), nn.Linear(16, 12),
                             nn.ReLU(True), nn.Dropout(), nn.Linear(12, 3))
        return feats, head

    torch.manual_seed(0)
    model.features, model.classifier = parts()
    return _perturbed(model), image_batch(16, 3)


#: adapter name -> (model, batch) for the families whose blocks change the representation's shape
RAGGED = {"rbf_net": _rbf_net, "small_cnn": _small_cnn, "torchvision_resnet": _resnet, "torchvision_vgg": _vgg}


def ragged_reference(name, model, x):
    """Every entry 0..L of a RAGGED model, computed by hand from its modules (float tensors)."""
    with torch.no_grad():
        if name == "rbf_net":
            rbf = model.layers[0]
            d2 = torch.cdist(x, rbf.centers).pow(2)
            return [x, torch.exp(-d2 / (2 * torch.exp(rbf.log_width) ** 2))]
        if name == "small_cnn":
            return [x, *model.hidden(x)]
        if name == "torchvision_resnet":
            h = [model.maxpool(model.relu(model.bn1(model.conv1(x))))]
            for stage in (model.layer1, model.layer2, model.layer3, model.layer4, model.avgpool):
                h.append(stage(h[-1]))
            return h
        if name == "torchvision_vgg":
            f = model.features(x)
            c = model.classifier
            fc1 = torch.relu(c[0](torch.flatten(model.avgpool(f), 1)))
            return [x, f, fc1, torch.relu(c[3](fc1))]
    raise KeyError(name)


def electra_tiny():
    """ELECTRA (its embedding projection and classification head) through the ``bert`` adapter."""
    import transformers as tr

    cfg = tr.ElectraConfig(vocab_size=99, embedding_size=16, max_position_embeddings=40, num_labels=3,
                           pad_token_id=0, **_SMALL)
    return Tiny(_seeded(lambda: tr.ElectraForSequenceClassification(cfg)), text_batch(), _logits, _logits)


def roberta_tiny():
    import transformers as tr

    cfg = tr.RobertaConfig(vocab_size=99, max_position_embeddings=40, num_labels=3, pad_token_id=0, **_SMALL)
    return Tiny(_seeded(lambda: tr.RobertaForSequenceClassification(cfg)), text_batch(), _logits, _logits)


def write_notebook(path, cells, params='scale = "default"'):
    """A notebook at ``path``: a ``parameters``-tagged cell holding ``params``, then one code cell per
    source in ``cells``, on the python3 kernel (what the runner and the smoke checks run)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    first = nbformat.v4.new_code_cell(params)
    first.metadata["tags"] = ["parameters"]
    nb.cells = [first] + [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def one_line_error(err: str, *words: str) -> str:
    """The message of a command line's ``prog: error: ...`` (or ``error: ...``) output: exactly one such line, no
    traceback, containing every one of ``words``. What the hostile-input suites mean by a clean refusal."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ----------------------------------------------------------------------------- files


def tree_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its relative path, with its bytes (a folder's state, to compare before/after)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def temporaries(folder: Path) -> list[str]:
    """The names of the temporary files (``.tmp-``) an atomic write left under ``folder``."""
    return [p.name for p in folder.rglob("*") if ".tmp-" in p.name]


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    """An idx file for ``array`` (big-endian data), written the long way for independence."""
    head = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return head + array.astype(array.dtype.newbyteorder(">")).tobytes()


def fake_fmnist(folder, n_train=20, n_test=10):
    """Fashion-MNIST's four gzipped IDX files under ``folder``, random images with labels 0..9 in turn; returns
    ``{"train": (x, y), "t10k": (x, y)}``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = (np.arange(n) % 10).astype(np.uint8)
        for kind, arr, code in (("images-idx3", x, 0x08), ("labels-idx1", y, 0x08)):
            with gzip.open(folder / f"{prefix}-{kind}-ubyte.gz", "wb") as fh:
                fh.write(idx_bytes(arr, code))
        arrays[prefix] = (x, y)
    return arrays


# ----------------------------------------------------------------------------- committed results in a private repository

#: the ways of spelling ``figures/p/n`` that :func:`spelled` knows
SPELLINGS = ["absolute", "relative", "dotdot", "symlink", "symlink then dotdot", "home"]


def spelled(repo: Path, monkeypatch, spelling: str) -> Path:
    """``figures/p/n`` of ``repo`` spelled one way (cwd and HOME ``repo``, ``link`` -> figures, ``deep`` -> figures/p)."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(repo))
    (repo / "elsewhere").mkdir()
    (repo / "link").symlink_to(repo / "figures")
    (repo / "deep").symlink_to(repo / "figures" / "p")
    return {"absolute": repo / "figures" / "p" / "n", "relative": Path("figures/p/n"),
            "dotdot": Path("elsewhere/../figures/p/n"), "symlink": Path("link/p/n"),
            "symlink then dotdot": Path("deep/../p/n"), "home": Path("~/figures/p/n")}[spelling]


def committed_files(root: Path) -> dict[str, bytes]:
    """Every file under the committed folders (figures/, notebooks/, tests/) of ``root``."""
    return {name: data for folder in ("figures", "notebooks", "tests") for name, data in tree_files(root / folder).items()}


def run_metrics(value: float = 0.8, holds: bool = True, curve: list | None = None) -> dict:
    """A run's ``metrics.json`` with one claim (``rises``: value >= 0.5) and one curve (the NaN cases)."""
    return {"notebook": "toy/t01", "scale": "smoke", "params": {"depth": 3},
            "claims": {"rises": {"holds": holds, "value": value, "threshold": 0.5, "op": ">="}},
            "curve": [0.25, 0.5, 1.0] if curve is None else curve}


def write_metrics_json(folder: Path, key: str, payload: dict) -> Path:
    """``folder/<key>/metrics.json`` as ``json.dumps`` writes it (NaN and infinities as ``NaN``, ``Infinity``)."""
    import json

    path = folder / key / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def prose_notebook(template: str, shown: str, extra_markdown: str = "") -> dict:
    """A notebook dict: one templated markdown cell showing ``shown``, a code cell, and ``extra_markdown`` if any."""
    from layersim.notebook import prose

    cells = [{"cell_type": "markdown", "metadata": {prose.KEY: {"template": template}}, "source": [shown]},
             {"cell_type": "code", "metadata": {}, "source": ["x = 1"], "outputs": [], "execution_count": 1}]
    if extra_markdown:
        cells.append({"cell_type": "markdown", "metadata": {}, "source": [extra_markdown]})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


# ----------------------------------------------------------------------------- refusals and faults


def full_disk(*args, **kwargs):
    """A writer on a full disk: some bytes reach the file (the first path argument), then ENOSPC."""
    import errno

    target = next((a for a in args if isinstance(a, (str, Path))), None)
    if target is not None:
        Path(target).write_bytes(b"partial")
    raise OSError(errno.ENOSPC, "No space left on device")


def leftovers(folder: Path) -> list[str]:
    """Temporary files of interrupted writes anywhere below ``folder``."""
    import re

    return sorted(p.name for p in folder.rglob("*") if re.search(r"\.tmp-|\.part-", p.name))


def _flip_100_bytes(path):
    raw = bytearray(path.read_bytes())
    for i in range(len(raw) // 2, len(raw) // 2 + 100):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


#: damage done to a cache file, by name (the tests of the loaders' caches)
CACHE_FAULTS = {
    "garbage": lambda p: p.write_bytes(b"\x93NUMPY garbage" * 50),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "100 flipped bytes": _flip_100_bytes,
}


def full_disk_on_cache(path: Path, load, fault: str, monkeypatch, cache: Path) -> None:
    """``load()`` with the writer ``fault`` (a dotted name) on a full disk: one ``DiskFull`` line naming the cache
    file ``path``, nothing left below ``cache``; with space again, ``path`` and its sha256 record are written."""
    import re

    from layersim.core.writers import DiskFull
    from layersim.inputs.cache import sha256_record

    with monkeypatch.context() as m:
        m.setattr(fault, full_disk)
        one_line_raised(load, rf"disk full at {re.escape(str(path))}$", DiskFull)
    assert leftovers(cache) == [] and not path.exists() and not sha256_record(path).exists()
    load()  # space again: the cache is written, with its sha256
    assert path.is_file() and sha256_record(path).is_file() and leftovers(cache) == []


def one_line_raised(call, match: str, kind=ValueError) -> str:
    """The message of the ``kind`` that ``call()`` raises: one line, matching the regex ``match`` (returned)."""
    import re

    import pytest

    with pytest.raises(kind) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    assert re.search(match, msg), f"{match!r} not in {msg!r}"
    return msg


# ----------------------------------------------------------------------------- references and tolerances


def naive_hsic(K, L):
    """Deliberately naive float64 HSIC of two Gram matrices (explicit centring matrix)."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ L @ H) / (n - 1) ** 2


def naive_linear_cka(X, Y):
    """Deliberately naive float64 linear CKA from uncentred Gram matrices (``naive_hsic`` does the centring)."""
    K, L = X @ X.T, Y @ Y.T  # uncentred Gram matrices; H does the centring
    return naive_hsic(K, L) / np.sqrt(naive_hsic(K, K) * naive_hsic(L, L))


def linear_cka(X, Y):
    """Kornblith et al.'s linear CKA on column-centred features: ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)."""
    X, Y = X - X.mean(0), Y - Y.mean(0)
    return np.linalg.norm(Y.T @ X) ** 2 / (np.linalg.norm(X.T @ X) * np.linalg.norm(Y.T @ Y))


def logit_tol(z):
    """Drift allowed between two routes to the same float32 logits (array): 1e-4 of their scale, floored at 1e-12."""
    return 1e-4 * float(np.abs(z).max()) + 1e-12


def tensor_logit_tol(z):
    """Drift allowed between two routes to the same float32 logits (tensor): 1e-4 of their scale, no floor."""
    return 1e-4 * float(z.abs().max())


def near_top(tokens, logits):
    """Each of ``tokens`` [N] is a top-1 of its row of ``logits`` [N, V] up to 1e-4 x max |logits| (returned)."""
    # 1e-4 x max |logits| is hundreds of times the drift between two routes to the same logits (other batching, a KV
    # cache, other CPU kernels). A random-init model's top two logits may be closer than that drift, so one route's
    # argmax need not be another's; a wrong token falls far short.
    z = (logits.detach() if isinstance(logits, torch.Tensor) else torch.from_numpy(np.asarray(logits))).double()
    tol = 1e-4 * float(z.abs().max())
    picked = z.gather(-1, torch.as_tensor(np.asarray(tokens)).long().reshape(-1, 1))[:, 0]
    assert (picked >= z.max(-1).values - tol).all(), (picked - z.max(-1).values).min()
    return tol


# ----------------------------------------------------------------------------- Austen text tasks on tiny encoders

#: a tiny 3-block encoder config
TINY_ENCODER = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=2, intermediate_size=64)
#: the paper-scale families, each shrunk to :data:`TINY_ENCODER`
TINY_FAMILIES = {"roberta-base": dict(TINY_ENCODER, type_vocab_size=2),  # the MiniLM tokenizer marks second segments
                 "albert-large-v2": dict(TINY_ENCODER, embedding_size=16, vocab_size=30522),
                 "electra-base-discriminator": dict(TINY_ENCODER, embedding_size=16)}
#: fine-tuning settings of the paper-scale path on the tiny families
TINY_FINETUNE = dict(steps=3, batch_size=8, lr=1e-3, warmup_steps=1, max_length=24, weight_decay=0.0,
                     eval_batch_size=16)


def austen_task(split, n=24):
    """The ``austen-novel`` task: ``n`` examples of ``split``, seed 0."""
    from layersim.inputs import text_tasks as tt

    return tt.load_task("austen-novel", split, n=n, seed=0)


def austen_choice_task(split, n=12, C=3):
    """Multiple choice from Austen: which of C texts is the excerpt of the context."""
    from layersim.inputs import text_tasks as tt

    base = tt.load_task("austen-excerpt", split, n=n * C, seed=0)
    rng = np.random.default_rng(0)
    contexts, choices, labels = [], [], []
    for k in range(n):
        rows = list(range(k * C, (k + 1) * C))
        contexts.append(base.text_a[rows[0]])
        endings = [" ".join(base.text_a[r].split()[:6]) for r in rows]
        y = int(rng.integers(C))
        endings[0], endings[y] = endings[y], endings[0]
        choices.append(endings)
        labels.append(y)
    return tt.TextTask("toy-choice", split, contexts, None, np.array(labels), C, choices=choices)


def accuracy_range(task, logits, tol):
    """``(lo, hi)``: ``task``'s accuracies from ``logits`` when any score within ``tol`` of an example's best may win."""
    # A random-init head scores by a hair (at the embedding output every ending of an example even has the same CLS
    # vector: exact ties), so another route to these logits breaks such ties its own way; ``lo`` counts the examples
    # that are right for sure, ``hi`` those that may be right.
    assert task.metric == "accuracy"
    z = np.asarray(logits, dtype=np.float64).reshape(len(task), -1)  # [N, K], or [N, C] for multiple choice
    near = z >= z.max(1, keepdims=True) - tol
    hit = near[np.arange(len(task)), task.labels]
    return float((hit & (near.sum(1) == 1)).mean()), float(hit.mean())


def scores_like(task, score, ref):
    """``score``, reached by another route to the logits ``ref``, is ``ref``'s accuracy wherever no near tie decides."""
    lo, hi = accuracy_range(task, ref, 2 * logit_tol(ref))
    assert lo <= score <= hi, (score, lo, hi)


# ----------------------------------------------------------------------------- a small GPT-2 on Austen


def gpt2_config():
    """The small GPT-2 (512 tokens, 3 blocks of width 32) of the LM tests, trained 30 steps."""
    from layersim.papers.tracing import lm

    return lm.LMConfig(vocab_size=512, n_positions=32, n_embd=32, n_layer=3, n_head=2, steps=30, batch_size=8,
                       lr=3e-3, warmup_steps=3)


# ----------------------------------------------------------------------------- skip grids and CKA maps of papers/clusters


def truncation_curves(untuned, tuned, tunedorig, full, majority=0.5):
    """One run's truncation curves (Fig. 3) as protocol gives them."""
    return {"UNTUNED": np.asarray(untuned, float), "TUNED": np.asarray(tuned, float),
            "TUNEDORIG": np.asarray(tunedorig, float), "full": full, "majority": majority}


def skip_grid(diag):
    """A skip grid with the single-block scores ``diag`` on its diagonal, NaN below, 0.3 above."""
    L = len(diag)
    G = np.full((L, L), np.nan)
    G[np.triu_indices(L, 1)] = 0.3
    G[np.diag_indices(L)] = diag
    return G


def cka_maps(ft_ft, orig_orig, ft_orig_diag, restart_diag=None):
    """One task's CKA maps: FT-FT, ORIG-ORIG, the diagonal FT-ORIG and, given ``restart_diag``, FT[1]-FT[2]."""
    out = {"ORIG-ORIG": np.asarray(orig_orig, float), "FT-ORIG": np.diag(ft_orig_diag).astype(float),
           "FT-FT": np.asarray(ft_ft, float)}
    if restart_diag is not None:
        out["FT[1]-FT[2]"] = np.diag(restart_diag).astype(float)
    return out


#: two clusters (blocks 1-2 and 3-4) after fine-tuning, none before
TWO_CLUSTERS = np.array([[1, .9, .1, .1], [.9, 1, .1, .1], [.1, .1, 1, .8], [.1, .1, .8, 1]])
#: no clusters
FLAT_MAP = np.full((4, 4), 0.5) + 0.5 * np.eye(4)
#: the CKA maps of two tasks: clusters after fine-tuning on ``a``, before on ``b``
CLUSTER_MAPS = {("m", "a"): cka_maps(TWO_CLUSTERS, FLAT_MAP, [0.9, 0.8, 0.3, 0.1], [0.95, 0.9, 0.9, 0.99]),
                ("m", "b"): cka_maps(FLAT_MAP, TWO_CLUSTERS, [0.7, 0.7, 0.6, 0.5])}


# ----------------------------------------------------------------------------- the bad-input contract of layersim.measures


def bad_input_tests(measures: dict, few, hostile):
    """The two contract tests over ``measures`` (name -> (fn, range)): classic bad inputs and arbitrary float arrays."""
    import pytest
    from hypothesis import given
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @pytest.mark.parametrize("name", sorted(measures))
    @few
    @given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 14), d=st.integers(2, 5))
    def test_classic_bad_inputs(bad_inputs, name, seed, n, d):
        bad_inputs.classic(name, *measures[name], seed, n, d)

    @pytest.mark.parametrize("name", sorted(measures))
    @hostile
    @given(X=hnp.arrays(np.float64, st.tuples(st.integers(0, 7), st.integers(0, 3)),
                        elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)),
           seed=st.integers(0, 2**32 - 1))
    def test_arbitrary_float_arrays(bad_inputs, name, X, seed):
        """Any float64 array at all (NaN, inf, subnormals, 1e308 next to 1e-308, repeated rows) against
        a partner of the same N."""
        bad_inputs.arbitrary(*measures[name], X, seed)

    return test_classic_bad_inputs, test_arbitrary_float_arrays


# ----------------------------------------------------------------------------- tables of papers/redundancy


def table1_row(model, data, span, blocks, per_seed):
    """A row of Tables 1, 5, 6: one span's probe accuracies per seed with their mean and std."""
    return {"model": model, "data": data, "span": span, "blocks": blocks, "accuracy": np.mean(per_seed),
            "std": np.std(per_seed), "per_seed": list(per_seed)}


#: rows of Tables 1, 5, 6: two models on two data sets, spans 1-3, 2-3 (single block), 3-4 (single block) and the
#: unmodified model
TABLE1_ROWS = [table1_row(m, d, s, b, acc) for m, d, shift in (("A", "x", 0.0), ("A", "y", 0.1), ("B", "x", -0.05))
               for s, b, acc in (("1-3", 2, [0.5 + shift, 0.6 + shift]), ("2-3", 3, [0.7 + shift, 0.75 + shift]),
                                 ("3-4", 3, [0.8 + shift, 0.6 + shift]), ("none", 4, [0.8 + shift, 0.7 + shift]))]


def table2_row(model, data, span, blocks, skip, approx):
    """A row of Table 2: one span's skip and approximation accuracies (two seeds)."""
    return {"model": model, "data": data, "span": span, "blocks": blocks, "skip": skip, "skip_std": 0.01,
            "skip_per_seed": [skip, skip], "approx": approx, "approx_std": 0.02, "approx_per_seed": [approx, approx]}


#: rows of Table 2, B before A (to check that the gains per pair are sorted)
TABLE2_ROWS = [table2_row("B", "x", "1-3", 2, 0.5, 0.6), table2_row("B", "x", "0-1", 3, 0.7, 0.65),
               table2_row("B", "x", "none", 4, 0.8, 0.8),
               table2_row("A", "y", "1-3", 2, 0.4, 0.45), table2_row("A", "y", "2-3", 3, 0.6, 0.7),
               table2_row("A", "y", "none", 4, 0.75, 0.75)]


def spy_probes(monkeypatch, module) -> list:
    """Record every ``module.probe_accuracies(m, *args, **kw)`` call as ``(m, args, kw, result)`` in the list returned."""
    probed, real = [], module.probe_accuracies

    def spy(m, *args, **kw):
        acc = real(m, *args, **kw)
        probed.append((m, args, kw, acc))
        return acc

    monkeypatch.setattr(module, "probe_accuracies", spy)
    return probed


#: counts every loader refuses, with the one-line message each gets (the tests of inputs.image_data,
#: inputs.subsets, inputs.text_data and inputs.text_tasks)
BAD_COUNTS = [
    (0, r"=0: at least 1 of the \w+ of .* is needed"),
    (-5, r"=-5: at least 1 of the \w+ of .* is needed"),
    (10**9, r"=1000000000 is more than the \d+ \w+|asks for 500000000 examples per class"),
    (2.5, r" must be a whole number of \w+ \(or None for all\), got 2.5"),
    ("100", r" must be a whole number of \w+ \(or None for all\), got '100'"),
    (True, r" must be a whole number of \w+ \(or None for all\), got True"),
]
BAD_COUNT_IDS = ["zero", "negative", "huge", "float", "text", "bool"]


# ----------------------------------------------------------------------------- raw HTML in the book (site, sanitize)

#: payloads, numbered: a payload is live in a page when its alert(<n>) sits in a tag, an attribute or a script
PAYLOADS = {
    "script": "<script>alert(1)</script>",
    "img": "<img src=x onerror=alert(2)>",
    "svg": "<svg onload=alert(3)>",
    "link": '<a href="javascript:alert(4)">a link</a>',
    "spaced link": '<a href=" java\tscript:alert(5)">a link</a>',
    "entity link": '<a href="&#106;avascript:alert(6)">a link</a>',
    "quote": '"><script>alert(7)</script>',
    "iframe": '<iframe srcdoc="<script>alert(8)</script>"></iframe>',
    "details": "<details open ontoggle=alert(9)><summary>more</summary>text</details>",
    "style": '<div style="background:url(javascript:alert(10))">d</div>',
    "split": "<scr<script>ipt>alert(11)</script>",
    "self-closed style": "<style/><img src=x onerror=alert(12)>",
}

#: raw HTML in every place MyST lets it through: text, a directive's body, a ``raw`` block, a reStructuredText link
HOSTILE_MARKDOWN = f"""Text {PAYLOADS['script']} and {PAYLOADS['svg']} and {PAYLOADS['link']}.

{PAYLOADS['details']}

```{{note}}
{PAYLOADS['iframe']}
```

```{{eval-rst}}
.. raw:: html

   <script>alert(14)</script>

`a link <javascript:alert(15)>`_ and `another <https://example.org>`_
```

Kept: `<b>code</b>`, $a<b$, H<sub>2</sub>O.
"""


class _Live(HTMLParser):
    """What a browser would run in a page: ``alert(`` in an ``on...`` handler, a ``javascript:`` URL, a script's
    body or an iframe's ``srcdoc``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._script = False

    def handle_starttag(self, tag, attrs):
        self._script = tag == "script"
        for name, value in attrs:
            value = re.sub(r"[\x00-\x20]+", "", value or "").lower()
            if "alert(" in value and (name.startswith("on") or name == "srcdoc" or value.startswith("javascript:")):
                self.found.append(f"<{tag} {name}={value}>")
        if tag in ("iframe", "object", "embed"):
            self.found.append(f"<{tag}>")

    def handle_endtag(self, tag):
        self._script = False

    def handle_data(self, data):
        if self._script and "alert(" in data:
            self.found.append(f"<script>{data.strip()[:40]}")


def live(page: str) -> list[str]:
    """The live payloads in the HTML ``page`` (:class:`_Live`, and a raw ``<script>`` with an alert by regex)."""
    parser = _Live()
    parser.feed(page)
    parser.close()
    return parser.found + re.findall(r"<script[^>]*>[^<]*alert\(", page, re.I)


#: the last part of a file name such as ``layersim.mplstyle``, not a Python name
FILE_SUFFIXES = {"mplstyle", "md", "py", "json", "ipynb", "toml"}


def resolves(dotted: str) -> bool:
    """Whether ``layersim.<module>[.<name>...]`` names a module or an attribute of one (the longest importable
    prefix, then attributes)."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False
