"""Safe file names: a label from the data can never write outside ``--out``, nor share a file with another."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.errors import ConfigError
from probes.reports.names import MAX_BYTES, MAX_CHARS, check_name, inside, safe_name, safe_names
from probes.reports.writer import OutputFolder, write_output

#: Labels a crafted treebank could hold (52): separators, dots, control and format characters, Windows
#: names and characters, very long and non-Latin text.
NASTY = [
    "../../../victim", "..", ".", "", "/", "\\", "/etc/passwd", "..\\..\\victim", "a/../../b", "./.hidden",
    ".hidden", "...", "a/b", "a\\b", "C:\\Windows\\x", "C:", "a\x00b", "\x00", "line\nbreak", "tab\there",
    "cr\rhere", "\x1b[31mred", "\x7f", "bidi\u202etxt.gpj", "zero\u200bwidth", "ls\u2028ps\u2029", "CON", "con",
    "NUL.png", "com1", "LPT9.txt", "aux", "<script>", 'quote"d', "pipe|d", "what?", "star*", "*", "a:b:c",
    "trailing.", "trailing ", " ", "x" * 300, "é" * 200, "日本語" * 60, "😀" * 80, "\udcff", "a" * 99 + "/",
    "../" * 40 + "victim", "nmod:poss/../../x", "%2e%2e%2fvictim", "~/x",
]
#: Ordinary labels: their names are exactly those figures always had (``:`` -> ``_``, ``*`` -> ``all``).
ORDINARY = {"nmod:poss": "nmod_poss", "acl:relcl": "acl_relcl", "det": "det", "*": "all", "obl:tmod": "obl_tmod",
            "compound:prt": "compound_prt", "flat:name": "flat_name", "nsubj:pass": "nsubj_pass", "ñandú": "ñandú"}


def _is_safe_part(name: str) -> bool:
    return (bool(name) and not name.startswith(".") and name not in (".", "..")
            and not any(ch in '/\\<>:"|?*' or unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in name)
            and name == name.rstrip(". ") and len(name) <= MAX_CHARS + 9
            and len(name.encode("utf-8", "surrogatepass")) <= MAX_BYTES + 9)


def test_ordinary_labels_keep_their_names():
    assert {label: safe_name(label) for label in ORDINARY} == ORDINARY
    assert safe_names(ORDINARY) == ORDINARY


def test_the_fixed_list_has_fifty_nasty_labels():
    assert len(set(NASTY)) >= 50


@pytest.mark.parametrize("label", NASTY)
def test_a_nasty_label_is_one_safe_part_inside_the_folder(label, tmp_path):
    name = safe_name(label)
    assert _is_safe_part(name), repr(name)
    assert name.split(".")[0].upper() not in ("CON", "NUL", "AUX", "PRN", "COM1", "LPT9")
    path = tmp_path / "figures" / f"{name}.png"
    assert path.resolve().parent == (tmp_path / "figures").resolve()
    assert check_name(f"figures/{name}.png")
    assert name == safe_name(label)  # stable: a label always gets the same name


def test_every_nasty_label_gets_its_own_file(tmp_path):
    """Written for real: every file lands directly in figures/, one per label (case-insensitively distinct)."""
    labels = NASTY + list(ORDINARY) + ["nmod_poss", "NMOD_POSS", "all", "a_b", "a-b"]
    names = safe_names(labels)
    assert len({n.casefold() for n in names.values()}) == len(set(labels))
    out = tmp_path / "out"
    folder = OutputFolder(out)
    for label, name in names.items():
        folder.text(f"figures/{name}.txt", label.encode("utf-8", "surrogatepass").hex())
    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert all(p.parent == out / "figures" for p in written)
    assert len(written) == len(set(labels))
    assert os.listdir(tmp_path) == ["out"]  # nothing written beside the folder


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=130)
                | st.lists(st.sampled_from(["/", "\\", "..", ".", ":", "*", "\x00", "\n", "a", "é", " "]))
                .map("".join), min_size=1, max_size=6))
def test_fuzzed_labels_stay_inside_and_apart(tmp_path_factory, labels):
    root = tmp_path_factory.mktemp("out")
    names = safe_names(labels)
    assert len({n.casefold() for n in names.values()}) == len(set(labels))
    for label in labels:
        name = names[label]
        assert _is_safe_part(name), repr(name)
        inside(root, root / "figures" / f"{name}.png", label=label)
        if name != label:
            assert name == label.replace(":", "_").replace("*", "all") or "-" in name


def test_labels_one_spelling_merges_are_kept_apart_whatever_the_order():
    one = safe_names(["nmod:poss", "nmod_poss"])
    other = safe_names(["nmod_poss", "nmod:poss"])
    assert one == other
    assert one["nmod_poss"] == "nmod_poss" and one["nmod:poss"].startswith("nmod_poss-")
    assert safe_names(["nmod:poss"]) == {"nmod:poss": "nmod_poss"}  # alone, it keeps the usual name


@pytest.mark.parametrize("name", ["../x.png", "/abs.png", "figures/../../x.png", ".hidden", "a\\b.png",
                                  "figures/a:b.png", "figures//x.png", "x\x00.png", "x.", ""])
def test_output_folder_refuses_unsafe_names(name, tmp_path):
    with pytest.raises(ConfigError, match="output file name"):
        OutputFolder(tmp_path).path(name)


def test_a_link_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "figures").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="outside the output folder"):
        OutputFolder(tmp_path / "out").path("figures/x.png")
    assert not any((tmp_path / "elsewhere").iterdir())


def test_a_writer_cannot_add_a_file_outside_the_folder(tmp_path):
    """The folder checks the paths it hands out before anything is written (above) and every file added: a
    file a writer wrote outside it ends the run before ``run.json`` (tests/reports/test_output_roots.py)."""
    from probes.reports.tables import write_csv

    def write(folder: OutputFolder) -> dict:
        folder.add(write_csv([{"a": 1}], folder.root / "figures" / ".." / ".." / "victim.csv"))
        return {"command": "test"}

    with pytest.raises(ConfigError, match="outside the output folder"):
        write_output(tmp_path / "out", "test", write)
    assert not (tmp_path / "out" / "run.json").exists()


def test_a_crafted_relation_writes_its_figure_inside_out(tmp_path):
    """The reported attack: a treebank whose DEPREL is ``../../../victim`` (and its cousins)."""
    from probes.corpora.types import Sentence
    from probes.extraction.attention import WordAttention
    from probes.runs.leaderboard import leaderboard_from_pairs

    hostile = ["../../../victim", "nmod:poss", "nmod_poss", "a\\..\\b", ".x"]
    rng = np.random.default_rng(0)
    pairs = []
    for k in range(40):
        n = 6
        heads = (0, 1, 1, 2, 3, 4)
        rels = ("root", *(hostile[(k + i) % len(hostile)] for i in range(n - 1)))
        w = rng.random((1, 2, n, n)).astype(np.float32)
        pairs.append((Sentence(f"s{k}", tuple("w" * n), heads, rels),
                      WordAttention(w, np.zeros(n, bool), (0,), (0, 1))))
    out = tmp_path / "a" / "b" / "c" / "out"
    board = leaderboard_from_pairs(pairs, min_count=1, mode="same")
    relations = {row.relation for row in board.rows}
    assert set(hostile) <= relations
    paths = board.write(out)
    figures = {p.name for p in (out / "figures").iterdir()}
    assert len(figures) == len(relations) + 1  # one per relation, and the overview
    assert {"nmod_poss.png", "overview.png"} <= figures  # the ordinary label keeps its name
    every = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.resolve().is_relative_to(out.resolve()) for p in every)
    assert all(Path(p).resolve().is_relative_to(out.resolve()) for p in paths.values())


def test_a_device_name_stays_readable_and_apart_from_its_spelling():
    """UD's ``aux`` relation is a Windows device name: its figure is ``aux_.png``, not a hashed name."""
    assert [safe_name(label) for label in ("aux", "AUX", "NUL.png", "con")] == ["aux_", "AUX_", "NUL_.png", "con_"]
    names = safe_names(["aux", "aux_", "det"])
    assert names["aux_"] == "aux_" and names["aux"] != "aux_" and names["det"] == "det"
