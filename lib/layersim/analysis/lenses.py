"""A registry of layer-wise measures ("lenses"): name -> measure, inputs, output kind, invariances.

Every measure of the four papers that reads a stack of layers is one :class:`Lens`, computed by the project's own
functions. A lens reads a :class:`LayerData` (``hidden [E, N, d]``, ``labels [N]``, ``logits [E, N, K]``,
``model``), returns one of :data:`KINDS` and declares invariances from :data:`INVARIANCES`, which
``tests/analysis/test_lenses.py`` checks numerically. ``apply("cka/matrix", data)`` gives ``[E, E]``;
``names("cos/*")`` lists lenses; ``rows()`` gives one :class:`LensRow` per lens, ``markdown()`` their table (see
docs/modules.md, `layersim.analysis.lenses`, for the inputs, output kinds and invariances).
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from layersim.measures import alignment, block_structure, collapse, probe, redundancy, similarity
from layersim.nets import linear_maps, readout

__all__ = [
    "ACROSS_WIDTHS",
    "IMPLIED",
    "INPUTS",
    "INVARIANCES",
    "KINDS",
    "LayerData",
    "Lens",
    "LensRow",
    "ModelRuns",
    "apply",
    "expected_shape",
    "get",
    "markdown",
    "names",
    "register",
    "rows",
]

INPUTS = ("hidden", "labels", "logits", "model")
#: why a lens with ``one_space`` does not apply to layers of different widths
ACROSS_WIDTHS = "compares layers coordinate by coordinate, which needs every layer in one space of one width"
KINDS = ("per_layer", "per_pair", "per_step", "per_sample_step", "per_sample_layer", "per_sample")
HIDDEN_INVARIANCES = ("invertible_linear", "isotropic_scale", "shared_scale", "orthogonal", "shared_orthogonal",
                      "translation", "shared_translation")
LOGIT_INVARIANCES = ("logit_scale", "logit_shift")
INVARIANCES = HIDDEN_INVARIANCES + ("sample_permutation",) + LOGIT_INVARIANCES
#: invariance -> the invariances it implies (directly; :class:`Lens` takes the closure)
IMPLIED = {"invertible_linear": ("orthogonal", "isotropic_scale"), "isotropic_scale": ("shared_scale",),
           "orthogonal": ("shared_orthogonal",), "translation": ("shared_translation",)}


def _closure(invariances: frozenset) -> frozenset:
    """``invariances`` with everything they imply (:data:`IMPLIED`)."""
    out, todo = set(invariances), list(invariances)
    while todo:
        for j in IMPLIED.get(todo.pop(), ()):
            if j not in out:
                out.add(j)
                todo.append(j)
    return frozenset(out)


# --------------------------------------------------------------------------------------
# the inputs
# --------------------------------------------------------------------------------------
def _array(x: Any) -> np.ndarray:
    """numpy view of an array-like or torch tensor (no dtype change, no copy of a memmap)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


@dataclass
class ModelRuns:
    """What a lens that runs the model again reads: ``model``, the batches RBA maps are fitted on (``fit``) and
    those the final representations are compared on (``eval``), the ``token`` (None: the adapter's default) and the
    ``device``; :meth:`reference` is computed once."""

    model: Any
    fit: Any
    eval: Any
    token: Any = None
    device: Any = "auto"
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def reference(self) -> np.ndarray:
        """The unchanged model's final representation of ``eval`` (``linear_maps.final_representation``)."""
        if "reference" not in self._memo:
            self._memo["reference"] = linear_maps.final_representation(self.model, self.eval, self.token, self.device)
        return self._memo["reference"]


