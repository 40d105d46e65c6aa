"""Registry fetches against a local HTTP server on loopback (never the internet)."""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import threading
from functools import partial
from pathlib import Path

import pytest

import probes
from probes.corpora import read_treebank
from probes.corpora.registry import (
    REGISTRY_PATH,
    SAMPLE_DIR,
    CachedFile,
    add_to_cache,
    cache_status,
    fetch_treebank,
    is_registry_name,
    load_registry,
    resolve_treebank,
)
from probes.errors import ConfigError, InputError

CONLLU = "# sent_id = 1\n1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n"


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "tb-dev.conllu").write_text(CONLLU, encoding="utf-8")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _registry(url: str, sha: str | None) -> dict:
    return {"treebanks": {"tb": {"files": {"dev": {"url": f"{url}/tb-dev.conllu", "sha256": sha}}}}}


def test_shipped_registry_lists_ewt_gum_pud():
    reg = load_registry()
    assert REGISTRY_PATH.is_file()
    for name in ("en_ewt", "en_gum", "en_pud"):
        assert name in reg["treebanks"]
        for entry in reg["treebanks"][name]["files"].values():
            assert entry["url"].startswith("https://") and "/r2.16/" in entry["url"]
            assert entry["sha256"] is None or len(entry["sha256"]) == 64


def test_shipped_checksums_match_local_copies(ewt, gum):
    reg = load_registry()["treebanks"]
    for name, folder in (("en_ewt", ewt), ("en_gum", gum)):
        for split in ("dev", "test"):
            entry = reg[name]["files"][split]
            path = folder / entry["url"].rsplit("/", 1)[-1]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]


def test_fetch_with_matching_checksum(server, tmp_path):
    url, _ = server
    sha = hashlib.sha256(CONLLU.encode()).hexdigest()
    path = fetch_treebank("tb", "dev", registry=_registry(url, sha), cache=tmp_path / "cache")
    assert path.read_text(encoding="utf-8") == CONLLU
    assert path.parent == tmp_path / "cache" / "tb"
    again = resolve_treebank("ud:tb:dev", registry=_registry(url, sha), cache=tmp_path / "cache")
    assert again == path


def test_checksum_mismatch_is_a_clear_error(server, tmp_path):
    url, _ = server
    with pytest.raises(InputError, match=r"tb-dev\.conllu: checksum mismatch: expected sha256 0{64}"):
        fetch_treebank("tb", "dev", registry=_registry(url, "0" * 64), cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "tb" / "tb-dev.conllu").exists()


def test_trust_on_first_use_records_and_then_checks(server, tmp_path, caplog):
    url, root = server
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="probes"):
        path = fetch_treebank("tb", "dev", registry=_registry(url, None), cache=cache)
    assert "trusting this first download" in caplog.text
    recorded = json.loads((cache / "tb" / "checksums.json").read_text())
    assert recorded[f"{url}/tb-dev.conllu"] == hashlib.sha256(CONLLU.encode()).hexdigest()
    # the cached file is later changed: the recorded hash catches it (pooch re-downloads, the server
    # now serves other bytes, and the check fails)
    path.write_text("tampered", encoding="utf-8")
    (root / "tb-dev.conllu").write_text("changed upstream", encoding="utf-8")
    with pytest.raises(InputError, match="checksum mismatch"):
        fetch_treebank("tb", "dev", registry=_registry(url, None), cache=cache)


def test_bad_names(tmp_path):
    with pytest.raises(ConfigError, match="unknown treebank 'xx'"):
        resolve_treebank("ud:xx:dev", cache=tmp_path)
    with pytest.raises(ConfigError, match="has no split 'train'"):
        resolve_treebank("ud:en_pud:train", cache=tmp_path)
    with pytest.raises(ConfigError, match="must look like ud:<treebank>:<split>"):
        resolve_treebank("ud:en_ewt", cache=tmp_path)
    with pytest.raises(InputError, match=r"missing\.conllu: no such file"):
        resolve_treebank(tmp_path / "missing.conllu")


