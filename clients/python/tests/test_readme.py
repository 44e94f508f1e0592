"""README.md's first example, run as written against a real tallyd (only
its URL replaced by the test server's)."""
from __future__ import annotations

import contextlib
import io
import re

from support import PACKAGE_DIR, Tallyd


def test_the_readme_example_runs(tallyd: Tallyd) -> None:
    readme = (PACKAGE_DIR / "README.md").read_text()
    block = re.findall(r"^```python\n(.*?)^```$", readme, re.M | re.S)[0]
    assert "http://127.0.0.1:7452" in block
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.replace("http://127.0.0.1:7452", tallyd.url), "README.md", "exec"), {})
    assert out.getvalue() == "500\n"
