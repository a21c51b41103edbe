"""Per-scale settings of the models that several notebooks share.

The tracing notebooks (t01 cosine vs CKA, t02 saturation events, t04 early exit, ...) and the
redundancy notebooks all read the same standard-trained ViT, so its settings live here once:
a notebook that asks for ``TRACING_VIT[scale]`` gets the same cache key, hence the same
checkpoint, as every other notebook at that scale.

- ``smoke``: seconds on a CPU; exercises every code path, proves nothing.
- ``default``: a 12-block DeiT-style ViT of width 128 on 28x28 Fashion-MNIST (patches of 7x7),
  trained here on two CPU cores in a few minutes.
- ``paper``: DeiT-S (12 blocks, width 384, 6 heads) trained from scratch on CIFAR-10 with the
  appendix-B recipe (batch 256, 200 epochs, MultiStepLR at epochs 100 and 150, random crop,
  flip and 15-degree rotation). The appendix states "AdamW with an initial learning rate of
  0.1", an SGD-sized rate with which AdamW diverges on a ViT; we use DeiT's own AdamW rate
  5e-4 x batch/512 and weight decay 0.05 instead. Needs a GPU (hours).
"""

from __future__ import annotations

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
    settings = {**TRACING_VIT[scale], **TRACING_VARIANTS[variant]}
    if reduced:
        settings.update(TRACING_ABLATION_BUDGET[scale])
    settings.update(overrides)
    return settings


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
