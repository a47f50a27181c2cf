"""`servebench netem`: run an emulated link in front of a server, check one, list them."""

from __future__ import annotations

import asyncio
import signal
import sys

import typer

from servebench.cli.usage import fail
from servebench.cli.values import Address, Number
from servebench.cli.values import seed as seed_type

app = typer.Typer(
    help="Emulated network links (wired, Wi-Fi, LTE, 3G, custom YAML, Mahimahi traces).",
    no_args_is_help=True,
)

_PROFILE_HELP = "A built-in profile name (see `servebench netem profiles`) or a YAML file."


@app.command("profiles")
def profiles_command() -> None:
    """List the built-in link profiles and where their numbers come from."""
    from rich.console import Console
    from rich.table import Table

    from servebench.netem import BUILTIN_PROFILES

    table = Table(title="Built-in link profiles")
    for column in ("name", "down Mbit/s", "up Mbit/s", "RTT ms", "jitter ms", "loss %"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for p in BUILTIN_PROFILES.values():
        table.add_row(
            p.name,
            "-" if p.down_mbps is None else f"{p.down_mbps:g}",
            "-" if p.up_mbps is None else f"{p.up_mbps:g}",
            f"{p.rtt_s * 1e3:g}",
            f"{p.jitter_s * 1e3:g}",
            f"{p.loss * 100:g}",
        )
    console = Console()
    console.print(table)
    console.print("Sources:")
    for p in BUILTIN_PROFILES.values():
        console.print(f"  {p.name}: {p.source}", highlight=False)


@app.command("proxy")
def proxy_command(
    profile: str = typer.Option(..., "--profile", "-p", help=_PROFILE_HELP),
    to: str = typer.Option(..., "--to", help="The server's host:port.", parser=Address()),
    listen: str = typer.Option(
        "127.0.0.1:0", "--listen", help="host:port to listen on.", parser=Address(listen=True)
    ),
    seed: int | None = typer.Option(
        None, help="Seed jitter and loss for a repeatable run.", parser=seed_type()
    ),
) -> None:
    """Run a link in front of a server until Ctrl-C; prints the address to use first."""
    from servebench.netem import NetemError, parse_address, resolve_link
    from servebench.netem.serve import run_proxy

    try:
        link = resolve_link(profile)
        target = parse_address(to, "--to")
        listen_at = parse_address(listen, "--listen")
    except NetemError as exc:
        raise fail(str(exc)) from None
    if not _local_only(listen_at.host):
        typer.echo(
            f"warning: --listen {listen_at}: other machines can connect to this link too "
            f"(and through it to {target}); listen on 127.0.0.1 to keep it on this machine",
            err=True,
        )

    async def until_signal(proxy) -> None:  # type: ignore[no-untyped-def]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        typer.echo(str(proxy.address))
        sys.stdout.flush()
        typer.echo(
            f"link '{link.name}' from {proxy.address} to {target}; Ctrl-C stops it", err=True
        )
        await stop.wait()

    try:
        proxy = run_proxy(link, target, listen_at, seed=seed, until=until_signal)
    except OSError as exc:
        raise fail(str(exc)) from None
    stats = proxy.stats()
    typer.echo(
        f"stopped: {stats.connections_opened} connections, "
        f"{stats.up.bytes_out} bytes up, {stats.down.bytes_out} bytes down",
        err=True,
    )


def _local_only(host: str) -> bool:
    """True for loopback addresses and `localhost`; a wildcard (0.0.0.0, ::), another
    interface's address or a host name may be reachable from the network."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command("check")
def check_command(
    profile: str = typer.Argument(..., help=_PROFILE_HELP),
    duration: float = typer.Option(
        2.0,
        help="Seconds each bulk transfer should last.",
        parser=Number(float, ge=0.1, le=3600, unit=" s"),
    ),
    pings: int = typer.Option(
        20, help="Ping-pong round trips to time.", parser=Number(int, ge=4, le=100_000)
    ),
    seed: int | None = typer.Option(
        None, help="Seed jitter and loss for a repeatable run.", parser=seed_type()
    ),
) -> None:
    """Measure RTT and throughput through the link against a local server; compare."""
    from rich.console import Console
    from rich.table import Table

    from servebench.netem import NetemError, resolve_link
    from servebench.netem.check import check_profile

    try:
        report = check_profile(resolve_link(profile), duration_s=duration, pings=pings, seed=seed)
    except NetemError as exc:
        raise fail(str(exc)) from None
    table = Table(title=f"link '{report.profile.name}': configured vs measured")
    for column in ("quantity", "unit", "configured", "measured", "error"):
        table.add_column(column, justify="left" if column in ("quantity", "unit") else "right")
    for row in report.rows:
        error = row.error
        table.add_row(
            row.quantity,
            row.unit,
            "-" if row.configured is None else f"{row.configured:.3f}",
            f"{row.measured:.3f}",
            "" if error is None else f"{error:+.1%}",
        )
    Console().print(table)
