"""Builds the token corpus and fits the estimator's coefficients against exact BPE counts.

Usage (from the repository root, with the dev virtualenv)::

    .venv/bin/python tools/calibrate_tokens.py build-corpus  # rewrites calibrate/ and heldout/
    .venv/bin/python tools/calibrate_tokens.py build-evaluation  # rewrites evaluate/
    .venv/bin/python tools/calibrate_tokens.py fit  # rewrites rust/src/tokens/coefficients.rs
    .venv/bin/python tools/calibrate_tokens.py evaluate  # per-category error

All three directories are under ``tests/corpus/tokens/``. ``build-corpus`` copies text from what
a Debian machine with CPython has installed (licences, man pages, stdlib sources, package data,
gettext catalogues) and records each file's source in ``MANIFEST.tsv``. ``fit`` counts every
message-sized chunk of the *calibration* files exactly with tiktoken (loaded offline, see
``tests/reference_tokens.py``), extracts the features with the pure Python reference, and solves
a least-squares problem on *relative* error in which each category carries the same total
weight, so the small categories are not drowned by the big ones. The held-out files only serve
to print the same error on them after the fit.

``build-evaluation`` gathers text of other kinds from files on the machine, by *source* (a
project, a package, a language's catalogues of one set of programs): code in C, C++, Go, Java,
JavaScript, TypeScript, shell, SQL and Perl; Markdown, HTML, YAML, CSV and logs; READMEs,
changelogs, licences and man pages; JSON; CJK, Arabic, Hebrew, Hindi, Thai, Vietnamese and
Indonesian gettext catalogues. Every second source of each category is copied into
``evaluate/`` (with its own ``MANIFEST.tsv``); the others are left out, so a source lands whole
on one side. ``fit`` never reads ``evaluate/``. ``evaluate`` prints, per encoding and category,
the median and p95 relative error of ``estimate_tokens`` (the kernel's, counting exactly where it
distrusts its model) on message-sized chunks of ``evaluate/`` and ``heldout/``, and the share
counted exactly; ``tests/test_tokens.py`` checks the targets on ``evaluate/``.
"""

from __future__ import annotations

import argparse
import gettext
import json
import pathlib
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "tokens"
COEFFICIENTS = ROOT / "rust" / "src" / "tokens" / "coefficients.rs"
sys.path.insert(0, str(ROOT / "tests"))

import reference_tokens as ref  # noqa: E402

STDLIB = pathlib.Path(sysconfig.get_paths()["stdlib"])
LOCALE = pathlib.Path("/usr/share/locale")
# The .mo catalogues to harvest per language; most packages ship all three languages.
MO_DOMAINS = [
    "apt",
    "dpkg",
    "coreutils",
    "bash",
    "tar",
    "grep",
    "sed",
    "wget",
    "systemd",
    "gnupg2",
    "psql-15",
    "glib20",
    "findutils",
    "diffutils",
    "make",
]


def _man(page: str) -> str:
    out = subprocess.run(
        ["man", "-P", "cat", page],
        capture_output=True,
        text=True,
        check=True,
        env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    ).stdout
    # `col -b` semantics: drop the backspace overstrike man uses for bold and underline.
    cleaned = []
    for ch in out:
        if ch == "\b":
            if cleaned:
                cleaned.pop()
        else:
            cleaned.append(ch)
    return "".join(cleaned)


def _mo_text(lang: str, domains: list[str]) -> tuple[str, list[str]]:
    parts, used = [], []
    for domain in domains:
        path = LOCALE / lang / "LC_MESSAGES" / f"{domain}.mo"
        if not path.exists():
            continue
        with path.open("rb") as f:
            catalog = gettext.GNUTranslations(f)
        texts = [v for k, v in catalog._catalog.items() if k and isinstance(v, str) and v.strip()]  # type: ignore[attr-defined]
        parts.append("\n".join(t.strip() for t in texts))
        used.append(str(path))
    return "\n".join(parts), used


