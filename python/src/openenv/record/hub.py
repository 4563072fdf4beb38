"""Upload a record file as a Hugging Face dataset repository (``openenv collect --push-to-hub``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

__all__ = ["PushPlan", "push_to_hub"]


@dataclasses.dataclass
class PushPlan:
    """What a push does: the dataset repository, the files (path in repo -> local file) and
    the commit message. ``dry_run`` plans are never sent."""

    repo_id: str
    files: dict[str, str]
    commit_message: str
    private: bool
    dry_run: bool


def _card(path: Path, repo_id: str) -> str:
    return (
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        f"  - split: train\n    path: data/{path.name}\ntags:\n- openenv\n- rollouts\n---\n\n"
        f"# {repo_id}\n\nRollouts recorded by `openenv collect` (one row per time step; the "
        "observation, action, reward breakdown and metadata columns hold JSON text).\n"
    )


def push_to_hub(
    path: str | Path, repo_id: str, *, private: bool = True, dry_run: bool = False, token: str | None = None
) -> PushPlan:
    """Create (if needed) the dataset repository ``repo_id`` and commit the record file under
    ``data/`` with a dataset card. ``dry_run`` checks the file and returns the plan without
    any network access."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no record file to push")
    card = p.with_name(p.name + ".README.md")
    card.write_text(_card(p, repo_id), encoding="utf-8")
    plan = PushPlan(
        repo_id,
        {f"data/{p.name}": str(p), "README.md": str(card)},
        f"openenv collect: {p.name}",
        private,
        dry_run,
    )
    if dry_run:
        return plan
    from huggingface_hub import CommitOperationAdd, HfApi

    api: Any = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.create_commit(
        repo_id,
        [CommitOperationAdd(path_in_repo=k, path_or_fileobj=v) for k, v in plan.files.items()],
        commit_message=plan.commit_message,
        repo_type="dataset",
    )
    return plan
