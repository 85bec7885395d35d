"""`energon-arrow checkpoint`: energon-arrow loader states and energon's checkpoint files (per-rank, global,
Megatron-style), energon's `checkpoint info` lines included, without importing megatron-energon."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
import torch

from energon_arrow.testing.reference import energon_cli
from tests.energon_order import global_order_train_dataset


@pytest.fixture(scope="module")
def energon_states(clean_root, tmp_path_factory):
    """energon's save_state_rank() after 2 batches, saved as two rank files, Megatron-style and as a global list."""
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=1)
    ds = get_train_dataset(
        clean_root, worker_config=wc, batch_size=2, shuffle_buffer_size=4, max_samples_per_sequence=2
    )
    loader = get_savable_loader(ds)
    it = iter(loader)
    next(it), next(it)
    state = loader.save_state_rank()
    folder = tmp_path_factory.mktemp("energon-ckpt")
    files = {"rank0": folder / "state_r0.pt", "rank1": folder / "state_r1.pt", "mg": folder / "mg_r0.pt"}
    torch.save(state, files["rank0"])
    torch.save(state, files["rank1"])
    torch.save({"dataloader_state_dict": state}, files["mg"])
    torch.save([state, state], folder / "global.pt")
    files["global"] = folder / "global.pt"
    return {k: str(v) for k, v in files.items()}


def test_energon_rank_files_show_energons_info_lines(energon_states, cli):
    files = [energon_states["rank1"], energon_states["rank0"]]  # sorted by rank number like energon
    ref = energon_cli("checkpoint", "info", *sorted(files))
    ours = cli("checkpoint", *files)
    assert ours.returncode == 0, ours.stderr
    ref_lines = [line for line in ref.stdout.splitlines() if line.strip()]
    ours_lines = [line for line in ours.stdout.splitlines() if line.strip()]
    pos = 0
    for line in ref_lines:  # energon's lines, in energon's order, among ours
        pos = ours_lines.index(line, pos) + 1
    assert "Checkpoint type: Per-rank checkpoint files" in ours_lines
    assert "    Micro batch size: 2" in ours_lines
    assert any(line.startswith("    Worker 0 (SavableDatasetCheckpoint): ") for line in ours_lines)


def test_energon_global_and_megatron_style(energon_states, cli):
    ours = cli("checkpoint", energon_states["global"])
    assert ours.returncode == 0, ours.stderr
    assert "Checkpoint type: Global checkpoint" in ours.stdout and "Number of DP ranks: 2" in ours.stdout
    assert "  Rank 1:" in ours.stdout
    doc = json.loads(cli("checkpoint", "--json", energon_states["mg"]).stdout)
    assert doc["format"] == "energon" and doc["megatron_style"] and not doc["global"]
    state = doc["ranks"][0]["state"]
    assert state["__class__"] == "SavableDataLoaderState" and state["micro_batch_size"] == 2
    assert len(state["worker_states"]) == 1


