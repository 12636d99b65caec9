"""What `dflash-data prepare` writes: the trainer's JSONL (`{"input_ids": [...], "loss_mask": [...]}` per line) and
token-shard directories in the binary format of docs/data-formats.md ("Token shards"), written as `dflash-train
prepare` writes them: the same bytes, the same index.json, the same atomic life cycle."""

import json
import os
import struct
import sys
from array import array
from pathlib import Path

TOKEN_MAGIC = b"DFLTOK\x00\x01"
TOKEN_SHARD_VERSION = 1
HEADER_BYTES = 64
DEFAULT_SEQUENCES_PER_SHARD = 65536
_MASK_DIGITS = bytes.maketrans(b"\x00\x01", b"01")
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


def jsonl_line(ids, mask):
    """One JSONL line (no newline) for token ids (a list of ints) and a 0/1 mask (bytes)."""
    mask_digits = ",".join(mask.translate(_MASK_DIGITS).decode())
    return '{"input_ids":' + _COMPACT_JSON.encode(ids) + ',"loss_mask":[' + mask_digits + "]}"


def ids_bytes(ids):
    """Token ids as little-endian i32, the shard payload."""
    packed = array("i", ids)
    if packed.itemsize != 4:
        return struct.pack(f"<{len(ids)}i", *ids)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _fsync_close(f):
    f.flush()
    os.fsync(f.fileno())
    f.close()


class JsonlWriter:
    """Writes OUT.jsonl through a temporary file renamed into place by commit(); abort() leaves no partial file."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.name + ".partial")
        self._file = open(self._tmp, "w", encoding="utf-8")

    def write(self, line):
        self._file.write(line)
        self._file.write("\n")

    def commit(self):
        _fsync_close(self._file)
        os.replace(self._tmp, self.path)

    def abort(self):
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class TokenShardWriter:
    """Writes a token-shard directory: tokens-00000.bin, ... with `sequences_per_shard` sequences each, then
    index.json. The old index.json is removed before the first shard is written and the new one is written last, so
    an interrupted run leaves a directory that refuses to open; shards of an earlier run that the new index does not
    list are removed after it. A shard's ids and masks are staged in two part files, so memory stays small."""

    def __init__(self, directory, vocab_size, sequences_per_shard=DEFAULT_SEQUENCES_PER_SHARD):
        self.directory = Path(directory)
        self.vocab_size = int(vocab_size)
        self.per_shard = int(sequences_per_shard)
        self._started = False
        self._entries = []
        self._lengths = []
        self._ids = self._mask = None
        self.sequences = 0
        self.tokens = 0

    def _start(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "index.json").unlink(missing_ok=True)
        self._started = True

    def _part(self, kind):
        return self.directory / f".tokens-{len(self._entries):05d}.{kind}.part"

    def append(self, ids_le_bytes, mask):
        if not self._started:
            self._start()
        if self._ids is None:
            self._ids, self._mask = open(self._part("ids"), "wb"), open(self._part("mask"), "wb")
        self._ids.write(ids_le_bytes)
        self._mask.write(mask)
        self._lengths.append(len(mask))
        if len(self._lengths) == self.per_shard:
            self._flush()

    def _flush(self):
        n, first = len(self._lengths), self.sequences
        name = f"tokens-{len(self._entries):05d}.bin"
        offsets = [0]
        for length in self._lengths:
            offsets.append(offsets[-1] + length)
        t = offsets[-1]
        fields = (TOKEN_SHARD_VERSION, HEADER_BYTES, n, t, self.vocab_size, first)
        header = TOKEN_MAGIC + struct.pack("<IIQQQQ16x", *fields)
        ids_part, mask_part = self._part("ids"), self._part("mask")
        self._ids.close()
        self._mask.close()
        tmp = self.directory / (name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(header)
            out.write(struct.pack(f"<{n + 1}Q", *offsets))
            for part in (ids_part, mask_part):
                with open(part, "rb") as f:
                    while block := f.read(1 << 24):
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.directory / name)
        ids_part.unlink()
        mask_part.unlink()
        self._entries.append({"file": name, "first_sequence": first, "sequences": n, "tokens": t})
        self.sequences += n
        self.tokens += t
        self._lengths = []
        self._ids = self._mask = None

    def finish(self):
        """Writes the last shard and index.json, then removes stale shards; returns the number of shard files."""
        if not self._started:
            return 0
        if self._lengths:
            self._flush()
        index = {
            "format": "dflash-token-shards", "version": TOKEN_SHARD_VERSION, "vocab_size": self.vocab_size,
            "sequences": self.sequences, "tokens": self.tokens, "shards": self._entries,
        }
        tmp = self.directory / "index.json.tmp"
        with open(tmp, "w") as f:
            # Sorted keys and two-space indentation: byte for byte what the C++ writer (nlohmann dump(2)) writes.
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "index.json")
        listed = {entry["file"] for entry in self._entries}
        for stale in self.directory.glob("tokens-*.bin"):
            if stale.name not in listed:
                stale.unlink()
        return len(self._entries)

    def abort(self):
        """Removes this run's part files; the directory keeps no index.json, so it refuses to open."""
        for f in (self._ids, self._mask):
            if f is not None:
                f.close()
        if self._started:
            for part in self.directory.glob(".tokens-*.part"):
                part.unlink(missing_ok=True)
