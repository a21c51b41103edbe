"""Transfer of aligned models: layer-wise accuracy under a distribution shift, and a new task read through a linear
probe (tracing paper, appendix B.4, Figure 17).

- :data:`CORRUPTIONS`: four mild corruptions, the offline stand-in for a re-collected test set; :data:`RULES`;
- :func:`shift_accuracy`: every model's layer-wise accuracy (eq. 2) on every shifted test set;
- :func:`task_inputs`, :func:`normed_blocks`, :func:`probe_transfer`: a new task's inputs, every block's normed
  class token, and the probes read from them;
- :func:`shallow_gap`, :func:`final_shortfall`, :func:`describe` (:func:`describe_shifts`,
  :func:`describe_probes`): the tested statistics;
- :func:`transfer_figure`, :func:`figure17_panels`: Figure 17.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from layersim.inputs import image_data, shift
from layersim.measures import probe
from layersim.nets import readout
from layersim.notebook import presets, settings

#: the offline stand-in for a re-collected test set: panel label -> shift spec (``layersim.inputs.shift``), the
#: severities fixed in advance (Gaussian noise of 0.1 of the pixel range, a 1-pixel blur, contrast halved,
#: translations of up to 2 pixels)
CORRUPTIONS = {
    "Gaussian noise (sigma 0.1)": {"corruption": "gaussian_noise", "severity": 0.1},
    "blur (sigma 1 px)": {"corruption": "gaussian_blur", "severity": 1.0},
    "contrast 50 %": {"corruption": "contrast", "severity": 0.5},
    "translation (up to 2 px)": {"corruption": "translate", "severity": 2},
}

#: the rules of t06's settings (``layersim.notebook.settings``): the shifted test sets (panel label -> shift spec),
#: the new task's data set, the probes' inverse L2 strength and the new task's sizes (0: all)
RULES = {"shifts": settings.mapping(settings.text(),
                                 settings.custom(shift.check_spec, "a shift (layersim.inputs.shift.check_spec)")),
         "transfer_to": settings.choice(*presets.TRAINABLE_IMAGE_SETS), "probe_C": settings.real(0, open_low=True),
         "n_transfer_train": settings.integer(0, meaning="0 means all"),
         "n_transfer_test": settings.integer(0, meaning="0 means all")}
#: line colours of Figure 17's two models
COLORS = {"standard": "tab:blue", "aligned": "tab:orange"}


def shift_accuracy(models: Mapping[str, torch.nn.Module], sets: Mapping[str, tuple], device="auto"
                   ) -> dict[str, dict[str, np.ndarray]]:
    """``{set label: {model name: layer-wise accuracy [L]}}``: each model's own classifier on blocks ``1..L``
    (eq. 2) of every ``(x, y)`` test set of ``sets``, in order."""
    return {label: {name: readout.evaluate(model, (x, y), device=device).accuracy for name, model in models.items()}
            for label, (x, y) in sets.items()}


def task_inputs(dataset: str, split: str, n: int, like: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``: ``n`` images of ``dataset``'s ``split`` (0: all; else a ``seed``-ed stratified subset) prepared
    as input of a model trained on ``like`` (:func:`layersim.inputs.image_data.as_model_input`)."""
    images, labels = image_data.image_dataset(dataset, split, limit=n or None, seed=seed, normalize=False).tensors()
    return image_data.as_model_input(images, like), labels


def normed_blocks(model: torch.nn.Module, hidden) -> np.ndarray:
    """The class token of blocks ``1..L`` after the model's final norm, ``[L, N, d]``, from
    ``hidden [L + 1, N, d]``; a ``logits_fn`` for :func:`layersim.nets.readout.evaluate`. ``ValueError`` without a
    block."""
    L = hidden.shape[0] - 1
    if L < 1:
        raise ValueError(f"normed_blocks needs the embedding output and at least one block, "
                         f"got {hidden.shape[0]} layers")
    return readout.layer_logits(model, hidden[1:], layers=np.arange(1, L + 1), head=torch.nn.Identity())


