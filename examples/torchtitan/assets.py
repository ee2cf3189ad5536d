# SPDX-License-Identifier: Apache-2.0
"""A tokenizer and a text corpus made locally, so torchtitan trains offline.

torchtitan reads a Hugging Face tokenizer folder (``tokenizer.json`` + ``tokenizer_config.json``)
and a dataset that ``datasets.load_dataset(path, split="train")`` opens (its ``c4_test`` loader).
Both are generated here from a seed: a word-level vocabulary and documents drawn from a fixed
random Markov chain over it, so there is structure for the model to learn (the loss falls) and
every rank, in every run, reads the same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
UNK = "<|unk|>"


def _words(count: int) -> list[str]:
    return [f"w{i}" for i in range(count)]


def write_tokenizer(folder: Path, words: int) -> None:
    """A word-level tokenizer over ``words`` words plus BOS/EOS/UNK, split on whitespace."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {UNK: 0, BOS: 1, EOS: 2}
    for word in _words(words):
        vocab[word] = len(vocab)
    tokenizer = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOS}))


def write_corpus(folder: Path, words: int, documents: int, seed: int) -> None:
    """``documents`` JSON lines ``{"text": ...}``: each word follows its predecessor through one of
    four successors fixed per word (a sparse random Markov chain), 32 to 256 words long."""
    rng = random.Random(seed)
    vocab = _words(words)
    successors = [[rng.randrange(words) for _ in range(4)] for _ in range(words)]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as out:
        for _ in range(documents):
            word = rng.randrange(words)
            text = [vocab[word]]
            for _ in range(rng.randint(31, 255)):
                word = rng.choice(successors[word])
                text.append(vocab[word])
            out.write(json.dumps({"text": " ".join(text)}) + "\n")


def make(folder: Path, words: int = 1000, documents: int = 400, seed: int = 0) -> tuple[Path, Path]:
    """Writes both under ``folder``; returns (tokenizer folder, dataset folder)."""
    tokenizer, data = folder / "tokenizer", folder / "data"
    write_tokenizer(tokenizer, words)
    write_corpus(data, words, documents, seed)
    return tokenizer, data
