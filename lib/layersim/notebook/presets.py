"""Per-scale settings of the models that several notebooks share, so that they share cache keys and checkpoints.

:data:`TRACING_VIT` is the standard-trained ViT of the tracing and redundancy notebooks: ``smoke`` (seconds,
exercises the code), ``default`` (a 12-block DeiT-style ViT of width 128 on 28x28 Fashion-MNIST, on two CPU cores)
and ``paper`` (DeiT-S on CIFAR-10 with appendix B's recipe and DeiT's AdamW rate; GPU) (see docs/modules.md,
`layersim.notebook.presets`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from layersim.inputs.image_data import dataset_info, split_size
from layersim.inputs.text_tasks import PAPER_TASKS
from layersim.notebook import rehearsal, settings as st

TRACING_VIT: dict[str, dict] = {
    "smoke": dict(
        dataset="fashion-mnist", n_train=512, patch_size=7, depth=4, embed_dim=32, num_heads=2,
        mlp_ratio=2.0, epochs=1, batch_size=64, lr=1e-3, weight_decay=0.05, schedule="cosine", milestones=(),
        augment=False,
    ),
    "default": dict(
        dataset="fashion-mnist", n_train=30000, patch_size=7, depth=12, embed_dim=128, num_heads=4,
        mlp_ratio=2.0, epochs=5, batch_size=128, lr=1e-3, weight_decay=0.05, schedule="cosine", milestones=(),
        augment=False,
    ),
    "paper": dict(
        dataset="cifar10", n_train=0, patch_size=4, depth=12, embed_dim=384, num_heads=6,
        mlp_ratio=4.0, epochs=200, batch_size=256, lr=2.5e-4, weight_decay=0.05, schedule="multistep",
        milestones=(100, 150), augment=True,
    ),
}

#: image data sets a tracing ViT or MLP can be trained on (offline: fashion-mnist, digits)
TRAINABLE_IMAGE_SETS = ("fashion-mnist", "digits", "mnist", "cifar10", "cifar100")

#: the patch side chosen for each image side: 2x2 on 8 px (digits), 7x7 on 28 px (MNIST-like,
#: 16 patches), 4x4 on 32 px (CIFAR, 64 patches, the paper's DeiT-S on CIFAR-10)
PATCH_FOR_SIDE = {8: 2, 28: 7, 32: 4}


def patch_size_for(dataset: str) -> int:
    """The patch side of a tracing ViT on ``dataset``: :data:`PATCH_FOR_SIDE` of its image side."""
    return PATCH_FOR_SIDE[dataset_info(dataset)["image_size"]]


def check_vit_shape(settings: dict) -> None:
    """One ``ValueError`` naming the parameter unless ``patch_size`` divides the image side, ``embed_dim`` is a
    multiple of ``num_heads`` and the counts fit the splits (:func:`check_split_counts`)."""
    side = dataset_info(settings["dataset"])["image_size"]
    patch = settings["patch_size"]
    if side % patch:
        divisors = ", ".join(str(d) for d in range(1, side + 1) if side % d == 0)
        raise ValueError(f"parameter 'patch_size': {patch} does not divide the {side}-pixel images of "
                         f"{settings['dataset']!r}; patch_size must be one of {divisors}")
    heads = settings["num_heads"]
    if settings["embed_dim"] % heads:
        raise ValueError(f"parameter 'embed_dim': {settings['embed_dim']} is not a multiple of num_heads={heads}; "
                         f"embed_dim must be a multiple of {heads}")
    check_split_counts(settings)


def check_split_counts(settings: dict) -> None:
    """One ``ValueError`` naming the parameter unless ``n_train`` (0: all) and ``n_eval`` fit the training and test
    splits of ``settings["dataset"]``, checked before anything loads."""
    for name, split in (("n_train", "train"), ("n_eval", "test")):
        n, size = settings.get(name), split_size(settings["dataset"], split)
        if n and size is not None and n > size:  # n = 0 / None: the whole split
            raise ValueError(f"parameter '{name}': {n} is more than the {size} images of the {split} split of "
                             f"{settings['dataset']}; {name} must be at most {size}"
                             + (" (0: the whole split)" if name == "n_train" else ""))


#: validation of :data:`TRACING_VIT` settings (:func:`layersim.notebook.settings.pick`); ``patch_size`` is
#: ``derived`` from the data set unless given, and :func:`check_vit_shape` checks the combination
TRACING_VIT_RULES: dict[str, st.Rule] = {
    "dataset": st.choice(*TRAINABLE_IMAGE_SETS),
    "n_train": st.integer(0, meaning="0 means the whole training split"),
    "patch_size": st.integer(1),
    "num_heads": st.integer(1),
    "mlp_ratio": st.real(0, open_low=True),
    "schedule": st.choice("cosine", "multistep", "constant"),
    "milestones": st.seq(st.integer(1), min_length=0),
    "augment": st.flag(),
}
TRACING_VIT_DERIVED = {"patch_size": lambda s: patch_size_for(s["dataset"])}


#: the shape of a tracing ViT that a notebook's ``vit`` parameter may change (:func:`shaped_vit`)
VIT_SHAPE_KEYS = ("depth", "embed_dim", "num_heads", "patch_size", "mlp_ratio")


def _vit_shape(shape) -> dict:
    if not isinstance(shape, Mapping):
        raise TypeError(f"got {type(shape).__name__}")
    unknown = sorted((k for k in shape if k not in VIT_SHAPE_KEYS), key=str)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}")
    return {k: st.check_value(k, v, TRACING_VIT_RULES) for k, v in shape.items()}


#: the rule of a ``vit`` parameter: None (the scale's ViT) or a dict of some of :data:`VIT_SHAPE_KEYS`
VIT_SHAPE_RULE = st.optional(st.custom(_vit_shape, f"a dict setting some of {', '.join(VIT_SHAPE_KEYS)}"),
                             "the scale's ViT")


#: beta of the CE + cosine regulariser (appendix B.3, ``objectives.ce_reg``). The paper gives no
#: value; 1.0 puts the regulariser (at most 1, its layer weights sum to 1) on the scale of the CE term.
CE_REG_BETA = 1.0

#: the training variants the aligned-training notebooks (t02 saturation, t03 aligned training,
#: t04 early exit) compare: figure label -> the settings that differ from ``TRACING_VIT[scale]``
#: (only the objective, so every comparison is at equal data, epochs and optimiser settings).
#: ``"standard"`` adds nothing, so it is the same cached checkpoint as t01's.
TRACING_VARIANTS: dict[str, dict] = {
    "standard": dict(),
    "aligned": dict(objective="aligned"),
    "multi-exit": dict(objective="multi_exit"),
    "CE-reg": dict(objective="ce_reg", extra={"beta": CE_REG_BETA}),
    "aligned (uniform)": dict(objective="aligned_uniform"),
}

#: a smaller training budget for the ablations of t03 (CE-reg, uniform weights, multi-exit heads,
#: standard 6- and 9-block models): each ablation is compared with a standard and an aligned model
#: trained with the *same* reduced budget. At paper scale nothing is reduced.
TRACING_ABLATION_BUDGET: dict[str, dict] = {
    "smoke": dict(n_train=256),
    "default": dict(n_train=10000, epochs=3),
    "paper": dict(),
}


def tracing_vit(scale: str, variant: str = "standard", reduced: bool = False, **overrides) -> dict:
    """Settings of a tracing ViT: ``TRACING_VIT[scale]`` with the ``TRACING_VARIANTS[variant]``
    objective, optionally the reduced ablation budget, then ``overrides`` (e.g. ``depth=6``)."""
    if variant not in TRACING_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {sorted(TRACING_VARIANTS)}")
    settings = {**rehearsal.shared("TRACING_VIT", scale, TRACING_VIT), **TRACING_VARIANTS[variant]}
    if reduced:
        settings.update(TRACING_ABLATION_BUDGET[scale])
    settings.update(overrides)
    return settings


def shaped_vit(scale: str, variant: str = "standard", shape: Mapping | None = None) -> dict:
    """:func:`tracing_vit` with the ``vit`` parameter's ``shape`` (:data:`VIT_SHAPE_RULE`; None or ``{}``: the
    scale's ViT, its settings and cache key unchanged). One ``ValueError`` naming ``vit`` and any unknown key, or
    the shape parameter that :func:`check_vit_shape` refuses."""
    shape = VIT_SHAPE_RULE.apply("vit", shape) or {}
    out = tracing_vit(scale, variant, **shape)
    if shape:
        try:
            check_vit_shape(out)
        except ValueError as err:
            raise ValueError(f"parameter 'vit': {shape} is not allowed ({err})") from None
    return out


def vit_shape_check(scale: str) -> Callable[[dict], None]:
    """A check for ``settings.pick(..., checks=)``: ``settings["vit"]`` gives a valid :func:`shaped_vit` of
    ``scale``, refused before anything loads."""

    def check(settings: dict) -> None:
        shaped_vit(scale, shape=settings["vit"])

    return check


#: The 9-layer MLPs of the tracing paper's appendix B.2 (Figure 12), trained with and without
#: residual connections (``residual`` is set per model by the notebook, so it is not here).
#: The paper gives neither width nor optimiser for them; ours: width 256, ReLU, no final norm,
#: AdamW with a cosine schedule. ``default``: Fashion-MNIST (offline, 28x28 like MNIST);
#: ``paper``: MNIST (downloaded), the whole training split.
TRACING_MLP: dict[str, dict] = {
    "smoke": dict(
        dataset="fashion-mnist", n_train=512, depth=9, width=32, final_norm=False,
        epochs=1, batch_size=64, lr=1e-3, weight_decay=0.05, schedule="cosine", milestones=(),
    ),
    "default": dict(
        dataset="fashion-mnist", n_train=30000, depth=9, width=256, final_norm=False,
        epochs=5, batch_size=128, lr=1e-3, weight_decay=0.05, schedule="cosine", milestones=(),
    ),
    "paper": dict(
        dataset="mnist", n_train=0, depth=9, width=256, final_norm=False,
        epochs=20, batch_size=128, lr=1e-3, weight_decay=0.05, schedule="cosine", milestones=(),
    ),
}

#: validation of :data:`TRACING_MLP` settings (:func:`layersim.notebook.settings.pick`)
TRACING_MLP_RULES: dict[str, st.Rule] = {
    **{k: TRACING_VIT_RULES[k] for k in ("dataset", "n_train", "schedule", "milestones")},
    "width": st.integer(1),
    "final_norm": st.flag(),
}


#: The source networks the alignment notebooks a08-a10 share (same settings -> same cache key -> same checkpoint).
#: ``default``: the small CNN pre-trained here on 12000 Fashion-MNIST training images of one class group
#: (a few CPU minutes). ``paper``: ResNet-18 trained from scratch on an ImageNet half (appendix D: 40 epochs,
#: learning rate x0.1 after 30 epochs, weight decay 1e-4, crop and flip augmentation; the cached training
#: loop is AdamW, so its rate is AdamW's 1e-3 rather than SGD's 0.1). ``weights``: a torchvision weights name
#: (e.g. ``"IMAGENET1K_V1"``) to download an ImageNet-trained ``arch`` instead of training one (a08 at paper scale).
ALIGNMENT_SOURCE_CNN: dict[str, dict] = {
    "smoke": dict(dataset="fashion-mnist", arch="small", channels=(4, 8, 8), fc=(32, 16), n_source=480, epochs=1,
                  batch_size=64, lr=3e-3, weight_decay=1e-4, schedule="cosine", milestones=(), augment=False,
                  weights=None),
    "default": dict(dataset="fashion-mnist", arch="small", channels=(8, 16, 32), fc=(256, 128), n_source=12000,
                    epochs=4, batch_size=128, lr=3e-3, weight_decay=1e-4, schedule="cosine", milestones=(),
                    augment=False, weights=None),
    "paper": dict(dataset="imagenet", arch="resnet18", channels=(), fc=(), n_source=0, epochs=40, batch_size=256,
                  lr=1e-3, weight_decay=1e-4, schedule="multistep", milestones=(30,), augment=True, weights=None),
}


#: The fine-tuning the clusters notebooks c01-c03 share (same settings -> same checkpoints), per scale
#: (``layersim.papers.clusters.protocol``, ``layersim.train.finetune.FinetuneConfig``). ``paper``: the clusters paper's §2
#: (Adam, batch 4, learning rate 1e-5, 1,000 warm-up steps, 10,000 steps; sequences of 256 tokens, jiant's
#: default). ``default``: a CPU budget for pretrained MiniLM-L6 on two cores (about 1.2 s per step of 32
#: examples of 64 tokens): 100 steps of 32 (3,200 examples seen once), sequences of 48 tokens, 10 % warm-up and a
#: learning rate of 2e-4, chosen in a 40-step pilot on austen-novel (5e-5: 0.29 validation accuracy, 2e-4: 0.44).
CLUSTERS_FINETUNE: dict[str, dict] = {
    "smoke": dict(n_train=96, n_val=48, steps=4, batch_size=8, lr=5e-5, warmup_steps=1, max_length=32,
                  weight_decay=0.0, restarts=2, models=["all-minilm-l6-v2"], tasks=["austen-novel", "austen-excerpt"]),
    "default": dict(n_train=3840, n_val=600, steps=100, batch_size=32, lr=2e-4, warmup_steps=10, max_length=48,
                    weight_decay=0.0, restarts=2, models=["all-minilm-l6-v2"], tasks=["austen-novel", "austen-excerpt"]),
    "paper": dict(n_train=None, n_val=None, steps=10_000, batch_size=4, lr=1e-5, warmup_steps=1000, max_length=256,
                  weight_decay=0.0, restarts=2, models=["roberta-base", "albert-large-v2", "electra-base-discriminator"],
                  tasks=list(PAPER_TASKS)),
}

#: validation of :data:`CLUSTERS_FINETUNE` settings (:func:`layersim.notebook.settings.pick`)
CLUSTERS_FINETUNE_RULES: dict[str, st.Rule] = {
    "n_train": st.optional(st.integer(2), "all"), "n_val": st.optional(st.integer(3, meaning="CKA needs 3 samples"), "all"),
    "steps": st.integer(1), "batch_size": st.integer(1), "lr": st.real(0, open_low=True),
    "warmup_steps": st.integer(0), "max_length": st.integer(4), "weight_decay": st.real(0), "restarts": st.integer(1, 2),
    "models": st.seq(st.text(), distinct=True), "tasks": st.seq(st.text(), distinct=True),
}

#: the suffix of the aligned-training notebook's models trained at the ablation budget
ABL = " (ablation budget)"

#: what an ablation budget may change of the full budget
BUDGET_KEYS = ("n_train", "epochs")


def shallow_depths(L: int) -> list[int]:
    """The depths of the shallower standard models of Figure 5: ``L/2`` and ``3L/4`` (6 and 9 for ``L = 12``)."""
    if L < 2:
        raise ValueError(f"the models need at least 2 blocks, got L={L}")
    return [L // 2, (3 * L) // 4]


def aligned_training_models(scale: str, budget: Mapping[str, int] | None = None) -> dict[str, dict]:
    """Every model of the aligned-training notebook (t03), name -> settings (:func:`tracing_vit`): the full budget's
    standard and aligned models, and the ablation budget's standard, aligned, multi-exit, CE-reg, uniform-weight and
    :func:`shallow_depths` models. ``budget``: the ablation images and epochs (:data:`BUDGET_KEYS`); ``{}`` means
    the full budget, its models shared."""
    if scale not in TRACING_VIT:
        raise ValueError(f"unknown scale {scale!r}; use one of {sorted(TRACING_VIT)}")
    budget = dict(TRACING_ABLATION_BUDGET[scale] if budget is None else budget)
    unknown = sorted(set(budget) - set(BUDGET_KEYS))
    if unknown:
        raise ValueError(f"an ablation budget sets only {', '.join(BUDGET_KEYS)}, got {unknown}")
    L = TRACING_VIT[scale]["depth"]
    return {
        "standard": tracing_vit(scale, "standard"),
        "aligned": tracing_vit(scale, "aligned"),
        **{f"{v}{ABL}": tracing_vit(scale, v, **budget)
           for v in ["standard", "aligned", "multi-exit", "CE-reg", "aligned (uniform)"]},
        **{f"standard {d}-block{ABL}": tracing_vit(scale, "standard", depth=d, **budget)
           for d in shallow_depths(L)},
    }
