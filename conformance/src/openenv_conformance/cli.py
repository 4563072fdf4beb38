"""``openenv certify``: the command line of the suite (registered in the ``openenv.cli``
entry-point group, so ``openenv certify`` works once protoenv-conformance is installed)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from openenv_conformance.certificate import LABEL, CertificateError, image_digest, issue_for_image, verify
from openenv_conformance.console import ConsoleProgress
from openenv_conformance.context import RunOptions
from openenv_conformance.declaration import DeclarationError, load_declaration
from openenv_conformance.registry import LEVELS, all_checks
from openenv_conformance.runner import certify as run
from openenv_conformance.targets import TargetOptions

__all__ = ["certify", "verify_certificate"]


_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class _Size(click.ParamType):
    """A size in bytes: ``1073741824``, ``512M``, ``2G``, ``2GiB`` (powers of 1024)."""

    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = 1
        if text and text[-1] in _SIZE_UNITS:
            unit, text = _SIZE_UNITS[text[-1]], text[:-1]
        try:
            n = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a size (e.g. 2G, 512M, 1073741824)", param, ctx)
        if n <= 0:
            self.fail(f"{value!r}: a size must be positive", param, ctx)
        return int(n * unit)


def _write(path: str, text: str) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


@click.command("certify")
@click.argument("target", required=False)
@click.option(
    "-l",
    "--level",
    "levels",
    multiple=True,
    type=click.Choice(LEVELS),
    help="Run only this level (repeatable). Default: all.",
)
@click.option(
    "-c",
    "--check",
    "checks",
    multiple=True,
    metavar="ID",
    help="Run only checks whose id matches (shell pattern, repeatable), e.g. 'lifecycle.*'.",
)
@click.option("--seed", type=int, default=None, help="Seed of every Hypothesis search (default: random, recorded).")
@click.option(
    "--max-examples", type=click.IntRange(1), default=None, help="Examples per Hypothesis search.  [default: 100]"
)
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait for any one answer.")
@click.option(
    "--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Write the JSON report here."
)
@click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False), default=None, help="Write a JUnit XML report here."
)
@click.option(
    "--markdown", "markdown_path", type=click.Path(dir_okay=False), default=None, help="Write a Markdown summary here."
)
@click.option(
    "--serve-arg",
    "serve_args",
    multiple=True,
    metavar="ARG",
    help="Extra `openenv serve` argument for python: targets (repeatable), e.g. --serve-arg=--max-sessions=8.",
)
@click.option(
    "--ready-timeout", type=float, default=60.0, show_default=True, help="Seconds a started target may take to serve."
)
@click.option(
    "--transport",
    type=click.Choice(["grpc", "http", "binary"]),
    default=None,
    help="Which transport of a target serving both to certify (python:, docker: targets): grpc (default) "
    "or http (OpenEnv's JSON protocol over HTTP/WebSocket).",
)
@click.option(
    "--parity-with",
    default=None,
    metavar="URL",
    help="The target's other transport (http://... for a grpc:// target, grpc://... for an http:// one), "
    "for the parity check.",
)
@click.option(
    "--capacity-limit",
    type=int,
    default=4096,
    show_default=True,
    help="Skip the capacity checks above this many max_sessions.",
)
@click.option(
    "--token",
    default=None,
    help="Bearer token for a target that requires one (default: $OPENENV_TOKEN; docker: targets: their own).",
)
@click.option(
    "--require-transport",
    type=click.Choice(["grpc", "http", "binary"]),
    default=None,
    help="Certify only a full run over this transport: a run over the other one, or a subset (checks the "
    "transport cannot express), is a failure.",
)
@click.option(
    "--require-exercised",
    is_flag=True,
    help="Certify only when every applicable check exercised its rule: a check that saw nothing of it (no "
    "step outlived its timeout, no episode ended) fails the run instead of being listed as not exercised.",
)
@click.option(
    "--durations",
    type=click.IntRange(0),
    default=None,
    metavar="N",
    help="Print the N slowest checks (0: all) and the time per level: where the run's time goes.",
)
@click.option(
    "--idle-bound",
    type=float,
    default=30.0,
    show_default=True,
    help="Check idle reaping only when the advertised idle_timeout is at most this many seconds.",
)
@click.option(
    "--strict-rewards",
    is_flag=True,
    help="Reward-sanity findings (rewards.trivial_max) fail the run instead of warning.",
)
@click.option(
    "--sandbox-memory-bound",
    type=_Size(),
    default="2G",
    show_default=True,
    help="Level sandbox: memory the processes of one call of submitted code may hold at once.",
)
@click.option(
    "--sandbox-disk-bound",
    type=_Size(),
    default="1G",
    show_default=True,
    help="Level sandbox: bytes a session's submitted code may hold on disk.",
)
@click.option(
    "--sandbox-files-bound",
    type=click.IntRange(1),
    default=100_000,
    show_default=True,
    help="Level sandbox: files a session's submitted code may hold.",
)
@click.option(
    "--sandbox-timeout",
    type=click.FloatRange(min=1.0),
    default=60.0,
    show_default=True,
    help="Level sandbox: seconds a call of submitted code may take to answer (its own limits must end it first).",
)
@click.option(
    "--sandbox-secret",
    "sandbox_secrets",
    multiple=True,
    metavar="NAME|PATH",
    help="Level sandbox: a name (a path component) or an absolute path submitted code must not read, beside the "
    "environment's package (repeatable).",
)
@click.option(
    "--grading-probes",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="Level grading: how many of the environment's grading probes to play (chosen by the seed; 0: all).",
)
@click.option(
    "--grading-timeout",
    type=click.FloatRange(min=1.0),
    default=120.0,
    show_default=True,
    help="Level grading: seconds a graded step may take to answer (the environment's limits must end a hung "
    "verifier first).",
)
@click.option(
    "--certificate",
    "certificate_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="docker: targets: write a signed certificate bound to the image digest here (needs --signing-key).",
)
@click.option(
    "--signing-key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Ed25519 private key (PEM, PKCS#8) signing the --certificate.",
)
@click.option(
    "--declaration",
    "declaration_path",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="A binding's declaration (e.g. typescript/openenv-binding.json): protocol.declaration checks the server "
    "against it (its protocol version, every advertised feature declared and answering, its transport).",
)
@click.option("--list-checks", is_flag=True, help="List every check (id, level, title) and exit.")
@click.option("-v", "--verbose", is_flag=True, help="Show notes of passing checks and full reasons.")
def certify(
    target: str | None,
    levels: tuple[str, ...],
    checks: tuple[str, ...],
    seed: int | None,
    max_examples: int | None,
    timeout: float,
    report_path: str | None,
    junit_path: str | None,
    markdown_path: str | None,
    serve_args: tuple[str, ...],
    ready_timeout: float,
    transport: str | None,
    parity_with: str | None,
    capacity_limit: int,
    token: str | None,
    require_transport: str | None,
    require_exercised: bool,
    durations: int | None,
    idle_bound: float,
    strict_rewards: bool,
    sandbox_memory_bound: int,
    sandbox_disk_bound: int,
    sandbox_files_bound: int,
    sandbox_timeout: float,
    sandbox_secrets: tuple[str, ...],
    grading_probes: int,
    grading_timeout: float,
    certificate_path: str | None,
    signing_key: str | None,
    declaration_path: str | None,
    list_checks: bool,
    verbose: bool,
) -> None:
    """Certify that TARGET keeps the openenv.v1 contract.

    TARGET is grpc://HOST:PORT (a running server), http://HOST:PORT or ws://HOST:PORT (the
    HTTP/WebSocket side of a running server: openenv's or any OpenEnv server),
    python:MODULE:FACTORY (served in a subprocess on free loopback ports) or docker:IMAGE.
    Exit status: 0 certified (checks not exercised are listed; --require-exercised fails
    them), 1 a check failed, 2 the target is unusable.
    """
    if list_checks:
        for c in all_checks():
            click.echo(f"{c.id:<36} {c.title}")
        return
    if not target:
        raise click.UsageError(
            "missing TARGET (grpc://HOST:PORT, http://HOST:PORT, python:MODULE:FACTORY or docker:IMAGE)"
        )
    if certificate_path and not signing_key:
        raise click.UsageError("--certificate needs --signing-key (an Ed25519 private key, PEM)")
    if certificate_path and not target.startswith("docker:"):
        raise click.UsageError("--certificate binds a certificate to an image: the target must be docker:IMAGE")
    declaration = None
    if declaration_path:
        try:
            declaration = load_declaration(declaration_path)
        except DeclarationError as e:
            raise click.UsageError(f"--declaration: {e}") from None
    console = Console(highlight=False, soft_wrap=True)
    opts = RunOptions(
        declaration=declaration,
        capacity_limit=capacity_limit,
        token=token,
        idle_bound=idle_bound,
        strict_rewards=strict_rewards,
        sandbox_memory_bound=sandbox_memory_bound,
        sandbox_disk_bound=sandbox_disk_bound,
        sandbox_files_bound=sandbox_files_bound,
        sandbox_timeout=sandbox_timeout,
        sandbox_secrets=tuple(sandbox_secrets),
        grading_probes=grading_probes,
        grading_timeout=grading_timeout,
    )
    try:
        report = run(
            target,
            levels=levels or None,
            checks=checks or None,
            seed=seed,
            max_examples=max_examples,
            timeout=timeout,
            run_options=opts,
            target_options=TargetOptions(
                ready_timeout=ready_timeout, serve_args=serve_args, transport=transport, parity_with=parity_with
            ),
            progress=ConsoleProgress(console, verbose=verbose, durations=durations),
            require_transport=require_transport,
            require_exercised=require_exercised,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if report_path:
        _write(report_path, report.to_json())
    if junit_path:
        _write(junit_path, report.to_junit())
    if markdown_path:
        _write(markdown_path, report.to_markdown())
    if certificate_path and signing_key:
        try:
            cert = issue_for_image(report, target.removeprefix("docker:"), Path(signing_key).read_bytes())
        except (ValueError, RuntimeError) as e:
            raise click.ClickException(f"no certificate written: {e}") from None
        _write(certificate_path, cert)
        console.print(f"certificate written to {escape(certificate_path)} (image {escape(report.image_digest)})")
    sys.exit(report.exit_code)


@click.command("verify-certificate")
@click.argument("image")
@click.argument("certificate", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--public-key",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The Ed25519 public key (PEM) the certificate must be signed with.",
)
def verify_certificate(image: str, certificate: str | None, public_key: str) -> None:
    """Check that CERTIFICATE (a file written by `openenv certify --certificate`; default: the
    image's org.openenv.certificate label) is signed with the public key and bound to IMAGE's
    current digest. Exit status: 0 verified, 1 not."""
    try:
        digest = image_digest(image)
        if certificate is not None:
            text = Path(certificate).read_text(encoding="utf-8")
        else:
            import docker

            text = (docker.from_env().images.get(image).labels or {}).get(LABEL, "")
            if not text:
                raise CertificateError(f"image {image!r} has no {LABEL} label; give the certificate file")
        payload = verify(text, Path(public_key).read_bytes(), digest)
    except (CertificateError, ValueError) as e:
        click.echo(f"NOT VERIFIED: {e}", err=True)
        sys.exit(1)
    click.echo(
        f"VERIFIED: {image} ({digest}) {payload['verdict']} by openenv certify {payload['suite_version']} "
        f"(rule set {payload['ruleset_hash'][:19]}..., seed {payload['seed']}, issued {payload['issued_at']})"
    )
    if payload.get("note"):
        click.echo(f"note: {payload['note']}")
