"""GUM / CorefUD coreference in CoNLL-U MISC (``Entity=``, ``Bridge=``, ``SplitAnte=``) into Documents.

Format (CorefUD 1.x, as written by GUM): ``Entity=`` holds a run of chunks with no
separator: ``(id-etype-...`` opens a mention, ``id)`` closes the most recently
opened mention of ``id``, ``(id-...)`` is a one-word mention. The hyphen-separated
fields of an opening chunk are named by ``# global.Entity = ...`` (GUM:
``GRP-etype-infstat-salience-centering-minspan-link-identity``; default
``eid-etype-head-other``). A discontinuous mention writes its parts as
``(id[1/2]`` ... ``id[1/2])`` ... ``(id[2/2]`` .... Mentions may cross sentence
boundaries (they are stored with document-level word offsets). Brackets on empty
nodes (``8.1``) are honoured; a mention made only of empty nodes has no word and
is counted in ``ReadReport.dropped``.

``Bridge=ante<ana`` (comma-separated, optional ``:relation`` suffix) sits on the
first word of the anaphor mention. ``SplitAnte=4<54,9<54`` (entity 54 has the split
antecedents 4 and 9) is kept as :class:`~probes.corpora.types.SplitAntecedent` entries of
``Document.split_antecedents``: the links of one anaphor entity, wherever they sit in
the document, are merged into one entry whose parts keep file order.

The mention head is computed from the dependency tree: among the mention's words
whose syntactic head lies outside the mention (or is ROOT), the one closest to the
root of its sentence; ties go to the leftmost word.

A bridging link listed twice for the same anaphor mention (``Bridge=e2<e3,e2<e3``, or
``Bridge=`` written twice in one MISC) is one link: it is counted once and noted in
``ReadReport.dropped`` (and the log). The same pair on two different mentions is two links.
A node holds one ``Entity=``; the parts of a discontinuous mention come in order. Work and
memory stay bounded by the file's size: at most :data:`MAX_CHUNKS` brackets and links on a
node, and mentions covering at most :data:`MENTION_WORDS_PER_WORD` words per word of the
document (plus :data:`MENTION_WORDS_FLOOR`), so brackets nested thousands deep in a small
file are refused rather than expanded.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

from probes.corpora.conllu import ParsedBlock, iter_results
from probes.corpora.integrity import shown
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.types import Bridge, Document, Mention, Sentence, SplitAntecedent
from probes.corpora.validate import tree_depths
from probes.errors import AnnotationError, InputError

__all__ = ["read_corefud", "build_document", "document_heads", "parse_entity_chunks", "tree_head"]

DEFAULT_FIELDS = "eid-etype-head-other"
#: Opening-chunk fields that give word positions inside the mention (1-based; GUM's ``minspan`` may list several).
HEAD_FIELDS = ("head", "minspan")
_POSITIONS = re.compile(r"[0-9]{1,9}(,[0-9]{1,9})*")
_CHUNK = re.compile(r"\([^()]+\)?|[^()]+\)")
_PART = re.compile(r"^(.+)\[([0-9]+)/([0-9]+)\]$")
#: The most Entity brackets, or bridging / split-antecedent links, on one node (GUM has fewer than 10).
MAX_CHUNKS = 1_000
#: The most digits in the ``k`` and ``n`` of a discontinuous part ``[k/n]``.
MAX_PART_DIGITS = 6
#: Mentions may cover at most this many words per word of the document so far, plus
#: :data:`MENTION_WORDS_FLOOR` (GUM: under 2 per word): deeper nesting is refused, not expanded.
MENTION_WORDS_PER_WORD = 100
MENTION_WORDS_FLOOR = 100_000
#: The ``ReadReport.dropped`` entry of a bridging link listed again for the same anaphor mention.
REPEATED_BRIDGE = "repeated bridging links (counted once)"


def parse_entity_chunks(value: str) -> list[str]:
    """Split an ``Entity=`` value into chunks; None if it has text outside any chunk."""
    chunks = _CHUNK.findall(value)
    if "".join(chunks) != value:
        raise ValueError(value)
    return chunks


def _links(state: _DocState, misc: str, key: str, line: int, sent_id: str) -> list[tuple[str, str]]:
    """The ``antecedent<anaphor`` pairs of a node's ``Bridge=`` or ``SplitAnte=`` MISC values (comma-separated;
    a key written twice adds its links)."""
    values = _misc_values(misc, key)
    if not values:
        return []
    links = ",".join(values).split(",")
    if len(links) > MAX_CHUNKS:
        raise _error(state, line, sent_id, f"expected at most {MAX_CHUNKS:,} {key} links on a word, found "
                     f"{len(links):,}")
    pairs = []
    for link in links:
        ante, sep, ana = link.partition("<")
        if not sep or not ante or not ana:
            raise _error(state, line, sent_id, f"expected {key}=antecedent<anaphor, found {link!r}")
        if ante == ana.split(":", 1)[0]:
            raise _error(state, line, sent_id, f"expected {key}=antecedent<anaphor between two different "
                         f"entities, found {key}={link} (entity {ante} linked to itself)")
        pairs.append((ante, ana))
    return pairs


def _misc_values(misc: str, key: str) -> list[str]:
    """Every value of ``key=`` in a MISC field, in order."""
    prefix = key + "="
    return [item[len(prefix) :] for item in misc.split("|") if item.startswith(prefix)]


def _entity_value(state: _DocState, misc: str, line: int, sent_id: str) -> str | None:
    """The node's one ``Entity=`` value, or None; two are refused (which brackets come first is unknown)."""
    values = _misc_values(misc, "Entity")
    if len(values) > 1:
        raise _error(state, line, sent_id, f"expected one Entity= in MISC, found {len(values)}")
    return values[0] if values else None


