"""The fixed shape of the Qwen3 demo (and what the miniature Kimi shares; docs/demo-models.md): bump
FABRICATION_VERSION with any change."""

from __future__ import annotations

FABRICATION_VERSION = "1"

# --- Tokenizer -------------------------------------------------------------------------------------
EOS_TOKEN = "<|endoftext|>"
SYSTEM_TOKEN = "<|system|>"
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, MASK_TOKEN)  # ids 0..4 in this order
TOKENIZER_VOCAB_SIZE = 1024  # requested; BPE stops earlier when no pair occurs twice
TOKENIZER_MIN_FREQUENCY = 2  # both demos (tokenizer.byte_level_bpe)
VOCAB_PAD_MULTIPLE = 64  # config vocab_size is the tokenizer size rounded up (like real checkpoints)

# --- Shared geometry ---------------------------------------------------------------------------------
HIDDEN_SIZE = 128
HEAD_DIM = 64  # one of the head sizes vLLM's CPU attention accepts (32, 64, 80, ...)
NUM_KV_HEADS = 1  # target and drafter use the same KV head shape so their KV cache pages match
RMS_NORM_EPS = 1e-6
ROPE_THETA = 10000.0
MAX_POSITION_EMBEDDINGS = 8192
TORCH_DTYPE = "float32"

CONTENT_DIM = 0  # constant marker of ordinary tokens
SPECIAL_DIM = 1  # constant marker of special tokens (and of the drafter's context features)
F_START = 2
F_DIMS = 64  # Fourier phase subspace: 32 frequency pairs (cos, sin); equals HEAD_DIM so one head carries it
NUM_FREQUENCIES = F_DIMS // 2

# --- Target (Qwen3ForCausalLM) --------------------------------------------------------------------------
TARGET_LAYERS = 4
TARGET_HEADS = 2  # head 0 copies (self for ordinary tokens, prompt mean after special ones); head 1 is idle
TARGET_INTERMEDIATE = 256
TARGET_COPY_GAIN = 0.125  # how much of the attended phase vector each layer adds to the residual
LM_HEAD_SCALE = 2.5  # sets the peak logit near 25-30: sharp enough that T=1 sampling mostly follows the walk

# --- Drafter (DFlashDraftModel) -------------------------------------------------------------------------
DRAFTER_LAYERS = 2  # layer 0: positional copy + rotation; layer 1: the deliberate misses (MLP)
DRAFTER_BLOCK_SIZE = 16  # bonus token + up to 15 mask slots, the z-lab convention
DRAFTER_HEADS = DRAFTER_BLOCK_SIZE - 1  # head j serves mask slot j
MAX_NUM_SPECULATIVE_TOKENS = DRAFTER_BLOCK_SIZE - 1
TARGET_LAYER_IDS = (1, 3)  # which target layers' outputs feed the drafter's fc (vLLM reads layer id + 1)
DRAFTER_OUTPUT_GAIN = 1.0  # scale of the rotated phase vector written into a mask slot
DRAFTER_MISS_RATE = 0.15
DRAFTER_MISS_JUMP = 7  # a missed phase proposes the token this many steps further along the cycle
MISS_GATE_PEAK = 20.0  # gate pre-activation of a miss neuron on its own phase (silu(x) ~ x there)

# --- Attention sharpness -------------------------------------------------------------------------------
QK_NORM_WEIGHT = 12.0  # q_norm / k_norm weights: the logit gap between the intended key and any other
MIN_ATTENTION_LOGIT_GAP = 20.0  # fabrication refuses a geometry whose worst-case gap is below this

# --- Seeds (numpy PCG64) -----------------------------------------------------------------------------------
FREQUENCY_SEED = 20261121
FREQUENCY_CANDIDATES = 400
MISS_SEED = 7
