"""A path that holds nothing (no such folder, bucket or prefix) is reported as such, not as "not prepared", by the
query layer, the loader and the CLI alike."""

from __future__ import annotations

import json
import uuid

import pytest

import energon_arrow as ea
from energon_arrow.cli.main import main
from energon_arrow.meta import MetaError
from energon_arrow.query import open_dataset
from energon_arrow.query.errors import NotPreparedError

NOT_THERE = (MetaError, NotPreparedError)  # read_info or the side index, whichever looks first


def test_missing_folder_and_a_folder_that_is_not_prepared(tmp_path):
    with pytest.raises(NOT_THERE, match=r"nope: no such folder; check the path"):
        open_dataset(str(tmp_path / "nope"))
    with pytest.raises(NOT_THERE, match="not prepared"):
        open_dataset(str(tmp_path))
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    with pytest.raises(MetaError, match=r"nope: no such folder"):
        ea.get_val_dataset(str(tmp_path / "nope"), batch_size=1, worker_config=wc)


@pytest.mark.s3
def test_missing_bucket_and_empty_prefix_on_s3(s3_root, capsys):
    url, options = s3_root
    bucket = f"ea-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(NOT_THERE, match=rf"bucket '{bucket}' not found"):
        open_dataset(f"s3://{bucket}/ds", options)
    with pytest.raises(NOT_THERE, match="nothing is stored under this prefix"):
        open_dataset(url, options)
    with pytest.raises(SystemExit) as exc:
        main(["info", f"s3://{bucket}/ds", "--storage-options", json.dumps(options)])
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"bucket '{bucket}' not found" in err[0], err


def _error_lines(url: str, options: dict, capsys) -> dict[str, list[str]]:
    """Each command's stderr lines when it fails against `url` with `options` (every one must exit non-zero)."""
    out = {}
    for args in (
        ["info", url],
        ["query", url, "SELECT 1"],
        ["prepare", "--split-ratio", "1,0,0", url],
        ["lint", url],
    ):
        with pytest.raises(SystemExit) as exc:
            main([args[0], "--storage-options", json.dumps(options), *args[1:]])
        assert exc.value.code != 0, args
        out[args[0]] = capsys.readouterr().err.strip().splitlines()
    return out


@pytest.mark.s3
def test_https_against_a_plain_http_endpoint_is_one_line_without_retries(s3_root, capsys):
    """Every command says the same: the endpoint does not speak TLS (not a transient error retried 5 times)."""
    url, options = s3_root
    https = {**options, "endpoint_url": options["endpoint_url"].replace("http://", "https://")}
    for command, err in _error_lines(url, https, capsys).items():
        assert len(err) == 1 and "does not speak TLS: is it http:// rather than https://?" in err[0], (
            command,
            err,
        )
        assert "transient" not in err[0] and "gave up" not in err[0], err


@pytest.mark.s3
def test_no_credentials_is_the_same_line_in_every_command(s3_root, capsys, monkeypatch, tmp_path):
    """No key in the options and none in the environment or a profile: every command says so (the direct client
    no longer sends unsigned requests that a store allowing anonymous reads answers with a misleading 404)."""
    url, options = s3_root
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bare = {k: v for k, v in options.items() if k not in ("key", "secret", "token")}
    for command, err in _error_lines(url, bare, capsys).items():
        assert len(err) == 1 and "no usable S3 credentials" in err[0], (command, err)


def test_an_endpoint_that_accepts_and_never_answers_is_one_line_naming_the_dataset(capsys, monkeypatch):
    """A port that takes connections and never answers (a wrong endpoint): every command fails after its retry
    budget with one line that starts with the dataset's URL (query's probe for a token prefix named `ds.idx`) and
    says no answer came; the budget and timeouts are the storage options'."""
    import socket

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    with socket.create_server(("127.0.0.1", 0), backlog=64) as silent:
        options = {
            "endpoint_url": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "read_timeout": 0.3,
            "retries": 1,
        }
        for command, err in _error_lines("s3://b/ds", options, capsys).items():
            assert len(err) == 1 and err[0].startswith("energon-arrow: error: s3://b/ds"), (command, err)
            assert not err[0].startswith("energon-arrow: error: s3://b/ds.idx"), (command, err)
            assert "no answer within the timeout" in err[0], (command, err)