def tree_head(words: Sequence[int], doc_heads: Sequence[int], depth: Sequence[int]) -> int:
    """Head of a mention: the word whose head is outside it, closest to the root, leftmost on ties.

    Args:
        words: document-level offsets of the mention's words.
        doc_heads: document-level offset of each word's head, -1 for ROOT.
        depth: each word's distance to ROOT in its sentence (root word = 1).
    """
    inside = set(words)
    best = words[0]
    best_key: tuple[int, int] | None = None
    for w in words:
        if doc_heads[w] not in inside:
            key = (depth[w], w)
            if best_key is None or key < best_key:
                best, best_key = w, key
    return best


@dataclass
class _Mention:
    """A mention being read: its parts so far (inclusive offset ranges)."""

    entity: str
    fields: dict[str, str]
    line: int
    sent_id: str
    n_parts: int = 1
    opened: int = 1  # parts opened so far: part ``opened + 1`` comes next, once all of them closed
    closed: int = 0  # parts closed so far
    parts: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Part:
    """An opened bracket waiting for its closing bracket: part ``k`` of ``mention``."""

    mention: _Mention
    k: int
    start: int


@dataclass
class _DocState:
    """Everything collected while walking one document's words in order."""

    path: str
    doc_id: str
    fields: list[str]
    raw: list[tuple[str, list[tuple[int, int]], dict[str, str], int]] = field(default_factory=list)
    bridges: list[tuple[str, str, int, int]] = field(
        default_factory=list
    )  # ante, ana, offset, line
    split_ante: list[tuple[str, str, int]] = field(default_factory=list)
    empties: list[int] = field(default_factory=list)  # offset of the word after each empty node, in order
    dropped: int = 0
    bridge_keys: set[tuple[str, str, int]] = field(default_factory=set)  # ante, ana, offset of each link kept
    repeated: list[tuple[str, int]] = field(default_factory=list)  # link, line of each repeated bridging link
    mention_words: int = 0  # words covered by the mentions so far, counted with repeats


def _error(state: _DocState, line: int, sent_id: str, msg: str) -> AnnotationError:
    return AnnotationError(f"sentence '{sent_id}': {msg}", path=state.path, line=line)


def _open_fields(state: _DocState, chunk: str) -> tuple[str, dict[str, str]]:
    names = state.fields
    values = chunk.split("-", len(names) - 1)
    named = dict(zip(names, values))
    eid = named.get("eid", named.get("GRP", values[0]))
    return eid, named


