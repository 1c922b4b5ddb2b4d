#!/usr/bin/env python3
"""make_tokens.py - the benchmark's real-text token files, built deterministically.

The corpus is the King James Bible of the Debian packages bible-kjv and bible-kjv-text (the
`bible` program prints it), or any text file given with --text. The text is split into a
training part (the first 90%) and a validation part (the rest), a byte-level BPE tokenizer is
trained on the training part, and both parts are written as nanoGPT token files:

    OUTDIR/kjv_train.bin       raw little-endian uint16 token ids, no header
    OUTDIR/kjv_val.bin         the same for the validation part
    OUTDIR/kjv_tokenizer.json  the merges (enough to encode and decode)

    python3 bench/make_tokens.py -o data/                # vocab 8192, as gpt10m and gpt30m
    python3 bench/make_tokens.py -o data/ --vocab 256    # plain bytes, as tiny
    python3 bench/make_tokens.py -o data/ --text other.txt --prefix other

Cleaning of the Bible text. `bible "Gen1:1-Rev22:21"` prints each chapter as a heading line
("Genesis 1") and numbered verses wrapped at the terminal width. Verse numbers are dropped and
each chapter becomes its heading line followed by one paragraph, the chapter's verses joined by
single spaces; chapters are separated by a blank line. A --text file is used as it is (its bytes,
only CRLF line ends turned into LF).

The split. The validation part starts at the first paragraph boundary (a blank line) at or after
90% of the text's bytes, or at exactly 90% when the text has no paragraph boundary there.

The tokenizer. Tokens 0..255 are the bytes; merge i makes token 256 + i from a pair of earlier
tokens. The text is first cut into words as GPT-2 does (letters, digits and other symbols
each in their own runs, a single leading space kept on the word that follows it, contractions
like 's split off, runs of white space apart); merges never cross word boundaries. Training
counts each distinct word once with its frequency and keeps the counts of adjacent pairs up to
date as merges change the few words that contain the merged pair. Each merge takes the most
frequent pair, the smallest (left id, right id) among equal counts, so the result does not
depend on dictionary or hash order. Encoding applies the merges to each word in merge order.
Everything is pure Python; the output is the same bytes on every run.
"""

import argparse
import hashlib
import heapq
import json
import os
import re
import shutil
import subprocess
import sys
import time
from array import array
from collections import Counter

