"""Tests of layersim.__main__: ``python -m layersim <command>``; no command, an unknown one, or one that needs the
repository run outside it, is one ``error:`` line and exit status 2."""

import subprocess
import sys

from layersim.__main__ import main
from builders import one_line_error


def test_no_command_and_an_unknown_command_are_one_error_line(capsys):
    assert main([]) == 2
    one_line_error(capsys.readouterr().err, "give a command", "report")
    assert main(["reprot"]) == 2
    one_line_error(capsys.readouterr().err, "unknown command 'reprot'", "report, compare, claims")
    assert main(["--help"]) == 0 and "usage:" in capsys.readouterr().out


def test_the_module_itself_exits_2_with_one_line():
    run = subprocess.run([sys.executable, "-m", "layersim", "reprot"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    one_line_error(run.stderr, "unknown command 'reprot'")


def test_a_command_that_needs_the_repository_says_so_outside_it(outside_repository, capsys):
    assert main(["claims"]) == 2
    one_line_error(capsys.readouterr().err, "python -m layersim: error:", "needs the layersim repository")