def _walk_entity(
    state: _DocState,
    value: str,
    *,
    here_start: int,
    here_end: int,
    line: int,
    sent_id: str,
    opened: dict[str, list[_Part]],
    partial: dict[str, list[_Mention]],
) -> None:
    """Apply one node's ``Entity=`` chunks, left to right.

    ``here_start``/``here_end`` are the document offsets a mention gets when it
    opens/closes at this node (for an empty node: the next word / the previous word).
    """
    try:
        chunks = parse_entity_chunks(value)
    except ValueError:
        raise _error(state, line, sent_id, "expected Entity brackets such as '(1-person', '1)' or '(1-person)', "
                     f"found {shown(value)!r}") from None
    if len(chunks) > MAX_CHUNKS:
        raise _error(state, line, sent_id, f"expected at most {MAX_CHUNKS:,} Entity brackets on a node, "
                     f"found {len(chunks):,}")
    for chunk in chunks:
        if chunk.startswith("("):
            _open(state, chunk, here_start, here_end, line, sent_id, opened, partial)
        else:
            eid = chunk[:-1]
            if not opened.get(eid) and "-" in eid:  # legacy closings carrying more fields
                eid = _open_fields(state, eid)[0]
            m = _PART.match(eid)
            if m:
                eid = m.group(1)
            if not opened.get(eid):
                raise _error(state, line, sent_id, f"expected an open mention of entity {shown(eid)} to close, found "
                             f"the closing bracket {shown(chunk)!r} of a mention never opened")
            _close(state, opened[eid].pop(), here_end, partial)


def _part_numbers(state: _DocState, chunk: str, eid: str, line: int, sent_id: str) -> tuple[str, int, int]:
    """``(entity, k, n)`` of an opening bracket: part ``[k/n]`` of a discontinuous mention, else ``1/1``."""
    m = _PART.match(eid)
    if not m:
        return eid, 1, 1
    k_text, n_text = m.group(2), m.group(3)
    if max(len(k_text), len(n_text)) > MAX_PART_DIGITS or not 1 <= int(k_text) <= int(n_text):
        raise _error(state, line, sent_id, f"expected a part [k/n] with 1 <= k <= n (at most "
                     f"{MAX_PART_DIGITS} digits), found {shown(chunk)!r}")
    return m.group(1), int(k_text), int(n_text)


def _open(state: _DocState, chunk: str, here_start: int, here_end: int, line: int, sent_id: str,
          opened: dict[str, list[_Part]], partial: dict[str, list[_Mention]]) -> None:
    """Open the mention (or the part of one) of an opening bracket ``(id-...`` or ``(id-...)``."""
    single = chunk.endswith(")")
    eid, named = _open_fields(state, chunk[1:-1] if single else chunk[1:])
    eid, k, n = _part_numbers(state, chunk, eid, line, sent_id)
    if not eid:
        raise _error(state, line, sent_id, f"expected an entity id in the Entity bracket, found {shown(chunk)!r}")
    if k == 1:
        mention = _Mention(eid, named, line, sent_id, n_parts=n)
        if n > 1:
            partial[eid].append(mention)
    elif partial.get(eid):
        mention = partial[eid][-1]
        if n != mention.n_parts or k != mention.opened + 1 or mention.closed != mention.opened:
            raise _error(state, line, sent_id, f"expected part {mention.opened + 1}/{mention.n_parts} of the "
                         f"mention of entity {eid} (after part {mention.opened} closed), found {shown(chunk)!r}")
        mention.opened = k
    else:
        raise _error(state, line, sent_id, f"expected part 1/{n} of a mention of entity {eid} before part "
                     f"{k}/{n}, found none")
    part = _Part(mention, k, here_start)
    if single:
        _close(state, part, here_end, partial)
    else:
        opened[eid].append(part)


def _close(state: _DocState, part: _Part, end: int, partial: dict[str, list[_Mention]]) -> None:
    """Close one part; a mention is complete when its last part closes."""
    mention = part.mention
    mention.closed += 1
    if part.start <= end:  # empty when opened and closed around empty nodes only
        mention.parts.append((part.start, end))
    if part.k < mention.n_parts:
        return
    if mention.n_parts > 1:  # its parts came in order: it is pending, most often the latest one
        pending = partial[mention.entity]
        index = len(pending) - 1 if pending[-1] is mention else next(i for i, m in enumerate(pending) if m is mention)
        del pending[index]
    if mention.parts:
        _check_size(state, mention, end)
        _check_head_fields(state, mention)
        state.raw.append((mention.entity, mention.parts, mention.fields, mention.line))
    else:
        state.dropped += 1


