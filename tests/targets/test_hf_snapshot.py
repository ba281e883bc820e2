"""The model's Hub snapshot before serving: renamed repositories, the cache directory as
huggingface_hub resolves it, the access check's messages (huggingface_hub's own exception
classes, raised by a fake), the offline look-up against a cache made here (the real
``snapshot_download`` with ``local_files_only``), the completeness check. No test reaches the Hub:
every socket connection fails."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from buildspecs import make_hub_snapshot as make_snapshot
from huggingface_hub.utils import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

from pdtrt.errors import BuildError
from pdtrt.targets import hf_snapshot
from pdtrt.targets.hf_snapshot import HubApi

OLD, NEW = "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B"
REV = "a" * 40  # make_snapshot's revision


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise OSError("tests must not reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def fake_api(*, token: str | None = None, access: BaseException | None = None,
             download: Path | BaseException | None = None, calls: list | None = None) -> HubApi:
    def auth_check(repo_id: str) -> None:
        if calls is not None:
            calls.append(("auth_check", repo_id))
        if access is not None:
            raise access

    def snapshot_download(repo_id: str, **kw) -> str:
        if calls is not None:
            calls.append(("snapshot_download", repo_id, kw["local_files_only"]))
        kw["progress"]("1/2 files")
        if isinstance(download, BaseException):
            raise download
        assert download is not None
        return str(download)

    return HubApi(get_token=lambda: token, auth_check=auth_check,
                  snapshot_download=snapshot_download)


@pytest.mark.parametrize(("name", "repo_id"), [
    (OLD, NEW),
    ("meta-llama/Meta-Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
    (NEW, NEW),
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
], ids=["renamed-8b", "renamed-70b", "current", "never-renamed"])
def test_hub_repo_id(name, repo_id):
    assert hf_snapshot.hub_repo_id(name) == repo_id


@pytest.mark.parametrize("env", [
    {"HF_HUB_CACHE": "/c/hub-cache", "HF_HOME": "/c/home"},
    {"HUGGINGFACE_HUB_CACHE": "/c/legacy", "HF_HOME": "/c/home"},
    {"HF_HOME": "/c/home", "XDG_CACHE_HOME": "/c/xdg"},
    {"XDG_CACHE_HOME": "/c/xdg"},
    {},
], ids=["hf-hub-cache", "legacy", "hf-home", "xdg", "default"])
def test_cache_dir_is_huggingface_hubs(env, tmp_path, monkeypatch):
    """Compared with huggingface_hub.constants.HF_HUB_CACHE, read in a fresh interpreter."""
    monkeypatch.setenv("HOME", str(tmp_path))  # ~ of both
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **env}
    theirs = subprocess.run(
        [sys.executable, "-c", "from huggingface_hub import constants; "
         "print(constants.HF_HUB_CACHE)"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert str(hf_snapshot.hub_cache_dir(env)) == theirs


@pytest.mark.parametrize(("env", "expected"), [
    ({"HF_HUB_OFFLINE": "1"}, True), ({"HF_HUB_OFFLINE": "true"}, True),
    ({"TRANSFORMERS_OFFLINE": "YES"}, True), ({"HF_HUB_OFFLINE": "0"}, False), ({}, False),
], ids=["1", "true", "transformers", "0", "unset"])
def test_offline(env, expected):
    assert hf_snapshot.offline(env) is expected


def _response(status: int) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    return response


@pytest.mark.parametrize(("token", "raised", "message"), [
    (None, GatedRepoError("401 Client Error.", response=_response(401)),
     f"{NEW} is a gated repository on the Hugging Face Hub, and no token is set (HF_TOKEN, "
     "or `hf auth login`)"),
    ("hf_x", GatedRepoError("403 Client Error.", response=_response(403)),
     f"{NEW} is a gated repository on the Hugging Face Hub, and the token set here has no "
     "access to it"),
    (None, RepositoryNotFoundError("401 Client Error.", response=_response(401)),
     f"{NEW} was not found on the Hugging Face Hub (a private or gated repository answers "
     "the same without a token)"),
    ("hf_x", HfHubHTTPError("401 Client Error: Invalid credentials", response=_response(401)),
     f"the Hugging Face Hub refused {NEW} (HTTP 401): 401 Client Error: Invalid credentials"),
    (None, requests.ConnectionError("Max retries exceeded"),
     f"cannot reach the Hugging Face Hub for {NEW}: Max retries exceeded"),
], ids=["gated-no-token", "gated-no-access", "not-found", "bad-token", "no-network"])
def test_access_errors_name_the_repository(token, raised, message):
    with pytest.raises(BuildError) as err:
        hf_snapshot.check_access(NEW, fake_api(token=token, access=raised))
    assert err.value.message == message
    assert err.value.hint and "HF_HUB_OFFLINE=1" in err.value.hint
    if isinstance(raised, GatedRepoError):
        assert f"https://huggingface.co/{NEW}" in err.value.hint


def test_an_unexpected_error_keeps_its_traceback():
    with pytest.raises(ValueError):
        hf_snapshot.check_access(NEW, fake_api(access=ValueError("a bug")))


def test_offline_finds_the_current_name_with_the_real_library(tmp_path):
    snap = make_snapshot(tmp_path / "hub", NEW)
    record = hf_snapshot.resolve_snapshot(OLD, cache_dir=tmp_path / "hub", is_offline=True,
                                          api=hf_snapshot.hub_api(), progress=print)
    assert (record.repo_id, record.snapshot, record.revision) == (NEW, snap, REV)
    assert record.repo_folder == tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B"
    assert record.offline


def test_offline_falls_back_to_the_name_before_the_rename(tmp_path):
    snap = make_snapshot(tmp_path / "hub", OLD)
    record = hf_snapshot.resolve_snapshot(OLD, cache_dir=tmp_path / "hub", is_offline=True,
                                          api=hf_snapshot.hub_api(), progress=print)
    assert (record.repo_id, record.snapshot) == (OLD, snap)


def test_offline_without_a_snapshot_says_where_it_looked(tmp_path):
    with pytest.raises(BuildError) as err:
        hf_snapshot.resolve_snapshot(OLD, cache_dir=tmp_path / "hub", is_offline=True,
                                     api=hf_snapshot.hub_api(), progress=print)
    hub = tmp_path / "hub"
    assert err.value.message == (
        f"HF_HUB_OFFLINE is set and this host's Hugging Face cache has no snapshot of {NEW} "
        f"(looked in {hub}/models--meta-llama--Llama-3.1-8B and "
        f"{hub}/models--meta-llama--Meta-Llama-3.1-8B)")


def test_an_interrupted_snapshot_is_refused(tmp_path):
    make_snapshot(tmp_path / "hub", NEW, shards=4, present=2)
    with pytest.raises(BuildError) as err:
        hf_snapshot.resolve_snapshot(NEW, cache_dir=tmp_path / "hub", is_offline=True,
                                     api=hf_snapshot.hub_api(), progress=print)
    assert "lacks 2 of the 4 weight files its model.safetensors.index.json names " \
        "(model-00003-of-00004.safetensors, model-00004-of-00004.safetensors)" \
        in err.value.message


def test_online_downloads_the_current_name_without_original(tmp_path):
    snap = make_snapshot(tmp_path / "hub", NEW)
    calls: list = []
    lines: list[str] = []
    api = fake_api(download=snap, calls=calls)
    record = hf_snapshot.resolve_snapshot(OLD, cache_dir=tmp_path / "hub", is_offline=False,
                                          api=api, progress=lines.append)
    assert calls == [("snapshot_download", NEW, False)]
    assert record.snapshot == snap and not record.offline
    assert lines == [f"downloading {NEW} into {tmp_path / 'hub'}", "1/2 files"]
    assert hf_snapshot.IGNORE_PATTERNS == ("original/*",)


def test_a_download_refused_midway_names_the_repository(tmp_path):
    api = fake_api(download=GatedRepoError("403", response=_response(403)), token="hf_x")
    with pytest.raises(BuildError, match=f"^{NEW} is a gated repository"):
        hf_snapshot.resolve_snapshot(NEW, cache_dir=tmp_path, is_offline=False, api=api,
                                     progress=print)


def test_record_round_trip_and_a_missing_snapshot(tmp_path):
    snap = make_snapshot(tmp_path / "hub", NEW)
    record = hf_snapshot.resolve_snapshot(NEW, cache_dir=tmp_path / "hub", is_offline=True,
                                          api=hf_snapshot.hub_api(), progress=print)
    written = hf_snapshot.write_record(tmp_path / "weights", record)
    assert not list((tmp_path / "weights").glob(".*.tmp"))
    assert hf_snapshot.read_record(tmp_path / "weights") == record
    assert hf_snapshot.recorded_snapshot(NEW, tmp_path / "weights") == record
    assert hf_snapshot.recorded_snapshot(OLD, tmp_path / "weights") is None  # another model
    inputs = hf_snapshot.weights_inputs(NEW, tmp_path / "weights", {})
    assert inputs["stale"] == ""
    for blob in (snap.parent.parent / "blobs").iterdir():  # the cache was cleaned
        blob.unlink()
    assert hf_snapshot.recorded_snapshot(NEW, tmp_path / "weights") is None
    assert hf_snapshot.weights_inputs(NEW, tmp_path / "weights", {})["stale"] == str(snap)
    written.write_text("{")
    assert hf_snapshot.read_record(tmp_path / "weights") is None
