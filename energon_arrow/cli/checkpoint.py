"""`energon-arrow checkpoint [info] FILE...`: a saved loader state in readable form (`checkpoint redist`:
checkpoint_redist.py).

Reads energon-arrow states (`Loader.state_dict()` / `SavableLoader.save_state_rank()`) and energon's
(`SavableDataLoaderState`, without importing megatron-energon), as one file per rank, one file holding the list of
all ranks' states (energon's global checkpoint), or either wrapped Megatron-style as {"dataloader_state_dict": ..}.
For energon files the first lines are those of `energon checkpoint info`.
"""

from __future__ import annotations

import json
import os

import click

from energon_arrow.cli.checkpoint_load import is_ours, natural_key, read_states
from energon_arrow.cli.checkpoint_redist import command_redist

ENERGON_STATE = "SavableDataLoaderState"


def _kind(state) -> str:
    from energon_arrow.cli.checkpoint_load import Opaque, class_name

    if is_ours(state):
        return "energon-arrow"
    if isinstance(state, Opaque) and state.qualname.endswith("." + ENERGON_STATE):
        return "energon"
    raise click.ClickException(f"not a saved loader state: {class_name(state)} {str(state)[:80]!r}")


def _scalars(tree, prefix: str = "", depth: int = 2) -> list[str]:
    """`path=value` for the scalar leaves of a plain state down to `depth` levels, leaving out RNG states (the
    whole state is in --json)."""
    out = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k in ("__class__", "rng") or (depth <= 1 and isinstance(v, (dict, list))):
                continue
            out += _scalars(v, f"{prefix}{k}.", depth - 1)
    elif isinstance(tree, list):
        if all(not isinstance(v, (dict, list)) for v in tree):
            out.append(f"{prefix[:-1]}={tree}")
    else:
        out.append(f"{prefix[:-1]}={tree}")
    return out


def _echo_energon(ranks: list, is_global: bool) -> None:
    from energon_arrow.cli.checkpoint_load import plain

    states = [plain(s) for _, s in ranks]
    workers = {len(s["worker_states"]) for s in states}
    if len(workers) != 1:
        raise click.ClickException(f"the ranks have different worker counts: {sorted(workers)}")
    click.echo("Checkpoint type: " + ("Global checkpoint" if is_global else "Per-rank checkpoint files"))
    click.echo(f"Number of DP ranks: {len(states)}")
    click.echo(f"Number of workers per DP rank: {workers.pop()}")
    click.echo("\nDetailed information:")
    for i, ((name, _), s) in enumerate(zip(ranks, states)):
        click.echo(f"  Rank {i}:" if name is None else f"  Rank {i} ({name}):")
        click.echo(f"    Next worker ID: {s['next_worker_id']}")
        click.echo(f"    Number of worker states: {len(s['worker_states'])}")
        click.echo(f"    Micro batch size: {s.get('micro_batch_size')}")
        for w, ws in enumerate(s["worker_states"]):
            summary = " ".join(_scalars(ws)) or "(empty)"
            click.echo(f"    Worker {w} ({ws.get('__class__', type(ws).__name__)}): {summary}")


def _echo_ours(ranks: list, is_global: bool) -> None:
    click.echo(
        "Checkpoint type: energon-arrow loader state, "
        + ("global checkpoint" if is_global else "per-rank checkpoint files")
    )
    click.echo(f"Number of DP ranks: {len(ranks)}")
    click.echo("\nDetailed information:")
    for i, (name, s) in enumerate(ranks):
        click.echo(f"  Rank {i}:" if name is None else f"  Rank {i} ({name}):")
        click.echo(f"    State version: {s['version']}")
        click.echo(f"    Next batch: {s['next_batch']} (batches of this rank already delivered)")
        if "sources" in s:
            click.echo(f"    Samples per dataset: {s['sources']}")
        for key, value in s.items():
            if key in ("version", "next_batch", "sources"):
                continue
            if key == "worker_streams":  # snapshots of the stages (KBs of numbers): where each stream resumes
                at = [None if x is None else x.get("at") for x in value]
                click.echo(f"    worker_streams: snapshots at samples {json.dumps(at)}")
            elif isinstance(value, dict):
                click.echo(f"    {key.capitalize()}:")
                for k, v in value.items():
                    click.echo(f"      {k}: {json.dumps(v, default=repr)}")
            else:
                click.echo(f"    {key}: {json.dumps(value, default=repr)}")


@click.command(name="info")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the whole state as JSON.")
def command_info(files, as_json):
    """Show saved loader states: FILES are one torch.save'd state per rank (energon-arrow's state_dict() or
    energon's save_state_rank()), or one file with every rank's state (energon's global checkpoint)."""
    from energon_arrow.cli.checkpoint_load import plain

    files = sorted(files, key=lambda f: natural_key(os.path.basename(f)))
    is_global, megatron, ranks = read_states(files)
    if not ranks:
        raise click.ClickException(f"{files[0]}: holds no rank state")
    kinds = {_kind(s) for _, s in ranks}
    if len(kinds) != 1:
        raise click.ClickException(f"the files mix energon and energon-arrow states: {files}")
    kind = kinds.pop()
    if as_json:
        doc = {
            "format": kind,
            "global": is_global,
            "megatron_style": megatron,
            "ranks": [{"file": name, "state": plain(s)} for name, s in ranks],
        }
        click.echo(json.dumps(doc, indent=2))
    elif kind == "energon":
        _echo_energon(ranks, is_global)
    else:
        _echo_ours(ranks, is_global)


class _InfoByDefault(click.Group):
    """A group whose `info` subcommand also runs without its name (`energon-arrow checkpoint FILES`)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["info", *args]
        return super().parse_args(ctx, args)


@click.group(name="checkpoint", cls=_InfoByDefault)
def command():
    """Saved loader states: `checkpoint [info] FILES` shows them, `checkpoint redist FILES OUT --new-world-size N`
    rewrites them for another number of ranks (energon's `energon checkpoint info` / `redist`)."""


command.add_command(command_info)
command.add_command(command_redist)