def _check_size(state: _DocState, mention: _Mention, end: int) -> None:
    """Raise if the mentions so far cover more words than :data:`MENTION_WORDS_PER_WORD` per word read."""
    state.mention_words += sum(z - a + 1 for a, z in mention.parts)
    bound = MENTION_WORDS_PER_WORD * (end + 1) + MENTION_WORDS_FLOOR
    if state.mention_words > bound:
        raise _error(state, mention.line, mention.sent_id,
                     f"expected mentions covering at most {MENTION_WORDS_PER_WORD} words per word of the document "
                     f"(+{MENTION_WORDS_FLOOR:,}), found {state.mention_words:,} words in mentions by word "
                     f"{end + 1} (the mention of entity {mention.entity} opened here; brackets nested too deep?)")


def _check_head_fields(state: _DocState, mention: _Mention) -> None:
    """Raise unless the mention's ``head`` (GUM: ``minspan``) field names positions inside the mention.

    The positions are 1-based over the mention's nodes; empty nodes inside or at the edges of a part
    are counted too (CorefUD counts them), so the bound is never too tight.
    """
    size = 0
    for name in HEAD_FIELDS:
        value = mention.fields.get(name)
        if not value or value == "_":
            continue
        if not size:
            size = sum(z - a + 1 for a, z in mention.parts)
            if state.empties:
                size += sum(bisect_right(state.empties, z + 1) - bisect_left(state.empties, a)
                            for a, z in mention.parts)
        if _POSITIONS.fullmatch(value):
            positions = [int(p) for p in value.split(",")]
            if min(positions) >= 1 and max(positions) <= size:
                continue
        raise _error(state, mention.line, mention.sent_id,
                     f"expected the {name} field of the mention of entity {mention.entity} opened here to "
                     f"name positions 1..{size} inside it, found {value!r}")


def document_heads(sentences: Sequence[Sentence]) -> tuple[list[int], list[int], list[int]]:
    """The trees of a document's sentences in document offsets, for :func:`tree_head`.

    Returns:
        ``starts`` (each sentence's first word), ``doc_heads`` (each word's head, -1 for ROOT)
        and ``depth`` (each word's distance to ROOT in its sentence).
    """
    starts: list[int] = []
    doc_heads: list[int] = []
    depth: list[int] = []
    total = 0
    for sent in sentences:
        starts.append(total)
        doc_heads.extend(total + h - 1 if h else -1 for h in sent.heads)
        depth.extend(tree_depths(sent.heads))
        total += len(sent.words)
    return starts, doc_heads, depth


def _add_bridge(state: _DocState, ante: str, ana: str, offset: int, line: int) -> None:
    """Keep a bridging link once: the same antecedent entity for the anaphor mention at ``offset`` again is
    noted (``state.repeated``), not kept."""
    key = (ante, ana, offset)
    if key in state.bridge_keys:
        state.repeated.append((f"{ante}<{ana}", line))
        return
    state.bridge_keys.add(key)
    state.bridges.append((ante, ana, offset, line))


def _walk_sentence(state: _DocState, block: ParsedBlock, base: int, opened: dict[str, list[_Part]],
                   partial: dict[str, list[_Mention]]) -> None:
    """Apply the MISC annotations of one sentence's words and empty nodes, in order."""
    sent = block.sentence
    empties = iter(block.empty_nodes)
    nxt = next(empties, None)
    n = len(sent.words)
    for k in range(n + 1):
        while nxt is not None and nxt[0] == k:  # empty nodes sitting before word k+1
            state.empties.append(base + k)
            value = _entity_value(state, nxt[2], nxt[1], sent.sent_id)
            if value:
                _walk_entity(state, value, here_start=base + k, here_end=base + k - 1, line=nxt[1],
                             sent_id=sent.sent_id, opened=opened, partial=partial)
            nxt = next(empties, None)
        if k == n:
            break
        misc = sent.misc[k]
        if "=" not in misc:
            continue
        line = block.word_lines[k]
        value = _entity_value(state, misc, line, sent.sent_id)
        if value:
            _walk_entity(state, value, here_start=base + k, here_end=base + k, line=line, sent_id=sent.sent_id,
                         opened=opened, partial=partial)
        for ante, ana in _links(state, misc, "Bridge", line, sent.sent_id):
            _add_bridge(state, ante, ana.split(":", 1)[0], base + k, line)
        for ante, ana in _links(state, misc, "SplitAnte", line, sent.sent_id):
            state.split_ante.append((ante, ana, line))


