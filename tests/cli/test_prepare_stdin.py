"""`energon-arrow prepare` answering energon's questions from piped stdin, in energon's order, with energon's
output ("Done") and exit codes; the dataset.yaml written is energon's for the same answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from click.testing import CliRunner

import energon_arrow
from energon_arrow.cli.main import cli as cli_group
from energon_arrow.testing.lint_data import write_lint_webdataset
from energon_arrow.testing.reference import energon_command

# energon's own test (tests/test_dataset.py::test_prepare_dataset) answers a prepared dataset with:
# continue? y, split 1,0,0, create dataset.yaml? y, class 0 (CaptioningSample), field map? Y, image, caption
ENERGON_TEST_ANSWERS = "y\n1,0,0\ny\n0\nY\njpg\ntxt\n"
# the entry point run as a subprocess imports this checkout's package
ENV = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(energon_arrow.__file__)))}


@pytest.fixture
def shards(tmp_path):
    root = str(tmp_path / "ds")
    write_lint_webdataset(root, shards=2, samples_per_shard=4)
    return root


def _ours(root: str, answers: str, *args: str):
    return CliRunner().invoke(cli_group, ["prepare", root, "--no-progress", *args], input=answers)


def _energon(root: str, answers: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*energon_command(), "prepare", root, "--no-progress", *args],
        input=answers,
        capture_output=True,
        text=True,
    )


def _dataset_yaml(root: str) -> dict:
    with open(os.path.join(root, ".nv-meta", "dataset.yaml")) as f:
        return yaml.safe_load(f)


def test_piped_answers_like_energons_test(shards, tmp_path):
    ref_root = str(tmp_path / "ref")
    shutil.copytree(shards, ref_root)
    first = _ours(shards, ENERGON_TEST_ANSWERS[2:])  # not prepared yet: no "continue?" question
    assert first.exit_code == 0, first.output
    assert first.output.rstrip().endswith("Done")
    again = _ours(shards, ENERGON_TEST_ANSWERS)
    assert again.exit_code == 0, again.output
    assert "already been prepared" in again.output and again.output.rstrip().endswith("Done")
    ref = _energon(ref_root, ENERGON_TEST_ANSWERS[2:])
    assert ref.returncode == 0 and "Done" in ref.stdout, ref.stderr[-2000:]
    assert _dataset_yaml(shards) == _dataset_yaml(ref_root)
    assert _dataset_yaml(shards)["field_map"] == {"image": "jpg", "caption": "txt"}


def test_sample_type_on_command_line_still_asks_for_the_field_map(shards, tmp_path):
    ref_root = str(tmp_path / "ref")
    shutil.copytree(shards, ref_root)
    answers = "1,1,0\nY\njpg\njson[caption]\n"
    ours = _ours(shards, answers, "--sample-type", "CaptioningSample")
    assert ours.exit_code == 0, ours.output
    ref = _energon(ref_root, answers, "--sample-type", "CaptioningSample")
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert _dataset_yaml(shards) == _dataset_yaml(ref_root)
    assert _dataset_yaml(shards)["field_map"] == {"image": "jpg", "caption": "json[caption]"}


def test_sample_loader_and_override_question(shards):
    # class 8 (TextSample), field map? n -> sample loader template
    ours = _ours(shards, "1,0,0\ny\n8\nn\n")
    assert ours.exit_code == 0, ours.output
    loader_py = os.path.join(shards, ".nv-meta", "sample_loader.py")
    assert _dataset_yaml(shards)["sample_loader"] == "sample_loader.py:sample_loader"
    with open(loader_py, "w") as f:
        f.write("# edited by hand\n")
    keep = _ours(shards, "y\n1,0,0\ny\n8\nn\nn\n")  # ... override the existing sample loader? n
    assert keep.exit_code == 0 and "override the existing sample loader" in keep.output, keep.output
    with open(loader_py) as f:
        assert f.read() == "# edited by hand\n"
    override = _ours(shards, "y\n1,0,0\ny\n8\nn\ny\n")
    assert override.exit_code == 0, override.output
    with open(loader_py) as f:
        assert "def sample_loader(raw: dict) -> dict:" in f.read()


def test_exit_codes_like_energon(shards):
    done = _ours(shards, "", "--non-interactive", "--split-ratio", "1,0,0")
    assert done.exit_code == 0, done.output
    assert "Skipping dataset.yaml creation" in done.output
    assert "You will have to add a dataset.yaml manually." in done.output and done.output.rstrip().endswith(
        "Done"
    )
    # energon's test: a re-run with --non-interactive and no split exits 1
    rerun = _ours(shards, "", "--non-interactive")
    assert rerun.exit_code == 1 and "--split-ratio is required" in rerun.output
    # answers that stop early: exit 1 like energon's "Aborted!" (a real pipe: click < 8.2's CliRunner never
    # reports the end of its input, it answers "" forever)
    short = subprocess.run(
        [sys.executable, "-m", "energon_arrow", "prepare", shards, "--no-progress"],
        input="y\n",
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert short.returncode == 1 and "aborted" in short.stderr
    # the user says no to "continue?": nothing is done, exit 0, no "Done"
    no = _ours(shards, "n\n")
    assert no.exit_code == 0 and "Done" not in no.output


def test_real_pipe_through_the_entry_point(shards):
    proc = subprocess.run(
        [sys.executable, "-m", "energon_arrow", "prepare", shards, "--no-progress"],
        input="1,0,0\ny\n11\n",  # split, create dataset.yaml? y, class 11 = CrudeWebdataset
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("Done")
    assert _dataset_yaml(shards) == {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    closed = subprocess.run(
        [sys.executable, "-m", "energon_arrow", "prepare", shards, "--no-progress"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert closed.returncode == 1
    assert closed.stderr.strip().splitlines() == [
        "energon-arrow: error: aborted: a question got no answer (stdin ended or interrupted)"
    ]