@dataclass
class LayerData:
    """What a lens reads: ``hidden`` ``[E, N, d]``, ``labels`` ``[N]``, ``logits`` ``[E, N, K]``, any of them None.

    ``layers``: the layer index of each entry (0 = embedding output; None = 0..E-1). ``widths``: each entry's own
    width where ``hidden`` holds layers of different widths zero-padded to one (``layersim.nets.models.zero_pad``;
    None: all are ``d`` wide). ``ValueError`` for wrong dimensions, disagreeing E or N, non-integer or negative
    labels, a label with no logit, or widths that do not fit.
    """

    hidden: Any = None
    labels: Any = None
    logits: Any = None
    layers: Sequence[int] | None = None
    model: ModelRuns | None = None
    widths: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if self.hidden is not None:
            self.hidden = _array(self.hidden)
            if self.hidden.ndim != 3:
                raise ValueError(f"hidden must be [E, N, d], got shape {self.hidden.shape}")
        if self.logits is not None:
            self.logits = _array(self.logits)
            if self.logits.ndim != 3:
                raise ValueError(f"logits must be [E, N, K], got shape {self.logits.shape}")
        if self.hidden is not None and self.logits is not None \
                and self.hidden.shape[:2] != self.logits.shape[:2]:
            raise ValueError(f"hidden [E, N, d] = {self.hidden.shape} and logits [E, N, K] = "
                             f"{self.logits.shape} disagree in E or N")
        if self.labels is not None:
            self._check_labels()
        if self.layers is not None:
            self.layers = [int(i) for i in self.layers]
            if self.n_entries is not None and len(self.layers) != self.n_entries:
                raise ValueError(f"layers has {len(self.layers)} indices for {self.n_entries} entries")
        if self.widths is not None:
            self.widths = [int(w) for w in self.widths]
            d = None if self.hidden is None else self.hidden.shape[2]
            if len(self.widths) != self.n_entries or min(self.widths) < 1 or (d is not None and max(self.widths) > d):
                raise ValueError(f"widths {self.widths} must give one width in 1..d={d} per entry "
                                 f"({self.n_entries} entries)")

    def _check_labels(self) -> None:
        y = _array(self.labels)
        if y.ndim != 1:
            raise ValueError(f"labels must be [N], got shape {y.shape}")
        if not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
            raise ValueError(f"labels must be integers 0..K-1, got dtype {y.dtype}")
        n = self.n_samples
        if n is not None and len(y) != n:
            raise ValueError(f"labels has {len(y)} entries, the features have N={n} samples")
        if self.logits is not None and y.size and y.max() >= self.logits.shape[2]:
            raise ValueError(f"label {int(y.max())} has no logit: logits have K={self.logits.shape[2]}")
        self.labels = y

    @property
    def n_entries(self) -> int | None:
        """E, from ``hidden`` or ``logits``, else from ``layers`` (None if none is given)."""
        ref = self.hidden if self.hidden is not None else self.logits
        if ref is None:
            return None if self.layers is None else len(self.layers)
        return int(ref.shape[0])

    @property
    def one_width(self) -> bool:
        """Whether every entry has the same width (no ``widths``, or all equal)."""
        return self.widths is None or len(set(self.widths)) <= 1

    @property
    def n_samples(self) -> int | None:
        """N, from ``hidden`` or ``logits`` (None if neither is given)."""
        ref = self.hidden if self.hidden is not None else self.logits
        return None if ref is None else int(ref.shape[1])


def expected_shape(kind: str, data: LayerData) -> tuple[int, ...]:
    """The output shape of a lens of kind ``kind`` on ``data`` (see the module docstring)."""
    E, N = data.n_entries, data.n_samples
    shapes = {"per_layer": (E,), "per_pair": (E, E), "per_step": (E - 1,),
              "per_sample_step": (E - 1, N), "per_sample_layer": (E, N), "per_sample": (N,)}
    if kind not in shapes:
        raise ValueError(f"unknown output kind {kind!r}; use one of {KINDS}")
    return shapes[kind]


