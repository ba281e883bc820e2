"""Weights before serving: the model's Hugging Face snapshot, resolved by ``pdtrt build``.

A trtllm-1.2 engine model builds ``tensorrt_llm.LLM(model=<llm_model>)`` when Triton loads it,
and pre/postprocessing load the tokenizer from ``tokenizer_dir``. Given a Hub name, every host
would download the checkpoint (16 GB for Llama-3.1-8B) during the model load, with whatever
token and offline setting reached the container (``sudo`` drops ``HF_TOKEN``), and a gated
repository fails only then. So when ``model.path`` is not set, ``pdtrt build`` resolves the
model first, in a step both phases share:

- the name: a renamed repository's current name (``pdtrt/data/hub_names.yaml``, with sources);
- before any step runs, unless ``HF_HUB_OFFLINE`` is set: a token check (``auth_check``) that
  names the gated repository and what to do;
- the snapshot: downloaded into this host's Hugging Face cache (``HF_HUB_CACHE``, else
  ``HF_HOME/hub``, as huggingface_hub resolves it), without Meta's ``original/`` consolidated
  weights; with ``HF_HUB_OFFLINE=1`` only looked up there (current name, then the old one);
- checked (``config.json`` and every weight shard its index names) and recorded in
  ``engines/<name>/weights/weights.json``.

``pdtrt repo`` then points the engine models' ``llm_model`` and the tokenizer at that snapshot
(:func:`recorded_snapshot`), ``launch.sh`` mounts the model's cache folder (the snapshot's files
are links into its ``blobs/``) and the container gets ``HF_HUB_OFFLINE=1``.

Nothing half-written: huggingface_hub downloads each file to ``blobs/<sha>.incomplete`` and
renames it when complete, then links it into the snapshot; an interrupted snapshot can lack
files, which the check above catches before the record is written (atomically). Every call
into huggingface_hub goes through :class:`HubApi` (:func:`hub_api` builds the real one), so tests
run without the Hub.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pdtrt import envvars
from pdtrt.errors import BuildError, ToolchainError
from pdtrt.yamlio import write_atomic

__all__ = ["IGNORE_PATTERNS", "RECORD_FILE", "HubApi", "WeightsRecord", "build_weights",
           "check_access",
           "check_snapshot", "hub_api", "hub_cache_dir", "hub_repo_id", "offline",
           "read_record", "recorded_snapshot", "repo_folder", "resolve_snapshot", "weights_inputs",
           "write_record"]

RECORD_FILE = "weights.json"
IGNORE_PATTERNS = ("original/*",)
"""Not downloaded: Meta's repositories carry their native consolidated checkpoint under
``original/`` (another full copy of the weights, which neither the LLM API nor transformers
reads)."""
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES


@cache
def _renamed() -> dict[str, str]:
    text = resources.files("pdtrt").joinpath("data/hub_names.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text)["renamed"])


def hub_repo_id(name: str) -> str:
    """The Hub repository ``name`` lives in today (``name`` itself unless it was renamed)."""
    return _renamed().get(name, name)


def offline(environ: Mapping[str, str]) -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set true, as huggingface_hub reads it."""
    value = environ.get(envvars.HF_HUB_OFFLINE) or environ.get(envvars.TRANSFORMERS_OFFLINE)
    return (value or "").upper() in _TRUE


def hub_cache_dir(environ: Mapping[str, str]) -> Path:
    """This host's Hub cache, resolved as ``huggingface_hub/constants.py`` (0.36) does:
    ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``,
    ``XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    def expand(path: str) -> str:
        return os.path.expandvars(os.path.expanduser(path))

    home = expand(environ.get(envvars.HF_HOME) or os.path.join(
        environ.get(envvars.XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface"))
    hub = (environ.get(envvars.HF_HUB_CACHE) or environ.get(envvars.HUGGINGFACE_HUB_CACHE)
           or os.path.join(home, "hub"))
    return Path(os.path.abspath(expand(hub)))


def repo_folder(cache_dir: Path, repo_id: str) -> Path:
    """The model's folder in the cache (``models--<org>--<name>``: refs, blobs, snapshots)."""
    return cache_dir / ("models--" + repo_id.replace("/", "--"))


