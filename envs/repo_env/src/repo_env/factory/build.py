"""The factory's pipeline: baseline each package, plan candidate bugs, validate each by running
the package's own tests, and write the validated instances.

1. **Baseline** (one job per package): the whole suite once on the pristine tree, each test's
   calls of the package's functions recorded; a test that does not pass here is never used.
2. **Plan** (in the driver, from the seed): every mutation site (:mod:`.mutate`) in a function
   that at least two passing tests call; ``per_package`` candidates drawn round-robin over the
   operators, and a harder tier combining two sites in different functions of one module.
3. **Validate** (jobs of a few candidates, over processes or a Ray cluster): the tests that call
   a touched function (at most :data:`MAX_SELECTED`) run on the tree with the bug planted; it is
   kept when at least one fails (``fail_to_pass``), at least one still passes (``pass_to_pass``),
   none hangs, and the reverse patch (the reference fix) gives the pristine files back, on which
   the same tests all pass again (run, not assumed).
4. **Write**: instances with ids, a split by package (:func:`split_of`), a tier, the issue text
   written from the failing tests (:mod:`.issue`), the reference patch; ``instances.jsonl`` and
   ``manifest.json`` (hashes, the packages, the figures of the run).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from repo_env.diff import git_diff
from repo_env.factory import mutate
from repo_env.factory.issue import issue_text, leaks_patch
from repo_env.factory.runner import run_tests
from repo_env.factory.sources import MANIFEST, Package, cache_dir, fetch, load_packages, source_files

__all__ = ["FACTORY_VERSION", "MAX_SELECTED", "BuildResult", "build", "split_of", "tier_of"]

FACTORY_VERSION = "1"
#: The tests run per candidate: those calling a touched function, at most this many (a stable
#: sample by node id when more do).
MAX_SELECTED = 60
#: A candidate's run is killed after this long (a bug that loops forever is not kept).
RUN_TIMEOUT_S = 90.0
#: The share of candidates combining two bugs (the hard tier).
COMBINED_SHARE = 0.2
TEST_SPLIT, VALIDATION_SPLIT = 0.2, 0.12


def _h(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()


def split_of(package: str, packages: Sequence[str]) -> str:
    """The package's split: the packages sorted by the hash of their name, the first fifth
    ``test``, the next eighth ``validation``, the rest ``train`` (every instance of a package is
    in its package's split, so no test-split package is seen in training)."""
    order = sorted(packages, key=lambda n: _h("split", n))
    n = len(order)
    n_test, n_val = max(1, round(n * TEST_SPLIT)), max(1, round(n * VALIDATION_SPLIT))
    i = order.index(package)
    return "test" if i < n_test else "validation" if i < n_test + n_val else "train"


def tier_of(lines: int, functions: int, files: int, fail_to_pass: int) -> str:
    """``easy``, ``medium`` or ``hard`` from what a fix must touch and how much the tests say:
    points = lines changed + 2 per further function + 2 per further file + 1 when a single test
    fails (less to go on); easy <= 1, medium 2-3, hard >= 4 (two bugs are at least medium)."""
    points = lines + 2 * (functions - 1) + 2 * (files - 1) + (1 if fail_to_pass == 1 else 0)
    return "easy" if points <= 1 else "medium" if points <= 3 else "hard"


# -- per-process working copies (run_tests writes a candidate's files into the tree)

_WORK: dict[str, Path] = {}


def _work_tree(pkg: Package, cache: str | None) -> Path:
    if pkg.key not in _WORK:
        src = fetch(pkg, cache)
        base = Path(tempfile.mkdtemp(prefix="repo-factory-work-"))
        atexit.register(shutil.rmtree, base, True)
        dst = base / pkg.key
        shutil.copytree(src, dst)
        _WORK[pkg.key] = dst
    return _WORK[pkg.key]


# -- jobs (top-level functions: they run in worker processes or Ray workers)


def baseline_job(pkg_dict: dict[str, Any], cache: str | None) -> dict[str, Any]:
    """The package's whole suite on its pristine tree: the passing tests and the functions each
    one calls (``{"passing": [...], "calls": {function: [tests]}, "seconds": s, "tests": n}``)."""
    pkg = Package(**{k: tuple(v) if isinstance(v, list) else v for k, v in pkg_dict.items()})
    saved = (
        cache_dir(cache)
        / "baselines"
        / f"{pkg.key}-{_h(json.dumps(pkg_dict, sort_keys=True), FACTORY_VERSION)[:12]}.json"
    )
    if saved.is_file():  # the same package, configuration and factory: the same baseline
        return dict(json.loads(saved.read_text(encoding="utf-8")), cached=True)
    tree = _work_tree(pkg, cache)
    run = run_tests(
        tree,
        import_root=pkg.import_root,
        testpaths=pkg.tests,
        ignore=pkg.ignore,
        trace=pkg.import_root,
        timeout_s=900.0,
    )
    passing = sorted(n for n, r in run.results.items() if r["outcome"] == "passed")
    calls: dict[str, list[str]] = defaultdict(list)
    root = "" if pkg.import_root in ("", ".") else pkg.import_root.rstrip("/") + "/"
    for nodeid in passing:
        for fn in run.calls.get(nodeid, []):
            calls[root + fn].append(nodeid)
    result = {
        "package": pkg.name,
        "passing": passing,
        "tests": len(run.results),
        "calls": dict(calls),
        "seconds": run.seconds,
        "timed_out": run.timed_out,
    }
    if not run.timed_out:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps(result, sort_keys=True), encoding="utf-8")
        tmp.rename(saved)
    return result


