"""``python -m layersim <command>``: ``report`` (every lens on one model: :mod:`layersim.tools.report`),
``compare`` (a run's metrics against the committed ones: :mod:`layersim.tools.compare`) and ``claims``
(every claim with its verdict over the seeds: :mod:`layersim.tools.claims`)."""

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m layersim report --model MODEL --data DATA [options]   (report --help for the options)\n"
              "       python -m layersim compare [RUN] [REFERENCE] [options]   (compare --help)\n"
              "       python -m layersim claims [FOLDER] [--readme | --check]   (claims --help)\n"
              "       python -m layersim.tools.runner ...   (run notebooks)   python -m layersim.tools.bench ...   (benchmarks)")
        return 0 if argv else 2
    if argv[0] == "report":
        from layersim.tools.report import main as report_main

        return report_main(argv[1:])
    if argv[0] == "compare":
        from layersim.tools.compare import main as compare_main

        return compare_main(argv[1:])
    if argv[0] == "claims":
        from layersim.tools.claims import main as claims_main

        return claims_main(argv[1:])
    print(f"unknown command {argv[0]!r}; the commands are: report, compare, claims", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
