"""`energon-arrow checkpoint redist FILES... OUTPUT_DIR --new-world-size N` (energon's `energon checkpoint redist`).

energon's rank state holds one state per DataLoader worker, so its redist deals the worker states of all ranks out
to the new ranks; a state of the energon API's training order (each worker's stream position, `worker_samples`,
and the snapshot it resumes from, `worker_streams`) is dealt the same way (`_dealt_streams`). A native Loader
rank state holds the position in the rank's batch stream, which is the same on
every rank and does not depend on the worker count: redist writes that state once per new rank, named like the
input files (`state_rank0.pt` ... -> `state_rank0.pt` ... `state_rank{N-1}.pt`), a global checkpoint (one file
holding every rank's state) as one file of N states, Megatron-style `{"dataloader_state_dict": ...}` wrapping
kept. A loader built with the new world size (and so another global batch size) resumes after the same number of
samples (`Loader.load_state_dict`). States whose ranks hold different positions or pending samples of their own
(regrouping loaders) are refused, as are energon's own states (their format is energon's to rewrite).
"""

from __future__ import annotations

import os
import re

import click

from energon_arrow.cli.checkpoint_load import is_ours, natural_key, read_states


def rank_file_namer(names: list[str]):
    """The file name of rank n following `names` (the input rank files, in rank order): the one run of digits
    that counts up from file to file (the last run of digits for a single file), zero-padded like the first."""
    tokens = [re.split(r"(\d+)", n) for n in names]
    if any(len(t) != len(tokens[0]) for t in tokens):
        raise click.ClickException(f"the rank files are not named by one pattern: {names}")
    varying = [i for i in range(1, len(tokens[0]), 2) if len({int(t[i]) for t in tokens}) > 1]
    fixed = [i for i in range(0, len(tokens[0]), 2) if len({t[i] for t in tokens}) > 1]
    if len(names) == 1:
        varying = [len(tokens[0]) - 2] if len(tokens[0]) > 1 else []
    if fixed or len(varying) != 1:
        raise click.ClickException(f"the rank files are not numbered by one counter: {names}")
    pos = varying[0]
    first, width = int(tokens[0][pos]), len(tokens[0][pos])
    if [int(t[pos]) for t in tokens] != list(range(first, first + len(names))):
        raise click.ClickException(f"the rank files are not numbered consecutively: {names}")

    def name(n: int) -> str:
        return "".join(str(first + n).zfill(width) if i == pos else tok for i, tok in enumerate(tokens[0]))

    return name


def redistributed(states: list[dict], world_size: int) -> list[dict]:
    """The rank states for `world_size` ranks from those of the old ranks (see the module docstring)."""
    if world_size == len(states):
        return states
    if any("regroup" in s for s in states):
        raise click.ClickException(
            "these rank states hold samples pending on each rank (a loader that groups, packs or generates "
            "samples): they resume only with the same world size"
        )
    if all("worker_samples" in s for s in states):
        return _dealt_streams(states, world_size)
    if any(s != states[0] for s in states[1:]):
        raise click.ClickException(
            "the rank states are at different positions: not one checkpoint of one loader"
        )
    return [dict(states[0]) for _ in range(world_size)]


def _dealt_streams(states: list[dict], world_size: int) -> list[dict]:
    """States of energon's training order (each worker of each rank has its own stream): the streams of all ranks
    in global worker order (rank * workers + worker), dealt to `world_size` ranks, as energon's redist deals its
    worker states; each new rank's loader then needs (global workers / world_size) workers."""
    streams = [x for s in states for x in s["worker_samples"]]
    if len(streams) % world_size:
        raise click.ClickException(
            f"these states hold {len(streams)} worker streams (ranks x workers); they cannot be dealt to "
            f"{world_size} ranks: the new ranks x workers per rank must be {len(streams)}"
        )
    # each stream's snapshot (where it resumes from without being computed again) goes with its position
    snapshots = [x for s in states for x in s.get("worker_streams") or [None] * len(s["worker_samples"])]
    per = len(streams) // world_size
    out = []
    for rank in range(world_size):
        mine = streams[rank * per : (rank + 1) * per]
        turn = mine.index(min(mine)) if len(set(mine)) > 1 else 0  # the first worker one batch behind
        settings = dict(states[0]["settings"], slice_workers=per)
        state = dict(
            states[0],
            worker_samples=mine,
            worker_turn=turn,
            rank=rank,
            world_size=world_size,
            next_batch=0,
            settings=settings,
        )
        state.pop("worker_streams", None)
        own = snapshots[rank * per : (rank + 1) * per]
        if any(x is not None for x in own):
            state["worker_streams"] = own
        out.append(state)
    return out


@click.command(name="redist")
@click.argument("input_files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.argument("output_path", type=click.Path(file_okay=False))
@click.option("--new-world-size", type=int, help="Number of data-parallel ranks to write states for.")
def command_redist(input_files, output_path, new_world_size):
    """Redistribute a checkpoint: read the rank states in INPUT_FILES (one file per rank, or one global
    checkpoint) and write states for --new-world-size ranks to OUTPUT_PATH, named like the inputs."""
    files = sorted(input_files, key=lambda f: natural_key(os.path.basename(f)))
    click.echo(f"Processing {len(files)} checkpoint files")
    is_global, megatron, ranks = read_states(files)
    states = [s for _, s in ranks]
    if not states:
        raise click.ClickException(f"{files[0]}: holds no rank state")
    if not all(is_ours(s) for s in states):
        raise click.ClickException(
            "these are energon's own loader states: redistribute them with energon's `energon checkpoint redist` "
            "(energon-arrow redistributes energon-arrow states)"
        )
    namer = None if is_global else rank_file_namer([os.path.basename(f) for f in files])
    if new_world_size is None:
        click.echo(f"Current DP world size: {len(states)}")
        new_world_size = click.prompt("Please enter the new DP world size", type=int)
    if new_world_size <= 0:
        raise click.ClickException("New world size must be greater than 0")
    new_states = redistributed(states, new_world_size)
    os.makedirs(output_path, exist_ok=True)
    if is_global:
        out = os.path.join(output_path, os.path.basename(files[0]))
        _save(new_states, out, megatron)
        click.echo(f"Saved global checkpoint to {out}")
    else:
        for rank, state in enumerate(new_states):
            _save(state, os.path.join(output_path, namer(rank)), megatron)
        click.echo(f"Saved {new_world_size} rank checkpoint files to {output_path}")


def _save(state, path: str, megatron: bool) -> None:
    import torch

    torch.save({"dataloader_state_dict": state} if megatron else state, path)