def build_corpus() -> None:
    """Writes tests/corpus/tokens/{calibrate,heldout}/<category>/*.txt and MANIFEST.tsv."""
    # The base interpreter's site-packages, not the virtualenv's: that is where boto3 & co live.
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix}
    site = pathlib.Path(sysconfig.get_paths(vars=base)["purelib"])
    licences = pathlib.Path("/usr/share/common-licenses")
    files: list[tuple[str, str, str, str]] = []  # split, category, name, source

    def add(split: str, category: str, name: str, text: str, source: str) -> None:
        # Always .txt: linters and formatters must not mistake the corpus for project sources.
        name = name if name.endswith(".txt") else name + ".txt"
        out = CORPUS / split / category / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        files.append((split, category, name, source))

    for split, lic in [
        ("calibrate", "GPL-3"),
        ("calibrate", "Apache-2.0"),
        ("heldout", "MPL-2.0"),
        ("heldout", "GFDL-1.3"),
    ]:
        add(split, "prose", f"licence-{lic}.txt", (licences / lic).read_text(), str(licences / lic))
    for split, page in [
        ("calibrate", "tar"),
        ("calibrate", "apt-get"),
        ("heldout", "grep"),
        ("heldout", "dpkg"),
    ]:
        add(split, "prose", f"man-{page}.txt", _man(page)[:120_000], f"man -P cat {page}")

    for split, mod in [
        ("calibrate", "argparse.py"),
        ("calibrate", "json/decoder.py"),
        ("calibrate", "textwrap.py"),
        ("calibrate", "dataclasses.py"),
        ("heldout", "shutil.py"),
        ("heldout", "csv.py"),
        ("heldout", "heapq.py"),
    ]:
        add(
            split,
            "code",
            "py-" + mod.replace("/", "-"),
            (STDLIB / mod).read_text(),
            str(STDLIB / mod),
        )
    cargo = sorted(pathlib.Path.home().glob(".cargo/registry/src/*/serde_json-1.*/src"))
    if cargo:
        for split, mod in [("calibrate", "de.rs"), ("heldout", "ser.rs")]:
            add(
                split,
                "code",
                f"rs-serde_json-{mod}",
                (cargo[-1] / mod).read_text()[:100_000],
                str(cargo[-1] / mod),
            )

    boto = site / "boto3" / "data"
    for split, rel, compact in [
        ("calibrate", "ec2/2016-11-15/resources-1.json", False),
        ("calibrate", "iam/2010-05-08/resources-1.json", True),
        ("heldout", "s3/2006-03-01/resources-1.json", False),
        ("heldout", "ec2/2014-10-01/resources-1.json", True),
    ]:
        text = (boto / rel).read_text()
        if compact:
            # Tool-call arguments are usually compact JSON: keep both layouts in the corpus.
            text = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        name = "boto3-" + rel.replace("/", "-").replace(
            ".json", "-compact.json" if compact else ".json"
        )
        add(
            split,
            "json",
            name,
            text[:120_000],
            str(boto / rel) + (" (re-dumped compact)" if compact else ""),
        )
    sbom = sorted(site.glob("cryptography-*.dist-info/sboms/cryptography-rust.cyclonedx.json"))
    if sbom:
        add("heldout", "json", "cyclonedx-sbom.json", sbom[-1].read_text(), str(sbom[-1]))

    for category, lang in [
        ("chinese", "zh_CN"),
        ("chinese", "zh_TW"),
        ("japanese", "ja"),
        ("korean", "ko"),
    ]:
        half = len(MO_DOMAINS) // 2
        for split, domains in [("calibrate", MO_DOMAINS[:half]), ("heldout", MO_DOMAINS[half:])]:
            text, used = _mo_text(lang, domains)
            add(
                split,
                category,
                f"gettext-{lang}.txt",
                text[:150_000],
                "msgstr of " + ", ".join(used),
            )
    # Accented Latin and Cyrillic: not a target category, but without them the 2-byte features
    # would be fitted on almost nothing.
    for lang in ["de", "fr", "ru"]:
        half = len(MO_DOMAINS) // 2
        for split, domains in [("calibrate", MO_DOMAINS[:half]), ("heldout", MO_DOMAINS[half:])]:
            text, used = _mo_text(lang, domains)
            add(
                split,
                "european",
                f"gettext-{lang}.txt",
                text[:60_000],
                "msgstr of " + ", ".join(used),
            )

    with (CORPUS / "MANIFEST.tsv").open("w", encoding="utf-8") as f:
        f.write("split\tcategory\tfile\tsource\n")
        for row in files:
            f.write("\t".join(row) + "\n")
    print(f"wrote {len(files)} files under {CORPUS}")


RIDGE = 1e-6
# Prior tokens per feature unit: one per piece, nothing for what BPE merges into a neighbour.
# fmt: off
PRIOR = [1, 1, 1, 1, 1, 1.5, 2, 3, 0.25, 0, 1, 1, 1, 1, 0.5, 0, 0, 1, 0, 1, 0,
         1, 2, 1, 1, 2, 1, 1, 0, 1.5, 2, 0, 0, 2, 2, 0]
# fmt: on


