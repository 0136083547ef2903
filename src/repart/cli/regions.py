"""``repart region create|list|show|update|delete``: regions and their configuration.

The options map onto ``repart.storage.RegionConfig``, which validates them; an error names the option
and the accepted values, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from repart.cli.database import DbOption, JsonOption, console, print_json, query, read_query, timestamp
from repart.cli.errors import options_of, reports_bad_input
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from repart.storage.models import Region

region_app = typer.Typer(no_args_is_help=True, help="Create, list, show, update and delete regions.")

# RegionConfig field → command-line option, so that an error names the option people typed.
Name = Annotated[str, typer.Argument(help="Region name: letters, digits, '.', '_', '-'.")]
KeyTypeOption = Annotated[str | None, typer.Option("--key-type", help="Key type: str or int.")]
Channels = Annotated[int | None, typer.Option("--channels", help="Initial number of channels N.")]
ResourcesOption = Annotated[
    str | None, typer.Option("--resources", help="Resource code (state, computation, communication): LCL, …")
]
Alpha = Annotated[float | None, typer.Option("--alpha", help="Imbalance tolerance α > 1 (default 1.2).")]
Sigma = Annotated[float | None, typer.Option("--sigma", help="Frequency threshold scaler σ in (0, 1].")]
Algorithm = Annotated[
    str | None, typer.Option("--algorithm", help="scan, redist, readj, uniform, consistent or auto.")
]
Utility = Annotated[str | None, typer.Option("--utility", help="Utility: A, APM, APLM, ATM, ATLM.")]
Policy = Annotated[
    str | None, typer.Option("--policy", help="Channel-count policy: fixed, target-utilization.")
]
MinChannels = Annotated[int | None, typer.Option("--min-channels", help="Smallest N the policy may choose.")]
MaxChannels = Annotated[int | None, typer.Option("--max-channels", help="Largest N the policy may choose.")]
TailAware = Annotated[
    bool | None,
    typer.Option("--tail-aware/--no-tail-aware", help="Build with per-slot loads and slot overrides."),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Who places the region's state: repart (its partition functions; default) or spark-state "
        "(a Structured Streaming query's own state: repart chooses its count of state partitions).",
    ),
]
SlotBits = Annotated[int | None, typer.Option("--slot-bits", help="log2 of the slot table size (10-20).")]
SplitOption = Annotated[
    str | None,
    typer.Option(
        "--split",
        help="Split mode: spread keys too hot for one channel by pkg, dchoices, wchoices, "
        "rr, fish or dkg (needs --merge); on update, none goes back to one channel per key.",
        show_default=False,
    ),
]
MergeOption = Annotated[
    str | None,
    typer.Option(
        "--merge",
        help="How a split key's partial state rows merge: column=sum|min|max pairs, "
        "e.g. 'pv=sum,volume=sum'.",
        show_default=False,
    ),
]
Settings = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Controller setting KEY=VALUE, repeatable: target_utilization, utilization_band=\\[low,high], "
        "batch_interval_seconds, catch_up_seconds, stabilization_batches, scale_down_delay, "
        "max_scale_down_factor, reversal_batches, reversal_margin, effectiveness_threshold, "
        "scale_up_lookback, "
        "rebalance_threshold, migration_budget, rebalance_payback_batches, counters, move_limit, "
        "plan_keep_versions, plan_keep_days; "
        "split.<parameter> for the split scheme's (split.theta, …). On update, KEY=null removes a "
        "setting (back to its default).",
        show_default=False,
    ),
]


def _parsed_settings(pairs: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a settings object; a VALUE that parses as JSON (a number, true) is that.
    ``split.KEY=VALUE`` goes into the ``split`` object (the split scheme's parameters)."""
    settings: dict[str, Any] = {}
    for pair in pairs or []:
        key, separator, text = pair.partition("=")
        if not separator or not key:
            raise InvalidInput("settings", f"must be KEY=VALUE, got {pair!r}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        group, dot, name = key.partition(".")
        if dot and group == "split" and name:
            settings.setdefault("split", {})[name] = value
        else:
            settings[key] = value
    return settings


def _options(**values: Any) -> dict[str, Any]:
    """The RegionConfig fields given on the command line (the others keep their default or value)."""
    return {field: value for field, value in values.items() if value is not None}


def region_dict(row: Region) -> dict[str, Any]:
    """A region's name, configuration and timestamps as a JSON object."""
    from repart.storage import RegionConfig

    config = RegionConfig.from_row(row)
    values = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}
    values["settings"] = dict(config.settings)
    return {
        "name": row.name,
        **values,
        "mode": row.mode,
        "mode_reason": row.mode_reason,
        "created_at": timestamp(row.created_at),
        "updated_at": timestamp(row.updated_at),
    }


