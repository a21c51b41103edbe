"""Shared by the tests of layersim.nets: tiny random-init models of the families whose layers differ in shape."""

import pytest

from builders import tiny
from layersim.nets import adapters

#: the registered families whose layers differ in shape (convolutional maps, layers of other widths)
RAGGED = [a.name for a in adapters.REGISTRY if not a.uniform]


@pytest.fixture(scope="module", params=RAGGED)
def ragged(request):
    """``(name, tiny model)`` of every family whose layers differ in shape."""
    return request.param, tiny(request.param)
