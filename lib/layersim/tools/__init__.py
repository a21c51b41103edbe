"""Command-line tools: the notebook runner, the one-model report, benchmarks, run comparison,
portability checks, the smoke-reference pytest plugin.
"""