def probe_transfer(model: torch.nn.Module, train: tuple, test: tuple, C: float = 1.0, device="auto"
                   ) -> dict[str, np.ndarray]:
    """A new task read from a frozen model (Fig. 17, right; appendix B.4); ``train``, ``test``: ``(x, y)``
    (:func:`task_inputs`). Returns ``shared_probe``, the test accuracy at every block of one logistic probe (``C``)
    fitted on the last block, and ``per_layer_probes``, one probe per block."""
    (x_tr, y_tr), (x_te, y_te) = train, test
    normed_tr, normed_te = (readout.evaluate(model, (x, y), device=device, logits_fn=normed_blocks).logits
                            for x, y in ((x_tr, y_tr), (x_te, y_te)))
    head = probe.fit_linear_probe(normed_tr[-1], y_tr.numpy(), C=C)
    return {
        "shared_probe": np.array([probe.probe_accuracy(head, f, y_te.numpy()) for f in normed_te]),
        "per_layer_probes": probe.per_layer_probe_accuracy(normed_tr, y_tr.numpy(), normed_te, y_te.numpy(), C=C),
    }


def shallow_gap(curves: Mapping[str, np.ndarray], shallow: slice) -> float:
    """The aligned model's mean layer-wise accuracy over the ``shallow`` blocks minus the standard model's."""
    return float(curves["aligned"][shallow].mean() - curves["standard"][shallow].mean())


def final_shortfall(curves: Mapping[str, np.ndarray]) -> float:
    """How far the aligned model's last-block accuracy lies below the standard model's (negative: above)."""
    return float(curves["standard"][-1] - curves["aligned"][-1])


def describe(curves: Mapping[str, np.ndarray], shallow: slice) -> str:
    """One line: each model's last-block accuracy and its mean accuracy over the ``shallow`` blocks."""
    last = ", ".join(f"{n} {a[-1]:.3f}" for n, a in curves.items())
    low = ", ".join(f"{n} {a[shallow].mean():.3f}" for n, a in curves.items())
    return f"last block: {last}; mean over blocks {shallow.start + 1}..{shallow.stop}: {low}"


def describe_shifts(accuracy: Mapping[str, Mapping[str, np.ndarray]], sets: Mapping[str, tuple], shallow: slice
                    ) -> str:
    """One line per test set of ``accuracy`` (:func:`shift_accuracy`): its label, its number of images (``sets``:
    ``(x, y)`` by label) and :func:`describe` of its curves."""
    return "\n".join(f"{label:28s} n={len(sets[label][1]):5d}  {describe(curves, shallow)}"
                     for label, curves in accuracy.items())


def describe_probes(probes: Mapping[str, Mapping[str, np.ndarray]], shallow: slice) -> str:
    """:func:`describe` of the shared probe's and of the per-block probes' curves of every model of ``probes``
    (:func:`probe_transfer` by name), on two lines."""
    return " ".join(["shared probe:", describe({n: t["shared_probe"] for n, t in probes.items()}, shallow),
                     "\nper-block probes:", describe({n: t["per_layer_probes"] for n, t in probes.items()}, shallow)])


def figure17_panels(shift_acc: Mapping[str, Mapping[str, np.ndarray]], probes: Mapping[str, Mapping[str, np.ndarray]],
                    shifts: Sequence[str], new_task: str) -> list[tuple[str, dict[str, np.ndarray], bool]]:
    """The panels of :func:`transfer_figure`: each shifted test set of ``shifts`` (beside the clean one), then the
    new task ``new_task`` read by the last block's probe on every block and by one probe per block
    (``probes``: :func:`probe_transfer` by model)."""
    panels = [(label, shift_acc[label], True) for label in shifts]
    return panels + [(f"{new_task}: last-block probe on every block", {n: p["shared_probe"] for n, p in probes.items()},
                      False),
                     (f"{new_task}: one probe per block", {n: p["per_layer_probes"] for n, p in probes.items()}, False)]


def transfer_figure(panels: Sequence[tuple[str, Mapping[str, np.ndarray], bool]], clean: Mapping[str, np.ndarray],
                    blocks: Sequence[int], colors: Mapping[str, str] | None = None):
    """The tracing paper's Figure 17: one panel per ``(title, {model: layer-wise accuracy}, with_clean)``, up to
    three a row; where ``with_clean``, each model's accuracy on the clean test images (``clean``) dotted beside
    it. Returns the figure."""
    import matplotlib.pyplot as plt

    if not panels:
        raise ValueError("transfer_figure needs at least one panel")
    colors = COLORS if colors is None else colors
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax, (title, curves, with_clean) in zip(axes.flat, panels):
        for name, acc in curves.items():
            ax.plot(blocks, acc, marker="o", ms=3, color=colors.get(name), label=name)
            if with_clean:
                ax.plot(blocks, clean[name], ls=":", color=colors.get(name), label=f"{name}, clean test set")
        ax.set(title=title, xlabel="layer", ylabel="layer-wise accuracy", ylim=(0, 1), xticks=blocks)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
