"""The TensorBoard tracker of `dflash-data track`: event files under
<dump_folder>/tensorboard/<run name>-<run id>/, written with tensorboard's own writer (no
TensorFlow): one scalar per numeric field against the step, and the config as hyperparameters
(the HParams dashboard) and as a text table (the Text dashboard), once per tracker run.
"""

import time

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.plugins.text import summary as text_summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from dflash_data.track import flatten


def hparams_summary(config):
    """The HParams plugin's session-start summary for a flat {name: value} config."""
    info = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
    for name, value in config.items():
        if value is None:
            continue
        if isinstance(value, bool):
            info.hparams[name].bool_value = value
        elif isinstance(value, (int, float)):
            info.hparams[name].number_value = value
        else:
            info.hparams[name].string_value = value if isinstance(value, str) else str(value)
    meta = hparams_metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_start_info=info))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=hparams_metadata.SESSION_START_INFO_TAG,
                                                                metadata=meta)])


def config_table(config):
    rows = "\n".join(f"| {name} | {value!r} |" for name, value in config.items())
    return "| key | value |\n|---|---|\n" + rows


class TensorBoardTracker:
    def __init__(self, ctx):
        folder = ctx.entry.setdefault("folder", ctx.run_folder())
        self.logdir = ctx.dump_folder / "tensorboard" / folder
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(self.logdir), flush_secs=5)
        if ctx.new and ctx.config:
            config = flatten(ctx.config)
            now = time.time()
            self.writer.add_event(event_pb2.Event(wall_time=now, step=0, summary=hparams_summary(config)))
            self.writer.add_event(
                event_pb2.Event(wall_time=now, step=0, summary=text_summary.text_pb("config", config_table(config))))

    def log(self, step, scalars):
        values = [summary_pb2.Summary.Value(tag=name, simple_value=float(v)) for name, v in scalars.items()]
        self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values)))

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()