def test_reads_energon_files_without_importing_energon(energon_states):
    code = (
        "import sys; from energon_arrow.cli.main import main\n"
        "try:\n    main(['checkpoint', sys.argv[1]])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert not [m for m in sys.modules if m.startswith('megatron')]\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, energon_states["rank0"]], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "Next worker ID" in proc.stdout


def test_energon_arrow_loader_state(clean_root, tmp_path, cli):
    import energon_arrow as ea

    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    loader = ea.get_savable_loader(global_order_train_dataset(clean_root, worker_config=wc, batch_size=2))
    it = iter(loader)
    next(it), next(it), next(it)
    path = tmp_path / "ea_r0.pt"
    torch.save(loader.save_state_rank(), path)
    it.close()
    ours = cli("checkpoint", str(path))
    assert ours.returncode == 0, ours.stderr
    assert "Checkpoint type: energon-arrow loader state, per-rank checkpoint files" in ours.stdout
    assert "    Next batch: 3 " in ours.stdout and "    Samples per dataset: [6]" in ours.stdout
    doc = json.loads(cli("checkpoint", "--json", str(path)).stdout)
    assert doc["format"] == "energon-arrow" and doc["ranks"][0]["state"]["next_batch"] == 3
    assert doc["ranks"][0]["state"]["settings"] == loader.state_dict()["settings"]
    # an energon-order state's stream snapshots (KBs of numbers each) show as where each stream resumes
    snap = {"stream": "1:3:0", "at": 128, "stages": {"words": {"key": {"array": "<u4", "b64": "A" * 3328}}}}
    torch.save(dict(loader.save_state_rank(), worker_streams=[snap, None]), path)
    shown = cli("checkpoint", str(path)).stdout
    assert "    worker_streams: snapshots at samples [128, null]" in shown and "AAAA" not in shown


def test_not_a_state_is_one_line_error(tmp_path, cli):
    path = tmp_path / "x.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    text = tmp_path / "y.pt"
    text.write_text("hello")
    for f, needle in (
        (path, "not a saved loader state: builtins.dict"),
        (text, "y.pt: not a torch.save'd checkpoint"),
    ):
        proc = cli("checkpoint", str(f))
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("energon-arrow: error:") and needle in lines[0], lines


def _debug_logs(root, folder, module, mode: str):
    """Two passes of a val loader (2 workers, batch 3) over `root` with the worker debug log on (level 3), by
    `module` (energon_arrow or megatron.energon); returns the keys of the batches."""
    wc = module.WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=2,
        worker_log_level=3,
        worker_debug_path=str(folder / "{worker_id}.jsonl"),
    )
    get = module.get_val_dataset if mode == "val" else module.get_train_dataset
    loader = module.get_savable_loader(get(root, split_part="train", batch_size=3, worker_config=wc))
    return [[b.__key__ for b in loader] for _ in range(2)]


def test_analyze_debug_reads_the_worker_debug_logs(clean_root, tmp_path, cli):
    """Our loader's logs: 3 files (main process + 2 workers), every batch a step; the same summary line as
    energon's analyze-debug on energon's logs of the same loader, and a heatmap PNG."""
    import energon_arrow as ea

    passes = _debug_logs(clean_root, tmp_path / "ours", ea, "val")
    n_keys = len({k for batches in passes for b in batches for k in b})
    steps = sum(len(batches) for batches in passes)
    png = tmp_path / "heat.png"
    args = ["--include-modality", "train,val", "--heatmap-path", str(png)]
    proc = cli("analyze-debug", str(tmp_path / "ours"), *args)
    assert proc.returncode == 0, proc.stderr
    assert "Analyzing 3 logs..." in proc.stdout
    assert f"Found {n_keys} unique sample keys, {steps} steps" in proc.stdout
    from PIL import Image

    assert Image.open(png).size == (steps, n_keys)
    # energon's logs of the same loader read the same way
    import megatron.energon as me

    _debug_logs(clean_root, tmp_path / "energon", me, "val")
    ref = energon_cli(
        "analyze-debug", str(tmp_path / "energon"), *args[:2], "--heatmap-path", str(tmp_path / "e.png")
    )
    theirs = cli("analyze-debug", str(tmp_path / "energon"), *args)
    found = [line for line in ref.stdout.splitlines() if line.startswith("Found")]
    assert found and found[0] in theirs.stdout.splitlines()
    # no loader of the asked modality: the workers' records of it (none for train here): an error
    proc = cli("analyze-debug", str(tmp_path / "ours"), "--heatmap-path", str(png))
    assert proc.returncode == 1 and "No data found in logs" in proc.stderr


def test_mount_refuses_with_the_alternatives(cli):
    """energon mount (FUSE) is not provided: one error line naming what to use instead, exit 1."""
    proc = cli("mount", "/data/ds", "./mnt", "-d", "-s")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1
    assert lines[0].startswith("energon-arrow: error: mount is not provided") and "energon mount" in lines[0]


def _rank_loaders(root, world: int, batch: int):
    import energon_arrow as ea

    return [
        ea.get_savable_loader(
            global_order_train_dataset(
                root,
                worker_config=ea.WorkerConfig(rank=r, world_size=world, num_workers=0),
                batch_size=batch,
                shuffle_buffer_size=4,
                max_samples_per_sequence=2,
            )
        )
        for r in range(world)
    ]


