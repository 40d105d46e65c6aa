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

from probes.errors import ConfigError, InputError
import probes
from probes.corpora import read_treebank
from probes.corpora.registry import (
    REGISTRY_PATH,
    SAMPLE_DIR,
    fetch_treebank,
    is_registry_name,
    load_registry,
    resolve_treebank,
)

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
