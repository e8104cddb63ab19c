"""The decode runner: B sequences, one token each per step, every buffer static (so a
whole step captures into one CUDA graph), every op through ``netra.ops`` and
``netra.decode.ops`` (each runs its kernel when the guard passes and the framework path
otherwise). State lives in pools: GDN conv and recurrent states indexed by slot, and a
paged KV cache with a block table.

Weights come repacked into the layouts the ops take (``netra.model.packed``: routed
experts stacked as w13 [E, 2I, H] (gate | up) and w2 [E, H, I] with their 128x128 block
scales, the shared expert likewise): from a Netra-packed checkpoint, or packed at
construction from a real-layout one. ``prefill`` ingests whole prompts on the framework path
(batched matmuls on dequantized weights, causal SDPA, transformers' chunked delta rule)
until prefill kernels exist."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import ops as nops
from ..ops import proj
from ..contracts.attn import PART as ATTN_PART
from ..contracts.proj import LM_HEAD
from ..ops.norm import _zero_centred
from ..model.checkpoint import Checkpoint
from ..model.packed import Packed, pack
from . import ops as dops

# Measured and rejected (experiments/decode/step_ab.py embed_index, at 9ca14dc): the step's embedding rows by
# aten::index into h instead of index_select, whose CUDA kernel for up to 16 indices (indexSelectSmallIndex) takes
# 7.1 us at batch 8 in the timelines against 1.9 at 1 and 32. The step did not move at batch 1, 8 or 16. Both copy
# the rows exactly.
EMBED_INDEX = False


def _plain(wp):
    """(weight, scale) with a packed weight unpacked (prefill's framework path)."""
    w, sc = wp
    return (proj.unpack_weight(w) if w.dim() == 3 else w), sc


class DecodeRunner:
    def __init__(self, model: Checkpoint | Packed, batch: int, max_context: int, device="cuda", page_size: int = 64):
        packed = model if isinstance(model, Packed) else pack(model)
        self.cfg = c = packed.cfg
        self.B, self.device, self.dtype = batch, torch.device(device), torch.bfloat16
        self.page = page_size
        self.pages_per_seq = math.ceil(max_context / page_size)
        self.max_context = self.pages_per_seq * page_size
        dev = self.device
        self.layers = [packed.layer(L, dev) for L in range(c.num_hidden_layers)]
        self.embed = packed.tensors["embed"].to(dev)
        self.final_norm = packed.tensors["final_norm"].to(dev)
        self.lm_head = packed.tensors["lm_head"].to(dev)
        self.cos, self.sin = dops.rope_tables(self.max_context, c.rotary_dim, c.rope_theta, dev)
        self._alloc()
        self.graph = None
        self.trace: dict | None = None  # eager only: {(layer, name): [per-step clones]}, for the shadow gate

    # --- static buffers and state ----------------------------------------------------------
    def _alloc(self):
        c, B, dev, bf = self.cfg, self.B, self.device, torch.bfloat16
        H = c.hidden_size
        e = lambda *s, dt=bf: torch.empty(*s, dtype=dt, device=dev)  # noqa: E731
        self.tokens = torch.zeros(B, dtype=torch.long, device=dev)
        self.positions = torch.zeros(B, dtype=torch.long, device=dev)
        self.slots = torch.arange(B, dtype=torch.long, device=dev)
        self.block_table = torch.arange(B * self.pages_per_seq, dtype=torch.int32, device=dev).view(B, self.pages_per_seq)
        self.h, self.x, self.mix, self.moe = e(B, H), e(B, H), e(B, H), e(B, H)
        self.qkvz = e(B, c.conv_dim + c.value_dim)  # one launch: in_proj_qkv | in_proj_z
        self.qkv, self.z = self.qkvz[:, :c.conv_dim], self.qkvz[:, c.conv_dim:]
        self.bb, self.aa = e(B, c.linear_num_value_heads), e(B, c.linear_num_value_heads)
        self.o = e(B, c.value_dim)
        # the spin pair's own in_proj outputs (dops.GDN_SPIN_MAX_B): TAG at allocation and after every gdn_decode_spin;
        # only that pair touches them, so a plain or eager step between two PDL replays cannot leave them stale
        self.spin = B <= dops.GDN_SPIN_MAX_B
        if self.spin:
            self.qkvz_s = e(B, c.conv_dim + c.value_dim)
            self.qkv_s, self.z_s = self.qkvz_s[:, :c.conv_dim], self.qkvz_s[:, c.conv_dim:]
            self.bb_s, self.aa_s = e(B, c.linear_num_value_heads), e(B, c.linear_num_value_heads)
            dops.tag_(self.qkvz_s, self.bb_s, self.aa_s)
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.qkv_attn = e(B, 2 * nh * hd + 2 * nkv * hd)  # one launch: q (with its gate) | k | v
        self.qg = self.qkv_attn[:, :2 * nh * hd]
        self.kb = self.qkv_attn[:, 2 * nh * hd:2 * nh * hd + nkv * hd]
        self.vb = self.qkv_attn[:, 2 * nh * hd + nkv * hd:]
        self.qn, self.kn, self.ao = e(B, nh, hd), e(B, nkv, hd), e(B, nh * hd)
        self.logits = e(B, c.vocab_size)
        # [0]: the router-fused gate | up's barrier counter; [1:]: the split router's per token group (moe_decode's bar)
        self.moe_bar = torch.zeros(5, dtype=torch.long, device=dev)
        self.next_tokens = torch.zeros(B, dtype=torch.long, device=dev)
        self.lm_ws = torch.zeros(LM_HEAD.counter + 1, dtype=torch.long, device=dev)  # the LM head kernel's workspace
        # the attention kernel's scratch (dops.attention_decode_paged): page partials, and arrival counters left zero
        self.attn_ws = torch.empty(B, nkv, self.pages_per_seq, ATTN_PART, dtype=torch.float32, device=dev)
        self.attn_counters = torch.zeros(B, nkv, dtype=torch.int32, device=dev)
        # the long-context builds' counters (dops.attention_decode_paged_qknorm's cl_counters; ws is shared)
        self.attn_cl_counters = torch.zeros(B, nkv, dops.CL_COUNTERS, dtype=torch.int32, device=dev)
        self.conv_pool, self.state_pool, self.k_pages, self.v_pages = {}, {}, {}, {}
        for L in range(c.num_hidden_layers):
            if c.is_full(L):
                self.k_pages[L] = torch.zeros(B * self.pages_per_seq, self.page, nkv, hd, dtype=bf, device=dev)
                self.v_pages[L] = torch.zeros_like(self.k_pages[L])
            else:
                self.conv_pool[L] = torch.zeros(B, c.conv_dim, c.linear_conv_kernel_dim - 1, dtype=bf, device=dev)
                self.state_pool[L] = torch.zeros(B, c.linear_num_value_heads, c.linear_key_head_dim,
                                                 c.linear_value_head_dim, dtype=torch.float32, device=dev)

    def reset(self):
        """Empty every sequence (positions 0, zero states); buffers keep their addresses."""
        self.positions.zero_()
        for t in (*self.conv_pool.values(), *self.state_pool.values(), *self.k_pages.values(), *self.v_pages.values()):
            t.zero_()
        if self.spin:  # a step cut short between the pair's two launches (an error while enqueuing) cannot leak into the next
            dops.tag_(self.qkvz_s, self.bb_s, self.aa_s)

    # --- the step ----------------------------------------------------------------------------
    def _mixer(self, L: int, lw: dict):
        c, B, eps = self.cfg, self.B, self.cfg.rms_norm_eps
        if c.is_full(L):
            nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
            dops.fp8_linear_norm(self.h, lw["in_norm"], eps, *lw["qkv_attn"], self.qkv_attn, self.x)
            qg, kb, vb = self.qg.view(B, nh, 2 * hd), self.kb.view(B, nkv, hd), self.vb.view(B, nkv, hd)
            if (dops.ATTN_KERNEL and dops.ATTN_QKNORM  # q_norm and k_norm too: one launch (the cluster builds: one wave)
                    and (dops.ATTN_CLUSTER or B * self.pages_per_seq * nkv <= dops.ATTN_QKNORM_MAX_CTAS)):
                dops.attention_decode_paged_qknorm(qg[:, :, :hd], kb, vb, qg[:, :, hd:], lw["q_norm"], lw["k_norm"],
                                                   self.cos, self.sin, self.positions, self.block_table,
                                                   self.k_pages[L], self.v_pages[L], self.ao, self.attn_ws,
                                                   self.attn_counters, eps, self.attn_cl_counters)
            else:
                nops.qk_rmsnorm(qg[:, :, :hd], kb, lw["q_norm"], lw["k_norm"], eps, out_q=self.qn, out_k=self.kn)
                if dops.ATTN_KERNEL:  # RoPE, the append, attention and the gate: one launch (else the framework path)
                    dops.attention_decode_paged(self.qn, self.kn, vb, qg[:, :, hd:], self.cos, self.sin, self.positions,
                                                self.block_table, self.k_pages[L], self.v_pages[L], self.ao,
                                                self.attn_ws, self.attn_counters)
                else:
                    dops.attention_decode_ctx(self.qn, self.kn, vb, qg[:, :, hd:].reshape(B, nh * hd), *self.attn_ctx,
                                              self.k_pages[L], self.v_pages[L], self.ao,
                                              pages_in_order=True)  # block_table is arange(B * pages): the cache as a view
            dops.fp8_linear_add(self.ao, *lw["o"], self.h, self.mix)  # mix, and h += mix
        elif (self.spin and dops.BA_FUSED and nops.pdl_enabled()
              and self.B <= dops.GDN_SPIN_MAX_B):  # the spin pair (dops.GDN_SPIN_MAX_B): gdn_decode polls the in_proj's rows
            dops.fp8_linear_norm_ba(self.h, lw["in_norm"], eps, *lw["qkvz"], self.qkvz_s, self.x, lw["b"], lw["a"],
                                    self.bb_s, self.aa_s)
            dops.gdn_decode_spin(self.qkv_s, self.z_s, self.bb_s, self.aa_s, lw["conv"], lw["A_log"], lw["dt_bias"],
                                 lw["gnorm"], self.conv_pool[L], self.state_pool[L], self.slots, c.linear_num_key_heads,
                                 eps, self.o)
            dops.fp8_linear_add(self.o, *lw["out"], self.h, self.mix)  # mix, and h += mix
        else:
            if dops.BA_FUSED:  # b | a by more CTAs of the same launch
                dops.fp8_linear_norm_ba(self.h, lw["in_norm"], eps, *lw["qkvz"], self.qkvz, self.x, lw["b"], lw["a"],
                                        self.bb, self.aa)
            else:
                dops.fp8_linear_norm(self.h, lw["in_norm"], eps, *lw["qkvz"], self.qkvz, self.x)
                dops.bf16_linear2(self.x, lw["b"], lw["a"], self.bb, self.aa)
            dops.gdn_decode(self.qkv, self.z, self.bb, self.aa, lw["conv"], lw["A_log"], lw["dt_bias"], lw["gnorm"],
                            self.conv_pool[L], self.state_pool[L], self.slots, c.linear_num_key_heads, eps, self.o)
            dops.fp8_linear_add(self.o, *lw["out"], self.h, self.mix)  # mix, and h += mix

    def step_(self):
        """One decode step on the static buffers: reads tokens and positions, writes logits
        and next_tokens, advances positions. Captures into a CUDA graph."""
        c, eps = self.cfg, self.cfg.rms_norm_eps
        if EMBED_INDEX:
            torch.ops.aten.index.Tensor_out(self.embed, [self.tokens], out=self.h)
        else:
            torch.index_select(self.embed, 0, self.tokens, out=self.h)
        # the positions' RoPE rows, cache rows and length mask, once for the 10 attention layers
        if not dops.ATTN_KERNEL:
            self.attn_ctx = dops.attention_context(self.cos, self.sin, self.block_table, self.positions, self.page)
        for L, lw in enumerate(self.layers):
            self._record(L, "h_in", self.h)
            # the first projection computes x = input_layernorm(h) as a prologue, the last one
            # adds the mixer's output into h as an epilogue (and writes it to mix)
            self._mixer(L, lw)
            self._record(L, "x", self.x, "mix", self.mix, "h_mid", self.h)
            # x = post_attention_layernorm(h) in the router's launch; h += moe in moe_down's
            dops.moe_decode(self.x, lw["router"], lw["w13"], lw["s13"], lw["w2"], lw["s2"], *lw["sw13"],
                            *lw["sw2"], lw["sgate"], c.num_experts_per_tok, self.moe, self.h, lw["post_norm"], eps,
                            self.moe_bar)
            self._record(L, "x2", self.x, "moe", self.moe)
        nops.rmsnorm(self.h, self.final_norm, eps, out=self.x)
        dops.lm_head_argmax(self.x, self.lm_head, self.logits, self.next_tokens, self.lm_ws)
        self.positions.add_(1)

    # --- prefill (framework path) --------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompts: Tensor) -> Tensor:
        """Ingest ``prompts`` [B, T] into empty sequences, one batched pass per layer: fills the
        KV pages and the GDN pools, leaves every position at T, sets ``next_tokens`` and
        returns the last position's logits [B, V]. Eager (its shapes depend on T); a captured
        decode graph reads the state it leaves, so decoding continues with ``step``."""
        c, B, eps, bf = self.cfg, self.B, self.cfg.rms_norm_eps, torch.bfloat16
        if prompts.dim() != 2 or prompts.shape[0] != B:
            raise ValueError(f"prefill: expected prompts [{B}, T], got {list(prompts.shape)}")
        T = prompts.shape[1]
        if not 1 <= T <= self.max_context:
            raise ValueError(f"prefill: expected 1 <= T <= {self.max_context} (max_context), got {T}")
        if bool(self.positions.any()):
            raise RuntimeError("prefill starts empty sequences: call reset() first")
        lin = lambda x, wp: x @ dops.dequant(*_plain(wp), dtype=bf).T  # noqa: E731
        norm = lambda x, w: _zero_centred(x, w, eps).to(bf)  # noqa: E731
        h = self.embed[prompts.to(self.device)].view(B * T, -1)
        pos = torch.arange(T, device=self.device)
        for L, lw in enumerate(self.layers):
            x = norm(h, lw["in_norm"])
            mix = self._prefill_attention(L, lw, x, B, T, pos, lin) if c.is_full(L) else self._prefill_gdn(L, lw, x, B, T, lin)
            h = h + mix
            x = norm(h, lw["post_norm"])
            h = h + self._prefill_moe(lw, x, lin)
        last = norm(h.view(B, T, -1)[:, -1], self.final_norm)
        dops.lm_head_argmax(last, self.lm_head, self.logits, self.next_tokens, self.lm_ws)
        self.positions.fill_(T)
        return self.logits

    def _prefill_attention(self, L, lw, x, B, T, pos, lin):
        c = self.cfg
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qkv = lin(x, lw["qkv_attn"])
        qg = qkv[:, :2 * nh * hd].reshape(B, T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(B * T, nh * hd)
        k = qkv[:, 2 * nh * hd:2 * nh * hd + nkv * hd].reshape(B, T, nkv, hd)
        v = qkv[:, 2 * nh * hd + nkv * hd:].reshape(B, T, nkv, hd)
        q = _zero_centred(q, lw["q_norm"], c.rms_norm_eps).to(x.dtype)
        k = _zero_centred(k, lw["k_norm"], c.rms_norm_eps).to(x.dtype)
        cos, sin = self.cos[pos], self.sin[pos]  # [T, rd]
        q = dops._rope(q.reshape(B * T, nh, hd), cos.repeat(B, 1), sin.repeat(B, 1)).view(B, T, nh, hd)
        k = dops._rope(k.reshape(B * T, nkv, hd), cos.repeat(B, 1), sin.repeat(B, 1)).view(B, T, nkv, hd)
        pg = self.block_table[:, pos // self.page].long()  # [B, T]
        self.k_pages[L][pg, pos % self.page] = k
        self.v_pages[L][pg, pos % self.page] = v
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(nh // nkv, 1),
                                           v.transpose(1, 2).repeat_interleave(nh // nkv, 1), is_causal=True,
                                           scale=hd ** -0.5)
        o = o.transpose(1, 2).reshape(B * T, nh * hd) * torch.sigmoid(gate)
        return lin(o, lw["o"])

    def _prefill_gdn(self, L, lw, x, B, T, lin):
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import torch_chunk_gated_delta_rule

        c = self.cfg
        nk, nv, dk, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim
        K = c.linear_conv_kernel_dim
        qkvz = lin(x, lw["qkvz"])
        qkv = qkvz[:, :c.conv_dim].reshape(B, T, -1).transpose(1, 2)  # [B, C, T]
        z = qkvz[:, c.conv_dim:]
        b = x @ lw["b"].T
        a = x @ lw["a"].T
        padded = F.pad(qkv, (K - 1, 0))  # the sequences start empty: zero history
        self.conv_pool[L][self.slots] = padded[:, :, -(K - 1):]
        conv = F.conv1d(padded.float(), lw["conv"].float()[:, None, :], groups=qkv.shape[1])  # [B, C, T]
        mixed = F.silu(conv).to(x.dtype).transpose(1, 2)  # [B, T, C], rounded as the model does
        q, k, v = torch.split(mixed, [c.key_dim, c.key_dim, c.value_dim], -1)
        q = q.reshape(B, T, nk, dk).repeat_interleave(nv // nk, 2)
        k = k.reshape(B, T, nk, dk).repeat_interleave(nv // nk, 2)
        v = v.reshape(B, T, nv, dv)
        beta = torch.sigmoid(b.float()).view(B, T, nv)
        g = (-lw["A_log"].float().exp() * F.softplus(a.float() + lw["dt_bias"].float())).view(B, T, nv)
        o, state = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None,
                                                output_final_state=True, use_qk_l2norm_in_kernel=True)
        self.state_pool[L][self.slots] = state.float()
        of = o.float().reshape(B * T, nv, dv)
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)
        o = lw["gnorm"].float() * of * F.silu(z.float().view(B * T, nv, dv))
        return lin(o.reshape(B * T, nv * dv).to(x.dtype), lw["out"])

    def _prefill_moe(self, lw, x, lin):
        c = self.cfg
        probs = torch.softmax((x @ lw["router"].T).float(), -1)
        top, idx = torch.topk(probs, c.num_experts_per_tok, -1)
        top = (top / top.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in idx.unique().tolist():  # data-dependent: each chosen expert once, for its tokens
            rows, j = (idx == e).nonzero(as_tuple=True)
            gate, up = lin(x[rows], (lw["w13"][e], lw["s13"][e])).chunk(2, -1)
            y = lin(F.silu(gate) * up, (lw["w2"][e], lw["s2"][e]))
            out.index_add_(0, rows, (y * top[rows, j, None]).float())
        sg, su = lin(x, lw["sw13"]).chunk(2, -1)
        shared = lin(F.silu(sg) * su, lw["sw2"])
        return (out.to(x.dtype) + torch.sigmoid(x @ lw["sgate"].T) * shared)

    def _record(self, L: int, *pairs):
        if self.trace is None:
            return
        for name, t in zip(pairs[::2], pairs[1::2]):
            self.trace.setdefault((L, name), []).append(t.detach().clone())

    def step(self, tokens: Tensor) -> Tensor:
        """Teacher-forced step: the given tokens [B] in, logits [B, V] out (a view of the
        static buffer, valid until the next step). Replays the graph when captured."""
        self.tokens.copy_(tokens)
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step_()
        return self.logits

    def capture(self, pdl: bool = False):
        """Capture one step into a CUDA graph (kernels load first; state is reset after the
        warm-up step, so capture leaves every sequence empty). ``pdl``: the kernels whose
        contract allows it (``Contract.pdl``: only weights before ``griddepcontrol.wait``) are
        captured with programmatic stream serialization, so each may start while the one before
        it finishes (bitwise the same logits: `netra decode` checks it); eager calls afterwards
        launch plainly again."""
        if self.trace is not None:
            raise RuntimeError("tracing records clones on the host side; switch it off before capture")
        if pdl:
            nops.set_pdl(True)
        try:
            nops.prepare()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.step_()  # warm: allocator pools, library handles, module loads
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            self.reset()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.step_()
        finally:
            if pdl:
                nops.set_pdl(False)
        self.graph = g
        self.reset()
        return g