def _check_closed(state: _DocState, opened: dict[str, list[_Part]], partial: dict[str, list[_Mention]]) -> None:
    """Raise for a mention still open, or a discontinuous mention missing parts, at the document's end."""
    for eid, stack in opened.items():
        if stack:
            raise AnnotationError(
                f"document '{state.doc_id}': expected a closing bracket '{eid})' for the mention of "
                f"entity {eid} opened here, found the end of the document",
                path=state.path,
                line=stack[0].mention.line,
            )
    for eid, pending in partial.items():
        if pending:
            raise AnnotationError(
                f"document '{state.doc_id}': expected all {pending[0].n_parts} parts of the discontinuous "
                f"mention of entity {eid} opened here, found fewer",
                path=state.path,
                line=pending[0].line,
            )


def _mentions(state: _DocState, sentences: Sequence[Sentence]) -> tuple[list[int], list[Mention]]:
    """Sentence starts, and the document's mentions with their tree heads, sorted by position."""
    starts, doc_heads, depth = document_heads(sentences)
    mentions: list[Mention] = []
    for eid, parts, named, _line in state.raw:
        words = tuple(sorted({w for a, z in parts for w in range(a, z + 1)}))
        mentions.append(
            Mention(
                entity=eid,
                words=words,
                head=tree_head(words, doc_heads, depth),
                sentence=bisect_right(starts, words[0]) - 1,
                etype=named.get("etype") or named.get("entity") or None,
                infstat=named.get("infstat") or None,
            )
        )
    mentions.sort(key=lambda m: (m.start, -m.end, m.entity))
    return starts, mentions


def _check_entities(state: _DocState, by_entity: dict[str, list[Mention]], link: tuple[str, str], line: int,
                    what: str, key: str) -> None:
    """Raise unless both entities of an ``antecedent<anaphor`` link have a mention."""
    ante, ana = link
    for eid in link:
        if eid not in by_entity:
            raise AnnotationError(
                f"document '{state.doc_id}': expected {what} entity {eid} to have a mention in "
                f"the document, found none ({key}={ante}<{ana})",
                path=state.path,
                line=line,
            )


def _bridges(state: _DocState, by_entity: dict[str, list[Mention]]) -> list[Bridge]:
    """Each ``Bridge=`` link: the anaphor mention at its word and the closest antecedent mention before.

    Mentions are found by bisection over each entity's sorted starts, so many links cost no more than
    many lookups.
    """
    starts = {eid: [m.start for m in ms] for eid, ms in by_entity.items()}
    bridges: list[Bridge] = []
    for ante, ana, offset, line in state.bridges:
        _check_entities(state, by_entity, (ante, ana), line, "bridging", "Bridge")
        at = bisect_left(starts[ana], offset)
        if at == len(starts[ana]) or starts[ana][at] != offset:
            raise AnnotationError(f"document '{state.doc_id}': expected a mention of entity {ana} starting at the "
                                  f"word with Bridge={ante}<{ana}, found none", path=state.path, line=line)
        anaphor = by_entity[ana][at]  # the longest one starting here (mentions are sorted)
        before = bisect_left(starts[ante], anaphor.start)
        if before:  # the longest of the mentions that start last before the anaphor
            antecedent = by_entity[ante][bisect_left(starts[ante], starts[ante][before - 1])]
        else:
            antecedent = by_entity[ante][0]
        bridges.append(Bridge(anaphor=anaphor, antecedent_entity=ante, antecedent=antecedent))
    return bridges


def _split_antecedents(state: _DocState, by_entity: dict[str, list[Mention]]) -> tuple[SplitAntecedent, ...]:
    """The ``SplitAnte=`` links merged per anaphor entity, parts in file order."""
    split_parts: dict[str, dict[str, None]] = {}  # anaphor entity -> parts (an ordered set), both in file order
    for ante, ana, line in state.split_ante:
        _check_entities(state, by_entity, (ante, ana), line, "split-antecedent", "SplitAnte")
        split_parts.setdefault(ana, {})[ante] = None
    return tuple(SplitAntecedent(ana, tuple(p)) for ana, p in split_parts.items())


