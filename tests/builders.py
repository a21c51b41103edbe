"""Tiny models and data shared by the unit tests (import with ``from builders import ...``)."""

import gzip
import struct
from pathlib import Path

import numpy as np

import torch
from timm.models.vision_transformer import VisionTransformer
from torch.utils.data import TensorDataset

# the project's own model families register their adapters where they are defined: import them, so that every test
# that walks layersim.nets.adapters.REGISTRY sees them
import layersim.papers.alignment.pretrain  # noqa: F401
import layersim.train.mlp  # noqa: F401
import layersim.train.small_nets  # noqa: F401

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
    from layersim.papers.alignment import pretrain as pt

    cfg = pt.CNNConfig(in_chans=1, img_size=8, num_classes=3, channels=(4, 6), fc=(10, 7))
    return _perturbed(pt.build_cnn(cfg, seed=0)), image_batch(8, 1)


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