def validate_job(
    pkg_dict: dict[str, Any], cache: str | None, candidates: list[dict[str, Any]], rerun_fixed: bool = True
) -> list[dict[str, Any]]:
    """Validate candidates of one package (each ``{"mutations": [...], "selected": [...]}``):
    each comes back with ``valid``, ``reason``, ``fail_to_pass``, ``pass_to_pass``, the failing
    tests' messages and the seconds spent."""
    pkg = Package(**{k: tuple(v) if isinstance(v, list) else v for k, v in pkg_dict.items()})
    tree = _work_tree(pkg, cache)
    return [validate_candidate(pkg, tree, c, rerun_fixed) for c in candidates]


def validate_candidate(pkg: Package, tree: Path, cand: dict[str, Any], rerun_fixed: bool = True) -> dict[str, Any]:
    """One candidate (see :func:`validate_job`). ``rerun_fixed=False`` skips running the
    selected tests again on the restored files: the reverse patch is still checked to give the
    pristine files back byte for byte, whose run is the baseline's (every selected test passed
    there); ``openenv factory validate`` runs both sides again."""
    start = time.monotonic()
    muts = [mutate.Mutation.from_dict(m) for m in cand["mutations"]]
    selected: list[str] = list(cand["selected"])
    out: dict[str, Any] = {**cand, "valid": False}
    by_file: dict[str, list[mutate.Mutation]] = defaultdict(list)
    for m in muts:
        by_file[m.path].append(m)
    original = {p: (tree / p).read_text(encoding="utf-8") for p in by_file}
    try:
        buggy = {p: mutate.apply(original[p], ms) for p, ms in by_file.items()}
    except (ValueError, SyntaxError) as e:
        return {**out, "reason": f"does not apply: {e}", "seconds": time.monotonic() - start}
    test_paths = sorted({s.split("::", 1)[0] for s in selected})
    run = run_tests(tree, import_root=pkg.import_root, testpaths=test_paths, select=selected, files=buggy,
                    timeout_s=RUN_TIMEOUT_S)  # fmt: skip
    if run.timed_out:
        return {**out, "reason": "timed out", "seconds": time.monotonic() - start}
    f2p = [s for s in selected if run.outcome(s) in ("failed", "error")]
    p2p = [s for s in selected if run.outcome(s) == "passed"]
    other = [s for s in selected if s not in f2p and s not in p2p]
    reason = None
    if not f2p:
        reason = "no test fails"
    elif not p2p:
        reason = "no test still passes"
    elif other:
        reason = f"{len(other)} selected tests neither passed nor failed"
    if reason:
        return {**out, "reason": reason, "seconds": time.monotonic() - start}
    # The reverse patch: the reference fix applied to the buggy files gives the pristine ones,
    # and the selected tests all pass on them.
    fix_patch = git_diff(buggy, original)
    if _apply_patch(buggy, fix_patch) != original:
        return {**out, "reason": "the reverse patch does not restore the files", "seconds": time.monotonic() - start}
    fixed = None
    if rerun_fixed:
        fixed = run_tests(
            tree, import_root=pkg.import_root, testpaths=test_paths, select=selected, timeout_s=RUN_TIMEOUT_S
        )
    not_green = [s for s in selected if fixed is not None and fixed.outcome(s) != "passed"]
    if (fixed is not None and fixed.timed_out) or not_green:
        return {**out, "reason": f"{len(not_green)} tests not green after the fix", "seconds": time.monotonic() - start}
    messages = {s: run.results[s].get("message", "") for s in f2p}
    return {
        **out,
        "valid": True,
        "reason": "",
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "messages": messages,
        "patch": fix_patch,
        "bug_patch": git_diff(original, buggy),
        "seconds": time.monotonic() - start,
    }