# GPT-2's pre-tokeniser with Python re classes: [^\W\d_] is a letter, \d a digit; the symbol run
# is anything that is neither white space, letter nor digit (the underscore included).
WORD_PATTERN = (r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
WORD_RE = re.compile(WORD_PATTERN)

BIBLE_RANGE = "Gen1:1-Rev22:21"
SPLIT_FRACTION = 0.9
HEADING_RE = re.compile(r"^(\S.*) (\d+)$")
VERSE_RE = re.compile(r"^\s+\d+ (.*)$")


def fail(message):
    sys.exit(f"make_tokens.py: {message}")


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


def bible_text():
    """The King James Bible from the `bible` program, cleaned as the module docstring says."""
    if shutil.which("bible") is None:
        fail("the `bible` program is missing; install the King James Bible with\n"
             "    sudo apt-get install bible-kjv      (it pulls in bible-kjv-text)\n"
             "or give another corpus with --text FILE")
    # A fixed line width, so that nothing depends on the terminal (the lines are re-flowed).
    env = dict(os.environ, COLUMNS="80")
    run = subprocess.run(["bible", BIBLE_RANGE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, check=False)
    if run.returncode != 0 or not run.stdout:
        fail(f"`bible {BIBLE_RANGE}` failed (exit {run.returncode}): "
             + run.stderr.decode(errors="replace").strip())
    return clean_bible(run.stdout.decode("utf-8"))


def clean_bible(raw):
    """Headings kept, verse numbers dropped, each chapter's verses as one paragraph."""
    chapters = []  # (heading, [verse text])
    previous_blank = True
    for line in raw.split("\n"):
        line = line.rstrip()
        if not line:
            previous_blank = True
            continue
        verse = VERSE_RE.match(line)
        if verse:
            if not chapters:
                fail("the `bible` output has a verse before the first chapter heading")
            chapters[-1][1].append(verse.group(1).strip())
        elif previous_blank and HEADING_RE.match(line):
            chapters.append((line, []))
        else:  # a wrapped continuation of the verse before
            if not chapters or not chapters[-1][1]:
                fail(f"unexpected line in the `bible` output: {line!r}")
            chapters[-1][1][-1] += " " + line.strip()
        previous_blank = False
    verses = sum(len(v) for _, v in chapters)
    # The KJV has 1189 chapters and 31102 verses; anything else means the format changed.
    if len(chapters) != 1189 or verses != 31102:
        fail(f"expected 1189 chapters and 31102 verses from `bible`, got {len(chapters)} "
             f"and {verses}; the output format may have changed")
    return "\n\n".join(heading + "\n" + " ".join(v) for heading, v in chapters) + "\n"


def file_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    if not data:
        fail(f"{path}: empty file")
    # surrogateescape keeps bytes that are not UTF-8, so that encoding gives them back exactly.
    return data.decode("utf-8", errors="surrogateescape").replace("\r\n", "\n")


def split_point(text):
    """Index where the validation part starts."""
    target = int(len(text) * SPLIT_FRACTION)
    boundary = text.find("\n\n", target)
    if boundary < 0 or boundary > target + max(len(text) // 100, 1):
        return target
    return boundary + 2


def to_bytes(text):
    return text.encode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------------------------------------
# Byte-level BPE
# ---------------------------------------------------------------------------------------------


def word_counts(text):
    """{word bytes: frequency} of the pre-tokenised text."""
    return Counter(to_bytes(w) for w in WORD_RE.findall(text))


def train_bpe(counts, vocab_size, progress=None):
    """The merges [(left, right)], merge i making token 256 + i.

    words[i] is the current token sequence of distinct word i; pair_count holds the
    frequency-weighted count of every adjacent pair, and pair_words the words where each pair
    was ever seen (checked when used, so removals can be lazy). The heap holds (-count, left,
    right) entries; an entry is current when its count equals pair_count, and stale entries are
    dropped or re-pushed with the current count as they surface.
    """
    items = sorted(counts.items())  # a fixed order, for reproducible bookkeeping
    words = [list(w) for w, _ in items]
    freqs = [f for _, f in items]
    pair_count = {}
    pair_words = {}
    for i, w in enumerate(words):
        f = freqs[i]
        for pair in zip(w, w[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + f
            pair_words.setdefault(pair, set()).add(i)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    while len(merges) < vocab_size - 256 and heap:
        neg, a, b = heapq.heappop(heap)
        current = pair_count.get((a, b), 0)
        if -neg != current:
            if 0 < current < -neg:  # the count fell since this entry: queue it again
                heapq.heappush(heap, (-current, a, b))
            continue
        new = 256 + len(merges)
        merges.append((a, b))
        changed = {}  # pair -> change of its count
        for i in sorted(pair_words.pop((a, b))):
            w = words[i]
            if len(w) < 2:
                continue
            f = freqs[i]
            merged = []
            j = 0
            found = False
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    merged.append(new)
                    j += 2
                    found = True
                else:
                    merged.append(w[j])
                    j += 1
            if not found:
                continue
            for pair in zip(w, w[1:]):
                changed[pair] = changed.get(pair, 0) - f
            for pair in zip(merged, merged[1:]):
                changed[pair] = changed.get(pair, 0) + f
                pair_words.setdefault(pair, set()).add(i)
            words[i] = merged
        for pair, delta in changed.items():
            if delta == 0:
                continue
            count = pair_count.get(pair, 0) + delta
            if count > 0:
                pair_count[pair] = count
                if delta > 0:
                    heapq.heappush(heap, (-count, pair[0], pair[1]))
            else:
                pair_count.pop(pair, None)
        pair_count.pop((a, b), None)
        if progress and len(merges) % 1000 == 0:
            progress(len(merges))
    return merges


class Encoder:
    """Applies the merges to words, with a cache of the words seen."""

    def __init__(self, merges):
        self.pairs = list(merges)
        self.rank = {pair: i for i, pair in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        tokens = self.cache.get(w)
        if tokens is not None:
            return tokens
        tokens = list(w)
        rank = self.rank
        while len(tokens) > 1:
            best = None
            for pair in zip(tokens, tokens[1:]):
                r = rank.get(pair)
                if r is not None and (best is None or r < best):
                    best = r
            if best is None:
                break
            a, b = self.pairs[best]
            new = 256 + best
            merged = []
            j = 0
            while j < len(tokens):
                if j + 1 < len(tokens) and tokens[j] == a and tokens[j + 1] == b:
                    merged.append(new)
                    j += 2
                else:
                    merged.append(tokens[j])
                    j += 1
            tokens = merged
        self.cache[w] = tokens
        return tokens

    def encode(self, text):
        out = array("H")
        for w in WORD_RE.findall(text):
            out.extend(self.word(to_bytes(w)))
        return out


def token_bytes(merges):
    """The bytes of every token id."""
    table = [bytes([i]) for i in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def write_tokens(path, tokens):
    """Raw little-endian uint16, no header (nanoGPT's .bin format)."""
    data = array("H", tokens)
    if sys.byteorder != "little":
        data.byteswap()
    raw = data.tobytes()
    with open(path, "wb") as f:
        f.write(raw)
    return hashlib.sha256(raw).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--outdir", required=True, help="folder for the output files")
    ap.add_argument("--vocab", type=int, default=8192,
                    help="vocabulary size, 256 (bytes only) to 65536 (default 8192)")
    ap.add_argument("--text", help="a text file to use instead of the King James Bible")
    ap.add_argument("--prefix", default="kjv", help="output file name prefix (default kjv)")
    ap.add_argument("--quiet", action="store_true", help="only the summary line")
    a = ap.parse_args()
    if not 256 <= a.vocab <= 65536:
        ap.error("--vocab must be between 256 and 65536 (token ids are uint16)")

    def note(message):
        if not a.quiet:
            print(message, file=sys.stderr, flush=True)

    start = time.perf_counter()
    text = file_text(a.text) if a.text else bible_text()
    cut = split_point(text)
    train_text, val_text = text[:cut], text[cut:]
    if not train_text or not val_text:
        fail("the text is too short to split into training and validation parts")
    source = a.text if a.text else f"bible {BIBLE_RANGE} (bible-kjv)"
    note(f"{source}: {len(to_bytes(text)):,} bytes of text, validation from byte "
         f"{len(to_bytes(train_text)):,}")

    if a.vocab == 256:
        merges = []
        train_tokens = array("H", list(to_bytes(train_text)))
        val_tokens = array("H", list(to_bytes(val_text)))
    else:
        counts = word_counts(train_text)
        note(f"{len(counts):,} distinct words; training {a.vocab - 256} merges")
        t0 = time.perf_counter()
        merges = train_bpe(counts, a.vocab,
                           progress=lambda n: note(f"  {n} merges, "
                                                   f"{time.perf_counter() - t0:.1f}s"))
        if len(merges) < a.vocab - 256:
            note(f"warning: only {len(merges)} merges possible; the vocabulary has "
                 f"{256 + len(merges)} tokens")
        note(f"merges done in {time.perf_counter() - t0:.1f}s")
        encoder = Encoder(merges)
        train_tokens = encoder.encode(train_text)
        val_tokens = encoder.encode(val_text)

    # The encoding must be lossless: decode both parts and compare.
    table = token_bytes(merges)
    for name, part, tokens in (("train", train_text, train_tokens), ("val", val_text, val_tokens)):
        if b"".join(table[t] for t in tokens) != to_bytes(part):
            fail(f"internal error: the {name} tokens do not decode to the text")

    os.makedirs(a.outdir, exist_ok=True)
    base = os.path.join(a.outdir, a.prefix)
    train_sha = write_tokens(base + "_train.bin", train_tokens)
    val_sha = write_tokens(base + "_val.bin", val_tokens)
    tokenizer = {
        "type": "byte-level BPE",
        "vocab_size": 256 + len(merges),
        "pretokenizer": WORD_PATTERN,
        "note": "tokens 0..255 are bytes; merges[i] = [left, right] makes token 256 + i",
        "source": source,
        "text_bytes": len(to_bytes(text)),
        "split_byte": len(to_bytes(train_text)),
        "train_sha256": train_sha,
        "val_sha256": val_sha,
        "merges": [list(m) for m in merges],
    }
    with open(base + "_tokenizer.json", "w", newline="\n") as f:
        json.dump(tokenizer, f, indent=None, separators=(",", ":"))
        f.write("\n")

    text_bytes = len(to_bytes(text))
    tokens = len(train_tokens) + len(val_tokens)
    print(f"{base}_{{train,val}}.bin: {text_bytes:,} bytes of text -> {tokens:,} tokens "
          f"(train {len(train_tokens):,}, val {len(val_tokens):,}), vocab {256 + len(merges)}, "
          f"{text_bytes / tokens:.3f} bytes/token, train sha256 {train_sha}, "
          f"{time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
