"""The bounds every number a user gives servebench must respect, written once.

A scenario file and a command line describe the same work, so a value `scenario validate`
refuses (`rates: [1e12]`) must be refused by `servebench load --rate 1e12` too, with the
same limit. docs/scenario-limits.md lists them; the scenario schema, the model specs and
the command line's value types (`servebench.cli.values`) all read them from here.

Two sorts: hard ceilings, beyond which a value is a slip whatever the study, and the
defaults of the scenario limits (`limits:` in a scenario, `servebench.scenario.schema.Limits`),
which a scenario may raise up to their own ceiling. The command line applies the defaults.
"""

from __future__ import annotations

# Where a person reads them: messages that name a limit point here.
LIMITS_DOC = "docs/scenario-limits.md"

# -- hard ceilings ---------------------------------------------------------------------------

MAX_BATCH = 65_536  # samples in one request (the byte cap in `Limits` usually bites first)
MAX_DELAY_US = 60_000_000  # batcher queue delay / timeout: one minute
MAX_THREADS = 1024  # server threads, instances per model
MAX_SECONDS = 3600.0  # a request timeout, a think time
MAX_GPUS = 64
MIN_RATE = 0.001  # requests per second; below it a trial's length is unbounded
MAX_COLD_START_REPEATS = 20  # each is a full server restart and model load: minutes
MAX_REPEATS = 1000  # replicates of a setting (workload.repeats); limits.max_repeats: 50
MAX_REMEASURES = 2  # measurements again of a disturbed replicate (workload.remeasure)
MAX_SEED = 2**64 - 1  # numpy's generators take no other
MAX_STABILITY_WINDOWS = 1000
MAX_SEARCH_STEPS = 100
MAX_TUNE_TRIALS = 100_000  # settings a configuration search may measure
# A search's level (tune.level: how often it may call equal settings different). Below
# 0.001 a race's look level is beyond what its 10,000 simulated A/A races can resolve;
# above 0.2 the word "significant" no longer means anything.
MIN_TUNE_LEVEL = 0.001
MAX_TUNE_LEVEL = 0.2
# A weighted mix of models in one trial (`workload.mix`): a weight is a relative share, so a
# ratio past a million to one is a slip; its models travel in the records as 1-byte codes.
MAX_MIX_WEIGHT = 1e6
MAX_MIX_MODELS = 127

# Model specs: far above any model a serving benchmark builds, so that a slip (an extra
# zero, `1e11`) is refused instead of exhausting memory in a builder or exporter.
MAX_DEPTH = 1024
MAX_WIDTH = 65_536
MAX_OUTPUTS = 1_000_000
MAX_SEQ_LEN = 65_536
MAX_HEADS = 1024
MAX_KERNEL_SIZE = 31
#: Elements of one sample at the served input (seq_len x features for sequence models):
#: 2**26 float32 values are 256 MiB per sample.
MAX_SAMPLE_ELEMENTS = 2**26
#: The longest model name (a Triton model's folder and URL path; a file name has 255 bytes,
#: and staging and replacing add a prefix and suffix to it).
MAX_NAME_CHARS = 128

# A user's files (`common.userfile`): what servebench holds in memory or copies is bounded
# before anything is read. A model's own bytes are `MAX_MODEL_MB` below.
#: Files and folders in one model folder (a Triton model folder, a SavedModel).
MAX_FOLDER_ENTRIES = 10_000
#: Bytes of input-data samples held in memory (an .npz's arrays, as its headers declare
#: them); one cycle of pre-encoded requests is held to the same bound.
MAX_INPUT_DATA_BYTES = 2**30
#: Bytes of a perf_analyzer JSON input-data file: its numbers become Python objects of
#: about 30 bytes per number written in 4 to 10, so the text is held to 1/16 of the arrays'.
MAX_INPUT_JSON_BYTES = MAX_INPUT_DATA_BYTES // 16
#: The most specs one family may hold. Each is exported and served (seconds apiece), so
#: more is a slip, not a study; checked before any spec is built.
MAX_FAMILY_SIZE = 10_000

# -- the scenario limits' defaults (what `limits:` may raise) ------------------------------

MAX_RATE = 100_000.0  # requests per second (limits.max_rate)
MAX_CONCURRENCY = 10_000  # concurrent requests, each its own connection (limits.max_concurrency)
MAX_REQUESTS = 10_000_000  # requests in one trial (limits.max_requests)
MAX_TRIAL_S = 86_400.0  # a trial's duration, warm-up, windows: a day (limits.max_trial_s)
MAX_REQUEST_MB = 256.0  # MiB of input tensors in one request (limits.max_request_mb)
#: A model's weights, and the bytes of a user's model file or folder, in MiB
#: (limits.max_model_mb).
MAX_MODEL_MB = 4096.0