def test_redist_to_other_world_sizes_resumes_the_same_samples(clean_root, tmp_path):
    """energon's test_redist in small: 2 ranks x batch 2 save after 2 steps; redist to 1 and to 4 ranks (files
    named like the inputs); the next 8 samples of the world, as sets per global batch of 4, are the same."""
    from click.testing import CliRunner

    from energon_arrow.cli.checkpoint import command_redist

    def next_global_batches(loaders, steps):
        iters = [iter(ld) for ld in loaders]
        out = [sorted(k for it in iters for k in next(it).__key__) for _ in range(steps)]
        for it in iters:
            it.close()
        return out

    loaders = _rank_loaders(clean_root, 2, 2)
    files = []
    for r, ld in enumerate(loaders):
        it = iter(ld)
        next(it), next(it)
        it.close()
        files.append(str(tmp_path / f"state_rank{r}.pt"))
        torch.save(ld.save_state_rank(), files[-1])
    ref = next_global_batches(loaders, 2)
    for world in (1, 4):
        out = tmp_path / f"out{world}"
        result = CliRunner().invoke(command_redist, ["--new-world-size", str(world), *files, str(out)])
        assert result.exit_code == 0, result.output
        assert f"Saved {world} rank checkpoint files to {out}" in result.output
        assert sorted(p.name for p in out.iterdir()) == [f"state_rank{r}.pt" for r in range(world)]
        new = _rank_loaders(clean_root, world, 4 // world)
        for r, ld in enumerate(new):
            ld.restore_state_rank(torch.load(out / f"state_rank{r}.pt", weights_only=False))
        assert next_global_batches(new, 2) == ref


def test_redist_global_and_megatron_style_and_refusals(clean_root, energon_states, tmp_path, cli):
    (ld,) = _rank_loaders(clean_root, 1, 2)
    it = iter(ld)
    next(it)
    it.close()
    state = ld.save_state_rank()
    torch.save({"dataloader_state_dict": [state, state]}, tmp_path / "global.pt")
    proc = cli(
        "checkpoint", "redist", "--new-world-size", "3", str(tmp_path / "global.pt"), str(tmp_path / "o")
    )
    assert proc.returncode == 0, proc.stderr
    saved = torch.load(tmp_path / "o" / "global.pt", weights_only=False)
    assert saved == {"dataloader_state_dict": [state, state, state]}
    # `checkpoint FILES` is still `checkpoint info FILES`
    assert "Next batch: 1 " in cli("checkpoint", "info", str(tmp_path / "o" / "global.pt")).stdout
    torch.save(state, tmp_path / "s_r0.pt")
    torch.save({**state, "next_batch": 2}, tmp_path / "s_r1.pt")
    for args, needle in (
        (
            [str(tmp_path / "s_r0.pt"), str(tmp_path / "s_r1.pt")],
            "the rank states are at different positions",
        ),
        ([energon_states["rank0"], energon_states["rank1"]], "energon's `energon checkpoint redist`"),
    ):
        proc = cli("checkpoint", "redist", "--new-world-size", "1", *args, str(tmp_path / "x"))
        assert proc.returncode == 1 and needle in proc.stderr, proc.stderr


def test_redist_deals_worker_streams_in_global_worker_order():
    from energon_arrow.cli.checkpoint_redist import redistributed

    base = {
        "version": 1,
        "next_batch": 9,
        "settings": {"slice_workers": 2, "global_batch_size": 4},
        "sources": [10],
    }
    snap = {"stream": "s", "at": 8, "stages": {}}
    states = [
        dict(base, worker_samples=[10, 8], worker_turn=1, rank=0, world_size=2, worker_streams=[None, snap]),
        dict(base, worker_samples=[10, 8], worker_turn=1, rank=1, world_size=2),
    ]
    out = redistributed(states, 4)
    assert [s["worker_samples"] for s in out] == [[10], [8], [10], [8]]
    # each stream's snapshot goes with its position; a rank with none has no worker_streams
    assert [s.get("worker_streams") for s in out] == [None, [snap], None, None]
    assert [s["rank"] for s in out] == [0, 1, 2, 3]
    assert all(s["settings"]["slice_workers"] == 1 and s["next_batch"] == 0 for s in out)
    one = redistributed(states, 1)[0]
    assert one["worker_samples"] == [10, 8, 10, 8] and one["worker_turn"] == 1
    assert one["worker_streams"] == [None, snap, None, None]
    with pytest.raises(click.ClickException, match="4 worker streams"):
        redistributed(states, 3)