def _apply_patch(files: dict[str, str], patch: str) -> dict[str, str]:
    """``patch`` (git's unified format, as :func:`git_diff` writes it) applied to ``files``."""
    from repo_env.factory.patch import apply_patch

    return apply_patch(files, patch)


def stable_test_ids(pkg: Package, cache: str | None) -> list[str]:
    """The package's test ids that are the same in every interpreter: collected twice, in
    fresh processes with two hash seeds (a test parametrized over a set gets ids that follow
    the set's order; the sandbox that grades has a seed of its own). Cached per package."""
    saved = cache_dir(cache) / "stable-ids" / f"{pkg.key}-{_h(json.dumps(pkg.to_dict(), sort_keys=True))[:12]}.json"
    if saved.is_file():
        return list(json.loads(saved.read_text(encoding="utf-8")))
    tree = fetch(pkg, cache)
    found = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree / pkg.import_root)}  # fmt: skip
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               f"--rootdir={tree}", *(f"--ignore={tree / i}" for i in pkg.ignore),
               *(str(tree / t) for t in pkg.tests)]  # fmt: skip
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=900, check=False)
        found.append({line.strip() for line in r.stdout.splitlines() if "::" in line})
    stable = sorted(found[0] & found[1])
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(stable), encoding="utf-8")
    return stable


# -- planning


def plan(pkg: Package, tree: Path, baseline: dict[str, Any], per_package: int, seed: int) -> list[dict[str, Any]]:
    """The package's candidates: sites in functions that at least two passing tests call, drawn
    round-robin over the operators; :data:`COMBINED_SHARE` of them pairs of sites in different
    functions of one module (the hard tier)."""
    rng = random.Random(_h(seed, pkg.key))
    calls: dict[str, list[str]] = baseline["calls"]
    by_op: dict[str, list[mutate.Mutation]] = defaultdict(list)
    for rel in source_files(pkg, tree):
        for m in mutate.sites(rel, (tree / rel).read_text(encoding="utf-8")):
            if len(calls.get(f"{rel}::{m.function}", [])) >= 2:
                by_op[m.operator].append(m)
    for ms in by_op.values():
        rng.shuffle(ms)
    n_combined = int(per_package * COMBINED_SHARE)
    singles: list[mutate.Mutation] = []
    ops = sorted(by_op)
    while len(singles) < per_package - n_combined and any(by_op[o] for o in ops):
        for o in ops:
            if by_op[o] and len(singles) < per_package - n_combined:
                singles.append(by_op[o].pop())
    rest = [m for o in ops for m in by_op[o]]
    rng.shuffle(rest)
    pairs: list[list[mutate.Mutation]] = []
    for a in rest:
        if len(pairs) >= n_combined:
            break
        for b in rest:
            if b.path == a.path and b.function != a.function and b.line > a.end_line:
                pairs.append([a, b])
                rest.remove(b)
                break
    out = []
    for ms in [[m] for m in singles] + pairs:
        tests: set[str] = set()
        for m in ms:
            tests.update(calls.get(f"{m.path}::{m.function}", []))
        selected = sorted(tests, key=lambda t: _h(t))[:MAX_SELECTED]
        out.append({"package": pkg.name, "mutations": [m.to_dict() for m in ms], "selected": sorted(selected)})
    return out