@dataclass(frozen=True, kw_only=True)
class HubApi:
    """The three huggingface_hub calls pdtrt makes; tests pass fakes.

    ``get_token()``: the token huggingface_hub would send (``HF_TOKEN``, else the saved one);
    ``auth_check(repo_id)``: raises huggingface_hub's ``GatedRepoError`` /
    ``RepositoryNotFoundError`` / ``HfHubHTTPError`` / a connection error;
    ``snapshot_download(repo_id, cache_dir=, local_files_only=, ignore_patterns=, progress=)``:
    the snapshot's directory (``progress`` receives one line per finished file)."""

    get_token: Callable[[], str | None]
    auth_check: Callable[[str], None]
    snapshot_download: Callable[..., str]


def hub_api() -> HubApi:
    """The real huggingface_hub; raises :class:`ToolchainError` when it is not installed."""
    try:
        import huggingface_hub
        from tqdm.auto import tqdm
    except ImportError:
        raise ToolchainError(
            "pdtrt build resolves the model's weights with huggingface_hub, which is not "
            "installed here",
            hint="run inside the target's container (it has huggingface_hub), or "
            "`pip install huggingface_hub`, or set model.path to a local checkpoint") from None

    def download(repo_id: str, *, cache_dir: Path, local_files_only: bool,
                 ignore_patterns: list[str], progress: Callable[[str], None]) -> str:
        class Files(tqdm):  # type: ignore[misc,valid-type]  # the files-done bar -> progress
            def update(self, n: float | None = 1) -> bool | None:
                done = super().update(n)
                progress(f"{self.n}/{self.total} files of {repo_id}")
                return done

        return str(huggingface_hub.snapshot_download(
            repo_id, cache_dir=cache_dir, local_files_only=local_files_only,
            ignore_patterns=ignore_patterns, tqdm_class=Files))

    return HubApi(get_token=huggingface_hub.get_token,
                  auth_check=lambda repo_id: huggingface_hub.auth_check(repo_id),
                  snapshot_download=download)


def _hub_errors() -> dict[str, type[BaseException]]:
    try:
        from huggingface_hub import utils
    except ImportError:
        return {}
    return {"gated": utils.GatedRepoError, "missing": utils.RepositoryNotFoundError,
            "http": utils.HfHubHTTPError, "local": utils.LocalEntryNotFoundError}


def _hub_error(exc: BaseException, repo_id: str, *, token: str | None) -> BuildError | None:
    """``exc`` (raised by huggingface_hub) as the one-line error pdtrt shows, else None."""
    kinds = _hub_errors()
    page = f"https://huggingface.co/{repo_id}"
    fallback = ("or download it where the Hub is reachable, copy the cache here and set "
                "HF_HUB_OFFLINE=1, or set model.path to a local checkpoint")
    if "gated" in kinds and isinstance(exc, kinds["gated"]):
        if token is None:
            return BuildError(
                f"{repo_id} is a gated repository on the Hugging Face Hub, and no token is set "
                "(HF_TOKEN, or `hf auth login`)",
                hint=f"accept its license at {page} with your account, then export "
                "HF_TOKEN=hf_... (sudo drops it: use `sudo -E` or no sudo); " + fallback)
        return BuildError(
            f"{repo_id} is a gated repository on the Hugging Face Hub, and the token set here "
            "has no access to it",
            hint=f"request access at {page} with the account of that token and wait for the "
            "grant; " + fallback)
    if "missing" in kinds and isinstance(exc, kinds["missing"]):
        return BuildError(
            f"{repo_id} was not found on the Hugging Face Hub"
            + (" (a private or gated repository answers the same without a token)"
               if token is None else ""),
            hint="check model.name (renamed repositories: pdtrt/data/hub_names.yaml), set "
            "HF_TOKEN for a private one, " + fallback)
    if "http" in kinds and isinstance(exc, kinds["http"]):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return BuildError(f"the Hugging Face Hub refused {repo_id} (HTTP {status}): "
                          f"{str(exc).splitlines()[0]}",
                          hint="check HF_TOKEN (an invalid token is refused), " + fallback)
    if isinstance(exc, OSError):  # requests' connection errors are OSErrors
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        return BuildError(f"cannot reach the Hugging Face Hub for {repo_id}: "
                          f"{detail[:160]}{'...' if len(detail) > 160 else ''}",
                          hint="check the network or proxy (HTTPS_PROXY), " + fallback)
    return None


def check_access(repo_id: str, api: HubApi) -> None:
    """Raise :class:`BuildError` unless this host's token may download ``repo_id``."""
    token = api.get_token()
    try:
        api.auth_check(repo_id)
    except Exception as exc:
        error = _hub_error(exc, repo_id, token=token)
        if error is None:
            raise
        raise error from None


def check_snapshot(path: Path) -> str | None:
    """Why ``path`` is not a complete checkpoint (None: it is): ``config.json``, and every
    shard named by the weights index (else some ``*.safetensors`` / ``*.bin``). Links into
    ``blobs/`` count only when their file is there."""
    if not (path / "config.json").is_file():
        return f"{path} has no config.json"
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (path / index).is_file():
            try:
                shards = set(json.loads((path / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                return f"{path / index} is unreadable ({exc})"
            missing = sorted(s for s in shards if not (path / s).is_file())
            return (f"{path} lacks {len(missing)} of the {len(shards)} weight files its "
                    f"{index} names ({', '.join(missing[:3])}{', ...' if missing[3:] else ''})"
                    if missing else None)
    if not any(any(path.glob(g)) for g in ("*.safetensors", "*.bin")):
        return f"{path} has a config.json but no weights (*.safetensors, *.bin)"
    return None


@dataclass(frozen=True, kw_only=True)
class WeightsRecord:
    """What ``weights.json`` says: the spec's model, the repository resolved and its
    snapshot, and the cache folder the serving container must mount."""

    model: str  # model.name in the spec
    repo_id: str  # the Hub repository the snapshot came from
    revision: str  # the snapshot's commit
    snapshot: Path
    repo_folder: Path  # models--<org>--<name>: mounted whole (snapshot files link to blobs/)
    offline: bool  # found in the cache with HF_HUB_OFFLINE, not downloaded

    def to_dict(self) -> dict[str, object]:
        return {"model": self.model, "repo_id": self.repo_id, "revision": self.revision,
                "snapshot": str(self.snapshot), "repo_folder": str(self.repo_folder),
                "offline": self.offline}


def read_record(weights_dir: Path) -> WeightsRecord | None:
    """The record ``pdtrt build`` wrote into ``weights_dir``, or None (none, unreadable)."""
    try:
        data: dict[str, Any] = json.loads((weights_dir / RECORD_FILE).read_text())
        return WeightsRecord(model=data["model"], repo_id=data["repo_id"],
                             revision=data["revision"], snapshot=Path(data["snapshot"]),
                             repo_folder=Path(data["repo_folder"]),
                             offline=bool(data["offline"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resolve_snapshot(model: str, *, cache_dir: Path, is_offline: bool, api: HubApi,
                     progress: Callable[[str], None]) -> WeightsRecord:
    """Download (or, offline, find) ``model``'s snapshot in ``cache_dir`` and check it.

    Raises :class:`BuildError` naming the repository and what to do."""
    repo_id = hub_repo_id(model)
    if is_offline:
        found = _find_offline(model, repo_id, cache_dir=cache_dir, api=api)
    else:
        progress(f"downloading {repo_id} into {cache_dir}")
        try:
            found = repo_id, Path(api.snapshot_download(
                repo_id, cache_dir=cache_dir, local_files_only=False,
                ignore_patterns=list(IGNORE_PATTERNS), progress=progress))
        except Exception as exc:
            error = _hub_error(exc, repo_id, token=api.get_token())
            if error is None:
                raise
            raise error from None
    source, path = found
    problem = check_snapshot(path)
    if problem is not None:
        raise BuildError(
            f"the snapshot of {source} is incomplete: {problem}",
            hint="run the download again where the Hub is reachable (finished files are kept: "
            f"`hf download {source} --exclude 'original/*'`), then pdtrt build")
    return WeightsRecord(model=model, repo_id=source, revision=path.name, snapshot=path,
                         repo_folder=repo_folder(cache_dir, source), offline=is_offline)


def _find_offline(model: str, repo_id: str, *, cache_dir: Path, api: HubApi
                  ) -> tuple[str, Path]:
    """The cached snapshot of ``repo_id``, else of ``model`` (the name before a rename)."""
    local = _hub_errors().get("local", FileNotFoundError)
    names = list(dict.fromkeys((repo_id, model)))
    for name in names:
        try:
            return name, Path(api.snapshot_download(
                name, cache_dir=cache_dir, local_files_only=True,
                ignore_patterns=list(IGNORE_PATTERNS), progress=lambda _line: None))
        except local:
            continue
    looked = " and ".join(str(repo_folder(cache_dir, n)) for n in names)
    raise BuildError(
        f"HF_HUB_OFFLINE is set and this host's Hugging Face cache has no snapshot of "
        f"{repo_id} (looked in {looked})",
        hint=f"download it where the Hub is reachable (`hf download {repo_id} --exclude "
        "'original/*'`) and copy that cache's models--* folder here, or set HF_HUB_CACHE to "
        "the cache that has it, or set model.path")


def write_record(weights_dir: Path, record: WeightsRecord) -> Path:
    """Write ``weights.json`` atomically; its path."""
    weights_dir.mkdir(parents=True, exist_ok=True)
    path = weights_dir / RECORD_FILE
    write_atomic(path, json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")
    return path


def recorded_snapshot(model: str, weights_dir: Path) -> WeightsRecord | None:
    """The snapshot ``pdtrt build`` recorded in ``weights_dir`` for ``model`` (``model.name``),
    when it is still complete on this host; else None."""
    record = read_record(weights_dir)
    if record is None or record.model != model or check_snapshot(record.snapshot) is not None:
        return None
    return record


def build_weights(model: str, weights_dir: Path, environ: Mapping[str, str], *,
                  progress: Callable[[str], None]) -> str:
    """``pdtrt build``'s step: check access (online), download or find the snapshot, check
    it, record it in ``weights_dir``; the line that says what happened. Raises
    :class:`BuildError` (:class:`ToolchainError` without huggingface_hub)."""
    is_offline, cache_dir = offline(environ), hub_cache_dir(environ)
    api = hub_api()
    if not is_offline:  # a gated repository without a token fails here, before any download
        check_access(hub_repo_id(model), api)
    record = resolve_snapshot(model, cache_dir=cache_dir, is_offline=is_offline, api=api,
                              progress=progress)
    written = write_record(weights_dir, record)
    line = (f"{record.repo_id} ({'found offline' if is_offline else 'downloaded'}): "
            f"{record.snapshot}; recorded in {written}")
    progress(line)
    return line


def weights_inputs(model: str, weights_dir: Path, environ: Mapping[str, str]
                   ) -> dict[str, str]:
    """What decides whether the step runs again: the repository, the cache, and a record
    whose snapshot went missing on this host (a cleaned cache)."""
    record = read_record(weights_dir)
    stale = record is not None and recorded_snapshot(model, weights_dir) is None
    return {"repo_id": hub_repo_id(model), "cache_dir": str(hub_cache_dir(environ)),
            "stale": str(record.snapshot) if stale and record else ""}