def _show(region: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(region)
        return
    table = Table(title=f"region {region['name']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in region.items():
        if field != "name":
            table.add_row(field, str(value))
    console().print(table)


@region_app.command("create")
@reports_bad_input
def create(
    name: Name,
    key_type: KeyTypeOption = None,
    channels: Channels = None,
    resources: ResourcesOption = None,
    alpha: Alpha = None,
    sigma: Sigma = None,
    algorithm: Algorithm = None,
    utility: Utility = None,
    policy: Policy = None,
    min_channels: MinChannels = None,
    max_channels: MaxChannels = None,
    tail_aware: TailAware = None,
    slot_bits: SlotBits = None,
    split: SplitOption = None,
    merge: MergeOption = None,
    engine: EngineOption = None,
    settings: Settings = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a region; --key-type is required, N defaults to --min-channels (1)."""
    from repart.controller.service import create_region
    from repart.storage import RegionConfig

    if key_type is None:
        raise InvalidInput("key_type", "is required: str or int")
    given = _options(
        resources=resources,
        alpha=alpha,
        sigma=sigma,
        algorithm=algorithm,
        utility=utility,
        policy=policy,
        min_channels=min_channels,
        max_channels=max_channels,
        tail_aware=tail_aware,
        slot_bits=slot_bits,
        split_scheme=split,
        merge=merge,
        engine=engine,
    )
    config = RegionConfig(
        key_type=key_type,  # type: ignore[arg-type]  # validated by RegionConfig
        n_channels_initial=channels if channels is not None else given.get("min_channels", 1),
        settings=_parsed_settings(settings),
        **given,
    )
    region = query(db, lambda session: region_dict(create_region(session, name, config)))
    _show(region, as_json)


@region_app.command("list")
@reports_bad_input
def list_(db: DbOption = None, as_json: JsonOption = False) -> None:
    """List the regions and their main settings."""
    from repart.storage import list_regions

    regions = read_query(db, lambda session: [region_dict(row) for row in list_regions(session)])
    if as_json:
        print_json(regions)
        return
    table = Table(title="regions")
    for column in (
        "name",
        "key type",
        "N",
        "min..max",
        "algorithm",
        "utility",
        "resources",
        "α",
        "σ",
        "policy",
    ):
        table.add_column(column)
    for r in regions:
        table.add_row(
            r["name"],
            r["key_type"],
            str(r["n_channels_initial"]),
            f"{r['min_channels']}..{r['max_channels']}",
            r["algorithm"] + ("+tail" if r["tail_aware"] else ""),
            r["utility"],
            r["resources"],
            f"{r['alpha']:g}",
            f"{r['sigma']:g}",
            r["policy"],
        )
    console().print(table)


@region_app.command("show")
@reports_bad_input
def show(name: Name, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show a region's whole configuration."""
    from repart.storage import region_by_name

    _show(read_query(db, lambda session: region_dict(region_by_name(session, name))), as_json)


@region_app.command("update")
@reports_bad_input
def update(
    name: Name,
    key_type: KeyTypeOption = None,
    channels: Channels = None,
    resources: ResourcesOption = None,
    alpha: Alpha = None,
    sigma: Sigma = None,
    algorithm: Algorithm = None,
    utility: Utility = None,
    policy: Policy = None,
    min_channels: MinChannels = None,
    max_channels: MaxChannels = None,
    tail_aware: TailAware = None,
    slot_bits: SlotBits = None,
    split: SplitOption = None,
    merge: MergeOption = None,
    settings: Settings = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="What the controller may do: auto (act), recommend (record what it would do, activate "
            "nothing), hold (nothing).",
            show_default=False,
        ),
    ] = None,
    reason: Annotated[
        str | None, typer.Option(help="Why the mode changes (recorded with it).", show_default=False)
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change the given settings of a region (key type and slot bits only while it has no data), or its
    mode (every change of mode is an event)."""
    from repart.controller.service import update_region

    changes = _options(
        key_type=key_type,
        n_channels_initial=channels,
        resources=resources,
        alpha=alpha,
        sigma=sigma,
        algorithm=algorithm,
        utility=utility,
        policy=policy,
        min_channels=min_channels,
        max_channels=max_channels,
        tail_aware=tail_aware,
        slot_bits=slot_bits,
        merge=merge,
    )
    if split is not None:
        changes["split_scheme"] = None if split == "none" else split
    new_settings = _parsed_settings(settings)
    if not changes and not new_settings and mode is None and reason is None:
        listed = ", ".join(
            option
            for name, option in options_of(update).items()
            if name not in ("name", "db", "as_json", "reason")
        )
        raise InvalidInput("options", f"must include at least one change ({listed}): nothing to update")

    def work(session: Session) -> dict[str, Any]:
        row = update_region(session, name, settings=new_settings, mode=mode, reason=reason, **changes)
        return region_dict(row)

    _show(query(db, work), as_json)


@region_app.command("delete")
@reports_bad_input
def delete(
    name: Name,
    force: Annotated[
        bool, typer.Option("--force", help="Delete it even though it has versions (and their plans).")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a region with its snapshots, versions, plans and batch reports, in one transaction.

    Refused (exit 3) when the region has versions, unless --force. Its events stay in the audit log
    (without a region), and a controller-wide ``region-deleted`` event records what went.
    """

    from repart.controller.service import delete_region

    deleted = query(db, lambda session: delete_region(session, name, force=force))
    if as_json:
        print_json(deleted)
    else:
        console().print(deleted["message"])