def fit() -> None:
    """Fits one coefficient vector per encoding family and writes coefficients.rs."""
    import numpy as np

    chunks = ref.corpus_chunks("calibrate")
    heldout = ref.corpus_chunks("heldout")
    categories = sorted({c for c, _ in chunks})
    lines = []
    for family, encoding in [("O200K", "o200k_base"), ("CL100K", "cl100k_base")]:
        enc = ref.tiktoken_encoding(encoding)
        rows, targets, weights = [], [], []
        per_cat = {c: sum(1 for cc, _ in chunks if cc == c) for c in categories}
        for category, text in chunks:
            y = len(enc.encode_ordinary(text))
            if y == 0:
                continue
            # The guard's features stay out of the model (their coefficients are 0).
            f = ref.features(text, encoding)
            rows.append([x for k, x in enumerate(f) if k not in ref.GUARD_ONLY])
            targets.append(y)
            weights.append(1.0 / per_cat[category])
        x = np.asarray(rows, dtype=float)
        y = np.asarray(targets, dtype=float)
        w = np.sqrt(np.asarray(weights))
        # Minimise sum_i weight_i * ((x_i . c - y_i) / y_i)^2: scale each row by sqrt(w_i) / y_i.
        scale = w / y
        # A light ridge pull towards a plain prior keeps features the corpus rarely exercises
        # (emoji, rare scripts) at sane values instead of whatever absorbs the noise.
        prior = np.asarray(PRIOR[: x.shape[1]], dtype=float)
        ridge = np.sqrt(RIDGE) * np.eye(len(prior))
        a = np.vstack([x * scale[:, None], ridge])
        b = np.concatenate([y * scale, ridge @ prior])
        fitted, *_ = np.linalg.lstsq(a, b, rcond=None)
        pred = x @ fitted
        coef = np.zeros(len(ref.FEATURE_NAMES))
        coef[[k for k in range(len(coef)) if k not in ref.GUARD_ONLY]] = fitted
        for category in categories:
            idx = [i for i, (c, _) in enumerate(chunks) if c == category]
            rel = np.abs(pred[idx] - y[idx]) / y[idx]
            median, p95 = np.median(rel), np.percentile(rel, 95)
            print(f"{family:6} {category:9} median {median:.3%} p95 {p95:.3%}")
        lines.append((family, coef))
        # Reported, never fitted on: the same error on the held-out files.
        for category in categories:
            rel_h = []
            for c, text in heldout:
                if c == category:
                    exact = len(enc.encode_ordinary(text))
                    rel_h.append(abs(ref.estimate(text, encoding, list(coef)) - exact) / exact)
            median, p95 = np.median(rel_h), np.percentile(rel_h, 95)
            print(f"{family:6} {category:9} held-out median {median:.3%} p95 {p95:.3%}")

    names = ref.FEATURE_NAMES
    out = [
        "//! GENERATED by tools/calibrate_tokens.py fit: do not edit by hand.",
        "//!",
        "//! Per encoding family: the linear model (tokens ~= sum of feature x coefficient,",
        "//! features in `super::features` order) and the bitsets of the ideographs and hangul",
        "//! syllables the family encodes as one (SINGLE) or two (DOUBLE) tokens on their own.",
        "",
        f"pub const FEATURE_COUNT: usize = {len(names)};",
        f"pub const HAN_FIRST: u32 = {ref.HAN_TABLE[0]:#x};",
        f"pub const HAN_LAST: u32 = {ref.HAN_TABLE[1]:#x};",
        f"pub const HANGUL_FIRST: u32 = {ref.HANGUL_TABLE[0]:#x};",
        f"pub const HANGUL_LAST: u32 = {ref.HANGUL_TABLE[1]:#x};",
        "",
    ]

    def bitset(lo: int, hi: int, members: set[int]) -> list[str]:
        words = [0] * ((hi - lo + 1 + 63) // 64)
        for o in members:
            if lo <= o <= hi:
                words[(o - lo) // 64] |= 1 << ((o - lo) % 64)
        rows = []
        for i in range(0, len(words), 6):
            rows.append("    " + " ".join(f"{w:#018x}," for w in words[i : i + 6]))
        return rows

    for family, coef in lines:
        encoding = {"O200K": "o200k_base", "CL100K": "cl100k_base"}[family]
        out.append(f"pub const {family}: [f64; FEATURE_COUNT] = [")
        for name, c in zip(names, coef):
            out.append(f"    {float(c)!r}, // {name}")
        out.append("];")
        isolated = ref.isolated_counts(encoding)
        for table, (lo, hi) in [("HAN", ref.HAN_TABLE), ("HANGUL", ref.HANGUL_TABLE)]:
            n = (hi - lo + 1 + 63) // 64
            for kind, tokens in [("SINGLE", 1), ("DOUBLE", 2)]:
                members = {o for o, t in isolated.items() if t == tokens}
                out.append(f"pub static {family}_{table}_{kind}: [u64; {n}] = [")
                out.extend(bitset(lo, hi, members))
                out.append("];")
        lo, hi = ref.TWO_BYTE_TABLE
        members = {o for o, t in isolated.items() if lo <= o <= hi and t == 1}
        out.append(f"pub static {family}_TWO_BYTE_SINGLE: [u64; {(hi - lo + 1 + 63) // 64}] = [")
        out.extend(bitset(lo, hi, members))
        out.append("];")
        out.append("")
    COEFFICIENTS.write_text("\n".join(out), encoding="utf-8")
    subprocess.run(["rustfmt", "--edition", "2021", str(COEFFICIENTS)], check=True)
    print(f"wrote {COEFFICIENTS}")


def _read(path: pathlib.Path, limit: int = 60_000) -> str:
    import gzip

    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError):
        return ""
    return data.decode("utf-8", errors="replace")[:limit]


def _files(pattern: str, limit: int = 6, size: int = 120_000) -> list[pathlib.Path]:
    """Up to ``limit`` files matching the absolute glob ``pattern``, spread over the matches."""
    matches = sorted(p for p in pathlib.Path("/").glob(pattern.lstrip("/")) if p.is_file())
    step = max(1, len(matches) // limit)
    return matches[::step][:limit]


def _java(limit: int = 6) -> list[tuple[str, str]]:
    import zipfile

    zips = sorted(pathlib.Path("/usr/lib/jvm").glob("*/lib/src.zip"))
    if not zips:
        return []
    with zipfile.ZipFile(zips[0]) as z:
        names = sorted(
            n for n in z.namelist() if n.startswith("java.base/java/util/") and n.endswith(".java")
        )
        return [
            (n, z.read(n).decode("utf-8", "replace")[:60_000])
            for n in names[:: max(1, len(names) // limit)][:limit]
        ]


def _gettext(lang: str, domains: list[str]) -> str:
    return _mo_text(lang, domains)[0][:80_000]


# Per category, sources as (name, loader); even positions calibrate, odd ones evaluate.
def _sources() -> dict[str, list[tuple[str, object]]]:
    def files(pattern: str, limit: int = 6) -> object:
        return lambda: [(str(p), _read(p)) for p in _files(pattern, limit)]

    def gettext(langs: list[str], domains: list[str]) -> object:
        return lambda: [(f"{lang}:{','.join(domains)}", _gettext(lang, domains)) for lang in langs]

    def man_pages(pages: list[str]) -> object:
        return lambda: [(f"man {page}", _man(page)[:60_000]) for page in pages]

    half = len(MO_DOMAINS) // 2
    first, second = MO_DOMAINS[:half], [*MO_DOMAINS[half:], "Linux-PAM", "PackageKit", "gtk20"]
    return {
        "code": [
            ("C headers", files("/usr/include/*.h", 10)),
            ("C++ headers", files("/usr/include/c++/*/bits/*.h", 8)),
            ("Go", files("/usr/share/doc/git/contrib/persistent-https/*.go", 4)),
            ("Java", _java),
            ("JavaScript", files("/usr/lib/node_modules/npm/lib/commands/*.js", 10)),
            ("TypeScript", files("/usr/lib/node_modules/npm/node_modules/glob/dist/esm/*.d.ts", 6)),
            ("shell", files("/usr/share/doc/git/contrib/**/*.sh", 6)),
            ("SQL", files("/usr/share/postgresql/*/*.sql", 4)),
            ("Perl", files("/usr/share/perl/*/File/*.pm", 8)),
        ],
        "markup": [
            ("Markdown", files("/root/.cargo/registry/src/*/pyo3-*/guide/src/*.md", 8)),
            ("HTML", files("/root/.rustup/toolchains/*/share/doc/rust/html/rustdoc/*.html", 4)),
            (
                "YAML",
                files("/usr/lib/google-cloud-sdk/lib/googlecloudsdk/schemas/compute/v1/*.yaml", 6),
            ),
            ("CSV", files("/usr/share/distro-info/*.csv", 2)),
            ("logs", files("/var/log/*.log", 3)),
        ],
        "prose": [
            ("licences", files("/usr/share/common-licenses/[A-L]*", 6)),
            ("READMEs", files("/usr/share/doc/*/README*", 10)),
            ("changelogs", files("/root/.cargo/registry/src/*/*/CHANGELOG.md", 6)),
            (
                "man pages, other programs",
                man_pages(["sed", "find", "ssh", "curl", "psql", "less"]),
            ),
        ],
        "json": [
            (
                "boto3 resources",
                files("/usr/lib/python3*/site-packages/boto3/data/*/*/resources-1.json", 6),
            ),
            (
                "npm package.json",
                files("/usr/lib/node_modules/npm/node_modules/*/package.json", 20),
            ),
            (
                "boto3 (pyenv)",
                files(
                    "/root/.pyenv/versions/*/lib/python*/site-packages/boto3/data/*/*/resources-1.json",
                    6,
                ),
            ),
            ("iso-codes", files("/usr/share/iso-codes/json/*.json", 4)),
        ],
        "cjk": [
            ("zh/ja/ko, first programs", gettext(["zh_CN", "zh_TW", "ja", "ko"], first)),
            ("zh/ja/ko, other programs", gettext(["zh_CN", "zh_TW", "ja", "ko"], second)),
        ],
        # Each language on both sides: its catalogues of one set of programs on each.
        "other scripts": [
            ("ar/he/hi, first programs", gettext(["ar", "he", "hi"], [*first, "Linux-PAM"])),
            (
                "ar/he/hi, other programs",
                gettext(["ar", "he", "hi"], ["PackageKit", "gtk20", "glib20"]),
            ),
            ("th/vi/id, first programs", gettext(["th", "vi", "id"], [*first, "Linux-PAM"])),
            (
                "th/vi/id, other programs",
                gettext(["th", "vi", "id"], ["PackageKit", "gtk20", "glib20"]),
            ),
        ],
    }


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "-" for c in text).strip("-")


def build_evaluation() -> None:
    """Writes tests/corpus/tokens/evaluate/<category>/*.txt and its MANIFEST.tsv.

    Copies the evaluation side of the split by source: every second source of each category
    (``_sources``), none of which the coefficients were fitted on.
    """
    import shutil

    out_dir = CORPUS / "evaluate"
    shutil.rmtree(out_dir, ignore_errors=True)
    rows = ["category\tfile\tsource\tfrom"]
    for category, sources in _sources().items():
        folder = out_dir / _slug(category)
        for index, (name, load) in enumerate(sources):
            if index % 2 == 0:
                continue
            for path, text in load():  # type: ignore[operator]
                if not text.strip():
                    continue
                # Always .txt: linters and formatters must not mistake the corpus for sources.
                # Files are named by their folder and name (many are all called package.json
                # or README); catalogues and man pages by what precedes the ':'.
                where = pathlib.PurePath(path)
                label = f"{where.parent.name}-{where.name}" if path.startswith("/") else path
                file = f"{_slug(name)}--{_slug(label.split(':')[0])}.txt"
                if (folder / file).exists():
                    sys.exit(f"two sources would both write {file}")
                folder.mkdir(parents=True, exist_ok=True)
                (folder / file).write_text(text, encoding="utf-8")
                rows.append(f"{_slug(category)}\t{file}\t{name}\t{path}")
    (out_dir / "MANIFEST.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {len(rows) - 1} files under {out_dir}")


def evaluate() -> None:
    """Prints the per-category error on the evaluation sources and the held-out files."""
    try:
        from memstrata.tokens import count_tokens, estimate_tokens
    except ImportError:
        sys.exit("evaluate needs the built memstrata package on the path")
    print(
        f"{'encoding':12} {'split':9} {'category':13} {'n':>5} {'median':>7} {'p95':>7}"
        f" {'exact':>6}"
    )
    for encoding in ["o200k_base", "cl100k_base"]:
        for split in ["evaluate", "heldout"]:
            by_category: dict[str, list[str]] = {}
            for category, chunk in ref.corpus_chunks(split):
                by_category.setdefault(category, []).append(chunk)
            for category, chunks in by_category.items():
                errors, counted = [], 0
                for chunk in chunks:
                    exact = count_tokens(chunk, encoding=encoding)
                    estimate = estimate_tokens(chunk, model=encoding)
                    errors.append(abs(estimate - exact) / exact)
                    counted += estimate == exact
                median, p95 = ref.error_quantiles(errors)
                print(
                    f"{encoding:12} {split:9} {category:13} {len(errors):5d} {median:7.2%}"
                    f" {p95:7.2%} {counted / len(errors):6.1%}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = {
        "build-corpus": build_corpus,
        "build-evaluation": build_evaluation,
        "fit": fit,
        "evaluate": evaluate,
    }
    parser.add_argument("command", choices=list(commands))
    commands[parser.parse_args().command]()


if __name__ == "__main__":
    main()
