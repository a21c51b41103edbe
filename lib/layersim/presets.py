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
