"""Random search for texts the token estimator misjudges by more than a factor of 2.

Usage (from the repository root, with the dev virtualenv and the extension installed)::

    .venv/bin/python tools/explore_tokens.py --seeds 200 --texts 100  # fresh random seeds
    .venv/bin/python tools/explore_tokens.py --first-seed 7 --seeds 1  # replay one seed
    .venv/bin/python tools/explore_tokens.py --kinds words  # words no vocabulary holds, alone

Each seed draws ``--texts`` texts from ``tests/adversarial_text.py`` (``--kinds all``: every
kind of segment; ``features``: the kinds the features tell apart, which the regression cases of
tests/test_tokens.py were drawn from; ``words``: words the vocabularies do not hold) and compares
``estimate_tokens`` with the exact count in both encodings. Every failure is printed with its
seed and index (``text`` number ``index`` drawn from ``random.Random(seed)``), so it can be
replayed and kept as a regression case.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

import adversarial_text as adv

from memstrata.tokens import count_tokens, estimate_tokens

ENCODINGS = ("o200k_base", "cl100k_base")
KINDS = {"all": adv.ALL_KINDS, "features": adv.KINDS, "words": adv.WORD_KINDS,
         "mixes": adv.MIX_KINDS}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first-seed", type=int, default=None, help="default: random")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--texts", type=int, default=100, help="texts per seed")
    parser.add_argument("--kinds", choices=sorted(KINDS), default="all")
    args = parser.parse_args()
    first = args.first_seed
    if first is None:
        first = random.SystemRandom().getrandbits(40)
    kinds = KINDS[args.kinds]
    start = time.perf_counter()
    searched = failures = 0
    for seed in range(first, first + args.seeds):
        rng = random.Random(seed)
        for index in range(args.texts):
            text = adv.text(rng, kinds)
            searched += 1
            for encoding in ENCODINGS:
                exact = count_tokens(text, encoding=encoding)
                estimate = estimate_tokens(text, model=encoding)
                if not exact / 2 <= estimate <= 2 * exact:
                    failures += 1
                    print(f"seed {seed} index {index} {encoding}: estimate {estimate}, "
                          f"exact {exact}, {len(text)} chars: {text[:80]!r}")  # fmt: skip
    elapsed = time.perf_counter() - start
    print(f"seeds {first}..{first + args.seeds - 1}: {searched} texts x {len(ENCODINGS)} "
          f"encodings, {failures} failures, {elapsed:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
