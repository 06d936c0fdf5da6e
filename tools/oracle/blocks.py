"""Family-independent NumPy blocks shared by the five oracles (gpt_oss.py, qwen3_moe.py,
glm4_moe.py, deepseek_v3.py, longcat_flash.py).

Owns: tensor access with block-FP8 dequantisation (Weights), RMSNorm, SiLU / SwiGLU, softmax,
sorted top-k, the default / YaRN RoPE frequency tables and their cos/sin, the half-split rotary
embedding, MoE expert dispatch, the sigmoid group-limited router, and Decoder, the pre-norm
decoder stack (weights, experts, layer loop) every oracle runs. Written from the upstream code
named in each docstring, never from this project's C sources. The math keeps the exact
operation order of the references (a reordering changes float32 bits).
"""
import math
import re
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
from safetensors_np import ModelFolder  # noqa: E402


# --- weights -------------------------------------------------------------------------------
class Weights:
    """Tensor access over a ModelFolder: plain tensors widened exactly, block-FP8 linears
    dequantised as W[i][j] = e4m3(W[i][j]) * scale[i // bo][j // bi] (DeepSeek
    inference/kernel.py weight_dequant; transformers FineGrainedFP8; edge blocks partial;
    scale F32, BF16 or F16 widened first). Records which tensors were read (used) and which are
    knowingly not part of the model (ignored). plain_dtypes: the dtypes an unquantised linear
    may have (None: any but F8)."""

    def __init__(self, model_dir, dtype, block=(128, 128), plain_dtypes=("BF16", "F16", "F32")):
        self.st = ModelFolder(model_dir)
        self.dt = dtype
        self.block = tuple(block)
        self.plain_dtypes = plain_dtypes
        self.used = set()
        self.ignored = set()
        self.n_fp8 = 0

    def __contains__(self, name):
        return name in self.st

    def shape(self, name):
        return list(self.st.info(name)["shape"])

    def w(self, name, shape=None):
        """A plain (unquantised) tensor."""
        info = self.st.info(name)
        if info["dtype"].startswith("F8_"):
            raise ValueError(f"{name}: {info['dtype']} where an unquantised tensor is expected")
        if name + "_scale_inv" in self.st:
            raise ValueError(f"{name}: has a _scale_inv but is not a quantised linear")
        return self.read(name, info, shape)

    def read(self, name, info, shape=None):
        """The tensor widened to the compute dtype, after checking its shape."""
        if shape is not None and list(info["shape"]) != list(shape):
            raise ValueError(f"{name}: shape {info['shape']}, expected {list(shape)}")
        self.used.add(name)
        return self.st.get(name).astype(self.dt)

    def check_linear(self, name, rows, cols):
        """Validates a linear's weight (+ scale) without decoding it. Returns its dtype."""
        info = self.st.info(name)
        if list(info["shape"]) != [rows, cols]:
            raise ValueError(f"{name}: shape {info['shape']}, expected {[rows, cols]}")
        sname = name + "_scale_inv"
        if sname not in self.st:
            if info["dtype"].startswith("F8_"):
                raise ValueError(f"{name}: {info['dtype']} without {sname}")
            if self.plain_dtypes and info["dtype"] not in self.plain_dtypes:
                raise ValueError(f"{name}: dtype {info['dtype']}")
            self.used.add(name)
            return info["dtype"]
        if info["dtype"] != "F8_E4M3":
            raise ValueError(f"{name}: {info['dtype']} with a weight_scale_inv (want F8_E4M3)")
        bo, bi = self.block
        want = [-(-rows // bo), -(-cols // bi)]
        sinfo = self.st.info(sname)
        if list(sinfo["shape"]) != want:
            raise ValueError(f"{sname}: shape {sinfo['shape']}, expected {want} (block {bo}x{bi})")
        if sinfo["dtype"] not in ("F32", "BF16", "F16"):
            raise ValueError(f"{sname}: scale dtype {sinfo['dtype']}")
        self.used.update((name, sname))
        return "F8_E4M3"

    def fp8_codes(self, name):
        """An F8_E4M3 tensor's values, exact in float32 (the e4m3fn table); NaN refused."""
        self.n_fp8 += 1
        codes = self.st.get(name)
        if np.isnan(codes).any():
            raise ValueError(f"{name}: NaN fp8 code")
        return codes

    def linear(self, name, rows, cols):
        """[out, in] weight of a linear: bf16/f16/f32 as stored, or F8_E4M3 x block scale."""
        if self.check_linear(name, rows, cols) != "F8_E4M3":
            return self.st.get(name).astype(self.dt)
        codes = self.fp8_codes(name)
        bo, bi = self.block
        scale = self.st.get(name + "_scale_inv").astype(np.float32).astype(self.dt)
        full = np.repeat(np.repeat(scale, bo, axis=0), bi, axis=1)[:rows, :cols]
        return codes.astype(self.dt) * full


def quant_block(cfg):
    """quantization_config -> (bo, bi); refuses what the oracles do not implement."""
    q = cfg.get("quantization_config") or {}
    if q and q.get("quant_method") not in ("fp8", None):
        raise NotImplementedError(f"quant_method {q.get('quant_method')}")
    if q.get("fmt", "e4m3") != "e4m3":
        raise NotImplementedError(f"fp8 fmt {q.get('fmt')}")
    return tuple(q.get("weight_block_size") or (128, 128))


def load_mlp(wts, prefix, inter, hidden):
    """(gate, up, down) weights of a SwiGLU MLP under `prefix` ([inter, hidden] x 2, [hidden,
    inter]): Qwen3MoeMLP / Glm4MoeMLP / DeepseekV3MLP / LongcatFlashMLP gate_proj, up_proj,
    down_proj (also the routed and shared experts)."""
    return (wts.linear(prefix + "gate_proj.weight", inter, hidden),
            wts.linear(prefix + "up_proj.weight", inter, hidden),
            wts.linear(prefix + "down_proj.weight", hidden, inter))


def ignore_extra_layers(wts, n_layers):
    """Marks model.layers.N.* with N >= num_hidden_layers as ignored: the MTP layer(s) that
    DeepseekV3Model / Glm4MoeModel._keys_to_ignore_on_load_unexpected leave out of the model."""
    for name in wts.st.keys():
        mt = re.match(r"model\.layers\.(\d+)\.", name)
        if mt and int(mt.group(1)) >= n_layers:
            wts.ignored.add(name)


# --- elementwise blocks --------------------------------------------------------------------
def rmsnorm(x, wt, eps):
    """Qwen3MoeRMSNorm / Glm4MoeRMSNorm / DeepseekV3RMSNorm / LongcatFlashRMSNorm:
    weight * (x * rsqrt(mean(x^2) + eps)), in the compute dtype (float32 like the references)."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return wt * (x / np.sqrt(var + x.dtype.type(eps)))


def silu(x):
    return x / (1 + np.exp(-x))


def swiglu(x, wg, wu, wd):
    """Qwen3MoeMLP / Glm4MoeMLP / DeepseekV3MLP / LongcatFlashMLP: down(silu(gate(x)) * up(x)),
    no biases."""
    return (silu(x @ wg.T) * (x @ wu.T)) @ wd.T


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def topk_desc(x, k):
    """Indices of the k largest per row, descending; ties: lower index first (torch.topk
    sorted=True order for distinct values)."""
    return np.argsort(-x, axis=-1, kind="stable")[:, :k]


# --- RoPE ----------------------------------------------------------------------------------
def yarn_get_mscale(scale=1.0, mscale=1.0):
    """modeling_rope_utils get_mscale / modeling_deepseek_v3.py, modeling_longcat_flash.py
    yarn_get_mscale: 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_type(rope_scaling):
    rs = rope_scaling or {}
    return rs.get("rope_type", rs.get("type", "default")) if rope_scaling else "default"


def rope_inv_freq(dim, theta):
    """(pos_freqs, inv_freq), float32 [dim/2] as torch computes them: pos_freqs =
    theta^(arange(0, dim, 2) / dim), inv_freq = 1 / pos_freqs (transformers
    compute_default_rope_parameters; openai/gpt-oss RotaryEmbedding
    _compute_concentration_and_inv_freq)."""
    base = float(theta)
    pos_freqs = np.power(np.float32(base), np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    return pos_freqs, (np.float32(1.0) / pos_freqs).astype(np.float32)


def yarn(dim, theta, pos_freqs, inv, factor, orig, rs):
    """(inv_freq float32 [dim/2], attention_factor) of YaRN, transformers
    modeling_rope_utils._compute_yarn_parameters (= openai/gpt-oss
    _compute_concentration_and_inv_freq): extrapolation inv = 1/pos_freqs, interpolation
    1/(factor*pos_freqs); low/high = dim*ln(orig/(beta*2*pi)) / (2 ln theta) for beta_fast /
    beta_slow, floored / ceiled unless truncate is false, clamped to [0, dim-1]; ramp =
    clip((i - low)/(high - low), 0, 1) (high += 0.001 when equal); extrapolation_factor =
    1 - ramp; inv_freq = interp * (1 - extrapolation_factor) + extrap * extrapolation_factor;
    attention_factor = rope_scaling.attention_factor, else get_mscale(factor, mscale) /
    get_mscale(factor, mscale_all_dim) when both are set (non-zero), else get_mscale(factor).
    `factor` and `orig` (original context) are the caller's: the families differ there. In
    float32 as torch."""
    base = float(theta)
    attn = rs.get("attention_factor")
    if attn is None:
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        attn = (yarn_get_mscale(factor, ms) / yarn_get_mscale(factor, msa)) if (ms and msa) \
            else yarn_get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def corr_dim(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low))
                   / np.float32(high - low), 0, 1).astype(np.float32)
    extrap = np.float32(1) - ramp
    inv_inter = np.float32(1) / (np.float32(factor) * pos_freqs)
    inv = inv_inter * (np.float32(1) - extrap) + inv * extrap
    return inv.astype(np.float32), float(attn)


def cos_sin(pos, inv_freq, dt, scaling=None, duplicate=False, f32_angles=False):
    """cos/sin tables [n, dim/2] (duplicate: [n, dim], transformers' emb = cat(freqs, freqs))
    of pos * inv_freq, times `scaling` (attention_factor / attention_scaling) when given: the
    rotary embedding forwards (transformers *RotaryEmbedding.forward, gpt-oss
    RotaryEmbedding._compute_cos_sin), in float32 like torch. With --f64 the angles are float64
    too, unless f32_angles (gpt-oss: float32 angles, widened)."""
    if dt == np.float32 or f32_angles:
        f = pos.astype(np.float32)[:, None] * inv_freq[None, :]
        if dt != np.float32:
            f = f.astype(dt)
    else:
        f = pos.astype(dt)[:, None] * inv_freq.astype(dt)[None, :]
    if duplicate:
        f = np.concatenate([f, f], axis=-1)
    cos, sin = np.cos(f), np.sin(f)
    if scaling is not None:
        s = np.float32(scaling) if dt == np.float32 else scaling
        cos, sin = cos * s, sin * s
    return cos.astype(dt), sin.astype(dt)


def rope_half(x, cos, sin):
    """Half-split RoPE on x [n, heads, d] with cos/sin [n, d/2]: (a, b) = halves ->
    (a cos - b sin, b cos + a sin) (openai/gpt-oss model.py _apply_rotary_emb; transformers
    apply_rotary_pos_emb with rotate_half, as DeepSeek's rope_interleave false)."""
    c, s = cos[:, None, :], sin[:, None, :]
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


# --- MoE -----------------------------------------------------------------------------------
def dispatch(t, idx, wts, expert_out):
    """Routed-expert sum: out[i] = sum over slots s of expert_out(idx[i, s], t[i]) * wts[i, s],
    each expert run once on the rows routed to it (Qwen3MoeSparseMoeBlock / Glm4MoeMoE /
    DeepseekV3MoE / LongcatFlashExperts forward loops, gpt-oss MLPBlock einsums)."""
    out = np.zeros_like(t)
    for e in np.unique(idx):
        rows, slot = np.nonzero(idx == e)
        out[rows] += expert_out(e, t[rows]) * wts[rows, slot][:, None]
    return out


def dump_routing(dump, l, g, idx, wts):
    dump[f"L{l}.router_logits"] = g
    dump[f"L{l}.topk_ids"] = idx.astype(np.int32)
    dump[f"L{l}.topk_w"] = wts


def group_limited_topk(g, bias, n_group, topk_group, top_k, norm_topk, rsf, fill, other_fill):
    """Sigmoid router with correction bias and group limit (noaux_tc): transformers
    DeepseekV3TopkRouter.forward / get_topk_indices, Glm4MoeMoE.route_tokens_to_experts, and
    DeepSeek inference/model.py Gate.forward. scores = sigmoid(g); scores_for_choice = scores +
    e_score_correction_bias (selection only); group score = sum of the top-2 scores_for_choice
    in each of n_group groups; the topk_group best groups kept, the other experts' entries set
    to `fill` (transformers 0.0, the official Gate -inf); top-k of that; weights = the unbiased
    scores gathered, / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor.
    Returns (ids [n, k] in torch.topk sorted=True order, weights [n, k], info) where info holds
    what --stats compares with: the selection without the group limit, without the bias, and
    with `other_fill` as the mask."""
    dt = g.dtype.type
    scores = 1 / (1 + np.exp(-g))                                # sigmoid
    sfc = scores + bias                                          # selection only
    n, E = sfc.shape
    gs = E // n_group
    grouped = sfc.reshape(n, n_group, gs)
    group_scores = (-np.sort(-grouped, axis=-1)[..., :min(2, gs)]).sum(axis=-1)  # top-2 sum
    gidx = topk_desc(group_scores, topk_group)
    keep = np.zeros((n, n_group), dtype=bool)
    np.put_along_axis(keep, gidx, True, axis=1)
    keep_e = np.repeat(keep, gs, axis=1)
    masked = np.where(keep_e, sfc, fill)
    idx = topk_desc(masked, top_k)
    w = np.take_along_axis(scores, idx, axis=1)
    if norm_topk:
        w = w / (w.sum(axis=-1, keepdims=True) + dt(1e-20))
    w = w * dt(rsf)
    info = {"idx_nogroup": topk_desc(sfc, top_k),
            "idx_nobias": topk_desc(np.where(keep_e, scores, fill), top_k),
            "idx_other_fill": topk_desc(np.where(keep_e, sfc, other_fill), top_k),
            "group_scores": group_scores, "masked": masked, "kept": keep_e}
    return idx, w, info


def route_changes(infos, top_k, other_fill_key):
    """--stats: of the routings in infos (group_limited_topk info), how many change their
    expert set without the group limit, without the bias, and with the other mask fill."""
    r = {"routings": 0, "group_limit_changed": 0, "bias_changed": 0, other_fill_key: 0}
    for _, inf in infos:
        sel = np.sort(topk_desc(inf["masked"], top_k), axis=1)
        r["routings"] += sel.shape[0]
        for k, alt in (("group_limit_changed", "idx_nogroup"), ("bias_changed", "idx_nobias"),
                       (other_fill_key, "idx_other_fill")):
            r[k] += int(np.sum(np.any(np.sort(inf[alt], 1) != sel, 1)))
    return r


def kth_gap(x, k, finite_only=False):
    """--stats: min over rows of (k-th largest - (k+1)-th largest) of x [n, m]; None when
    k >= m. finite_only: over the finite gaps only (inf when there is none)."""
    srt = -np.sort(-x, axis=1)
    if k >= srt.shape[1]:
        return None
    gp = srt[:, k - 1] - srt[:, k]
    if finite_only:
        return float(np.min(gp[np.isfinite(gp)], initial=np.inf))
    return float(np.min(gp))


# --- the decoder stack ---------------------------------------------------------------------
class Decoder:
    """The pre-norm decoder every oracle runs, as the upstream *Model.forward /
    *DecoderLayer.forward (Qwen3Moe, Glm4Moe, DeepseekV3 in transformers; gpt-oss
    Transformer.forward / TransformerBlock): x = embed[ids]; per layer
    x += attention(norm_in(x)) (dump L{l}.attn_out), x += mlp_or_moe(norm_post(x))
    (dump L{l}.moe_out); logits = lm_head(norm(x)) (dump final_norm, logits). The
    embeddings / final norm / lm_head (tied to embed_tokens when tie_word_embeddings; a stored
    lm_head.weight is then ignored) and the experts (decoded once when they fit in 1 GiB, or
    always with cache_experts = True) are read through self.wts (a Weights).

    A family sets c (its Config: vocab, hidden, n_layers, eps, tie, is_moe), wts, dt,
    inv_freq / attn_factor, expert_inter, and defines load_layer(l), attention(l, lw, t, pos,
    cs, cache, kv_only) and, for the default moe(), route(g, lw) -> (ids, weights, info). A
    layer's dict has in_ln, post_ln, then either mlp (a dense (gate, up, down)) or the router
    (gate [+ bias], shared (gate, up, down) when there are shared experts). The KV cache is a
    dict keyed by layer (or sub-block)."""

    attn_factor = None

    def __init__(self, c, wts, dtype):
        self.c, self.wts, self.dt = c, wts, dtype
        self._expert_cache = {}
        self.cache_experts = True
        self.route_infos = []        # (layer, router info) of every dumped routing, for --stats
        self.n_prompt_routes = None  # how many of them belong to the prompt pass

    def fit_expert_cache(self, n_experts):
        """Keep decoded experts only when all of them fit in 1 GiB."""
        c = self.c
        n_moe = sum(c.is_moe(l) for l in range(c.n_layers))
        exp_bytes = (n_moe * n_experts * 3 * self.expert_inter * c.hidden
                     * np.dtype(self.dt).itemsize)
        self.cache_experts = exp_bytes <= (1 << 30)

    # --- weights ---------------------------------------------------------------------------
    def weights(self):
        if not hasattr(self, "_layers"):
            c, W = self.c, self.wts
            self._layers = [self.load_layer(l) for l in range(c.n_layers)]
            self._embed = W.w("model.embed_tokens.weight", [c.vocab, c.hidden])
            self._norm = W.w("model.norm.weight", [c.hidden])
            if c.tie:
                self._head = self._embed
                if "lm_head.weight" in W:   # tied: the stored copy is not read
                    W.ignored.add("lm_head.weight")
            else:
                self._head = W.w("lm_head.weight", [c.vocab, c.hidden])
        return self._layers

    def expert(self, l, e, proj):
        """Decoded [out, in] weight of model.layers.l.mlp.experts.e.<proj>."""
        key = (l, e, proj)
        if key in self._expert_cache:
            return self._expert_cache[key]
        H, I = self.c.hidden, self.expert_inter
        rows, cols = (H, I) if proj == "down_proj" else (I, H)
        wt = self.wts.linear(f"model.layers.{l}.mlp.experts.{e}.{proj}.weight", rows, cols)
        if self.cache_experts:
            self._expert_cache[key] = wt
        return wt

    def check_expert(self, name, rows, cols):
        self.wts.check_linear(name, rows, cols)

    def check_experts(self, p, n, inter):
        """Every expert tensor must exist with its shape, even if no token routes to it."""
        H = self.c.hidden
        for e in range(n):
            for proj, rows, cols in (("gate_proj", inter, H), ("up_proj", inter, H),
                                     ("down_proj", H, inter)):
                self.check_expert(p + f"mlp.experts.{e}.{proj}.weight", rows, cols)

    def load_biased_moe(self, lw, p):
        """DeepseekV3MoE / Glm4MoeMoE weights: router gate.weight [E, H] and
        gate.e_score_correction_bias [E], routed experts (checked here, decoded on use), and
        shared_experts (moe_intermediate_size * n_shared_experts wide) when there are any."""
        c, W = self.c, self.wts
        H, E = c.hidden, c.n_routed
        lw["gate"] = W.w(p + "mlp.gate.weight", [E, H])
        lw["bias"] = W.w(p + "mlp.gate.e_score_correction_bias", [E])
        self.check_experts(p, E, c.moe_inter)
        if c.n_shared:
            lw["shared"] = load_mlp(W, p + "mlp.shared_experts.", c.moe_inter * c.n_shared, H)

    # --- blocks ----------------------------------------------------------------------------
    def norm(self, x, wt):
        return rmsnorm(x, wt, self.c.eps)

    def cos_sin(self, pos):
        return cos_sin(pos, self.inv_freq, self.dt, self.attn_factor)

    def expert_mlp(self, l, e, x):
        return swiglu(x, self.expert(l, e, "gate_proj"), self.expert(l, e, "up_proj"),
                      self.expert(l, e, "down_proj"))

    def moe(self, l, lw, t, dump):
        """Router logits = t @ gate.T; route; routed experts summed with their weights; plus
        the shared experts on the same input."""
        g = t @ lw["gate"].T                                   # router logits [n, E]
        idx, wts, info = self.route(g, lw)
        out = dispatch(t, idx, wts, lambda e, x: self.expert_mlp(l, e, x))
        if "shared" in lw:
            out = out + swiglu(t, *lw["shared"])
        if dump is not None:
            dump_routing(dump, l, g, idx, wts)
            self.route_infos.append((l, info))   # for --stats only
        return out

    def ffn(self, l, lw, h, dump):
        if "mlp" in lw:
            return swiglu(h, *lw["mlp"])
        return self.moe(l, lw, h, dump)

    def logits(self, x, dump):
        h = self.norm(x, self._norm)
        logits = h @ self._head.T
        if dump is not None:
            dump["final_norm"] = h
            dump["logits"] = logits
        return logits

    def embed(self, ids, pos0):
        """(layer weights, positions, cos/sin, embeddings) of tokens `ids` at pos0.."""
        layers = self.weights()
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(pos0, pos0 + len(ids), dtype=np.int64)
        return layers, pos, self.cos_sin(pos), self._embed[ids]

    def forward(self, ids, pos0, cache, dump=None, kv_only_last=False):
        """Runs tokens `ids` at positions pos0.. through the model, extending `cache`;
        kv_only_last: only extend the last layer's cache (returns None)."""
        layers, pos, cs, x = self.embed(ids, pos0)
        for l, lw in enumerate(layers):
            a = self.attention(l, lw, self.norm(x, lw["in_ln"]), pos, cs, cache,
                               kv_only=kv_only_last and l == len(layers) - 1)
            if a is None:
                return None
            x = x + a
            if dump is not None:
                dump[f"L{l}.attn_out"] = x
            x = x + self.ffn(l, lw, self.norm(x, lw["post_ln"]), dump)
            if dump is not None:
                dump[f"L{l}.moe_out"] = x
        return self.logits(x, dump)

    def new_cache(self):
        return {}

    def end_prompt(self):
        self.n_prompt_routes = len(self.route_infos)
