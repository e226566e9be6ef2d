"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_readme_opens_with_the_two_setup_commands():
    first = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
