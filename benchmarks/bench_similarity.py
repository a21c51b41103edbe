"""Thin wrapper: ``python benchmarks/bench_similarity.py [args]`` runs ``python -m layersim.tools.bench``.

The all-pairs CKA benchmark (layer_matrix vs one Gram pair per layer pair vs
the one-product floor, StreamingCKA memory, torch_cka); see ``layersim/tools/bench.py`` and the
measured table in ``benchmarks/RESULTS.md``.
"""

import sys

from layersim.tools.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
