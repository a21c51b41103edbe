"""``python -m layersim <command>``: ``report`` (every lens on one model: :mod:`layersim.tools.report`),
``compare`` (a run's metrics against the committed ones: :mod:`layersim.tools.compare`) and ``claims``
(every claim with its verdict over the seeds: :mod:`layersim.tools.claims`). No command, an unknown one, or one that
needs the repository run outside it, is one ``error:`` line on standard error and exit 2."""

import sys

from layersim.core.paths import RepositoryNotFound

USAGE = ("usage: python -m layersim report --model MODEL --data DATA [options]   (report --help for the options)\n"
         "       python -m layersim compare [RUN] [REFERENCE] [options]   (compare --help)\n"
         "       python -m layersim claims [FOLDER] [--readme | --check]   (claims --help)\n"
         "       python -m layersim.tools.runner ...   (run notebooks)   python -m layersim.tools.bench ...   (benchmarks)")
COMMANDS = ("report", "compare", "claims")


def usage_error(message: str) -> int:
    """Print the usage and one ``python -m layersim: error: <message>`` line to standard error; return 2."""
    print(USAGE, file=sys.stderr)
    print(f"python -m layersim: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to its command's ``main``; return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if not argv:
        return usage_error(f"give a command: {', '.join(COMMANDS)}")
    try:
        return _dispatch(argv)
    except RepositoryNotFound as exc:
        print(f"python -m layersim: error: {exc}", file=sys.stderr)
        return 2


def _dispatch(argv: list[str]) -> int:
    if argv[0] == "report":
        from layersim.tools.report import main as report_main

        return report_main(argv[1:])
    if argv[0] == "compare":
        from layersim.tools.compare import main as compare_main

        return compare_main(argv[1:])
    if argv[0] == "claims":
        from layersim.tools.claims import main as claims_main

        return claims_main(argv[1:])
    return usage_error(f"unknown command {argv[0]!r}; the commands are: {', '.join(COMMANDS)}")


if __name__ == "__main__":
    sys.exit(main())
