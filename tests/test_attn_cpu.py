"""The attention family on the CPU: the generated PTX is current and assembles as intended, the contract's shapes, the
float64 reference against the framework path, and the op's framework fallback."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from netra import contracts, paths
from netra.contracts import attn as A
from netra.lifecycle import metrics, testbeds
from netra.reference import attn as ra
from netra.runtime import build, toolchain


@pytest.mark.parametrize("qknorm", [False, True])
def test_generated_ptx_is_current(qknorm):
    g = paths.generator("attention", "gen_attn_decode")
    name = (A.ATTN_DECODE_QKNORM if qknorm else A.ATTN_DECODE).name
    assert paths.ptx_path("sm_90a", "attention", name).read_text() == g.generate(qknorm), "run gen_attn_decode.py"


@pytest.mark.parametrize("c", [A.ATTN_DECODE, A.ATTN_DECODE_QKNORM], ids=lambda c: c.name)
def test_sass_has_the_intended_instructions(tmp_path, c):
    """32 HMMA (16 k-steps of S, 16 tiles of O^T), the movmatrix transposes (64 of V, 2 of P), 32 cp.async per thread,
    one atomic, no local memory, within the contract's registers; the qknorm build's norms add 2 + 5 butterfly shuffles
    (q across the quad, k across the warp) and nothing else that touches memory but its 1 + w in shared memory."""
    path = tmp_path / "a.ptx"
    path.write_text(paths.ptx_path("sm_90a", "attention", c.name).read_text())
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= c.max_registers
    sass = build.disasm(c.name)
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|SHFL)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 32
    assert ops.count("ATOMG") == 1 and "LDL" not in ops and "STL" not in ops
    base = re.findall(r"\bSHFL\b", build.disasm(A.ATTN_NAME))
    assert ops.count("SHFL") == len(base) + (7 if c is A.ATTN_DECODE_QKNORM else 0)


def test_qknorm_sums_in_qk_rmsnorm_order():
    """The argument of gen_attn_decode._norm_q, in fp32: qk_rmsnorm_d256's lane c sums dims 8 c .. 8 c + 7 and
    butterflies over 16, 8, 4, 2, 1; the attention thread (quad lane t) holds chunks c = 4 s + t and pairs slabs s ^ 4,
    ^ 2, ^ 1 in-thread, then lanes t ^ 2, ^ 1. Both give every head the same fp32 sum, bit for bit (and a pairing in
    another order does not)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        x = (torch.randn(256, generator=g) * torch.exp(3 * torch.randn(256, generator=g))).to(torch.bfloat16).float()
        chunk = [torch.tensor(0.0)] * 32
        for c in range(32):
            acc = x[8 * c] * x[8 * c]
            for e in range(1, 8):
                acc = acc + x[8 * c + e] * x[8 * c + e]  # (the kernels' fma: the same in both, so mul + add here)
            chunk[c] = acc
        v = list(chunk)
        for off in (16, 8, 4, 2, 1):
            v = [v[lane] + v[lane ^ off] for lane in range(32)]
        quad, wrong = [], []
        for t in range(4):
            a, w = [chunk[4 * s + t] for s in range(8)], [chunk[4 * s + t] for s in range(8)]
            for step in (4, 2, 1):
                a = [a[s] + a[s + step] for s in range(step)] + a[step:]
            for step in (1, 2, 4):  # slab pairs in the other order: not the kernel's sum in general
                w = [w[2 * s] + w[2 * s + 1] for s in range(len(w) // 2)]
            quad.append(a[0])
            wrong.append(w[0])
        for off in (2, 1):
            quad = [quad[t] + quad[t ^ off] for t in range(4)]
            wrong = [wrong[t] + wrong[t ^ off] for t in range(4)]
        assert all(torch.equal(q, v[0]) for q in quad)
        if not torch.equal(wrong[0], v[0]):
            break
    else:
        raise AssertionError("the other pairing order matched every time: the test cannot tell orders apart")


@pytest.mark.parametrize("dims", [dict(B=1, NP=1, P=3, T=64), dict(B=3, NP=2, P=9, T=128), dict(B=5, NP=3, P=17, T=192)])
def test_reference_against_the_framework_path(dims):
    """attention_decode's framework path (RoPE in fp32, the append, SDPA in BF16) against the float64 reference, on the
    testbed's inputs: within the contract's tolerance; the cache rows it appends equal the reference's within BF16
    rounding, and nothing else in the pool moves."""
    from netra.decode import ops as dops

    i = testbeds.get(A.ATTN_NAME).make(dims, torch.Generator().manual_seed(3), "cpu")
    kp0, vp0 = i["k_pages"].clone(), i["v_pages"].clone()
    want = ra.decode_step(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"],
                          kp0, vp0)
    B = dims["B"]
    out = torch.full((B, A.Q_HEADS * A.HEAD_DIM), float("nan"), dtype=torch.bfloat16)
    dops.attention_decode(i["q"], i["k"], i["v"], i["gate"].reshape(B, -1), i["cos"], i["sin"], i["k_pages"],
                          i["v_pages"], i["block_table"], i["positions"], out)
    assert metrics.rel_err(out, want["out"]) <= A.ATTN_TOL
    assert metrics.rel_err(i["k_pages"], want["k_pages"]) <= 2 ** -8
    assert torch.equal(i["v_pages"].double(), want["v_pages"])
    changed = (i["k_pages"] != kp0).flatten(2).any(-1)  # [P, page]
    rows = {(int(i["block_table"][b, int(p) // A.PAGE]), int(p) % A.PAGE) for b, p in enumerate(i["positions"])}
    assert {tuple(x) for x in changed.nonzero().tolist()} <= rows


def test_testbed_positions_and_pages():
    """Every sequence's position is inside its pages and the table, and the first cases hit a page's last row, its
    first row and the row before it; the block table draws distinct pages of the pool."""
    i = testbeds.get(A.ATTN_NAME).make(dict(B=5, NP=3, P=17, T=192), torch.Generator().manual_seed(1), "cpu")
    assert i["positions"].tolist()[:4] == [191, 128, 127, 190]
    assert len(set(i["block_table"].flatten().tolist())) == 15 and int(i["block_table"].max()) < 17
    one = testbeds.get(A.ATTN_NAME).make(dict(B=3, NP=1, P=3, T=64), torch.Generator().manual_seed(1), "cpu")
    assert one["positions"].tolist() == [63, 0, 0]


def test_op_falls_back_to_the_framework_path_without_the_gpu():
    """On the CPU the guard misses and attention_decode_paged runs attention_decode on the same inputs: the same bits."""
    from netra import ops
    from netra.decode import ops as dops

    dims = dict(B=2, NP=2, P=6, T=128)
    i = testbeds.get(A.ATTN_NAME).make(dims, torch.Generator().manual_seed(5), "cpu")
    kp, vp = i["k_pages"].clone(), i["v_pages"].clone()
    out = torch.empty(2, A.Q_HEADS * A.HEAD_DIM, dtype=torch.bfloat16)
    ops.reset_stats()
    dops.attention_decode_paged(i["q"], i["k"], i["v"], i["gate"], i["cos"], i["sin"], i["positions"],
                                i["block_table"], i["k_pages"], i["v_pages"], out, i["ws"], i["counters"])
    assert sum(ops.stats()["attention_decode_paged"]["misses"].values()) == 1
    want = torch.empty_like(out)
    dops.attention_decode(i["q"], i["k"], i["v"], i["gate"].reshape(2, -1), i["cos"], i["sin"], kp, vp,
                          i["block_table"], i["positions"], want)
    assert torch.equal(out, want) and torch.equal(i["k_pages"], kp) and torch.equal(i["v_pages"], vp)


def test_contract_shapes():
    c = contracts.get(A.ATTN_NAME)
    assert c.grid_for({"B": 3, "NP": 16, "P": 50, "T": 1024}) == (16, A.KV_HEADS, 3)
    assert A.PART == 8 * 256 + 16 and A.SMEM == 64 * 1024 and c.dynamic_smem == A.SMEM
    assert all(case["T"] == case["NP"] * A.PAGE and case["P"] >= case["B"] * case["NP"] for case in c.cases())


def test_qknorm_op_falls_back_to_the_two_framework_paths_without_the_gpu():
    """attention_decode_paged_qknorm on the CPU: qk_rmsnorm's framework path, then attention_decode_paged's: the same
    bits as the two called in turn; its float64 reference (qk_rmsnorm, then the step) within the contract's tolerance."""
    from netra import ops
    from netra.decode import ops as dops
    from netra.ops.norm import qk_rmsnorm

    dims = dict(B=3, NP=2, P=9, T=128)
    tb = testbeds.get(A.ATTN_QKNORM_NAME)
    i = tb.make(dims, torch.Generator().manual_seed(6), "cpu")
    kp, vp = i["k_pages"].clone(), i["v_pages"].clone()
    want_ref = tb.reference({**i, "kernel_ws": i["ws"]})
    out = torch.empty(3, A.Q_HEADS * A.HEAD_DIM, dtype=torch.bfloat16)
    ops.reset_stats()
    dops.attention_decode_paged_qknorm(i["q"], i["k"], i["v"], i["gate"], i["q_norm"], i["k_norm"], i["cos"], i["sin"],
                                       i["positions"], i["block_table"], i["k_pages"], i["v_pages"], out, i["ws"],
                                       i["counters"], testbeds.EPS)
    assert sum(ops.stats()["attention_decode_paged_qknorm"]["misses"].values()) == 1
    qn, kn = qk_rmsnorm(i["q"], i["k"], i["q_norm"], i["k_norm"], testbeds.EPS)
    want = torch.empty_like(out)
    dops.attention_decode_paged(qn, kn, i["v"], i["gate"], i["cos"], i["sin"], i["positions"], i["block_table"], kp, vp,
                                want, i["ws"].clone(), i["counters"].clone())
    assert torch.equal(out, want) and torch.equal(i["k_pages"], kp) and torch.equal(i["v_pages"], vp)
    assert metrics.rel_err(out, want_ref["out"]) <= A.ATTN_TOL
    assert metrics.rel_err(i["k_pages"], want_ref["k_pages"]) <= 2 ** -7  # two roundings: the norm's, RoPE's


def test_qknorm_testbed_reads_the_rows_slots():
    """The qknorm testbed's q and k are the row's own slots (the runner's views), before any norm (not unit RMS)."""
    i = testbeds.get(A.ATTN_QKNORM_NAME).make(dict(B=2, NP=1, P=3, T=64), torch.Generator().manual_seed(2), "cpu")
    row = i["_row"]
    assert i["q"].data_ptr() == row.data_ptr() and i["k"].data_ptr() == row[:, 2 * 16 * 256:].data_ptr()
    assert i["q"].stride() == (row.stride(0), 512, 1) and i["k"].stride() == (row.stride(0), 256, 1)
    rms = i["q"].float().pow(2).mean(-1).sqrt()
    assert not torch.allclose(rms, torch.ones_like(rms), atol=0.2)


def test_qknorm_once_candidate_assembles(tmp_path):
    """gen_attn_decode.generate(qknorm=True, once=True) (experiments/attention/qknorm_once_variant.py): no spills, within
    the contract's registers, the same mma / movmatrix / cp.async / atomic counts, 15 more shuffles than attn_decode_d256
    (two q heads a warp and the new k, 5 butterfly steps each), one more CTA barrier than it, and no weight table in
    shared memory; the promoted PTX is the build without the option."""
    g = paths.generator("attention", "gen_attn_decode")
    t = g.generate(True, once=True)
    assert t != g.generate(True) == paths.ptx_path("sm_90a", "attention", A.ATTN_QKNORM_NAME).read_text()
    assert "nw[" not in t and t.count("bar.sync 0;") == g.generate().count("bar.sync 0;") + 1
    path = tmp_path / "once.ptx"
    path.write_text(t)
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= A.ATTN_DECODE_QKNORM.max_registers
    cubin, _ = build._assemble(toolchain.ptxas(), path, tmp_path)
    sass = subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|SHFL)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 32 and ops.count("ATOMG") == 1
    assert "LDL" not in ops and "STL" not in ops
    assert ops.count("SHFL") == len(re.findall(r"\bSHFL\b", build.disasm(A.ATTN_NAME))) + 15


@pytest.mark.parametrize("c", sorted(A.ATTN_CLUSTER))
def test_cluster_builds_are_current_and_assemble_as_intended(c):
    """attn_decode_d256_qknorm_c4 / _c8: the generator's output; no spills, within the contract's registers and shared
    memory; the same 32 HMMA and 66 MOVM as the one-page build (one page's S and O^T, in the page loop), 64 cp.async
    per thread (the first page's K and V, and the loop's next page), no atomic (no counters: the partials meet in shared
    memory), two cluster barriers, and the same shuffles as attn_decode_d256_qknorm; no griddepcontrol.wait (launched
    plainly) and one launch_dependents, before the first page is walked (generate(trigger=True), since f6f3e85)."""
    g = paths.generator("attention", "gen_attn_decode")
    name = A.ATTN_CLUSTER[c].name
    text = g.generate(True, cluster=c, trigger=True)
    assert paths.ptx_path("sm_90a", "attention", name).read_text() == text, "run gen_attn_decode.py"
    assert "griddepcontrol.wait" not in text and not A.ATTN_CLUSTER[c].pdl  # launched plainly, PDL engine included
    assert text.count("griddepcontrol.launch_dependents;") == 1
    assert text.index("griddepcontrol.launch_dependents;") < text.index("mma.sync")
    assert "st.async" not in text and text.count("ld.shared::cluster") == 3 * c
    res = build.resource_usage(toolchain.ptxas(), paths.ptx_path("sm_90a", "attention", name))
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= A.ATTN_CLUSTER[c].max_registers and res["static_smem"] <= A.ATTN_CLUSTER[c].max_static_smem
    sass = build.disasm(name)
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|SHFL|UCGABAR_ARV|UCGABAR_WAIT)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 64
    assert "ATOMG" not in ops and "LDL" not in ops and "STL" not in ops
    assert ops.count("UCGABAR_ARV") == ops.count("UCGABAR_WAIT") == 2
    assert ops.count("SHFL") == len(re.findall(r"\bSHFL\b", build.disasm(A.ATTN_QKNORM_NAME)))


@pytest.mark.parametrize("c", sorted(A.ATTN_CLUSTER))
def test_cluster_push_candidate_assembles(tmp_path, c):
    """The push candidate (generate(push=True), measured at 2c03b57, not promoted): without spills in 168 registers, 3
    CTAs a SM by shared memory (the 64 KB of pages and its static buffers: every rank's O, M and L of its slice); one
    cluster barrier (the mbarrier's initialization), the partial pushed by four 16-byte and one 8-byte st.async, nothing
    read from another CTA's shared memory, the page walk's HMMA, MOVM and cp.async as the committed build's."""
    g = paths.generator("attention", "gen_attn_decode")
    text = g.generate(True, cluster=c, push=True)
    assert ".version 8.1" in text and "ld.shared::cluster" not in text
    assert sum(ln.strip().startswith("st.async.") for ln in text.splitlines()) == 5
    path = tmp_path / f"{A.ATTN_CLUSTER[c].name}.ptx"
    path.write_text(text)
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= A.ATTN_CLUSTER_REGS
    assert 3 * (A.SMEM + res["static_smem"] + 1024) <= 228 * 1024, res  # 1 KB reserved a CTA
    cubin, _ = build._assemble(toolchain.ptxas(), path, tmp_path)
    sass = subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|UCGABAR_ARV|UCGABAR_WAIT|STAS|LD)\b([.A-Z0-9]*)", sass)
    ops, wide = [o for o, _ in ops], [o + w for o, w in ops]
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 64
    assert "ATOMG" not in ops and "LDL" not in ops and "STL" not in ops and "LD" not in ops
    assert ops.count("UCGABAR_ARV") == ops.count("UCGABAR_WAIT") == 1
    assert wide.count("STAS.128") == 4 and wide.count("STAS.64") == 1 and ops.count("STAS") == 5


@pytest.mark.parametrize("c", sorted(A.ATTN_LONG))
def test_long_q_first_candidate_assembles(tmp_path, c):
    """The q_first candidate (rejected: experiments/attention/q_first_variant.py): the committed long build's lines, the first
    page's two cp.async groups moved after q's loads and the gate's; without spills in the contract's registers."""
    g = paths.generator("attention", "gen_attn_decode")
    text = g.generate(True, cluster=c, long=True, q_first=True)
    committed = paths.ptx_path("sm_90a", "attention", A.ATTN_LONG[c].name).read_text()
    assert text != committed and sorted(text.splitlines()) == sorted(committed.splitlines())
    first_copy = text.index("cp.async.cg.shared.global")
    assert text.index("ld.global.v4.b32 {%q0, %q1, %q2, %q3}") < first_copy and text.index("[%pg+16]") < first_copy
    path = tmp_path / f"{A.ATTN_LONG[c].name}.ptx"
    path.write_text(text)
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= A.ATTN_LONG[c].max_registers


@pytest.mark.parametrize("c", sorted(A.ATTN_LONG))
def test_long_builds_are_current_and_assemble_as_intended(c):
    """attn_decode_d256_qknorm_c4_long / _c8_long: the generator's output; no spills, within the contract's registers
    and shared memory; the cluster build's page walk (32 HMMA, 66 MOVM, 64 cp.async, its shuffles, two cluster
    barriers) and one atomic (the clusters' arrival); the walk's stride a register (C S_eff), the page table filled
    after pos; no griddepcontrol (launched plainly)."""
    g = paths.generator("attention", "gen_attn_decode")
    k = A.ATTN_LONG[c]
    text = g.generate(True, cluster=c, long=True)
    assert paths.ptx_path("sm_90a", "attention", k.name).read_text() == text, "run gen_attn_decode.py"
    res = build.resource_usage(toolchain.ptxas(), paths.ptx_path("sm_90a", "attention", k.name))
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= k.max_registers and res["static_smem"] <= k.max_static_smem, res
    sass = build.disasm(k.name)
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|SHFL|UCGABAR_ARV|UCGABAR_WAIT)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 64 and ops.count("ATOMG") == 1
    assert "LDL" not in ops and "STL" not in ops
    assert ops.count("UCGABAR_ARV") == ops.count("UCGABAR_WAIT") == 2
    assert ops.count("SHFL") == len(re.findall(r"\bSHFL\b", build.disasm(A.ATTN_QKNORM_NAME)))
    assert "add.u32 %pn, %cpg, %W;" in text and "rem.u32 %r0, %last, %W;" in text
    assert f"pids[{A.LONG_MAX_PAGES // c}]" in text and f".reqnctapercluster {c}, 1, 1" in text
    assert text.count("@%psplit bra SPLIT_PART;") == 1 and text.count("bra CL_OUT;") == 1
    assert "griddepcontrol" not in text and not k.pdl  # launched plainly, PDL engine included


def test_long_contracts_and_the_ops_choice():
    """The long builds: grid C x S x 2 x B, ws [B, 2, S, PART] and counters [B, 2, C] (S bound from ws), up to
    LONG_MAX_PAGES pages (the model's 262144 positions); the op takes one where the caller passes cl_counters and the
    cache is past the cluster builds' 64 pages, with S from attn_splits (about one CTA a SM; one split fewer where the
    grid would pass what its clusters place one a SM and S > 2) and views of the caller's ws and cl_counters."""
    from netra.decode import ops as dops

    assert A.LONG_MAX_PAGES * A.PAGE == 262144
    for c, k in A.ATTN_LONG.items():
        assert k.grid_for({"B": 3, "NP": 500, "S": 5, "P": 2000, "T": 32000}) == (5 * c, A.KV_HEADS, 3)
        shapes = {t.name: t.shape for t in k.tensors}
        assert shapes["ws"] == ("B", A.KV_HEADS, "S", A.PART) and shapes["counters"] == ("B", A.KV_HEADS, c)
        assert max(k.dims["NP"]) == A.LONG_MAX_PAGES and max(k.dims["S"]) == A.LONG_SPLITS[c]
        assert k.op == A.ATTN_DECODE_QKNORM.op and k.dynamic_smem == A.SMEM
        assert all(case["P"] >= case["B"] * case["NP"] and case["S"] <= A.LONG_SPLITS[c] for case in k.cases())
        assert max(case["NP"] for case in k.cases()) >= 512  # 32K positions
    assert [dops.attn_splits(b, dops.attn_cluster_for(b)) for b in (1, 2, 3, 4, 5, 8, 16, 17, 32)] == \
        [7, 3, 2, 2, 3, 2, 1, 1, 1]

    def choice(B, NP, cl=True):
        q = torch.zeros(B, A.Q_HEADS, A.HEAD_DIM)
        ws = torch.zeros(B, A.KV_HEADS, NP, A.PART)
        la = dops._long_args(q, torch.zeros(B, NP, dtype=torch.int32), ws,
                             torch.zeros(B, A.KV_HEADS, dops.CL_COUNTERS, dtype=torch.int32) if cl else None)
        if la is not None:
            assert la[1].is_contiguous() and la[1].data_ptr() == ws.data_ptr() and la[2].shape == (B, A.KV_HEADS, la[0])
            return la[0], la[1].shape[2]
        return None

    assert choice(1, 16) is None and choice(1, 64) is None and choice(4, 64) is None and choice(32, 64) is None
    assert choice(1, 65) == (8, 7) and choice(1, 65, False) is None and choice(8, 100) == (4, 2)
    assert choice(32, 65) == (4, 1) and choice(17, 4096) == (4, 1) and choice(2, 512) == (8, 3)


def test_cluster_contracts():
    """C CTAs per (sequence, kv head) whatever the context; no scratch or counters; the long-context cases too."""
    for c, k in A.ATTN_CLUSTER.items():
        assert k.grid_for({"B": 3, "NP": 64, "P": 200, "T": 4096}) == (c, A.KV_HEADS, 3)
        assert {"ws", "counters"}.isdisjoint(p.name for p in k.params)
        assert k.op == A.ATTN_DECODE_QKNORM.op and k.dynamic_smem == A.SMEM
        assert {(d["B"], d["NP"]) for d in k.cases()} >= {(1, 64), (8, 64), (32, 64)}
        assert all(case["T"] == case["NP"] * A.PAGE and case["P"] >= case["B"] * case["NP"] for case in k.cases())


def _candidate_ops(tmp_path, k, text: str) -> list[str]:
    """An unregistered candidate's PTX (no committed file): assembled without spills within its contract's registers and
    shared memory; its SASS's HMMA, MOVM, LDGSTS, ATOMG, LDL, STL and UCGABAR_ARV, with the page walk's counts checked."""
    assert k.name not in {c.name for c in contracts.all_contracts()}
    assert not paths.ptx_path("sm_90a", "attention", k.name).exists()
    path = tmp_path / f"{k.name}.ptx"
    path.write_text(text)
    res = build.resource_usage(toolchain.ptxas(), path)
    assert res["spill_stores"] == res["spill_loads"] == res["stack_frame"] == 0, res
    assert res["registers"] <= k.max_registers and res["static_smem"] <= k.max_static_smem, res
    cubin, _ = build._assemble(toolchain.ptxas(), path, tmp_path)
    sass = subprocess.run([*toolchain.disassembler(), str(cubin)], capture_output=True, text=True, check=True).stdout
    ops = re.findall(r"\b(HMMA|MOVM|LDGSTS|ATOMG|LDL|STL|UCGABAR_ARV)[.A-Z0-9]*", sass)
    assert ops.count("HMMA") == 32 and ops.count("MOVM") == 66 and ops.count("LDGSTS") == 64
    assert "LDL" not in ops and "STL" not in ops
    return ops


@pytest.mark.parametrize("c", sorted(A.ATTN_SPLIT))
def test_split_candidates_assemble_as_intended(tmp_path, c):
    """The split candidates attn_decode_d256_qknorm_s4 / _s8 (experiments/attention/split_variant_606fb91.json; not
    registered): the cluster builds' page walk (the same 32 HMMA, 66 MOVM, 64 cp.async) with attn_decode_d256's combine
    (one atomic, no cluster barrier); no spills, within their registers; no committed PTX for them."""
    g = paths.generator("attention", "gen_attn_decode")
    k = A.ATTN_SPLIT[c]
    ops = _candidate_ops(tmp_path, k, g.generate(True, split=c))
    assert ops.count("ATOMG") == 1 and "UCGABAR_ARV" not in ops
    assert k.grid_for({"B": 3, "NP": 64, "P": 200, "T": 4096}) == (c, A.KV_HEADS, 3) and k.op == A.ATTN_DECODE_QKNORM.op


# what each rejected cluster candidate's PTX must hold (docs/notes/attention.md, after 43fb274)
_CLUSTER_CANDIDATE_TEXT = {
    # the owner of pos's page by rem (6 is not a power of 2), a page table of 11, 4 ranks combining 512 outputs each
    6: ("rem.u32 %r0, %last, 6;", "pids[11]", ".reqnctapercluster 6, 1, 1", "setp.lt.u32 %pslice, %page, 4;",
        "mul.lo.u32 %ir0, %page, 512;"),
    # non-portable, a page table of 4, 8 ranks combining 256 outputs each, ranks 8..15 walking pages only
    16: ("and.b32 %r0, %last, 15;", "pids[4]", ".reqnctapercluster 16, 1, 1", "setp.lt.u32 %pslice, %page, 8;",
         "mul.lo.u32 %ir0, %page, 256;"),
}


@pytest.mark.parametrize("c", sorted(A.ATTN_CLUSTER_CANDIDATES))
def test_cluster_candidates_assemble(tmp_path, c):
    """The rejected candidates attn_decode_d256_qknorm_c6 (measured at 74282c6) and _c16 (97ea05b), in
    A.ATTN_CLUSTER_CANDIDATES: ranks past the combining ones skip the combine once; the registered builds' instruction
    counts, two cluster barriers, no atomic, no spills, within their registers."""
    g = paths.generator("attention", "gen_attn_decode")
    t = g.generate(True, cluster=c)
    assert all(x in t for x in _CLUSTER_CANDIDATE_TEXT[c]) and t.count("@!%pslice bra COMBINED;") == 1
    ops = _candidate_ops(tmp_path, A.ATTN_CLUSTER_CANDIDATES[c], t)
    assert ops.count("UCGABAR_ARV") == 2 and "ATOMG" not in ops
