"""The committed sample is what its generator makes: re-running it gives the same bytes."""

from __future__ import annotations

import shutil
import subprocess
import sys

from builders import REPO


def test_the_generator_reproduces_the_committed_sample(tmp_path):
    shutil.copy(REPO / "data" / "generate_sample.py", tmp_path / "generate_sample.py")
    subprocess.run([sys.executable, str(tmp_path / "generate_sample.py")], check=True, cwd=tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".py")
    committed = sorted(
        p.relative_to(REPO / "data")
        for folder in ("kb", "runs")
        for p in (REPO / "data" / folder).rglob("*")
        if p.is_file()
    )
    assert made == committed and len(made) == 9
    for relative in made:
        assert (tmp_path / relative).read_bytes() == (REPO / "data" / relative).read_bytes(), relative
