"""layersim: layer-wise representation similarity, readouts and training objectives.

The library behind the notebooks under ``notebooks/``: every metric, model readout, training objective and plotting
helper lives here once and is unit-tested. The names people reach for first are here too, each imported from its
module on first use (``import layersim`` imports neither torch nor numpy): ``analyze`` (every lens on any model from
one pass), ``cka`` (linear CKA of two representations), ``layer_matrix`` (CKA or COS between all pairs of layers),
``collect`` (every layer of a model) and ``register_model`` (teach layersim an architecture of your own); see
docs/library.md.
"""

__version__ = "0.1.0"

#: the top-level names: name -> (module, attribute), imported on first use
API = {
    "analyze": ("layersim.analysis.layer_report", "analyze"),
    "cka": ("layersim.measures.similarity", "linear_cka"),
    "layer_matrix": ("layersim.measures.similarity", "layer_matrix"),
    "collect": ("layersim.nets.models", "collect"),
    "register_model": ("layersim.nets.adapters", "register_model"),
}
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'layersim' has no attribute {name!r}")
    import importlib

    module, attr = API[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(API))