# --------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lens:
    """One registered measure ``fn(data: LayerData, **kwargs) -> np.ndarray``.

    ``paper``: ``tracing``, ``alignment``, ``redundancy``, ``clusters`` or the original source; ``equation``: where
    it is defined; ``needs``: a subset of :data:`INPUTS`; ``returns``: one of :data:`KINDS`; ``invariances``: a
    subset of :data:`INVARIANCES` (closed under :data:`IMPLIED`); ``doc``: one line; ``one_space``: it compares
    layers coordinate by coordinate (a cosine, a difference), so it needs every layer in one space of one width.
    ``ValueError`` for inconsistent declarations.
    """

    name: str
    fn: Callable[..., np.ndarray]
    paper: str
    equation: str
    needs: frozenset = field(default_factory=frozenset)
    returns: str = "per_layer"
    invariances: frozenset = field(default_factory=frozenset)
    doc: str = ""
    one_space: bool = False

    def __post_init__(self) -> None:
        needs, inv = frozenset(self.needs), _closure(frozenset(self.invariances))
        object.__setattr__(self, "needs", needs)
        object.__setattr__(self, "invariances", inv)
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a lens needs a non-empty name")
        if not needs or not needs <= set(INPUTS):
            raise ValueError(f"lens {self.name!r}: needs must be a non-empty subset of {INPUTS}, got {sorted(needs)}")
        if self.returns not in KINDS:
            raise ValueError(f"lens {self.name!r}: returns must be one of {KINDS}, got {self.returns!r}")
        if not inv <= set(INVARIANCES):
            raise ValueError(f"lens {self.name!r}: unknown invariances {sorted(inv - set(INVARIANCES))}; "
                             f"use {INVARIANCES}")
        if "hidden" not in needs and inv & set(HIDDEN_INVARIANCES):
            raise ValueError(f"lens {self.name!r} does not read hidden; it cannot declare "
                             f"{sorted(inv & set(HIDDEN_INVARIANCES))}")
        if "logits" not in needs and inv & set(LOGIT_INVARIANCES):
            raise ValueError(f"lens {self.name!r} does not read logits; it cannot declare "
                             f"{sorted(inv & set(LOGIT_INVARIANCES))}")
        if needs == {"model"} and inv:
            raise ValueError(f"lens {self.name!r} reads only the model; the invariances are transformations of "
                             f"hidden, labels and logits, so it cannot declare {sorted(inv)}")


_REGISTRY: dict[str, Lens] = {}


def register(lens: Lens) -> Lens:
    """Add ``lens`` to the registry (ValueError if its name is taken); returns it."""
    if lens.name in _REGISTRY:
        raise ValueError(f"a lens named {lens.name!r} is already registered")
    _REGISTRY[lens.name] = lens
    return lens


def get(name: str) -> Lens:
    """The lens registered as ``name``; ValueError listing the names (and the closest) if none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown lens {name!r}.{hint} Registered: {', '.join(sorted(_REGISTRY))}") from None


def names(pattern: str = "*") -> list[str]:
    """Sorted names of the registered lenses matching the glob ``pattern`` (``fnmatch``)."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern))


def apply(name: str, data: LayerData, **kwargs: Any) -> np.ndarray:
    """Compute lens ``name`` on ``data``, keyword arguments going to the lens; ``ValueError`` if ``data`` lacks an
    input it needs. The shape is checked against its kind (:func:`expected_shape`)."""
    lens = get(name)
    missing = sorted(k for k in lens.needs if getattr(data, k) is None)
    if missing:
        raise ValueError(f"lens {name!r} needs {', '.join(missing)}, which the data lacks "
                         f"(it needs {', '.join(sorted(lens.needs))})")
    if lens.one_space and not data.one_width:
        raise ValueError(f"lens {name!r} {ACROSS_WIDTHS}: the layers have widths {data.widths}")
    out = np.asarray(lens.fn(data, **kwargs))
    want = expected_shape(lens.returns, data)
    if out.shape != want:  # pragma: no cover - a wrongly registered lens
        raise RuntimeError(f"lens {name!r} returned shape {out.shape}, its kind {lens.returns!r} means {want}")
    return out


class LensRow(NamedTuple):
    """One lens as :func:`rows` lists it (sets joined with ', ', sorted)."""

    name: str
    paper: str
    equation: str
    needs: str
    returns: str
    invariances: str


def rows(pattern: str = "*") -> list[LensRow]:
    """One :class:`LensRow` per registered lens matching ``pattern``, sorted by name."""
    out = []
    for n in names(pattern):
        lens = _REGISTRY[n]
        out.append(LensRow(n, lens.paper, lens.equation, ", ".join(sorted(lens.needs)), lens.returns,
                       ", ".join(sorted(lens.invariances))))
    return out


def markdown(pattern: str = "*") -> str:
    """:func:`rows` as a Markdown table."""
    head = "| " + " | ".join(LensRow._fields) + " |"
    rule = "|" + "---|" * len(LensRow._fields)
    return "\n".join([head, rule] + ["| " + " | ".join(r) + " |" for r in rows(pattern)])


