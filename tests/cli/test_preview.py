"""`energon-arrow preview`: energon's terminal layout (checked against energon's own preview) and the --html page
(parsed, every embedded image decoded with Pillow)."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
from html.parser import HTMLParser

from click.testing import CliRunner
from PIL import Image

from energon_arrow.cli.main import cli as cli_group
from energon_arrow.testing.reference import energon_command


def _fields(text: str) -> list[tuple[str, str, str]]:
    """(field name, type, value text) of the ' - name (type): value' lines of a preview."""
    return re.findall(r"^ - (\w+) \((.*?)\): (.*)$", text, flags=re.M)


def test_terminal_preview_matches_energon(clean_root):
    ours = CliRunner().invoke(cli_group, ["preview", clean_root, "--split-parts", "train"], input="y\nn\n")
    assert ours.exit_code == 0, ours.output
    ref = subprocess.run(
        [*energon_command(), "preview", clean_root, "--split-parts", "train"],
        input="y\nn\n",
        capture_output=True,
        text=True,
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    for out in (ours.output, ref.stdout):
        assert "Sample 0" in out and "Sample 1" in out and "Sample 2" not in out
        assert out.count("Continue?") == 2 and "Exiting Preview" in out
    # the same field lines: names, types and values; the image as a tensor with energon's header line
    ours_fields, ref_fields = _fields(ours.output), _fields(ref.stdout)
    assert [f[0] for f in ref_fields] == ["__key__", "image", "caption"] * 2
    assert ours_fields == ref_fields
    assert "__key__ (<class 'str'>): '000000_000000'" in ours.output
    art = ours.output.split("dtype=torch.float32):\n", 1)[1].split("\n - caption")[0].splitlines()
    assert len(art) >= 3 and all(set(line) <= set(" .:-=+*#%@") for line in art)


def test_terminal_preview_samples_limit_and_empty_split(clean_root):
    result = CliRunner().invoke(cli_group, ["preview", clean_root, "--samples", "2"])
    assert result.exit_code == 0, result.output
    assert "Continue?" not in result.output
    assert result.output.count("Sample 0") == 2 and "Sample 2" not in result.output  # train and val
    assert "Dataset test is empty. Skipping." in result.output


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.images, self.text, self.open = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"])
        if tag not in ("img", "meta"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def test_html_preview_is_self_contained(broken_root, tmp_path, cli):
    out = str(tmp_path / "site" / "preview.html")
    os.makedirs(os.path.dirname(out))
    proc = cli("preview", broken_root, "--html", out, "--samples", "5", "--thumb-size", "32")
    assert proc.returncode == 0, proc.stderr
    assert "10 samples of 2 split(s)" in proc.stdout
    assert os.listdir(os.path.dirname(out)) == ["preview.html"]  # written under a temp name, then renamed
    with open(out, encoding="utf-8") as f:
        text = f.read()
    page = _Page()
    page.feed(text)
    page.close()
    assert page.open == [] and "script" not in page.tags and "link" not in page.tags
    # train shows samples 0-4 of shard 0 (sample 3's JPEG is cut short); val the first 5 of shard 2
    assert len(page.images) == 9
    for src in page.images:
        kind, _, data = src.partition(";base64,")
        assert kind in ("data:image/jpeg", "data:image/png")
        with Image.open(io.BytesIO(base64.b64decode(data))) as img:
            img.load()
            assert max(img.size) <= 32
    body = " ".join(page.text)
    assert "sample 0 of shard 0" in body and "sample 4 of shard 2" in body
    assert "000000_000003" in body and "Truncated" in body
    assert text.count('class="card failed"') == 1


def test_preview_errors_are_one_line(tmp_path, cli):
    proc = cli("preview", str(tmp_path / "nope"), "--html", str(tmp_path / "x.html"))
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "x.html")
