"""layersim: layer-wise representation similarity, readouts and training objectives.

The library behind the notebooks under ``notebooks/``: every metric, model readout,
training objective and plotting helper lives here once and is unit-tested.
"""

__version__ = "0.1.0"