# -- the driver


@dataclasses.dataclass
class BuildResult:
    """What a build wrote and measured."""

    out: Path
    instances: int
    candidates: int
    seconds: float
    manifest: dict[str, Any]


Executor = Callable[[Callable[..., Any], list[tuple[Any, ...]]], Iterable[Any]]


def process_map(workers: int) -> Executor:
    """Run jobs over ``workers`` processes (at least one), yielding results as they finish.

    The processes come from a fork server, never from a fork of the caller: each job forks
    pytest again (runner.py), and a fork of a multi-threaded caller (a pytest-xdist worker with
    gRPC and anyio threads, a server) can inherit a lock another thread held and hang until
    the run's timeout: in CI, 3 of 8 candidates of the test fixture were lost so."""

    def run(fn: Callable[..., Any], jobs: list[tuple[Any, ...]]) -> Iterable[Any]:
        ctx = multiprocessing.get_context("forkserver")
        with concurrent.futures.ProcessPoolExecutor(max(1, workers), mp_context=ctx) as ex:
            futures = [ex.submit(fn, *j) for j in jobs]
            for f in concurrent.futures.as_completed(futures):
                yield f.result()

    return run


def ray_map(address: str) -> Executor:
    """Run jobs as Ray tasks on the cluster at ``address`` (one CPU each), yielding results as
    they finish. Every node needs the ``repo-env`` package (and the registries, or the cache
    of sdists under ``$REPO_FACTORY_CACHE``)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)

    def run(fn: Callable[..., Any], jobs: list[tuple[Any, ...]]) -> Iterable[Any]:
        remote = ray.remote(num_cpus=1, max_retries=1)(fn)
        pending = [remote.remote(*j) for j in jobs]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])

    return run


def build(
    out: str | os.PathLike[str],
    *,
    packages: Sequence[str] | None = None,
    per_package: int = 40,
    seed: int = 0,
    workers: int = 2,
    ray_address: str | None = None,
    cache: str | None = None,
    batch: int = 5,
    manifest: str | os.PathLike[str] = MANIFEST,
    rerun_fixed: bool = True,
    log: Callable[[str], None] = lambda s: None,
) -> BuildResult:
    """Build instances of ``packages`` (default: every pinned one) into ``out``: baselines,
    candidates, validation, then ``instances.jsonl`` and ``manifest.json``. The same seed and
    packages give the same candidates and, the tests being deterministic, the same instances."""
    start = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pkgs = load_packages(manifest, names=packages)
    allnames = [p.name for p in load_packages(manifest)]
    mapper = ray_map(ray_address) if ray_address else process_map(workers)
    for p in pkgs:  # the driver needs the trees too (planning reads the sources); also checks hashes
        fetch(p, cache)
    t0 = time.monotonic()
    baselines = {b["package"]: b for b in mapper(baseline_job, [(p.to_dict(), cache) for p in pkgs])}
    baseline_s = time.monotonic() - t0
    for name, b in sorted(baselines.items()):
        n_pass, n_fn = len(b["passing"]), len(b["calls"])
        log(f"baseline {name}: {n_pass}/{b['tests']} passing, {n_fn} functions, {b['seconds']:.1f}s")
    jobs = []
    for p in pkgs:
        stable = set(stable_test_ids(p, cache))
        base = baselines[p.name]
        base = {**base, "calls": {f: [t for t in ts if t in stable] for f, ts in base["calls"].items()}}
        cands = plan(p, fetch(p, cache), base, per_package, seed)
        for i in range(0, len(cands), batch):
            jobs.append((p.to_dict(), cache, cands[i : i + batch], rerun_fixed))
    n_candidates = sum(len(j[2]) for j in jobs)
    log(f"{n_candidates} candidates in {len(jobs)} jobs")
    t1 = time.monotonic()
    results: list[dict[str, Any]] = []
    reasons: dict[str, int] = defaultdict(int)
    for done in mapper(validate_job, jobs):
        results.extend(done)
        for r in done:
            reasons["valid" if r["valid"] else r["reason"].split(":")[0]] += 1
        log(f"validated {len(results)}/{n_candidates}: {sum(r['valid'] for r in results)} valid")
    validate_s = time.monotonic() - t1
    by_pkg = {p.name: p for p in pkgs}
    instances = []
    for r in sorted(results, key=lambda r: (r["package"], _h(json.dumps(r["mutations"], sort_keys=True)))):
        if not r["valid"]:
            continue
        inst = make_instance(by_pkg[r["package"]], fetch(by_pkg[r["package"]], cache), r, allnames)
        if inst is None:
            reasons["issue text would show the patch"] += 1
            reasons["valid"] -= 1
            continue
        instances.append(inst)
    lines = "".join(json.dumps(i, sort_keys=True) + "\n" for i in instances)
    (out / "instances.jsonl").write_text(lines, encoding="utf-8")
    seconds = time.monotonic() - start
    cpu_s = sum(r["seconds"] for r in results)
    manifest = {
        "factory_version": FACTORY_VERSION,
        "seed": seed,
        "per_package": per_package,
        "packages": [{**p.to_dict(), "split": split_of(p.name, allnames)} for p in pkgs],
        "instances": len(instances),
        "instances_sha256": hashlib.sha256(lines.encode()).hexdigest(),
        "splits": {s: sum(i["split"] == s for i in instances) for s in ("train", "validation", "test")},
        "tiers": {t: sum(i["tier"] == t for i in instances) for t in ("easy", "medium", "hard")},
        "operators": _count(op for i in instances for op in i["operators"]),
        "instances_per_package": _count(i["package"] for i in instances),
        "run": {
            "candidates": n_candidates,
            "valid": len(instances),
            "validation_rate": round(len(instances) / n_candidates, 4) if n_candidates else 0.0,
            "reasons": dict(sorted(reasons.items())),
            "workers": (ray_address and "ray") or workers,
            "rerun_fixed": rerun_fixed,
            "baseline_seconds": round(baseline_s, 1),
            "validate_seconds": round(validate_s, 1),
            "total_seconds": round(seconds, 1),
            "worker_seconds_per_candidate": round(cpu_s / n_candidates, 2) if n_candidates else 0.0,
            "wall_seconds_per_instance": round(validate_s / len(instances), 2) if instances else 0.0,
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return BuildResult(out, len(instances), n_candidates, seconds, manifest)


def _count(items: Iterable[str]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for i in items:
        c[i] += 1
    return dict(sorted(c.items()))


def make_instance(pkg: Package, tree: Path, r: dict[str, Any], allnames: Sequence[str]) -> dict[str, Any] | None:
    """The instance record of a validated candidate; None when its issue text would show the
    planted code (it is then dropped, never shipped with the patch in its text)."""
    muts = [mutate.Mutation.from_dict(m) for m in r["mutations"]]
    iid = f"{pkg.name}__{_h(pkg.key, r['bug_patch'])[:10]}"
    text = issue_text(iid, tree, r["fail_to_pass"], r["messages"])
    if leaks_patch(text, r["bug_patch"]):
        return None
    changed = sum(1 for line in r["patch"].splitlines() if line.startswith("-") and not line.startswith("---"))
    files = sorted({m.path for m in muts})
    functions = list(mutate.enclosing_functions(muts))
    return {
        "id": iid,
        "package": pkg.name,
        "version": pkg.version,
        "split": split_of(pkg.name, allnames),
        "tier": tier_of(max(changed, 1), len(functions), len(files), len(r["fail_to_pass"])),
        "operators": [m.operator for m in muts],
        "files": files,
        "functions": functions,
        "mutations": r["mutations"],
        "issue": text,
        "patch": r["patch"],
        "fail_to_pass": r["fail_to_pass"],
        "pass_to_pass": r["pass_to_pass"],
    }


def merge(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    check_ids: bool = True,
    cache: str | None = None,
) -> dict[str, Any]:
    """One set from several built ones (builds of other packages, or more candidates of the same
    ones): the instances of all (an id twice is one instance), their packages, the counts again,
    and each build's figures under ``runs`` with their totals under ``run``. With
    ``check_ids``, an instance naming a test whose id is not stable across interpreters
    (:func:`stable_test_ids`) is left out (counted as ``unstable_ids``). Returns the manifest
    written to ``out``."""
    from repo_env.factory.instances import load_instances

    by_id: dict[str, dict[str, Any]] = {}
    packages: dict[str, dict[str, Any]] = {}
    runs = []
    unstable = 0
    stable: dict[str, set[str]] = {}
    for src in sources:
        s = load_instances(src)
        for i in s:
            if check_ids:
                if i.package not in stable:
                    stable[i.package] = set(stable_test_ids(s.package(i.package), cache))
                if not set(i.fail_to_pass) | set(i.pass_to_pass) <= stable[i.package]:
                    unstable += 1
                    continue
            by_id.setdefault(i.id, i.to_dict())
        for p in s.manifest.get("packages", []):
            packages.setdefault(p["name"], p)
        per = s.manifest.get("per_package")
        runs.append({"seed": s.manifest.get("seed"), "per_package": per if isinstance(per, int) else None,
                     "packages": sorted({i.package for i in s}), **s.manifest.get("run", {})})  # fmt: skip
    instances = sorted(by_id.values(), key=lambda i: (i["package"], i["id"]))
    lines = "".join(json.dumps(i, sort_keys=True) + "\n" for i in instances)
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    (o / "instances.jsonl").write_text(lines, encoding="utf-8")
    candidates = sum(r.get("candidates", 0) for r in runs)
    validate_s = sum(r.get("validate_seconds", 0.0) for r in runs)
    manifest = {
        "factory_version": FACTORY_VERSION,
        "packages": [packages[n] for n in sorted(packages)],
        "instances": len(instances),
        "instances_sha256": hashlib.sha256(lines.encode()).hexdigest(),
        "splits": {s: sum(i["split"] == s for i in instances) for s in ("train", "validation", "test")},
        "tiers": {t: sum(i["tier"] == t for i in instances) for t in ("easy", "medium", "hard")},
        "operators": _count(op for i in instances for op in i["operators"]),
        "instances_per_package": _count(i["package"] for i in instances),
        "runs": runs,
        "run": {
            "candidates": candidates,
            "valid": len(instances),
            "validation_rate": round(len(instances) / candidates, 4) if candidates else 0.0,
            "baseline_seconds": round(sum(r.get("baseline_seconds", 0.0) for r in runs), 1),
            "validate_seconds": round(validate_s, 1),
            "total_seconds": round(sum(r.get("total_seconds", 0.0) for r in runs), 1),
            "wall_seconds_per_instance": round(validate_s / len(instances), 2) if instances else 0.0,
            "unstable_ids": unstable,
        },
    }
    (o / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest
