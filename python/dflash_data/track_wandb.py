"""The Weights & Biases tracker of `dflash-data track`, and a reader of offline W&B runs.

The tracker logs into one W&B run per tracker run (its id is the follower's run id, so a resumed
trainer continues the same run with resume="allow"), under <dump_folder>/wandb. Each record is
one wandb.log call holding "step" and its scalars; the scalars use "step" as their x axis
(define_metric), so W&B's own counter (_step) never has to match the trainer's steps. The
project, entity, name and mode come from the config's metrics keys; when empty, W&B reads its
own WANDB_PROJECT, WANDB_ENTITY, WANDB_NAME and WANDB_MODE.
"""

import json
import struct
import time
from pathlib import Path

from dflash_data.track import KINDS


class WandbTracker:
    def __init__(self, ctx):
        import wandb

        # W&B names the run's local folder by the second it starts and the run id: a continued run
        # starts in a later second than the last start, or it would write into that folder.
        since = time.time() - float(ctx.entry.get("started", 0))
        if 0 <= since < 1.1:
            time.sleep(1.1 - since)
        ctx.entry["started"] = time.time()
        s = ctx.settings
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                  save_code=False, init_timeout=60)
        self.run = wandb.init(
            project=s.get("wandb_project") or None,
            entity=s.get("wandb_entity") or None,
            name=s.get("run_name") or None,
            mode=s.get("wandb_mode") or None,
            id=ctx.run_id,
            resume="allow",
            dir=str(ctx.dump_folder),
            config=ctx.config or None,
            allow_val_change=True,
            settings=settings,
        )
        self.run.define_metric("step", hidden=True)
        for kind in KINDS:
            self.run.define_metric(f"{kind}/*", step_metric="step")

    def log(self, step, scalars):
        self.run.log({"step": step, **scalars})

    def flush(self):
        pass

    def close(self):
        self.run.finish()


# An offline run's transaction log (<dir>/wandb/offline-run-*/run-<id>.wandb): a 7-byte header
# (":W&B", magic 0xBEE1, version 0), then LevelDB log records in 32 KiB blocks counted from the
# file's start (each chunk: crc32c u32, length u16, type u8 full/first/middle/last; fewer than 7
# bytes left in a block are padding), each record a serialized wandb_internal_pb2.Record.
_BLOCK = 32768
_CHUNK_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_records(path):
    """Yields the wandb_internal_pb2.Record messages of a .wandb file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:7]!r})")
    pos, pending = 7, b""
    while pos + _CHUNK_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _CHUNK_HEADER])
        pos += _CHUNK_HEADER
        chunk = data[pos:pos + length]
        pos += length
        if kind == 0 and length == 0:
            continue
        if kind in (_FULL, _FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def read_offline_run(path):
    """The run id, config and history rows of one .wandb file: {"run_id", "config", "history"},
    each history row a dict of the logged keys (values decoded from JSON)."""
    run_id, config, history = None, {}, []
    for record in read_records(path):
        which = record.WhichOneof("record_type")
        if which == "run":
            run_id = record.run.run_id
            for item in record.run.config.update:
                config[item.key] = json.loads(item.value_json)
        elif which == "config":
            for item in record.config.update:
                config[item.key] = json.loads(item.value_json)
        elif which == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            history.append(row)
    return {"run_id": run_id, "config": config, "history": history}