# --------------------------------------------------------------------------------------
# the measures: thin calls into the project's functions
# --------------------------------------------------------------------------------------
def cos_to_last(data: LayerData, center: bool = True) -> np.ndarray:
    """Mean sample-wise COS of every entry with the last (tracing §2.1, footnote 2; Fig. 1a, 2a,b)."""
    return similarity.to_last(data.hidden, metric="cos", center=center)


def cos_to_last_samples(data: LayerData, center: bool = True) -> np.ndarray:
    """Per-sample COS of every entry with the last, ``[E, N]`` (tracing §2.1; App. B.1 box plots)."""
    last = data.hidden[-1]
    return np.stack([similarity.cosine_per_sample(h, last, center=center) for h in data.hidden])


def cos_matrix(data: LayerData, center: bool = True) -> np.ndarray:
    """Mean sample-wise COS between all pairs of entries (tracing §2.1; Fig. 2c,d)."""
    return similarity.layer_matrix(data.hidden, metric="cos", center=center)


def cka_to_last(data: LayerData) -> np.ndarray:
    """Linear CKA of every entry with the last (tracing eq. 3; Fig. 2a,b)."""
    return similarity.to_last(data.hidden, metric="cka")


def cka_matrix(data: LayerData) -> np.ndarray:
    """Linear CKA between all pairs of entries (tracing eq. 3; clusters §3, App. A, Fig. 1-2)."""
    return similarity.layer_matrix(data.hidden, metric="cka")


def debiased_cka_matrix(data: LayerData) -> np.ndarray:
    """Linear CKA from Song et al.'s unbiased HSIC_1 between all pairs (Kornblith et al. 2019 §3)."""
    return similarity.layer_matrix(data.hidden, metric="debiased_cka")


def rbf_cka_matrix(data: LayerData, threshold: float = 0.5) -> np.ndarray:
    """RBF-kernel CKA between all pairs of entries (Kornblith et al. 2019 §3; ``E`` Gram matrices of ``N x N``)."""
    return similarity.rbf_cka_matrix(data.hidden, threshold)


def adjacent_cos(data: LayerData, center: bool = False) -> np.ndarray:
    """Per-sample COS of consecutive entries, ``[E-1, N]``, uncentred (tracing App. B.2, Fig. 11)."""
    return similarity.adjacent_cosine(data.hidden, center=center)


def norm_ratio(data: LayerData) -> np.ndarray:
    """Per-sample ``||h^(l-1)|| / ||h^(l) - h^(l-1)||``, ``[E-1, N]``: skip vs residual branch of
    tracing eq. 1 (App. B.2, Fig. 11). Needs the raw residual stream (no final norm)."""
    h = data.hidden
    return np.stack([similarity.residual_norm_ratio(h[i - 1], h[i]) for i in range(1, len(h))])


def block_redundancy(data: LayerData) -> np.ndarray:
    """Block Redundancy ``BR_i = -MSE(h_i, h_{i-1})`` (redundancy eq. 1), ``[E-1]``, uncentred."""
    return redundancy.block_redundancy(data.hidden)


def rba_error(data: LayerData) -> np.ndarray:
    """Held-out ``1 - R^2`` of the affine least-squares map from every entry to the next (the redundancy paper's
    RBA, §3), ``[E-1]``: 0 = the block is linear here, 1 = no better than the mean."""
    return redundancy.rba_heldout_error(data.hidden)


def _steps(data: LayerData) -> list[tuple[int, int]]:
    """The span of blocks between each pair of consecutive entries, ``(layers[i-1] + 1, layers[i])``
    (``layersim.nets.surgery``'s 1-based blocks): the blocks a per-step lens removes."""
    layers = list(range(data.n_entries)) if data.layers is None else list(data.layers)
    if len(layers) < 2 or any(b <= a for a, b in zip(layers, layers[1:])):
        raise ValueError(f"a lens that changes the model needs at least two increasing layer indices, got {layers}")
    return [(a + 1, b) for a, b in zip(layers, layers[1:])]


def _span_change(data: LayerData, mode: str) -> np.ndarray:
    """:func:`layersim.nets.linear_maps.span_changes` of every step of ``data`` (:func:`_steps`), ``mode``
    ``"skip"`` or ``"approx"``, against the reference final representation ``data.model`` shares."""
    m = data.model
    return linear_maps.span_changes(m.model, m.fit, m.eval, _steps(data), mode, m.token, device=m.device,
                                   reference=m.reference())


def skip_change(data: LayerData) -> np.ndarray:
    """Relative change of the final representation when the blocks between consecutive entries are skipped
    (redundancy §4.3, Table 2's "skip"; MSE over variance as Figs. 3 and 7), ``[E-1]``."""
    return _span_change(data, "skip")


def rba_change(data: LayerData) -> np.ndarray:
    """As :func:`skip_change` with the blocks approximated instead (RBA, §3: one linear map per step,
    fitted on every token of ``data.model.fit``; no intercept, as the paper), ``[E-1]``."""
    return _span_change(data, "approx")


def logit_accuracy(data: LayerData) -> np.ndarray:
    """Layer-wise accuracy of the last-layer classifier on every entry (tracing eq. 2)."""
    return readout.layer_accuracy(data.logits, data.labels)


def saturation(data: LayerData) -> np.ndarray:
    """Saturation layer of every sample (tracing §2.2, after Geva et al. 2022), ``[N]``: the smallest entry from
    which the top-1 prediction stays the final one, as a layer index when ``data.layers`` is given."""
    idx = readout.saturation_layer(data.logits)
    return idx if data.layers is None else np.asarray(data.layers)[idx]


def alignment_area(data: LayerData, thresholds: Any = None, num: int = 62, most_pairs: int = 45) -> np.ndarray:
    """Normalised area under the alignment curve of every entry (alignment eq. 2) on the binary task ``y = 2t - 1``;
    with K > 2 classes, the mean over pairs of classes (:func:`layersim.measures.alignment.layer_areas`)."""
    return alignment.layer_areas(data.hidden, data.labels, thresholds, num, most_pairs)


def nc1(data: LayerData) -> np.ndarray:
    """Within-class variability collapse ``NC1 = tr(Sigma_W Sigma_B^+) / K`` per entry (tracing footnote 5)."""
    return collapse.nc1_per_layer(data.hidden, data.labels)


def block_diagonal(data: LayerData) -> np.ndarray:
    """Two-cluster block-diagonal score of the linear CKA matrix at every contiguous split (clusters §3, Figs. 1-2):
    entry ``s-1`` = mean within-cluster minus mean between-cluster CKA for entries ``0..s-1`` vs ``s..E-1``."""
    return block_structure.split_scores(cka_matrix(data))


def probe_accuracy(data: LayerData, train: Any = None, C: float = 1.0) -> np.ndarray:
    """Test accuracy of one L2 logistic-regression probe per entry (tracing App. B.4, Fig. 17), deterministic.
    ``train``: a boolean mask ``[N]`` of the samples fitted on, the rest the test set (default
    :func:`layersim.measures.probe.half_split`)."""
    train = probe.half_split(data.labels) if train is None else np.asarray(train, bool)
    if train.shape != (data.n_samples,) or train.all() or not train.any():
        raise ValueError(f"train must be a boolean mask [N={data.n_samples}] with samples on both sides")
    h, y = data.hidden, data.labels
    return probe.per_layer_probe_accuracy(h[:, train], y[train], h[:, ~train], y[~train], C=C)


# --------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------
_H, _HL, _Z, _ZL = frozenset({"hidden"}), frozenset({"hidden", "labels"}), \
    frozenset({"logits"}), frozenset({"logits", "labels"})
_M = frozenset({"model"})
_PERM = "sample_permutation"
_COS = frozenset({"isotropic_scale", "shared_orthogonal", "translation", _PERM})
_RIGID = frozenset({"isotropic_scale", "orthogonal", "translation", _PERM})
_LOGIT = frozenset({"logit_scale", "logit_shift", _PERM})