def test_unreachable_server_is_one_clear_error(tmp_path):
    reg = {"treebanks": {"tb": {"files": {"dev": {"url": "http://127.0.0.1:9/none.conllu", "sha256": None}}}}}
    with pytest.raises(InputError, match=r"^http://127\.0\.0\.1:9/none\.conllu: download failed"):
        fetch_treebank("tb", "dev", registry=reg, cache=tmp_path)


def test_sample_names_resolve_to_the_packaged_files(tmp_path, monkeypatch):
    package = Path(probes.__file__).resolve().parent
    monkeypatch.chdir(tmp_path)  # from any folder: no path relative to a checkout
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "no-downloads"))
    dev, test = resolve_treebank("sample:dev"), resolve_treebank("sample:test")
    assert dev == package / "corpora" / "sample" / "sample-dev.conllu" and dev.parent == SAMPLE_DIR
    assert test.name == "sample-test.conllu" and test.is_file()
    assert REGISTRY_PATH.parent == package / "corpora"
    assert is_registry_name("sample:dev") and not is_registry_name("sample-dev.conllu")
    # the readers take the names too, and the two halves are the documented 82 + 81 sentences
    dev_sents, test_sents = list(read_treebank("sample:dev")), list(read_treebank("sample:test"))
    assert (len(dev_sents), len(test_sents)) == (82, 81)
    assert dev_sents[0].sent_id == "sample-001" and test_sents[0].sent_id == "sample-002"
    assert not (tmp_path / "no-downloads").exists()


def test_bad_sample_split():
    with pytest.raises(ConfigError, match=r"the sample corpus has no split 'train'; it has \['dev', 'test'\]"):
        resolve_treebank("sample:train")
    with pytest.raises(ConfigError, match="no split ''"):
        read_treebank("sample:")


# ---- filling the cache from local files, offline (`probes data add`) ----

OFFLINE = "http://127.0.0.1:9"  # nothing listens there: any download attempt fails at once


def _offline_registry(sha: str | None, split: str = "dev") -> dict:
    return {"treebanks": {"tb": {"files": {split: {"url": f"{OFFLINE}/tb-{split}.conllu", "sha256": sha}}}}}


def test_add_checks_the_pinned_hash_then_resolves_with_no_network(tmp_path, caplog):
    local = tmp_path / "my-copy.conllu"
    local.write_text(CONLLU, encoding="utf-8")
    reg, cache = _offline_registry(hashlib.sha256(CONLLU.encode()).hexdigest()), tmp_path / "cache"
    (done,) = add_to_cache("ud:tb:dev", local, registry=reg, cache=cache)
    assert done == CachedFile("ud:tb:dev", cache / "tb" / "tb-dev.conllu", done.sha256, pinned=True)
    assert not (cache / "tb" / "checksums.json").exists()  # the registry's hash is the record
    with caplog.at_level(logging.WARNING, logger="probes"):
        path = resolve_treebank("ud:tb:dev", registry=reg, cache=cache)
    assert path == done.path and path.read_text(encoding="utf-8") == CONLLU and not caplog.text
    assert list(read_treebank(path))[0].words == ("Hi",)


def test_add_refuses_a_file_whose_hash_is_not_the_registrys(tmp_path):
    local = tmp_path / "other.conllu"
    local.write_text(CONLLU.replace("Hi", "Ho"), encoding="utf-8")
    with pytest.raises(InputError, match=r"other\.conllu: sha256 [0-9a-f]{64} is not the registry's 0{64} "
                                         r"for ud:tb:dev: not the file the registry names \(http://127"):
        add_to_cache("ud:tb:dev", local, registry=_offline_registry("0" * 64), cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "tb" / "tb-dev.conllu").exists()


