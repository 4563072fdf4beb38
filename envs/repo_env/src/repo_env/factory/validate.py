"""Re-validating built instances from their records alone: the bug planted in the pristine
tree makes every ``fail_to_pass`` test fail and every ``pass_to_pass`` test pass; the reference
patch applied to the buggy files gives the pristine ones back, on which all of them pass."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from repo_env.factory import mutate
from repo_env.factory.build import RUN_TIMEOUT_S, _work_tree, process_map, ray_map
from repo_env.factory.instances import Instance, InstanceSet, package_of
from repo_env.factory.patch import apply_patch
from repo_env.factory.runner import run_tests
from repo_env.factory.sources import Package

__all__ = ["revalidate", "revalidate_job"]


def revalidate_job(pkg_dict: dict[str, Any], cache: str | None, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Re-validate instances of one package (their records); each comes back as ``{"id", "ok",
    "reason", "seconds"}``."""
    pkg = Package(**{k: tuple(v) if isinstance(v, list) else v for k, v in pkg_dict.items()})
    tree = _work_tree(pkg, cache)
    return [_one(pkg, tree, Instance.from_dict(r)) for r in records]


def _one(pkg: Package, tree: Any, inst: Instance) -> dict[str, Any]:
    start = time.monotonic()

    def result(ok: bool, reason: str = "") -> dict[str, Any]:
        return {"id": inst.id, "ok": ok, "reason": reason, "seconds": time.monotonic() - start}

    muts = [mutate.Mutation.from_dict(m) for m in inst.mutations]
    paths = list(dict.fromkeys(m.path for m in muts))
    original = {p: (tree / p).read_text(encoding="utf-8") for p in paths}
    try:
        buggy = {p: mutate.apply(original[p], [m for m in muts if m.path == p]) for p in paths}
        restored = apply_patch(buggy, inst.patch)
    except (ValueError, SyntaxError) as e:  # PatchError is a ValueError
        return result(False, f"does not apply: {e}")
    if restored != original:
        return result(False, "the reference patch does not restore the pristine files")
    selected = [*inst.fail_to_pass, *inst.pass_to_pass]
    testpaths = sorted({s.split("::", 1)[0] for s in selected})
    before = run_tests(tree, import_root=pkg.import_root, testpaths=testpaths, select=selected, files=buggy,
                       timeout_s=RUN_TIMEOUT_S)  # fmt: skip
    wrong = [t for t in inst.fail_to_pass if before.outcome(t) not in ("failed", "error")]
    wrong += [t for t in inst.pass_to_pass if before.outcome(t) != "passed"]
    if before.timed_out or wrong:
        return result(False, f"with the bug: {len(wrong)} tests not as recorded (e.g. {wrong[:1]})")
    after = run_tests(tree, import_root=pkg.import_root, testpaths=testpaths, select=selected, files=restored,
                      timeout_s=RUN_TIMEOUT_S)  # fmt: skip
    red = [t for t in selected if after.outcome(t) != "passed"]
    if after.timed_out or red:
        return result(False, f"with the reference patch: {len(red)} tests not passing (e.g. {red[:1]})")
    return result(True)


def revalidate(
    instances: Sequence[Instance],
    *,
    packages: InstanceSet | None = None,
    workers: int = 2,
    ray_address: str | None = None,
    cache: str | None = None,
    batch: int = 5,
    log: Callable[[str], None] = lambda s: None,
) -> list[dict[str, Any]]:
    """Re-validate ``instances`` over processes (or the Ray cluster at ``ray_address``); their
    packages as ``packages`` (the set they came from) records them, else the pinned ones."""
    by_pkg: dict[str, list[Instance]] = defaultdict(list)
    for i in instances:
        by_pkg[i.package].append(i)
    jobs = []
    for _, items in sorted(by_pkg.items()):
        pkg = package_of(items[0], packages)
        for k in range(0, len(items), batch):
            jobs.append((pkg.to_dict(), cache, [i.to_dict() for i in items[k : k + batch]]))
    mapper = ray_map(ray_address) if ray_address else process_map(workers)
    out: list[dict[str, Any]] = []
    for done in mapper(revalidate_job, jobs):
        out.extend(done)
        log(f"re-validated {len(out)}/{len(instances)}: {sum(r['ok'] for r in out)} ok")
    return sorted(out, key=lambda r: r["id"])