for _lens in (
    Lens("cos/to_last", cos_to_last, "tracing", "tracing §2.1 COS (unnumbered), fn. 2; Fig. 2a,b",
         _H, "per_layer", _COS, "mean centred sample-wise cosine of every layer with the last", one_space=True),
    Lens("cos/to_last_samples", cos_to_last_samples, "tracing", "tracing §2.1 COS, fn. 2; App. B.1",
         _H, "per_sample_layer", _COS, "centred cosine of every sample at every layer with the last", one_space=True),
    Lens("cos/matrix", cos_matrix, "tracing", "tracing §2.1 COS, fn. 2; Fig. 2c,d",
         _H, "per_pair", _COS, "mean centred sample-wise cosine between all pairs of layers", one_space=True),
    Lens("cos/adjacent", adjacent_cos, "tracing", "tracing App. B.2, Fig. 11",
         _H, "per_sample_step", {"isotropic_scale", "shared_orthogonal", _PERM},
         "uncentred cosine of every sample between consecutive layers", one_space=True),
    Lens("residual/norm_ratio", norm_ratio, "tracing", "tracing eq. 1; App. B.2, Fig. 11",
         _H, "per_sample_step", {"shared_scale", "shared_orthogonal", _PERM},
         "skip / residual branch norm ratio ||h^(l-1)|| / ||h^(l) - h^(l-1)|| per sample", one_space=True),
    Lens("cka/to_last", cka_to_last, "tracing", "tracing eq. 3; Fig. 2a,b",
         _H, "per_layer", _RIGID, "linear CKA of every layer with the last"),
    Lens("cka/matrix", cka_matrix, "clusters", "tracing eq. 3; clusters §3, App. A",
         _H, "per_pair", _RIGID, "linear CKA between all pairs of layers"),
    Lens("cka/debiased_matrix", debiased_cka_matrix, "Kornblith et al. 2019; Song et al. 2012",
         "Kornblith et al. §3; Song et al. HSIC_1", _H, "per_pair", _RIGID,
         "linear CKA with the unbiased HSIC estimator between all pairs of layers"),
    Lens("cka/rbf_matrix", rbf_cka_matrix, "Kornblith et al. 2019", "Kornblith et al. §3 (RBF kernel)",
         _H, "per_pair", _RIGID, "RBF-kernel CKA (bandwidth 0.5 x median distance) between all pairs"),
    Lens("clusters/block_diagonal", block_diagonal, "clusters", "clusters §3, Figs. 1-2 (score: ours)",
         _H, "per_step", _RIGID, "mean within- minus between-cluster CKA for each contiguous two-cluster split"),
    Lens("redundancy/block", block_redundancy, "redundancy", "redundancy eq. 1",
         _H, "per_step", {"shared_orthogonal", "shared_translation", _PERM},
         "Block Redundancy: minus the MSE between consecutive layers", one_space=True),
    Lens("redundancy/rba_error", rba_error, "redundancy", "redundancy §3 (RBA; held-out 1 - R^2: ours)",
         _H, "per_step", {"isotropic_scale", "orthogonal", "translation"},
         "held-out error of the affine least-squares map from each layer to the next"),
    Lens("redundancy/skip_change", skip_change, "redundancy", "redundancy §4.3, Table 2; Figs. 3, 7 (relative MSE: ours)",
         _M, "per_step", set(), "change of the final representation with the blocks of each step skipped"),
    Lens("redundancy/rba_change", rba_change, "redundancy", "redundancy §3, §4.3, Table 2; Figs. 3, 7 (relative MSE: ours)",
         _M, "per_step", set(), "change of the final representation with the blocks of each step approximated by RBA"),
    Lens("logit_lens/accuracy", logit_accuracy, "tracing", "tracing eq. 2",
         _ZL, "per_layer", _LOGIT, "accuracy of the last-layer classifier applied to every layer"),
    Lens("logit_lens/saturation", saturation, "tracing", "tracing §2.2 (unnumbered)",
         _Z, "per_sample", _LOGIT, "first layer from which the top-1 prediction stays the final one"),
    Lens("alignment/area", alignment_area, "alignment", "alignment eq. 2 (area of the curve)",
         _HL, "per_layer", {"orthogonal", _PERM},
         "normalised area under the alignment curve of +-1 labels (K > 2: mean over pairs of classes)"),
    Lens("collapse/nc1", nc1, "tracing", "tracing footnote 5 (after Papyan et al. 2020)",
         _HL, "per_layer", _RIGID, "within-class variability collapse NC1 = tr(Sigma_W Sigma_B^+) / K"),
    Lens("probe/accuracy", probe_accuracy, "tracing", "tracing App. B.4, Fig. 17",
         _HL, "per_layer", {"isotropic_scale", "orthogonal", "translation"},
         "test accuracy of one linear probe per layer on a stratified half split"),
):
    register(_lens)
del _lens
