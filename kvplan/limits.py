"""The ranges a real deployment can have, for every number kvplan reads from a user.

Every input (command-line options, workloads, traces, check specs, saved profiles, model configs)
is checked against these bounds before any arithmetic, so that a huge, negative or non-finite
value is one line on stderr (exit 2) instead of an overflow, a hang or an allocation without
bound. The bounds are generous: each is orders of magnitude above what any GPU or model has today.
The input descriptions (`kvplan.schema` kinds) publish them in docs/schemas/input/."""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40
PIB = 1 << 50

MAX_BLOCKS = 10**8              # KV-cache blocks in one pool (the null block included)
MAX_TOKENS = 10**8              # tokens of one request, a model length, a step's token budget
MAX_TOKEN_ID = 2**63 - 1        # a token id (vLLM keeps them in int64 tensors)
MAX_BYTES = 4 * PIB             # any memory size: a GPU, a KV cache, weights
MAX_STEPS = 10**9               # scheduler steps: an arrival step, a run's length
MAX_RECORDED_STEPS = 10**7      # steps of a run that writes one line per step (records, timeline)
MAX_REQUESTS = 10**7            # requests (or conversations) of one trace or workload
MAX_SEQS = 10**6                # requests running at once (max_num_seqs)
MAX_PARALLEL = 4096             # tensor- or pipeline-parallel size
MAX_LAYERS = 10_000             # layers of a model
MAX_WIDTH = 10**7               # a hidden size, an intermediate size, a vocabulary
MAX_HEADS = 10**5               # attention heads, KV heads, a head size, a state dimension
MAX_SECONDS = 10**7             # a time in seconds (about 115 days): arrivals, durations, think times
MAX_STEP_MS = 10**6             # one scheduler step, in milliseconds
MAX_RATE = 10**6                # arrivals per second
MAX_SEED = 2**63 - 1            # a random seed
MAX_TEXT = 1024                 # characters of a name, an id or a setting given as text
MAX_PATH = 4096                 # characters of a path
MAX_INPUT_BYTES = 2 * GIB       # size of one input file
MAX_DIGITS = 30                 # digits of a number given as text (a size, a count)