def test_add_without_a_pinned_hash_records_it_like_a_first_download(tmp_path, caplog):
    local = tmp_path / "tb-dev.conllu"
    local.write_text(CONLLU, encoding="utf-8")
    reg, cache = _offline_registry(None), tmp_path / "cache"
    (done,) = add_to_cache("ud:tb:dev", local, registry=reg, cache=cache)
    digest = hashlib.sha256(CONLLU.encode()).hexdigest()
    assert not done.pinned and done.sha256 == digest
    assert json.loads((cache / "tb" / "checksums.json").read_text()) == {f"{OFFLINE}/tb-dev.conllu": digest}
    with caplog.at_level(logging.WARNING, logger="probes"):
        assert resolve_treebank("ud:tb:dev", registry=reg, cache=cache) == done.path
    assert "trusting" not in caplog.text  # already recorded: no first-use warning, no download
    # another file for the same name is refused; the cached copy stays
    local.write_text("changed", encoding="utf-8")
    with pytest.raises(InputError, match=r"differs from the [0-9a-f]{64} recorded for ud:tb:dev .*delete "):
        add_to_cache("ud:tb:dev", local, registry=reg, cache=cache)
    assert done.path.read_text(encoding="utf-8") == CONLLU
    # and a cached copy changed behind our back is caught on use
    done.path.write_text("tampered", encoding="utf-8")
    with pytest.raises(InputError, match="checksum mismatch|download failed"):
        resolve_treebank("ud:tb:dev", registry=reg, cache=cache)


def test_add_a_folder_takes_every_split_found_by_its_registry_file_name(tmp_path):
    folder = tmp_path / "UD_TB"
    folder.mkdir()
    (folder / "tb-dev.conllu").write_text(CONLLU, encoding="utf-8")
    (folder / "README.md").write_text("not a split", encoding="utf-8")
    reg = {"treebanks": {"tb": {"files": {
        "dev": {"url": f"{OFFLINE}/tb-dev.conllu", "sha256": None},
        "test": {"url": f"{OFFLINE}/tb-test.conllu", "sha256": None}}}}}
    done = add_to_cache("ud:tb", folder, registry=reg, cache=tmp_path / "cache")
    assert [d.name for d in done] == ["ud:tb:dev"]
    assert cache_status(registry=reg, cache=tmp_path / "cache") == [("ud:tb:dev", done[0].path), ("ud:tb:test", None)]
    with pytest.raises(InputError, match=r"holds none of the files of ud:tb:test \(tb-test\.conllu\)"):
        add_to_cache("ud:tb:test", folder, registry=reg, cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"is a file: name its split, e\.g\. ud:tb:dev"):
        add_to_cache("ud:tb", folder / "tb-dev.conllu", registry=reg, cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match="ships inside the package"):
        add_to_cache("sample:dev", folder, registry=reg, cache=tmp_path / "cache")
    with pytest.raises(InputError, match=r"nothing\.conllu: no such file or folder"):
        add_to_cache("ud:tb:dev", tmp_path / "nothing.conllu", registry=reg, cache=tmp_path / "cache")


def test_a_failed_download_says_how_to_add_a_local_copy(tmp_path):
    with pytest.raises(InputError, match=r"download failed .*`probes data add ud:tb:dev FILE`"):
        fetch_treebank("tb", "dev", registry=_offline_registry(None), cache=tmp_path)


def test_cli_data_add_and_list(tmp_path, monkeypatch, capsys):
    from probes.cli import main

    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))
    local = tmp_path / "copy.conllu"
    local.write_text(CONLLU, encoding="utf-8")
    assert main(["data", "add", "ud:en_ewt:dev", str(local)]) == 1  # not the registry's file
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not the registry's 531a54ff" in err and len(err.splitlines()) == 1
    assert main(["data", "add", "ud:en_pud:test", str(local)]) == 0  # PUD pins no hash: recorded
    out = capsys.readouterr().out
    assert out.startswith("ud:en_pud:test: ") and "recorded" in out
    assert main(["data", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"cache: {tmp_path / 'cache'}"
    assert any(line.split() == ["ud:en_pud:test", str(tmp_path / "cache" / "en_pud" / "en_pud-ud-test.conllu")]
               for line in lines)
    assert sum("not cached" in line for line in lines) == len(lines) - 2