def _note_repeats(state: _DocState, report: ReadReport) -> None:
    """Note each bridging link listed again for the same anaphor mention (kept once)."""
    for link, line in state.repeated:
        report.note(REPEATED_BRIDGE, f"document '{state.doc_id}': bridging link Bridge={link} listed again for "
                    "the same anaphor mention; counted once", path=state.path, line=line)


def build_document(
    doc_id: str,
    blocks: Sequence[ParsedBlock],
    *,
    path: str,
    report: ReadReport | None = None,
    fields: str | None = None,
) -> Document:
    """Assemble one :class:`Document` from its parsed sentences.

    The Entity fields are named by a ``# global.Entity`` comment on the document's first sentence, else by
    ``fields`` (the file's last such comment: a ``global.`` comment holds for the rest of its file), else
    CorefUD's default order.

    Raises:
        AnnotationError: ``path:line:`` for an unclosed or never-opened bracket, a
            malformed chunk, or a bridging/split-antecedent link to an unknown entity.
    """
    header = next((v for b in blocks[:1] for k, v in b.comments if k == "global.Entity"), None)
    state = _DocState(path, doc_id, (header or fields or DEFAULT_FIELDS).split("-"))
    opened: dict[str, list[_Part]] = defaultdict(list)
    partial: dict[str, list[_Mention]] = defaultdict(list)
    sentences = tuple(b.sentence for b in blocks)
    base = 0
    for block in blocks:
        _walk_sentence(state, block, base, opened, partial)
        base += len(block.sentence.words)
    _check_closed(state, opened, partial)
    starts, mentions = _mentions(state, sentences)
    by_entity: dict[str, list[Mention]] = defaultdict(list)
    for m in mentions:
        by_entity[m.entity].append(m)
    bridges = _bridges(state, by_entity)
    split_antecedents = _split_antecedents(state, by_entity)
    _note_repeats(state, report if report is not None else ReadReport())
    if report is not None and state.dropped:
        report.dropped["mentions of empty nodes only (no word)"] += state.dropped
    return Document(
        doc_id=doc_id,
        sentences=sentences,
        mentions=tuple(mentions),
        bridges=tuple(bridges),
        path=path,
        line=blocks[0].sentence.line,
        sentence_starts=tuple(starts),
        split_antecedents=split_antecedents,
    )


def read_corefud(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[Document]:
    """Stream the documents of a GUM/CorefUD CoNLL-U file, split at ``# newdoc``.

    Args:
        path: the ``.conllu`` file; a file without ``# newdoc`` is one document named
            after the file.
        on_error: ``"raise"`` or ``"skip"``; a document with any bad sentence or bad
            coreference annotation is skipped whole, warned about and recorded.
        report: a :class:`ReadReport` to fill.
    """
    check_on_error(on_error)
    report = report if report is not None else ReadReport()
    name = str(path)
    stem = Path(path).name.split(".")[0]
    group: list[ParsedBlock] = []
    failed: InputError | None = None
    doc_id: str | None = None
    fields: str | None = None  # the file's last ``# global.Entity``: it holds for the documents after it

    def finish() -> Iterator[Document]:
        nonlocal failed, fields
        if failed is not None:
            err = failed
            failed = None
            if on_error == "raise":
                raise err
            report.skip(err)
            return
        if not group:
            return
        fields = next((v for k, v in group[0].comments if k == "global.Entity"), fields)
        try:
            doc = build_document(doc_id or stem, group, path=name, report=report, fields=fields)
        except InputError as err:
            if on_error == "raise":
                raise
            report.skip(err)
            return
        report.documents += 1
        report.sentences += len(doc.sentences)
        report.words += doc.n_words
        yield doc

    for starts, result in iter_results(path, fmt="conllu"):
        this_doc = result.sentence.doc_id if isinstance(result, ParsedBlock) else doc_id
        if starts or (isinstance(result, ParsedBlock) and this_doc != doc_id and group):
            yield from finish()
            group = []
            if isinstance(result, ParsedBlock):
                doc_id = result.sentence.doc_id
        if isinstance(result, InputError):
            if failed is None:
                failed = result
            continue
        doc_id = result.sentence.doc_id
        group.append(result)
    yield from finish()
