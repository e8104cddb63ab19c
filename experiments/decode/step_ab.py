"""Which of this session's changes moved the decode step, in one process (the decode records at
d0e3321 and c375ea1 ran on different machine loans, and the plain runner moved 2.57 -> 2.69 ms at
batch 1 while the PDL engine moved 2.39 -> 2.28; a rerun at e0e50e8 gave 2.68 and 2.41).

Each form swaps one change back to its previous build in the same runner (batch 1, synthetic
40-layer checkpoint, context 1024, as `netra decode`), then captures and times the step plainly
and with PDL (CUDA-graph replay, CUDA events, median of 64 steps). The forms are timed in the order
current, each swap, current again, so drift shows as a difference between the two currents.
- attn_gather: attention reads the KV cache by gathering (pages_in_order=False), as before 0bfb57b;
- router_prev: moe_router_norm_e256_k2048 without its PDL build (no prefetch, no griddepcontrol),
  so launched plainly under PDL capture too (its op's contract without pdl, as before 0bfb57b; the
  first run at 3069270 launched the old build with the PDL attribute: a race, and its PDL logits
  differed, as they should);
- gdn_prev: gdn_decode_b32 and _pdl without .cs on the state (stream_state=False);
- fp8_prev: the 15 FP8 kernels with .nc activation loads (coherent_x=False);
- all_prev: all four;
- shared_first (a candidate, not a swap back): the MoE block launches the shared expert's gate | up
  before the routed experts' (netra.decode.ops.MOE_SHARED_FIRST), so under PDL its weights stream
  while the router runs on 8 SMs per token. Prediction: PDL step 40-60 us less at batch 1 (1-1.5 us
  per layer), plain unchanged; bitwise (independent launches);
- after_profile (a diagnosis, last): the current form timed after netra.decode.main.op_breakdown has
  run torch.profiler over 4 eager steps, as `netra decode` does before its kernel engines. If the
  CLI's extra 0.12-0.26 ms per step is CUPTI left active by the profiler, this form shows it.
- pre_strips_prev (after a8cba41): fp8_gemv_n1024_k2048 and _gate with x first (pre_strips=0), as
  before a8cba41. Prediction from the kernel records: ~10 us less per batch-1 PDL step for the
  current form (0.23-0.32 us per call, 40 calls), plain within +-5 us;
- moe_s4_off (ran at 59299e0 and 27bbe03, removed since): the op kept the 3-stage gate | up build at
  every M instead of its 4-stage build above 8 rows. Predicted the current form ~0.6-0.7 ms faster
  per batch-32 step; measured neutral twice, and the 4-stage build was withdrawn
  (experts_graph_c7bfb0f.json);
- moedown_s6 (a candidate after a8cba41): fp8_gemv_n2048_k4608_moedown with 6 stages at every M
  (experiments/proj/moedown_stages_6_variant_59299e0.json: M = 8 25.3 -> 22.3 us, M = 4 14.6 -> 13.8,
  M = 1 +0.2 plainly, the same as a chain). Prediction: batch 8 ~0.12 ms less per step (one M = 8
  launch per layer), batch 32 ~0.48 (four), batch 1 within +-10 us, unless the step's experts come
  from L2 (see expert_stats);
- expert_stats (a diagnosis, no timing): in one eager step, the distinct experts among each layer's
  B x 8 (token, expert) pairs. moe_s4_off was neutral at batch 32 where the kernel records (every
  pair a random expert, cold weights) predicted 0.6 ms: if the synthetic model's tokens share
  experts, the weights come from L2 and ring depth matters less.
- ks2_prev (after 6e78c34): the shared expert's gate | up (fp8_gemv_n1024_k2048_gate_ks2, and the
  plain fp8_linear's fp8_gemv_n1024_k2048_ks2) on their unsplit builds (64 + 1 CTAs of 512 threads), as
  before. Prediction from the kernel records (unsplit / ks2: M = 1 2.98 / 2.79 us, 8 3.18 / 2.91,
  16 3.88 / 3.28; as a PDL chain 2.10 / 1.98 at M = 1): the current form ~4-8 us faster per batch-1
  step (40 launches), ~50 us at batch 32 (80 launches of 16 rows). Not bitwise: the split adds the
  two halves of k as one more fp32 add.
- pipe_prev (after 7c79002; since the commit after f936d85 also the plain engine's pipe build from 16 sequences):
  gdn_decode takes the smem builds at every batch from 8 (plain and under PDL capture) instead of the pipe builds (the persistent pipeline of value-head states; bitwise the same). From the
  kernel records as PDL chains (pipe / smem: B = 8 10.75 / 11.19 us, 32 39.26 / 40.78), prediction: the current
  form's PDL step 10-15 us less at batch 8 and 30-45 us less at batch 32 (30 GDN layers), plain unchanged; run
  with --batch=8 and --batch=32 (at batch 1 the forms are the same).
- res_ks2 (after 29bd3be; measured at 9a29372, step_ab_res_ks2_pdl_s2_carveout_9a29372.json: 2.429 / 2.135 ms
  plain / PDL against 2.408-2.421 / 2.121-2.125, so 10 us more with PDL; rejected): out_proj / o_proj's `fp8_gemv_n2048_k4096_res` on its k-split
  build (`Fp8Gemv(..., "res", ksplit=2)`: 132 CTAs in clusters of 2, each half of k of two strips). The
  plain k-split build of this shape (experiments/proj/README.md, k split, build 2) took 3.71 us as a PDL
  chain at M = 1 against 4.11, but 4.76 against 4.62 launched plainly, and 5.72 against 5.88 at M = 16.
  Prediction: batch 1 PDL step 10-16 us less (40 launches), plain 4-6 us more; batch 32 ~10 us less.
  Not bitwise (the split adds the halves of k as one more fp32 add). If the PDL step gains, the op
  would take the k-split build only under set_pdl (as gdn_decode's PDL build).
- moedown_ids, moedown_ids_raw (candidates after 7d01a3a): fp8_gemv_n2048_k4608_moedown and its _s6 build with
  the expert ids read and every first chunk requested before griddepcontrol.wait (generate(ids_early=True)), so
  under PDL moe_down's 74 KB per CTA stream while the router-fused grid's slowest CTAs finish their walk (moe_down's
  CTAs land on the SMs the early ones free). `_ids` reads the ids again after the wait and re-requests the chunks
  if any changed (ids_check: valid although the router-fused launch, the grid just before, wrote them); `_raw`
  does not (the 0bfb57b candidate, measured then only as a chain of itself, where x queued behind the chunks).
  Prediction: batch 1 PDL step 40-80 us less (1-2 us of moe_down's ~5.3 per layer), plain within +-10 us
  (nothing runs before the wait plainly); batch 8 20-40 us less with PDL. Bitwise.
- cluster (after 38dbbc6): the cluster builds on (dops.ATTN_CLUSTER, off by default since 38dbbc6; the runs at
  bd25dbe, 768020c and 606fb91 had them on in "current"). split (606fb91 only; its dispatch is gone with its
  contracts): the split candidates (experiments/attention/split_variant_606fb91.json) in their place.
- cluster_plain (after bd25dbe; ran at 768020c and, at a 4K cache, at 113d9d7; promoted after f3e6613: the cluster
  builds have no griddepcontrol since, so the form was removed): the cluster builds launched plainly in the PDL engine
  (their contracts' pdl emptied), a diagnosis of the PDL engine's early-context time with them.
- cluster_c4 (after 43fb274): the cluster builds on with clusters of 4 at every batch (dops.ATTN_C8_MAX_B = 0), against
  `cluster` (clusters of 8 up to 4 sequences): whether the PDL engine's early-context loss at batch 1 grows with the
  cluster size.
- cluster_c6 (ran at 74282c6 with attn_decode_d256_qknorm_c6 registered; removed since, with the build): clusters of
  6 above dops.ATTN_C8_MAX_B sequences in place of clusters of 4. Predicted from the occupancy (c4 at B = 32: 256 CTAs,
  ~2 a SM; c6: 384, 3 a SM) batch 32 at 16 pages 30-80 us less per step; measured 20-120 us more with PDL at context
  1024 (step_ab_current_cluster_c6_b32_74282c6.json), level at 4096 and at batch 8 (docs/notes/attention.md).
- cluster_c16 (ran at 97ea05b with attn_decode_d256_qknorm_c16 registered; removed since, with the build): clusters
  of 16 (non-portable) at every batch. Predicted from the Nsight Compute run of c8 at 1 x 64 pages (16 CTAs, each 8
  pages one after another, 12% of DRAM): batch 1 at 4K positions 40-60 us less per step, at 1K 5-15 us less, the first
  page within +-10 us. Measured (step_ab_current_cluster_c16*_97ea05b.json, PDL): 20 us less at 4032..4095, 6-12 us
  more at 1K-2K positions, level in the first page; batch 8 at 4K 65 us less with PDL, 16 us more plainly.
- cluster_c8 (after 97ea05b): clusters of 8 at every batch (dops.ATTN_C8_MAX_B = 32) in place of 4 above 4 sequences.
  The kernel records have c8 1.1 us ahead of c4 at 8 x 64 pages and 1 us behind at 8 x 16; prediction: batch 8 within
  +-15 us at context 1024, 0-20 us less at 4K positions; batch 32 worse (its records: c4 ahead by 2.6-8.6 us a layer).
  Measured at 279567d (step_ab_current_cluster_c8_b{8,32}_ctx4096_279567d.json, ms plain / PDL): batch 8 16-20 us
  more in the first page, level at 1024..1087, at 4032..4095 level plainly and 56 us less with PDL; batch 32 17-127 us
  more plainly, 17-49 with PDL. ATTN_C8_MAX_B stays 4.
- long_off (after 7b4cfc9): the long-context attention builds (attn_decode_d256_qknorm_c4_long / _c8_long: up to S
  clusters per (sequence, kv head)) off, so the cluster builds alone up to 64 pages and the framework path (SDPA)
  past them. Prediction from the kernel's design (c8 at 1 x 64 pages: 14.7 us, 16 CTAs walking 8 pages each): batch 1
  at 4K positions 20-40 us less per step with them; at 32K positions (512 pages), where the current form without them
  runs the framework path, several hundred us less at every batch.
- long_trigger_end (after a734925; ran at 79432d6, neutral, removed with the builds' griddepcontrol after d47926b):
  the long builds without griddepcontrol.launch_dependents (their dependents launch
  when the grid ends), because with them the PDL step was slower than the plain one at long contexts (batch 1 at
  131072: 2.41 against 2.32 ms at the end of the cache; batch 32 at 32768: 14.31 against 14.04). Prediction: the late
  PDL step at or under the plain one there (the next projection's CTAs no longer take SMs while the walk runs), the
  early PDL step 10-20 us slower (no weight prefetch of o_proj during attention).
- long_plain (after 79432d6; ran at d47926b and promoted: the builds have no griddepcontrol since, so the form was
  removed): the long builds launched plainly in the PDL engine (their contracts' pdl emptied, as cluster_plain). Why: late in long caches the PDL step was slower than the plain one and long_trigger_end changed
  nothing; a cluster grid launched while the previous kernel still holds the SMs may be placed unevenly (clusters go
  where a GPC has room), and each CTA's walk is bound by its SM's share of the bandwidth. Prediction: the late PDL step
  at or under the plain one (batch 1 at 131072: 2.41 -> ~2.30 ms; batch 32 at 32768: 14.31 -> ~14.0), the early one
  5-15 us slower (no overlap of the attention launch with the q | k | v projection's tail).
- cluster_push (after e744800): the cluster builds (attn_decode_d256_qknorm_c4 / _c8) pushing each rank's partial by
  st.async to the combining ranks, completing their mbarriers (generate(push=True)), in place of the committed builds
  (a cluster barrier, then remote loads). Why: traced at e744800
  (experiments/attention/long_place_phases_e744800.json), c8 at 1 x 16 pages spends 3.1 of its 6.6 us after the walk,
  0.9 of them from the partial written to the cluster barrier passed and 0.8 in the remote loads and the out.
  Prediction: 0.8-1.3 us less a launch, 8-13 us a batch-1 step with PDL at a 1K cache; the same bits. Ran at 2c03b57
  with the push committed (the form was cluster_pull then; step_ab_current_cluster_pull_current_again*_2c03b57.json):
  bitwise, the step within 3 us at batch 1 and 32 (1K cache), the kernels 0.3-0.7 us faster for c8, level for c4 but
  at 32 x 64 pages (69.6 against 73.1 us). Not promoted; the push stays a generator option.
- long_cta120 (ran at a5048c1, then replaced by long_splits_prev): the long builds' S aimed at 120 CTAs
  (dops.ATTN_LONG_CTAS) instead of one a SM (132), so at most 15 clusters of 8: batch 1 S = 7, batch 2 S = 3 (the 16th
  cluster of 8 shares SMs and ends 4-7 us late: experiments/attention/long_place_dd43954.json). Predicted: batch 1 late
  in a 32K cache 20-30 us less a step. Measured (step_ab_current_long_cta120_current_again{,_b2}_ctx32768_a5048c1.json): batch
  1 late 1.849 / 1.745 ms against 1.861-1.862 / 1.757 (12 us), batch 2 late 2.315 / 2.183 against 2.318-2.319 /
  2.189-2.191 (4-6 us); early level. The kernel times (long_splits_a5048c1.json) had B = 1 x 512 pages 25.1 against
  26.3-26.6 us (the prediction's 23-25 was high: the walk's extra pages cost more than guessed), and 120 CTAs at B = 4
  would take S = 1, 11 us slower: so the op's rule drops one split only where S > 2 (dops.ATTN_LONG_RESIDENT).
- long_splits_prev (after a5048c1): that rule undone (S = about one CTA a SM at every batch: B = 1 S = 8, B = 2 S = 4).
- h_early (after 2a6d52d): the residual builds (out_proj / o_proj's fp8_gemv_n2048_k4096_res, moe_down's
  fp8_gemv_n2048_k4608_moedown and _s6) loading h at each strip's start instead of after the warps' sums
  (gen_fp8_gemv.generate(h_early=True); experiments/proj/h_early_variant.py). Prediction: batch 1 25-45 us less a step
  (an L2 round trip off the tail of 80 launches), the same bits. Measured at fdd15d3
  (step_ab_current_h_early_current_again{,_b8}_fdd15d3.json), ms plain / PDL, bitwise: batch 1 1.671 / 1.557 against
  1.668-1.672 / 1.569-1.579 (late 1.691 / 1.577 against 1.689-1.690 / 1.584-1.592); batch 8 3.768 / 3.551 against
  3.783-3.796 / 3.545-3.563. The kernels (h_early_variant_fdd15d3.json): the residual build 0.1-0.3 us faster as a chain,
  the 6-stage moedown 0.2-0.9, the 3-stage moedown (M <= 3) 0.02-0.15 slower. Promoted for the first two
  (Fp8Gemv.h_early); the form now swaps all three to h_early (the 3-stage moedown's is the only change).
- h_early_prev (after fdd15d3): the residual build and the 6-stage moedown without h_early, as before.
- top_early (after 304eaa6): moe_down's builds (fp8_gemv_n2048_k4608_moedown, _s6) loading every chunk's expert weight
  (top, glogit) with x instead of after each chunk's conversion (gen_fp8_gemv.generate(top_early=True);
  experiments/proj/top_early_variant.py). Prediction: batch 1 15-25 us less a step, the same bits. Measured at 6753f5e
  (step_ab_current_top_early_current_again_6753f5e.json): 1.654 / 1.553 ms against 1.660-1.663 / 1.559-1.560 (late
  1.676 / 1.572 against 1.678-1.681 / 1.577-1.578): 6-7 us with PDL, bitwise. Ready (Fp8Gemv.top_early), not promoted:
  the decode record could not be re-taken in the session's device time.
- norm_w_early (after 331dcf7; CPU-built, not yet run): the router-fused launch (fp8_gemv_n1024_k2048_moe_shared_router)
  copying its post-attention norm weight into shared memory by cp.async beside h's loads, instead of loading it block
  by block after the sums (gen_fp8_gemv.generate(norm_w_early=True); 64 KB more dynamic shared memory, swapped into the
  op's contract for the run). Prediction: 0.2-0.4 us a launch, 8-16 us a batch-1 step, the same bits.
- norm_w_early measured at 8cca9d2 (step_ab_current_norm_w_early_current_again_8cca9d2.json): 1.660 / 1.618 ms against
  1.667-1.668 / 1.576-1.581, 8 us less plainly and 37-42 us MORE with PDL, bitwise. Rejected.
- norm_w_early_carveout (a diagnosis after 8cca9d2): norm_w_early with every kernel at the largest carveout (as
  carveout). Hypothesis: its 205 KB needs the 228 KB carveout where its neighbours run at a smaller one, and an SM
  changes carveout only when empty, so under PDL no CTA of the router launch lands until the previous grid has left
  its SM. If so this form recovers the plain gain with PDL.
- moedown_s6 again (after 8cca9d2): with top_early on both builds the 6-stage one is the faster kernel at every M in
  one run's records (M = 1 5.31 / 4.74 us plain / chain against 5.63 / 5.10; M = 2 7.69 / 7.06 against 8.51 / 8.01).
  Prediction: batch 1 ~13-15 us less a step plain and with PDL (0.3-0.4 us x 40), batch 2 ~35 us, unless its 173 KB
  costs it the overlap under PDL (see norm_w_early_carveout).
- norm_w_early_carveout at c109e20: its launch failed (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) with the largest
  carveout set on every kernel; not diagnosed, not measured.
- norm_w_pre (after c109e20): the router-fused launch's norm weight requested before griddepcontrol.wait (one 4 KB bulk
  copy beside the router rows, on their mbarrier, into the partials' region; gen_fp8_gemv.generate(norm_w_early="pre")),
  the same shared memory and contract. Prediction: 6-12 us less a batch-1 step, plain and PDL alike, the same bits.
- norm_w_prev (after c109e20, where norm_w_pre was promoted in the same commit as its measurement): the build before it.
  Measured at b976963 (step_ab_current_norm_w_prev_current_again_b976963.json, bitwise): current 1.662 / 1.567 and
  1.660 / 1.568 ms plain / PDL, norm_w_prev 1.659 / 1.587 (late 1.680 / 1.587, 1.679 / 1.588 against 1.672 / 1.598):
  20 / 10 us less with PDL early / late, plainly neutral early and 6-10 us more late. Kept.
- x_tpose (after 4bceb0e; CPU-built, not yet run): the batch-1 kernels with staging (both moe_down builds, res,
  norm_ba, norm, the router-fused launch) with x staged by fragment lane, nothing stored or loaded past M
  (experiments/proj/x_tpose_variant.py says why). Prediction: 15-30 us less a batch-1 step, plain and PDL, the same bits.
  Measured at e40df94 (step_ab_current_x_tpose_current_again_e40df94.json): 5 / 2 us less plain / PDL; promoted for the
  norm builds only (Fp8Gemv.x_tpose).
- moedown_stagger2 / 4 / 8 (after aafc80c; a diagnostic that may be a candidate): the committed batch-1 moe_down
  (3-stage) with CTA c spinning 2 / 4 / 8 c cycles after griddepcontrol.wait (the last of 128 CTAs 254 / 508 / 1016
  cycles later). Why: moedown_trace_clock_stagger_aafc80c.json has the products ending ~3900 cycles (~2 us) later as a PDL
  chain than plainly, and 16 c cycles of stagger remove all of it, while reading half of x's bytes (--half_x) removes none:
  the cost is every CTA asking at the same instant. In the step moe_down's CTAs wait for the router-fused launch's last CTA
  and leave the wait together, as in the chain. Prediction: if the effect is the step's, 20-60 us less with PDL (0.5-1.5
  us of 40 launches), plainly 0-10 us more; the same bits (the spin changes no arithmetic). Measured at d2a4244
  (step_ab_current_moedown_stagger2_moedown_stagger4_moedown_stagger8_current_again_d2a4244.json, bitwise), ms plain /
  PDL, early (late): current 1.669 / 1.573 (1.682 / 1.592), again 1.670 / 1.575 (1.684 / 1.597); stagger2 1.670 / 1.562
  (1.684 / 1.575), stagger4 1.673 / 1.575 (1.694 / 1.587), stagger8 1.695 / 1.560 (1.715 / 1.582).
- moedown_stagger1 / 3, res_stagger2, normba_stagger2 (after d2a4244): the same spin at 1 and 3 cycles, and at 2 cycles in
  the out_proj / o_proj residual build and the GDN in_proj (norm, b | a) build, whose CTAs also leave the wait together:
  is stagger2's 11-22 us with PDL repeatable, and is the effect moe_down's alone. Measured at 1aa380b
  (step_ab_current_moedown_stagger1_..._current_again_1aa380b.json, bitwise), ms PDL early (late): current 1.576 (1.593),
  again 1.582 (1.598); moedown_stagger1 1.569 (1.585), stagger2 1.578 (1.593), stagger3 1.561 (1.579); res_stagger2
  1.578 (1.586), normba_stagger2 1.573 (1.591); plainly all within +-7 us. stagger2 did not repeat (-11 at d2a4244, 0
  here), and the other spins land anywhere from 0 to -20 with no order in N: not a robust gain. Not promoted.
- --context=N: the runners' context (default 1024, as `netra decode`); the late window is its last 64 positions.
- --at=P:P:..: every form also timed at positions P + 3 .. P + 66 (at_P_plain_ms / at_P_pdl_ms), to find where the
  cluster builds overtake the one-page-a-CTA build between the early and the late windows.
- cluster_prev (after 056f9ce): attn_decode_d256_qknorm (one page a CTA, its one-wave rule) in place of the cluster
  builds attn_decode_d256_qknorm_c4 / _c8. Since this form every form's row also has late_plain_ms / late_pdl_ms: the
  same runner timed at positions context - 61 .. context - 1 (every page read), after the early timing.
- qknorm_prev (after 5ff6da7): the runner's qk_rmsnorm launch before attn_decode_d256 again, instead of
  attn_decode_d256_qknorm with the two norms inside (dops.ATTN_QKNORM off; the same bits). Prediction from the
  kernel records (qk_rmsnorm_d256 1.2 us as a PDL chain at M = 1, ~1.8 plainly; 10 attention layers): the current
  form 10-15 us faster per batch-1 step with PDL, 15-20 plainly; at batch 32 ~20 us.
- pdl_s2 (a candidate after 4064c31, experiments/proj/coresident_variant.py): the >= 8 MB projections the
  runner launches (the norm-fused GDN in_proj_qkv | z and attention q | k | v, the plain ones at more
  than 8 rows, and out_proj / o_proj's residual build on its k split) on builds that fit two CTAs to
  an SM (2 stages, 64 registers, the largest shared-memory carveout), with every stage's chunks
  requested before griddepcontrol.wait: under PDL their weights stream beside the previous grid.
  Prediction: batch 1 PDL step 40-80 us less (~1-2 us per projection, 80 of them), plain 10-40 us
  more. Not bitwise where the k split applies. Measured at 9a29372: 2.473 / 2.292 ms (170 us more with PDL;
  the same builds' chains were slower too: experiments/proj/README.md, two CTAs per SM). Rejected.
- carveout (a diagnosis): every kernel with the largest shared-memory carveout preference, so that
  under PDL a grid's CTAs can share an SM with the previous grid's wherever their shared memory
  adds up to 228 KB (the driver's default carveout is sized per kernel). Bitwise. Measured at 9a29372:
  2.412 / 2.124 ms, neutral.
- pre_all (a candidate after 9a29372): the >= 8 MB projections (plain, norm-fused, residual) on their promoted
  3-stage builds with every stage's chunks requested before griddepcontrol.wait at every M (v3's rule, which
  v3f replaced because plainly x queued behind the chunks): under PDL, 96 KB per SM instead of 32 KB streams
  during the previous grid's tail. Prediction: PDL step 10-30 us less, plain 10-30 us more. Bitwise.
  Measured at 8cdd9cd: 2.465 / 2.168 ms against 2.417-2.421 / 2.126-2.144; rejected (experiments/proj/README.md).
- early (a candidate after 9a29372): the same kernels and the shared expert's gate | up trigger their
  dependents before griddepcontrol.wait (early_trigger), so the next kernel's CTAs start, and prefetch,
  where they fit beside this grid's instead of after its wait. Prediction: PDL step 0-30 us less, plain
  unchanged. Bitwise. Measured: 2.118 ms PDL at 8cdd9cd between currents of 2.144 and 2.126; repeated at
  e8d33e9 (step_ab_early_e8d33e9.json, _b32_): 2.131 / 2.136 against 2.131 / 2.137, batch 32 12.858 against
  12.860 / 12.871. Neutral; rejected. early_again: the same, timed again (the order early, current, early_again,
  current_again puts each form on both sides of the other).
- l2_prefetch (a candidate after 0f8a5ea): the projections whose CTAs stream more than their first strip
  (12288, 8192, 9216, 4096 x 2048, the norm builds, 2048 x 4096 and its residual build) also ask L2 for
  every later strip before griddepcontrol.wait (gen_fp8_gemv.generate(l2_prefetch=True)), so DRAM is busy
  from each CTA's start, and under PDL during the previous grid's tail. Prediction: 0-0.5 us per such
  projection, so 10-40 us per batch-1 step on either engine. Bitwise. Measured at 6bbe0da: batch 1
  2.465 / 2.172 ms plain / PDL against 2.406-2.407 / 2.120-2.128; batch 32 13.215 / 12.937 against
  12.936-12.951 / 12.725-12.731. Rejected (experiments/proj/README.md).
- l2_prefetch_lines: the same bytes by every thread's prefetch.global.L2 of single lines (l2_prefetch="lines"),
  not the CTA's bulk unit, which also carries the ring's copies.
- k4096_chunks_first (after 44deb3d): 2048 x 4096 and its residual build (out_proj, o_proj: 40 launches per
  step) with the strip's two chunks requested before the wait and x at M <= 8 (pre_strips=1, the rule before
  56e2db6). v3r chose x first from the bench, where x is cold in DRAM and queued behind the chunks (5.45 ->
  4.56 us at M = 1); in the step x is hot in L2 (experiments/proj/x_hot_chain.py). Prediction: batch 1 PDL
  0-30 us less, plain within +-15 us. Bitwise. Measured at e756719: batch 1 2.454 / 2.147 ms against
  2.427-2.429 / 2.123-2.128, batch 8 4.518 / 4.282 against 4.477-4.478 / 4.262-4.265. Rejected.
- red_swizzle (a candidate after 7bbc5ca): the 11 dense projection kernels with their warps' partials stored
  with rows swizzled by token (2-way bank conflicts instead of 4-way; experiments/proj/red_swizzle_variant.py).
  Bitwise the same logits. Prediction from the kernel records: 2-6 us less per batch-1 step (the norm builds
  0.1-0.2 us per call, 40 calls; the residual builds +-0.05) and 5-10 us less at batch 8, plain and PDL alike.
  Measured at 7d2021a (step_ab_red_swizzle{,_b8,_b32}_7d2021a.json, ms plain / PDL, candidate against current and
  current_again): batch 1 2.404 / 2.116 against 2.404-2.406 / 2.122-2.128; batch 8 4.521 / 4.292 against
  4.507-4.531 / 4.282-4.305; batch 32 12.913 / 12.710 against 12.922-12.935 / 12.715-12.721. Bitwise. Within the
  drift of the two currents: the gain is at M > 8 (verification), which these batches do not run. Promoted
  after that for the seven 16-warp builds but 12288 x 2048's plain one (Fp8Gemv.red_swizzle); this form
  still swaps in every dense build's swizzled form.
- land_split_prev (after land_split's promotion, Fp8Gemv.pieces): the 16-warp plain, norm and residual
  projections as before it, each 32 KB chunk one bulk copy on one mbarrier (generate(land_split=1)), against
  the promoted 4 copies on 4 mbarriers, each warp waiting for its own 8 KB piece
  (experiments/proj/land_split_variant.py). Bitwise the same logits. Prediction from the kernel A/B
  (land_split_4_variant_421e282.json: norm builds at M = 1 +0.17 / -0.06 us plain / PDL, M = 8 -0.14 / -0.20):
  the current form within +-5 us of this one at batch 1, 0-10 us faster at batch 8.
- moe_prefetch (a candidate after 8a62374): one more launch right after the router at batch <= 2,
  `moe_prefetch.ptx` beside this script (hand-written): 96 CTAs of one warp, each lane one 8 KB
  cp.async.bulk.prefetch.L2 of the chosen experts' packed gate | up and down (24 MiB per token), so the
  expert kernels, which cannot request their weights before their wait, read them from L2 (by bytes they
  run at 54% and 37% of the roofline at batch 1). The router's own try (rank 0's bulk unit alone) kept
  the router alive 45 us (experiments/proj/README.md); here each SM issues 256 KB. Prediction: batch 1
  0.1-0.25 ms less per step, both engines (2-6 us per MoE layer). Bitwise (a prefetch changes no bits).
  Measured at a694dcc (step_ab_moe_prefetch_a694dcc.json, _b2_): batch 1 2.540 / 2.219 ms plain / PDL
  against 2.406-2.409 / 2.119-2.124; batch 2 2.892 / 2.587 against 2.735 / 2.451: 97-157 us more. The
  grid seems to end only once its bulk prefetches have landed, so the expert kernel waits for the bytes
  and the extra launch. Rejected.
- moe_prefetch_lines (after a694dcc): the same pieces by prefetch.global.L2 per 128-byte line
  (`moe_prefetch_lines.ptx`: CCTL.E.PF2 in the SASS, no bulk unit), in case a CTA exits without waiting
  for those. Prediction: between -0.2 and +0.1 ms per batch-1 step. Bitwise. Measured at eac4517
  (step_ab_moe_prefetch_lines_eac4517.json): 2.551 / 2.232 ms against 2.412-2.415 / 2.127-2.130, 104-139 us
  more. Rejected: an extra launch between the router and the experts costs more than the earlier bytes
  give, whichever way they are asked for. Both forms put the launch in front of the routed gate | up
  by wrapping netra.decode.ops.moe_decode and fp8_linear_experts (moe_prefetch_wrappers), so the op itself
  carries no hook (it did at a694dcc and eac4517; the launch order is the same).
- state_pf_router / state_pf_inproj (candidates after afdc607): one more launch, `gdn_state_prefetch.ptx` beside
  this script (hand-written: 32 lanes a CTA, each one cp.async.bulk.prefetch.L2 of 4 KB), asks L2 for a GDN layer's
  recurrent state (the whole pool up to 16.9 MB: the pipe build's first wave of items) before gdn_decode reads it:
  state_pf_router right before the MoE block of the layer before (its router's chain leaves DRAM nearly idle; the
  lines must then survive the experts' evict-first weights), state_pf_inproj right before the layer's in_proj.
  Why: gdn_decode_b32_pipe_pdl at B = 8 takes 7.8 us with its state in L2 against 11.1 cold as a PDL chain
  (experiments/gdn/hot_state_afdc607.json). Prediction: batch 8 0-90 us less a PDL step (3 us a GDN layer at most,
  less the extra launch's hop, which cost moe_prefetch 3-4 us a layer), batch 16 less, batch 1 nothing; plainly
  slower (a launch more, serialized). Bitwise (a prefetch changes no bits). state_pf_empty: the control (the same
  launches, one CTA, nothing asked); state_pf_lines: the router placement by prefetch.global.L2 per 128-byte line
  (`gdn_state_prefetch_lines.ptx`), in case the grid's end waits for bulk prefetches.
  Measured (step_ab_current_state_pf_*_b{8,16}_{0a16103,e036dcc,e6dce43}.json, ms plain / PDL): batch 8 router
  3.725-3.735 / 3.518-3.524, inproj 3.729 / 3.584, lines 3.720 / 3.542, empty 3.645 / 3.332, against 3.614-3.623 /
  3.328-3.342; batch 16 router 5.610 / 5.355, inproj 5.610 / 5.368 against 5.493-5.501 / 5.178-5.183. Bitwise.
  The timeline (timeline.py, timeline_current_state_pf_router_state_pf_inproj_b8_e6dce43.json): the prefetch grid
  lasts until its bytes land (10.5 / 21 us a launch, 6 us past the kernel ahead), and gdn_decode gains only 0.6-0.9 us
  of the 3.25 the hot-state bound allows (experiments/gdn/hot_state_afdc607.json). Rejected
  (../../docs/notes/decode.md, "After 499410f").
- moedown_rotate (a candidate after e6dce43): the grouped moe_down (fp8_gemv_n2048_k4608_moedown_grp, from 2 rows under
  PDL) with CTA s taking task (u + 16 s) mod T where the promoted build takes task u: at any moment the 128 CTAs read
  strips of different experts instead of 8 KB pieces of the same ones (gen_moe_down_grp.down(rotate=True)). Why: the
  grouped kernel stays at ~80% of the roofline, and the L2-ahead candidates' note (experiments/proj/README.md) read it
  as DRAM delivering less to every CTA reading the same experts at once; this tests that reading. Bitwise (the partials
  are stored by pair). Prediction: if the reading holds, batch 32 40-120 us and batch 8 20-60 us less a PDL step;
  else level.
- grp_transpose (a candidate after e85fb52): the grouped routed + shared gate | up builds (fp8_gemv_n1024_k2048_moe_shared_grp
  from 5 rows, _t32 above 16) with the routed strips walked expert-fastest (gen_fp8_gemv.generate(grp_transpose=True):
  virtual strip S + j is expert 1 + j % U, row block j / U), so the 132 CTAs read row blocks of different experts at
  once instead of the 64 strips of one or two; the shared expert's strips first, as before. The same reading of the
  MoE kernels' ~80% as moedown_rotate's. Bitwise. Prediction: if the reading holds, batch 32 0.1-0.3 ms and batch 8
  40-120 us less a PDL step; else level. grp_transpose_rotate: both candidates.
  Measured at aa15e6b (step_ab_current_moedown_rotate_grp_transpose_grp_transpose_rotate_current_again_b{32,8}_aa15e6b.json),
  ms plain / PDL, bitwise: batch 32 moedown_rotate 8.357 / 8.044, grp_transpose 8.831 / 8.469, both 8.836 / 8.487
  against 8.367-8.371 / 8.019-8.022; batch 8 3.623 / 3.354, 3.668 / 3.373, 3.663 / 3.373 against 3.620-3.626 /
  3.336-3.346. The rotation is level; the transposed walk is 450 us slower at batch 32. Its copies alone in that order
  are not slower (experiments/runtime/stride_read.py); its mapping's ~330 cycles on each strip's refill path are
  (experiments/proj/grp_transpose_variant_a723b20.json). Both rejected (../../docs/notes/decode.md, "After 499410f").
- early_release, early_release_all (candidates after 268ffc7): gen_fp8_gemv.generate(early_release=True): thread 0
  refills a strip's stage once every warp has its tile and scale in registers (one more bar.sync, before the mma), where
  the promoted builds refill it after the strip's partials are stored. Why: the grouped gate | up's walk alone (its
  copies, nothing else: experiments/runtime/stride_read.py) moves 4.45 TB/s at batch 32's shape where the kernel moves
  3.66, and ~330 cycles more on each strip's refill path (grp_transpose's mapping) cost it 16% at M = 32: the ring's
  turnaround, not DRAM, bounds it. early_release: the grouped gate | up builds; early_release_all: also the router-fused
  and merged gate | up launches of 1-4 tokens (the batch-1 MoE block among them) and the one-chunk dense input
  projections (norm_ba, the plain b | a builds, the norm builds, the 32-token builds, the plain shapes; not the
  residual build, which spills at its 104-register cap with the option). Built at 1f2dfbc (the router builds after it).
  The same arithmetic: bitwise. Prediction: batch 32 100-400 us, batch 8 30-120 us less a PDL step; batch 1 level
  to 30 us less with _all.
  Measured at 5922835 (step_ab_current_early_release_early_release_all_current_again_b{32,8}_5922835.json,
  step_ab_current_early_release_all_current_again_b1_5922835.json), ms plain / PDL, bitwise: batch 32 early_release
  8.732 / 8.294, _all 8.774 / 8.344 against 8.392-8.402 / 8.032-8.036; batch 8 3.648 / 3.352, 3.628 / 3.336 against
  3.601-3.605 / 3.330-3.331; batch 1 _all 1.593 / 1.432 against 1.576-1.577 / 1.422-1.426. The kernels alone
  (../proj/early_release_variant_5922835.json): the 32-token grouped build 88.7 -> 101.8 us at M = 32, 71.5 -> 82.6 at
  24. Rejected: the extra barrier puts every warp's slowest tile load on each strip's path; the miss says the walk is
  not bound by when its stages are refilled (refill_last, below, checks that directly).
- refill_last, refill_last_grp (candidates after 5922835): gen_fp8_gemv.generate(refill_last=True): the refill after
  each strip's partials' barrier is issued by the last warp's lane 0, not thread 0, whose warp also sums the strip's
  first 32 outputs. Why: early_release (measured at 5922835, above) added one barrier a strip and lost 15% at M = 32;
  each strip's time follows the last warp to its barrier, and warp 0 does the refill and the sums. refill_last_grp: the
  grouped gate | up builds (batches 5-32); refill_last: also the merged gate | up of 1-4 tokens and every one-pass
  dense build without a k split (norm_ba, b | a, the norm builds, out_proj / o_proj's residual build, the 32-token and
  plain shapes). The same arithmetic: bitwise. Prediction: batch 8 10-40 us, batch 32 0-50 us less a PDL step (the
  last warp sums there above 30 tokens); batch 1 0-15 us.
  Measured at 3af5437 (step_ab_current_refill_last_refill_last_grp_current_again_b{32,8}_3af5437.json,
  step_ab_current_refill_last_current_again_b1_3af5437.json), ms plain / PDL, bitwise: batch 32 refill_last
  8.419 / 8.057, _grp 8.395 / 8.040 against 8.397-8.415 / 8.034-8.061; batch 8 3.614 / 3.333, 3.612 / 3.349 against
  3.610-3.627 / 3.335-3.351; batch 1 1.569 / 1.417 against 1.576 / 1.419-1.424. The kernels alone
  (../proj/refill_last_variant_3af5437.json) within 1.5% either way. Level: rejected. Which thread issues the refill
  does not set a strip's time.
- nt_branch (a candidate after e62210c): gen_fp8_gemv.generate(nt_branch=True) for the 32-token grouped gate | up
  builds: each chunk's mma n-tile by n-tile behind a warp-uniform branch over the n-tiles no token of the strip's expert
  is in, where the promoted build issues all 32 mma of a chunk predicated. Why: Nsight Compute on the promoted build at
  M = 32 (../proj/ncu_gemv.sh at e62210c; ../proj/ncu/) puts 25% of the warps' stall samples on
  the tensor pipe (stall_math, on the mma), 14% on the strip's barrier and 3% on the weight wait, and 65% of the
  issued mma are predicated off. Bitwise (each n-tile's k chain unchanged). Prediction: if a predicated-off mma holds
  the pipe, batch 32 150-400 us less a PDL step; if not, level or a little slower (A fragments converted per n-tile).
  t32_swizzle: the same builds with red_swizzle (the partials' stores 2-way instead of 4.4-way bank conflicted; MIO was
  6% of the samples); nt_branch_swizzle: both. Prediction for the swizzle: 0-60 us less at batch 32.
- sum_barrier (built at 0b5e12d, corrected at a044afc, removed after it): the 32-token grouped gate | up builds' strip
  barrier split into named barriers per partials buffer, so that only the warps that sum a strip wait for its partials.
  The 0b5e12d form deadlocked in the kernel's own A/B from M = 16 (e28ef15); the a044afc form was bitwise and 5-9%
  slower alone at M = 16..32 (../proj/sum_barrier_variant_a044afc.json), and its batch-32 A/B here did not finish
  inside 240 s (a hang not excluded). ../proj/README.md, the last section.
- router_bfly (measured at 7f8a1fd as the candidate form router_redux, promoted after it): moe_router_norm_e256_k2048
  choosing its top 8 by shfl.bfly argmax (generate(select="bfly")), as before, against the promoted u32 keys and
  redux.sync.max (experiments/proj/router/router_select_variant_7f8a1fd.json: bitwise, the norm build 0.95 us
  faster per launch plainly and as a PDL chain at M = 1). Prediction was ~40 us per batch-1 step both ways.
  Measured (step_ab_router_redux_ba_fused{,_b8}_7f8a1fd.json, ms plain / PDL, redux against the two currents):
  batch 1 2.388 / 2.099 against 2.393-2.403 / 2.104-2.118 (5-19 us, within the currents' drift); batch 8 4.439 /
  4.224 against 4.472-4.474 / 4.250-4.258 (30-35 us). Bitwise.
- ba_unfused (measured at 7f8a1fd as the candidate form ba_fused, promoted after it): the GDN layer's in_proj_b |
  in_proj_a as their own launch (bf16_gemv_n64_k2048 after fp8_linear_norm), against the promoted 4 more CTAs of
  the norm + in_proj_qkv | z launch (fp8_gemv_n12288_k2048_norm_ba, netra.decode.ops.BA_FUSED). Prediction from
  the kernel records (b | a 2.67 us plain, 1.57 as a PDL chain at M = 1; 30 GDN layers): the fused form ~60-80 us
  less per batch-1 step plainly, ~25-45 with PDL. Measured (same files): batch 1 2.326 / 2.076 against 2.393-2.403
  / 2.104-2.118 (67-77 / 28-42 us); batch 8 4.403 / 4.180 against 4.472-4.474 / 4.250-4.258 (70 / 70-78 us).
  Bitwise the same logits.
- no_shared (a diagnosis after 5fa7d79, not a candidate: its logits are wrong): moe_decode without the shared
  expert's gate | up launch (fp8_linear_gate a no-op; moe_down reads whatever its buffers hold). The difference
  to current is what that launch costs the step, i.e. the most that merging it into the routed experts' launch
  (or the router's) could save. Kernel records: 2.79 us plain, ~2.1-2.4 as a PDL chain at M = 1.
- shared_merged (a candidate after a404156; the form flips netra.decode.ops.MOE_SHARED_MERGED): the shared
  expert's gate | up as M more pairs of the routed experts' launch and its gate logit by that launch's last CTA
  (fp8_gemv_n1024_k2048_moe_shared), so the router's dependent is the experts' launch. Not bitwise: the shared
  gate | up leaves its k-split build for the unsplit order (and its gate CTA's 512-thread order), so the logits
  differ by roundings. Prediction from no_shared (127-130 / 72-74 us at batch 1) less the merged launch's extra
  2.1 MB per layer (~0.5 us): ~100 us plainly and ~50 us with PDL per batch-1 step. Measured at 9be9f78
  (step_ab_shared_merged{,_b8}_9be9f78.json, ms plain / PDL, against the two currents): batch 1 2.168 / 1.994
  against 2.268-2.272 / 2.038-2.045 (100-104 / 44-51 us, as predicted); batch 8 4.347 / 4.173 against 4.362-4.365 /
  4.146-4.152 (15-18 us faster plainly, 21-28 slower with PDL). Promoted up to MOE_SHARED_MERGED_ROWS = 4 tokens
  (where the kernel record is 1.0-1.5 us faster than the two launches); since then the form turns it off.
- router_smem (a candidate after 891fbf5): moe_router_norm_e256_k2048 with each warp's rows bulk-copied into
  shared memory at its start (gen_moe_router.generate(smem_rows=True), 132 KB per CTA), bitwise. Prediction:
  0.5-1 us per router launch, 20-40 us per batch-1 step; at batch 32 (M = 32: 256 CTAs of 132 KB, two waves)
  slower. Measured at a33b43e (step_ab_router_smem_a33b43e.json): 2.175 / 2.007 ms against 2.169-2.170 /
  1.992-1.994 at batch 1, bitwise. Rejected (the kernel A/B: experiments/proj/router/router_smem_variant_a33b43e.json).
- gate_in_router (a candidate, CPU-built after 891fbf5; measured at fde3786 and rejected: step_ab_gate_in_router{,_b8}_fde3786.json): the MoE block's gate logit from the router
  (moe_router_norm_gate_e256_k2048: rank 1's warp 0 sums x . gate_w while rank 0 selects) and the routed + shared gate
  | up launch without its gate CTA (fp8_gemv_n1024_k2048_moe_shared_nogate, 132 CTAs on the weights) at every batch
  (gate_in_router_moe). Not bitwise (the gate logit's order; above 4 tokens also the shared rows' unsplit order).
  Kernels first: experiments/proj/router/gate_in_router_variant.py. Prediction: batch 1 within +-10 us (it takes the
  merge already); batch 8 50-90 us less with PDL (no_shared: 96 us; the promoted merge was 21-28 us slower there for
  its 131 CTAs), batch 32 more (two launches of 16 per layer lose their shared launch).
- router_fused (a candidate, CPU-built after 486cb0a): up to 8 tokens the post-attention norm, the router and the
  routed + shared gate | up in one launch with a grid-wide barrier (fp8_gemv_n1024_k2048_moe_shared_router:
  router_fused_moe), then moe_down. Bitwise the current form at batch 1 (the same instructions per row; checked by
  experiments/proj/router/router_fused_variant.py). Prediction: 80-160 us less per batch-1 step plain and PDL.
  Measured at e4d20da (step_ab_router_fused{,_b8}_e4d20da.json, ms plain / PDL): batch 1 2.090 / 1.973 against
  2.164-2.165 / 1.988-1.996 (75 / 15-23 us; predicted 80-160 both ways: the PDL engine's router already overlapped
  its predecessor's tail), bitwise; batch 8 4.347 / 4.223 against 4.369-4.391 / 4.155-4.171 (PDL 52-68 us slower).
  Promoted up to MOE_ROUTER_FUSED_ROWS = 4 tokens (netra.decode.ops.MOE_ROUTER_FUSED); since then the form is the
  current one at batch <= 4.
- router_unfused (after the promotion): MOE_ROUTER_FUSED off, the router's own launch (the form before it).
- router_poll (a candidate after eb09b3d; rejected on its kernel times at 12b4e2d, the step run failed on this form's
  moe_decode signature, fixed after): the router-fused launch without its grid barrier
  (contracts.proj.EXPERTS_ROUTER_POLL: an epoch per launch from the counter before the wait, logits tagged with it in
  a zeroed workspace the form keeps, the selecting warps poll them; the body's x from the CTA's own normalized rows in
  shared memory). Bitwise the current form (experiments/proj/router/router_poll_variant.py checks the kernel).
  Prediction: 0.5-1 us per layer, 20-40 us per batch-1 step, plain and PDL.
- router_coop (after 5057cae): the router-fused launch with CU_LAUNCH_ATTRIBUTE_COOPERATIVE flipped (the contract's
  cooperative flag; with PDL both attributes). The same kernel: bitwise. Prediction: within drift. Measured at bdae2df
  (step_ab_router_coop_bdae2df.json, batch 1, ms plain / PDL): 2.0795 / 2.003 against 2.077-2.079 / 1.985-1.988:
  the same plainly, 15-18 us slower with PDL. Taken anyway (EXPERTS_ROUTER's contract: cooperative) for what it
  guards against; since then the form measures it off.
- experts_group (a candidate after 3aadb2f): the routed gate | up kernel (fp8_gemv_n1024_k2048_moe, taken from 5 tokens)
  streaming each distinct expert's strips once for every token that chose it (Fp8Gemv.group), under the promoted
  name; bitwise. Prediction: batch 8 ~3 us per layer (64 pairs, ~57 distinct experts: 10% of its bytes), ~0.1 ms
  per step; batch 32 (two launches of 16 tokens, ~101 distinct of 128 pairs each: 21%) ~0.5-0.8 ms; batch 1 nothing
  (it takes the router-fused kernel).
- no_shared measured at a404156 (step_ab_no_shared{,_b8}_a404156.json): batch 1 2.151 / 1.972 ms against
  2.277-2.280 / 2.044-2.046, batch 8 4.213 / 4.016 against 4.351 / 4.112: the shared gate | up launch cost the step
  127-130 / 72-74 us at batch 1 and 139 / 96 at batch 8.
- router_fused_rows8 (after a75351d): the router-fused launch (norm, router, routed + shared gate | up; per pair, not
  grouped) up to 8 tokens instead of 4. The kernel records at M = 8: 38.48 us as a PDL chain against 41.7 for the
  launches batch 8 takes now (moe_router_norm 4.56, the grouped gate | up 35.0 on random ids, the shared k-split gate
  | up 2.14); at e4d20da (before the grouped gate | up) it was 52-68 us slower per batch-8 PDL step. Prediction:
  batch 8 0-100 us less (the step's experts repeat less than the bench's). Not bitwise: batch 8's shared gate | up
  is the k-split build now, the merged launch's is not split.
  Measured at afe2311 (step_ab_router_fused_rows8_b8_afe2311.json): 4.321 / 4.202 ms against 4.275 / 4.050 and
  4.278 / 4.050: 46 us slower plainly, 152 with PDL. Rejected (the grouped gate | up is what batch 8 gains from; the
  router-fused launch walks every pair).
  Again at d7ab861, after moe_act's trigger moved and moe_down went grouped from 2 rows under PDL
  (step_ab_current_router_fused_rows8_current_again_b{5,6,8}_d7ab861.json), ms plain / PDL against both currents:
  batch 5 2.860 / 2.682 against 2.823-2.824 / 2.611-2.612, batch 6 3.171 / 3.005 against 3.086-3.092 / 2.879-2.882,
  batch 8 3.814 / 3.600 against 3.637-3.644 / 3.361, bitwise at all three (the logits, plain and PDL). 71-239 us slower
  with PDL: MOE_ROUTER_FUSED_ROWS = 4 stands.
- experts_group32_from9 (after a75351d; run with --batch=16): the routed gate | up's 32-token grouped build from 9
  tokens instead of above 16. Its variant run at 3413de0 (experiments/proj/experts_group32_variant_3413de0.json): M =
  16 matched the 16-token build plainly and was 6 us faster as a PDL chain (52.9 against 58.9 us; the n-tile skip).
  Prediction: batch 16 0-0.25 ms less with PDL (40 launches), plain within +-0.1 ms; bitwise (the t32 build is the
  16-token build's arithmetic).
  Measured at 81bf5ce (step_ab_experts_group32_from9_b16_81bf5ce.json): 6.298 / 6.177 ms against 6.256 / 6.123 and
  6.262 / 6.142: 36-42 us slower plainly, 35-55 with PDL; bitwise. Rejected (the rows stay above 16): in the step the
  16-token build's chain is not the bench's (the miss is not traced).
Every form's logits over 4 teacher-forced steps are compared bitwise with the current plain
runner's (every swap keeps the arithmetic but ks2_prev's).

- moedown_grp_off (after 041d36b): moe_down with the per-token kernels at every batch, as before the grouped
  pair (moe_act_i512, fp8_gemv_n2048_k4608_moedown_grp, taken from netra.decode.ops.MOE_DOWN_GRP_ROWS rows).
  Prediction from experiments/proj/moedown_grp_variant_041d36b.json (kernel times x 40 layers, uniform
  routing): the current form ~1.3 ms less per batch-32 step plainly and with PDL, batch 8 ~15-45 us less;
  bitwise (the grouped kernels give the per-token kernels' bits).
- experts_group32_off (after cc1f7cc): the routed gate | up above 16 tokens as 16-token launches of
  fp8_gemv_n1024_k2048_moe_grp, as before fp8_gemv_n1024_k2048_moe_grp_t32 (netra.decode.ops.EXPERTS_GROUP32_ROWS).
  Prediction (bytes: ~164 distinct experts per layer at batch 32 against ~2 x 101): the current form ~0.8-1 ms less
  per batch-32 step; bitwise.
- lm_head_off (after c98b8f8): the LM head and argmax by cuBLAS and torch.argmax (the framework path) instead of
  bf16_gemv_n248320_k2048_argmax; not bitwise (another summation order of the logits);
- dense32_off (after 6f6c78f): GDN in_proj_qkv | z and attention q | k | v above 16 rows as 16-row launches of the
  plain kernels, as before their 32-token builds (netra.contracts.proj.DENSE32, netra.decode.ops.DENSE32_ROWS).
  Prediction: the current form ~0.25 ms less per batch-32 step; bitwise.
- norm16 (after 9ca73b3): rmsnorm_h2048 and qk_rmsnorm_d256 on 16-row chunks, as before their contracts took 32 rows
  (their op's KernelOp.max_rows). Prediction from the a75351d batch-32 profile (82 + 20 launches of ~1.2-1.4 us):
  the current form 30-60 us less per batch-32 step plainly, less with PDL; bitwise (one CTA per row either way).
  Measured at 9ed2782 (step_ab_norm16_b32_9ed2782.json): 9.650 / 9.493 ms against 9.747 / 9.574 (then 9.660 / 9.493).
- ba16 (after 9ed2782): bf16_gemv_n64_k2048 (GDN in_proj_b | a above 8 rows) on 16-row chunks, as before its 32-row
  build (the op's KernelOp.max_rows; the 32-row build at M <= 16 runs the 16-row build's instructions). Prediction from
  the a75351d batch-32 profile (60 launches of 2.3 us): the current form 30-50 us less per batch-32 step; bitwise.
- res16 (after 444ca0f): fp8_linear_add (GDN out_proj, attention o_proj) above 16 rows as launches of the 16-row
  residual build, as before its two-pass form fp8_gemv_n2048_k4096_res_p2 (netra.decode.ops.RES32_ROWS). Prediction at
  batch 32 (40 uses per step, each two launches of ~5.8 us before, one of ~7.5 expected): the current form ~0.15 ms less
  per step plainly, ~0.1 with PDL; bitwise. Measured at fe52409 (step_ab_res16_p2_early_b32_fe52409.json): current 9.545 /
  9.315 ms, res16 9.594 / 9.324, current again 9.551 / 9.300: ~45 us plainly, ~15 with PDL (the second 16-row launch had
  read the weight from L2). (The run at 9d04b2f timed a build whose first pass corrupted h at M > 16: void.)
- p2_early (a candidate after res16): fp8_gemv_n2048_k4096_res_p2 built with its second pass's x loaded right after the
  first pass's mma (gen_fp8_gemv.generate(p2_early=True); experiments/proj/p2_early_variant.py). Prediction: batch 32
  10-30 us less per step (0.3-0.8 us per use, 40 uses), other batches unchanged (they never take it); bitwise.
  Measured at fe52409: 9.527 / 9.283 ms, inside the two currents' spread; the kernel 0.2-0.5 us slower at M = 17..25
  (experiments/proj/p2_early_variant_fe52409.json). Rejected.
- norm_pdl (a candidate after edb2c17; measured at d596a9d, promoted after it): rmsnorm_h2048 and qk_rmsnorm_d256 in
  PDL builds (experiments/norm/norm_pdl.py: the weight before griddepcontrol.wait, the activations coherent after it),
  their ops' contracts given a pdl string so the PDL engine launches them on programmatic edges. Prediction: batch 1
  5-10 us less per PDL step, batch 32 25-50 us; plain steps unchanged; bitwise. Measured (ms plain / PDL): batch 1
  2.065 / 1.953 against 2.052-2.065 / 1.963-1.969, batch 32 9.562 / 9.279 against 9.560-9.574 / 9.329-9.341.
  Since promotion the form is norm_prev: the builds before (norm_pdl.plain_build), their contracts without pdl.
- attn_prev (after 0fa84b9): attention by its framework path as before (netra.decode.ops.ATTN_KERNEL = False: RoPE, the
  append, one SDPA call, the gate; ~15 PyTorch kernels per layer, its context once per step) instead of the
  attn_decode_d256 kernel (one launch per layer). Prediction from the framework path's profile (32 us per layer at
  batch 1, 62 at batch 32) and the kernel's design (~4-6 us at batch 1, ~15-25 at batch 32): the kernel form 0.2-0.3
  ms less per batch-1 step and 0.3-0.5 ms at batch 32, plain and PDL. Not bitwise (other arithmetic; the gates decide).
- nreg104 (a candidate after 268a922): GDN's in_proj (fp8_gemv_n12288_k2048_norm_ba) and the residual out_proj / o_proj
  (fp8_gemv_n2048_k4096_res) at .maxnreg 104 (122 / 128 now: 512 threads then hold an SM's whole register file), and
  these two and gdn_decode_b32 / _pdl at the largest shared-memory carveout (an SM changes carveout only when empty),
  so that under PDL gdn_decode's CTAs (128 threads x 80 registers) start beside the in_proj's and request their state,
  and out_proj's CTAs start beside gdn_decode's and request their 64 KB strip before the wait. Prediction: batch 1
  PDL step 30-60 us less (30 GDN layers: out_proj's weights during the recurrence ~1-1.5 us, the state during the
  in_proj ~0.5 us), plain within +-10 us; bitwise (the same arithmetic). nreg104_nocarve and carve_gdn (diagnoses):
  the registers alone, the carveout alone. Measured at c4d8bee (bitwise): 1.569 / 1.431 and 1.579 / 1.427 ms against
  1.582 / 1.466-1.479 (carve_gdn 1.582 / 1.482). Promoted (Fp8Gemv.maxnreg); since then nreg_prev is the form without it.
- res_pre, gdn_early, res_pre_gdn_early (candidates after 778c411): the timeline at b09c329 (timeline.py) has out_proj
  starting beside gdn_decode since the register cap, yet its increment unchanged (4.1 us a call for 1.9 of bytes):
  it requests nothing before its wait (Fp8Gemv.pre_strips = 0 since v3r, so x does not queue behind the chunks), and
  it is launched only once gdn_decode has passed its own wait. res_pre: its strip's two chunks before the wait
  (pre_strips=1, as k4096_chunks_first, rejected at e756719 when no out_proj CTA could start before gdn_decode had
  left its SM); gdn_early: gdn_decode_b32_pdl triggering at its start (gen_gdn_decode early_trigger), so out_proj's
  CTAs take each SM as the in_proj's leave. Prediction: both, batch 1 PDL 20-40 us less (GDN layers ~1 us each;
  o_proj after the plainly launched attention may lose ~0.5 us each), plain within +-10 us; batch 8 (the pipe build:
  nothing fits beside it) up to +30 us, as k4096_chunks_first. Bitwise.
  Measured at 4c3658a (step_ab_current_res_pre_gdn_early_res_pre_gdn_early_current_again{,_b8}_4c3658a.json; ms plain /
  PDL): batch 1 current 1.588 / 1.436 and 1.584 / 1.431, res_pre 1.619 / 1.455, gdn_early 1.583 / 1.429,
  res_pre_gdn_early 1.610 / 1.449; batch 8 res_pre_gdn_early 3.795 / 3.536 against 3.753-3.759 / 3.517-3.518. All
  bitwise. Rejected: out_proj's weights before its wait delay its x (its chain), as at e756719; gdn_early neutral.
- shared_grp (a candidate after 542a369): from 5 tokens the MoE block's gate | up is one launch,
  fp8_gemv_n1024_k2048_moe_shared_grp: the grouped routed gate | up with the shared expert as its first distinct expert
  (CTAs 0..63 request its strips before the wait, i.e. while the router launch runs) and the gate logit by its last
  CTA, so fp8_gemv_n1024_k2048_gate_ks2 (2.16 us a layer with PDL, 3.5 plainly at batch 8: timeline_b8_b09c329.json)
  is gone. Prediction: batch 8 PDL 40-80 us less, plain 60-120; batch 1 unchanged (not taken there). Not bitwise at
  batch >= 5: the shared rows in the unsplit order, not the k-split kernel's. shared_grp_off: the form without it.
  Measured at 4f19b08 (bitwise no, as predicted): batch 8 3.642 / 3.451 ms against 3.770-3.775 / 3.521-3.522, batch 16
  5.614 / 5.380 against 5.737 / 5.444; promoted (MOE_SHARED_GROUP) up to 16 tokens.
- shared_grp32 (a candidate after 0eb5dd1): the same from 17 to 32 tokens (fp8_gemv_n1024_k2048_moe_shared_grp_t32, the
  gate CTA in rounds of 16 tokens), where the shared expert took two 16-row gate_ks2 launches a layer. Prediction:
  batch 32 PDL 80-160 us less, plain 150-280. Measured at 0650515 (step_ab_current_shared_grp32_current_again_b32_0650515
  .json, ms plain / PDL): 8.908 / 8.674 against 8.974 / 8.684-8.703: its kernel was 6-11 us slower than the grouped t32
  kernel alone (33 WARPSYNC in its strip loop, from a predicated setp). Fixed, at 59ebcec
  (step_ab_current_shared_grp32_b32_59ebcec.json): 8.758 / 8.529 against 9.000 / 8.731 (late 8.881 / 8.661 against
  9.097 / 8.819): 242 / 202 us. Ready; the runner takes it once the gates have run at 17-32 sequences
  (MOE_SHARED_GROUP_ROWS = 32).
- router_regs (a candidate after 9a313f8): moe_router_norm_e256_k2048 with each warp's 4 expert rows loaded into
  registers before its griddepcontrol.wait (gen_moe_router.generate(reg_rows=True); 251 registers, one CTA per SM),
  so after the wait it needs only h, the norm and the sums (experiments/proj/router/router_regs_variant.py). The
  runner launches this router from 5 to 30 tokens. Prediction: batch 8 PDL 20-40 us less a step (0.5-1 us a layer),
  plain the same or more; bitwise. Measured at 4f7f359 (step_ab_current_router_regs_current_again{_b8,_b16}_4f7f359
  .json, ms plain / PDL): batch 8 3.633 / 3.389 against 3.625-3.631 / 3.431-3.436; batch 16 5.715 / 5.420 against
  5.588-5.601 / 5.334-5.348 (its kernel takes a second wave at 16 tokens). Promoted up to 8 tokens
  (netra.decode.ops.ROUTER_REGS_ROWS); since then the form swaps the cluster build above it as well, and router_regs_off
  is the step without it. At c2d934c (step_ab_current_router_regs_off_current_again_b8_c2d934c.json,
  step_ab_current_router_regs_current_again_b12_c2d934c.json): batch 8 without it 3.608 / 3.416 against 3.616 /
  3.369-3.370; batch 12 with it 4.790 / 4.568 against 4.783-4.786 / 4.609-4.612; so up to 12 since.
- ba_first (a candidate after 7fd7cbe; run with --batch=16 or 32): above 8 rows, where the GDN layer's norm_ba
  launch falls back to rmsnorm, in_proj_qkv | z and b | a, b | a right after the norm (netra.decode.ops.BA_FIRST).
  The batch-32 PDL timeline at ce72796 (timeline_b1_b8_b32_ce72796.json) charges b | a 5.6 us a GDN layer after the
  in_proj's end (167 us a step) for 256 KB; first, it runs while the in_proj's CTAs request their weights before their
  wait. The same kernels on the same inputs, so bitwise. Prediction: batch 32 and 16 PDL 60-120 us less a step
  (2-4 us a GDN layer; gdn_decode's state no longer streams during b | a, so not all of it), plainly 0-30.
  Measured at b763560 (step_ab_current_ba_first_current_again_b32_b763560.json,
  step_ab_current_ba_first_experts_group32_from9_current_again_b16_b763560.json), ms plain / PDL, bitwise: batch 32
  8.596 / 8.290 against 8.585-8.596 / 8.328-8.332 (late 8.417 against 8.463-8.465), batch 16 5.591 / 5.327 against
  5.592 / 5.340-5.341: 38-48 and 13-15 us with PDL, under the prediction; promoted (BA_FIRST = True), ba_first_off is
  the step without it. experts_group32_from9 again in the batch-16 run: 5.618 / 5.365, slower, as at 81bf5ce.
- moedown_grp_from8 (after b763560; run with --batch=8): moe_down by moe_act_i512 and the grouped kernel from 8 rows
  (netra.decode.ops.MOE_DOWN_GRP_ROWS = 8) instead of 9. Their records since the threshold was set (moedown_grp at
  d3acdef M = 8 16.85 us as a PDL chain, moe_act 1.56; the 6-stage per-token build at 8cca9d2 19.88) say ~1.5 us a
  layer; the step A/B at 128d508 had batch 8 within -13..+22 us. Prediction: batch 8 PDL 0-60 us less, bitwise.
  Measured at b06b0c2 (step_ab_current_moedown_grp_from8_current_again_b8_b06b0c2.json), ms plain / PDL, bitwise:
  3.675 / 3.459 against 3.628-3.650 / 3.404-3.410: 48-55 us slower with PDL, 25-46 plainly. Rejected; the kernels'
  chain records do not carry into the step at 8 rows (not traced).
  Again at 43fbf7c, moe_act triggering first since 17dbbb6 (step_ab_current_moedown_grp_from8_current_again_b8_43fbf7c.json):
  3.642 / 3.330 against 3.616 / 3.372 (both currents): 42 us less with PDL, 25 more plainly. Promoted for the PDL
  engine only (netra.decode.ops.MOE_DOWN_GRP_PDL_ROWS = 8; MOE_DOWN_GRP_ROWS stays 9 for the plain engine).
- moedown_grp_from9 (after 43fbf7c): the PDL engine's threshold back at 9 rows (the build before).
- moedown_grp_pdl_from2 .. _from7 (after 2d12f3c; run with --batch=B for B from 4 to 7): the PDL engine's threshold at
  N rows (the plain engine's unchanged), so batches N..7 take moe_act and the grouped moe_down too. From 2 to 4 tokens the
  MoE block is the router-fused launch, then moe_down (from 2 tokens its 6-stage per-token build). Prediction: batch 6
  and 7 10-40 us less a PDL step (fewer distinct experts than pairs: at 6 tokens ~44 of 48), batch 4 level or slower.
  Measured at 4a61c05 (step_ab_current_moedown_grp_pdl_from*_b{2,3,4,5,6,7}_4a61c05.json), ms with PDL, bitwise, the
  candidate against both currents: batch 2 1.843 against 1.872-1.873, 3 2.131 against 2.155-2.158, 4 2.393 (from 4 and
  from 2) against 2.437, 5 2.606 against 2.604-2.614, 6 2.869 (from 6 and 5) against 2.862-2.864, 7 3.159 against
  3.164-3.166; plainly within -10..+10 us everywhere. So 25-44 us less at 2-4 tokens, level at 5-7: the wrong half of the
  prediction. Promoted as MOE_DOWN_GRP_PDL_ROWS = 2 (with the 42 us at 8 rows).
- act_trigger_first, since promoted act_trigger_prev (after 0fdd70f; run with --batch=32 or 16): moe_act_i512 triggering its dependents before its
  griddepcontrol.wait (gen_moe_down_grp.act(trigger_first=True)), so that under PDL the grouped moe_down launches
  during the gate | up launch's tail and requests its first strips there. The batch-32 timeline at ce72796 charges
  moe_act 2.2 us a layer and has moe_down starting 1.5 us before moe_act ends. Prediction: batch 32 PDL 20-80 us less a
  step, batch 16 10-40; plainly level (griddepcontrol is a no-op in a plain launch); bitwise. Measured at 03bb931, where
  the trigger-first build was committed and the form was act_trigger_prev (the build before), so "current" below is
  trigger-first (step_ab_current_act_trigger_prev_current_again_b{32,16}_03bb931.json), ms plain / PDL, bitwise:
  batch 32 8.615-8.634 / 8.248-8.257 against 8.621 / 8.300 (late 8.368-8.383 against 8.423); batch 16 5.609-5.619 /
  5.250-5.257 against 5.620 / 5.357 (late 5.300-5.308 against 5.403). 43-53 and 100-107 us a PDL step, over the
  prediction at 16. Not promoted then for want of a decode record. At 3e48abe again (step_ab_current_norm_trigger_
  first_act_trigger_first_both_trigger_first_current_again_b{32,16}_3e48abe.json): batch 32 8.246 against 8.303-8.323,
  batch 16 5.240 against 5.333-5.341 with PDL; promoted. The form is now act_trigger_prev (the build before).
- norm_trigger_first (after 095693b; run with --batch=32): rmsnorm_h2048 triggering its dependents before its wait
  (experiments/norm/norm_pdl.trigger_first_build), so the kernel after it (above 8 rows b | a or q | k | v, after the
  final norm the LM head) launches while the norm waits and requests its weights during the kernel ahead. Prediction:
  batch 32 PDL 20-60 us less a step (41 norm launches), batch 1 and 8 0-2 us (the final norm only); plainly level; bitwise.
  Measured at 3e48abe, ms plain / PDL, bitwise: batch 32 8.633 / 8.388 against 8.616-8.619 / 8.303-8.323; batch 16
  5.599 / 5.384 against 5.600-5.607 / 5.333-5.341. 43-85 us a PDL step slower: rejected. With act_trigger_first
  (both_trigger_first, a form of that run) 8.294 against act's 8.246 and 5.286 against 5.240: the loss adds.
- res_pre_all (after ffd615d; run with --batch=32, 16 and 8): fp8_gemv_n2048_k4096_res and its two-pass _p2 build
  (out_proj, o_proj) requesting their CTA's whole strip (64 KB, the ring's two stages) before griddepcontrol.wait at
  every M (generate(sh, pre_strips=1, x_first_m16=False); the committed builds request it after x above 8 rows and, at
  2048 x 4096, at every M). The batch-32 timeline at ce72796 charges the p2 build 11.4 us a layer past gdn_decode's
  end although its CTAs are resident 16.5 us before it, and its 8 MB take 2 us at the roofline: with the strip
  in shared memory before the wait, what is left after it is x, the mma passes and the h store. Prediction: batch 32
  PDL 80-160 us less a step (40 launches, 2-4 us each net of gdn_decode's 2 us of shared bandwidth), batch 16 40-80;
  batch 8 and plainly level to 20 us worse (x queues behind the strip, as res_pre at 4c3658a); bitwise.
  Measured at 168fd9b (step_ab_current_res_pre_all_current_again_b{32,16,8}_168fd9b.json), ms plain / PDL, bitwise:
  batch 32 8.689 / 8.261 against 8.619-8.646 / 8.239-8.242; batch 16 5.673 / 5.260 against 5.590-5.591 / 5.245-5.249;
  batch 8 3.672 / 3.429 against 3.631-3.645 / 3.390-3.396. Slower everywhere (PDL 11-40 us, plainly 40-80): rejected.
  The strip in shared memory early does not shorten what follows the wait; the bench has the p2 build at M = 32
  10.9 us plainly against a 4.1 us read floor, so its time is the two passes' x prologue, mma and stores, not the
  weights (the timeline at 9ca14dc charges it 11.3 us a layer, unchanged).
- embed_index (after 168fd9b; run with --batch=1, 8 and 16): the step's embedding rows by aten::index into h
  (netra.decode.runner.EMBED_INDEX) instead of torch.index_select, whose CUDA kernel for up to 16 indices
  (indexSelectSmallIndex) loops over the indices in every thread: 7.2 us at batch 8 in the ce72796 timeline against
  1.9 at 1 and 32 (vectorized_gather). Prediction: batch 8 4-6 us less a step, batch 16 8-12, batch 1 level, plainly
  and with PDL; bitwise (both copy the rows).
  Measured at 9ca14dc (step_ab_current_embed_index_current_again{,_b8,_b16}_9ca14dc.json), ms plain / PDL, bitwise:
  batch 8 3.600 / 3.379 against 3.611-3.614 / 3.372; batch 16 5.561 / 5.197 against 5.566 / 5.202-5.204; batch 1
  1.583 / 1.436 against 1.572-1.587 / 1.422-1.435. Level within the currents' spread: rejected (why the 7.1 us kernel
  costs the step nothing was not traced; it is the graph's first node, launched while the previous replay's LM head
  may still be ending).
- sum_late (after b690e6f; run with --batch=32 and 16): the plain dense builds (the 16-token kernels' M > 8 copy and the
  32-token builds) with each strip's sums beside the next strip's mma (generate(sh, sum_late="m16"),
  experiments/proj/sum_late_variant.py). Batch 32 runs GDN's in_proj (12288 x 2048 _t32, 30 a step) and attention's
  q | k | v (9216 x 2048 _t32, 10) on them, batch 16 the 16-token kernels' M > 8 copy. Prediction: batch 32 PDL 20-40
  us less a step (0.5-1 us a launch), batch 16 10-20; bitwise.
  Measured at 43fbf7c (step_ab_current_sum_late_current_again_b{32,16}_43fbf7c.json), ms plain / PDL, bitwise: batch 32
  8.580 / 8.182 against 8.567-8.571 / 8.191-8.193 (level), batch 16 5.633 / 5.260 against 5.577-5.583 / 5.214-5.215 (45
  us slower), as the kernels had it (sum_late_variant.py). sum_late_r16: the same with a sum's 16 loads in flight at once
  (sum_late_regs=16).
- grp_ahead1, grp_ahead1_he, grp_ahead2_he, grp_he (after d27c4ee; run with --batch=8, 32 and 2): the grouped moe_down
  (fp8_gemv_n2048_k4608_moedown_grp, taken from 2 rows under PDL and 9 plainly) with each warp's next strip asked of
  L2 while it works (gen_moe_down_grp.down(l2_ahead=1)), with that and h loaded after the wait (h_early=True), and
  with h_early alone; grp_ahead2_he asks for the next two (experiments/proj/moedown_grp_ahead_variant.py). Prediction: batch 32 PDL 120-200 us less a step
  (3-5 us a launch, 40 launches), batch 8 40-120, batch 2 within 10; bitwise.
- ks2_t32 (after bed4354; run with --batch=32, 24 and 17): out_proj / o_proj above 16 rows on the k-split 32-token
  residual build (Fp8Gemv(..., ksplit=2, tokens=32, passes=1), one pass) instead of the two-pass build
  (experiments/proj/ks2_t32_variant.py --only=res; the dense k-split builds were slower and are not swapped). Not
  bitwise (the halves of k are one more fp32 add). Prediction: batch 32 PDL 40-120 us less a step if the kernel gains
  1-3 us. Measured at f851efc (step_ab_current_ks2_t32_current_again_b32_f851efc.json): 8.095 ms with PDL against
  8.212 / 8.207, plainly 8.516 against 8.577 / 8.579; promoted (netra.contracts.proj.RES32), so on the runner since
  then this form swaps nothing.
- res_p2_prev (after the promotion of RES32): out_proj / o_proj above 16 rows on the two-pass build again
  (fp8_gemv_n2048_k4096_res_p2, netra.contracts.proj.RES_P2), as before f851efc.
- grp_s4, grp_s5 (after db2d438; run with --batch=8 and 32): the grouped routed + shared gate | up builds
  (fp8_gemv_n1024_k2048_moe_shared_grp from 5 to 16 tokens, _t32 above) with 4 weight stages, or the 16-token one with
  5 (the t32 build has room for 4 only), under the promoted names (experiments/proj/grp_stages_variant.py). Bitwise.
  Prediction: batch 8 0-80 us less a step, batch 32 0-200.
- res32_he (after db2d438; run with --batch=32): the k-split 32-token residual build (RES32) loading h before its walk
  (gen_fp8_gemv.generate(h_early=True), h_early_split; experiments/proj/h_early_split_variant.py), bitwise. Prediction:
  batch 32 5-12 us less a step, plainly and with PDL. Measured at 415d92d
  (step_ab_current_res32_he_grp_s4_current_again_b32_415d92d.json): 8.543 / 8.115 ms plain / PDL against 8.578 / 8.157
  and 8.558 / 8.131; promoted (Fp8Gemv.h_early), so on the runner since then this form swaps nothing.
- res32_he_prev (after the promotion of res32_he): RES32 without h_early, as before.
- ba_plain_off (after 80c3ce2; run with --batch=32 or 16): GDN's input projections above 8 rows as before (the norm,
  bf16_linear2, then in_proj_qkv | z), where the runner now launches the norm, then the in_proj's build with the b | a
  CTAs (fp8_gemv_n12288_k2048_ba up to 16 rows, _ba_t32 above: decode.ops.BA_PLAIN, contracts.proj.PLAIN_BA). The same
  bits. Prediction: 50-90 us less a batch-32 step with PDL (the b | a launch's 2.6-3.4 us increment in 30 layers, less
  what the in_proj gains from it), 60-110 plainly; batch 16 alike.
- router_split16 (after 860c68d; run with --batch=16): moe_router_norm takes its split build
  (moe_router_norm_split_e256_k2048) from 13 rows (decode.ops.ROUTER_SPLIT_ROWS = 13) where the cluster build runs
  13..30 rows today. The same bits. The split router's records at 9a7452f (router_split_variant_9a7452f.json) were
  0.2 / 0.6 us faster plain / PDL chain at M = 16 (6.23 / 5.85 -> 6.03 / 5.25) and 0.6-0.8 slower at 24. Prediction:
  batch 16 10-25 us less a PDL step (40 launches), plainly 0-10. Measured at 7d8bd43
  (step_ab_current_router_split16_current_again_b16_7d8bd43.json), ms plain / PDL, bitwise: 5.549 / 5.249 against
  5.548 / 5.228 and 5.545 / 5.220: 21-28 us slower with PDL. Rejected.
  Again after the split router's lean hand-off (a8d67e9: 0.4-0.7 us a launch faster), at 11fd479
  (step_ab_current_router_split16_current_again_b{16,24}_11fd479.json), ms plain / late plain / PDL / late PDL, bitwise:
  batch 16 5.508 / 5.561 / 5.237 / 5.261 against 5.535 / 5.568 / 5.218 / 5.256 and 5.530 / 5.580 / 5.230 / 5.259
  (PDL still 2-19 us slower, plainly 7-27 less: rejected at 16 again); batch 24 7.171 / 7.223 / 6.753 / 6.811 against
  7.175 / 7.223 / 6.762 / 6.819 and 7.190 / 7.235 / 6.774 / 6.821 (0-21 us less in every column). Hence router_split17.
- router_split17 (after 11fd479; run with --batch=17, 20, 24, 28): the split router from 17 rows instead of 31
  (decode.ops.ROUTER_SPLIT_ROWS = 17), the cluster build 13..16 rows. The same bits. From the records (a8d67e9 against
  d3acdef, other loans) the split build's PDL chain is level with the cluster build's at 17-24 rows and 0.25-1.3 us
  faster at 28-30; prediction: 0-20 us less a PDL step at 17-30 sequences, at 24 as measured above.
- parked, parked_inproj (after 860c68d; a diagnosis for docs/notes/persistent-proposal.md, wrong logits): the dense
  launches of batches 1..8 on gen_fp8_gemv.generate(parked=True) builds, which zero their ring before the wait and
  never copy a weight tile, as if the weights had been parked in shared memory a phase ahead: GDN's in_proj
  (fp8_gemv_n12288_k2048_norm_ba), attention's q | k | v (fp8_gemv_n9216_k2048_norm) and out_proj / o_proj
  (fp8_gemv_n2048_k4096_res) in parked, the in_proj alone in parked_inproj. The step's time without those bytes bounds
  what a persistent kernel's parking could save on these launches (its other mechanism, phases waiting on counters, is
  not in it). Their outputs are zeros (plus the residual), so the MoE blocks route on other h: their time is not
  the same work's. Measured at 922254c (step_ab_current_parked_parked_inproj_current_again_922254c.json; batch 8's
  JSON did not come back, its rows are in docs/notes/persistent-proposal.md), ms plain / PDL: batch 1 current 1.580 /
  1.426, parked 1.496 / 1.334, parked_inproj 1.533 / 1.374, current again 1.581 / 1.423; batch 8 3.630 / 3.345,
  3.528 / 3.236, 3.551 / 3.253, 3.629 / 3.347.
- parked_wide (after 7d8bd43; run with --batch=16 or 32; a diagnosis, wrong logits): the same parked builds for the
  dense launches above 8 rows: GDN's in_proj with b | a (fp8_gemv_n12288_k2048_ba, _ba_t32), q | k | v
  (fp8_gemv_n9216_k2048, _t32) and out_proj / o_proj (fp8_gemv_n2048_k4096_res up to 16 rows, the k-split RES32 above).
  Why: the batch-32 lead (these builds at 1.7-2.6x their read floors at M = 32) needs to know how much of their time is
  their weights and how much their chain (x's delivery, 4 n-tiles of mma a strip).
- pre2_inproj, pre3_inproj (after the parked forms, 922254c: parking the in_proj's weights saved 50 us a batch-1 PDL step
  and 92 at batch 8): GDN's in_proj (fp8_gemv_n12288_k2048_norm_ba) requesting its first 2 / 3 strips (3: every
  stage of its ring) before griddepcontrol.wait instead of 1 (generate(pre_strips=2 / None)); same contract, same
  bits. Under PDL its CTAs start ~6.5 us before the MoE block ends (timeline at b09c329), with 32 KB of their 96 KB
  ring in flight. The older pre_all (8cdd9cd, 40 us slower with PDL) was measured before the one-launch MoE block and
  the register caps, on the plain and residual builds, not this one. Prediction: batch 1 and 8 PDL 10-40 us less a
  step; plainly level or slower (x queuing behind the chunks, as v3f found). Measured at 7d8bd43
  (step_ab_current_pre2_inproj_pre3_inproj_current_again{,_b8}_7d8bd43.json, step_ab_current_pre2_inproj_current_again_b4_7d8bd43.json),
  ms plain / PDL, bitwise, against the two currents:
  batch 1 pre2 1.590 / 1.414, pre3 1.619 / 1.421, currents 1.578-1.581 / 1.425-1.427;
  batch 8 pre2 3.660 / 3.342, pre3 3.684 / 3.364, currents 3.645-3.651 / 3.362-3.366;
  batch 4 pre2 2.572 / 2.410, currents 2.553-2.555 / 2.395-2.399.
  pre2 is 11-24 us less with PDL at batches 1 and 8 but 11-15 more at 4 and 8-18 more plainly everywhere; pre3 is
  level with PDL. Rejected: a gain of ~1% at two batches would need a PDL-only build with a rule by rows.
- gdn_spin, inproj_strong (after 78b3396; the spin-on-rows lead of docs/notes/decode.md, "After e28ef15", at one real
  boundary): gdn_decode_b32_pdl (batches 1..7 under PDL) polls the in_proj's outputs instead of waiting for the whole
  in_proj grid (gen_gdn_decode.generate(spin=True)), and the in_proj (fp8_gemv_n12288_k2048_norm_ba) stores them strong
  (gen_fp8_gemv.generate(strong_out=True)); the runner's qkvz, bb and aa are filled with TAG when it allocates them,
  and the spin build writes TAG back after reading (its contract). The in_proj walks strips c, c + 128, ..: q | k | v
  (strips 0..511) land in rounds 0-3 of 6 and z last, so the conv and the recurrence run beside the in_proj's last
  two rounds, and only the gated norm waits for z. inproj_strong: the strong stores alone (their cost). Prediction:
  batch 1 PDL 25-45 us less a step (gdn_decode's increment 2.1 us a layer at b09c329 down to ~0.8: the final
  griddepcontrol.wait still returns ~0.8 us after the in_proj's last store; 30 layers); plainly and inproj_strong
  level (+-5 us); bitwise. The row also says whether every element of qkvz, bb and aa is TAG after the steps.
  gdn_spin_again: the same form once more (the two currents of one run differ by up to ~6 us with PDL).
  gdn_spin_nowait (a diagnosis, not a valid build): without the wait before exit, what that wait costs.
  gdn_spin_trace (a diagnosis): gdn_spin with %globaltimer stamps (gen_gdn_decode spin_trace) of the PDL runner's last
  64 launches, summarized per point (spin_stamps): where the grid's time goes relative to its first CTA's start.
  gdn_spin2, gdn_spin2_trace (after the trace at 131eed1): b and a polled after the q | k exchange (spin_ba_late), z's
  first poll issued after the delta rule (spin_z_early). Prediction: 0.3-0.8 us off the traced chain's latest CTA
  (b and a were seen 0.8 us after qkv, z's poll took 0.26), so batch 1 PDL 5-15 us less than gdn_spin; bitwise.
  Measured at 28b4b22: no better than gdn_spin; its trace: 15 of the 16 clusters start within 0.5 us and one 3.6-3.8 us
  later (cluster_first_start_us_sorted), so the grid's end is that cluster's chain.
- gdn_spin_smem, gdn_spin_smem_trace (after 28b4b22): gdn_spin on the smem_state build (48 registers, 18 KB of shared
  memory a CTA: two fit beside an in_proj CTA, whose 104 x 512 registers leave exactly 2 x 48 x 128), with the in_proj
  and gdn_decode at the largest carveout (CARVE_FORMS), so all 16 clusters of 8 can start beside the in_proj.
  Prediction: the late cluster gone, batch 1 PDL 10-30 us less than gdn_spin; bitwise (the smem build is).
  gdn_smem_carve (a control): the smem build without spin in gdn_decode_b32_pdl's place, at the same carveout.
  Measured (ms PDL, interpolated between each run's two currents; logits bitwise; docs/notes/decode.md, "After
  78b3396"): gdn_spin -3.5..-17 us over six runs; gdn_spin2 level with it; gdn_spin_smem -27.0, -13.2, -13.9 (traced
  -23.7, -11.9) at batch 1, -32 at batch 2, +57 at batch 4; gdn_smem_carve +11.4, +2.7. Not promoted then.
- spin_off (after the spin pair's promotion: gdn_decode_b32_spin, netra::gdn_decode_spin up to dops.GDN_SPIN_MAX_B = 2
  sequences under PDL): the runner with GDN_SPIN_MAX_B = 0 (the in_proj, then gdn_decode_b32_pdl waiting for its grid;
  the carveout and the strong stores stay, as promoted). Since the promotion the gdn_spin* forms above swap builds the
  runner no longer launches at batches 1 and 2 (their spin build replaces gdn_decode_b32_pdl).
  spin_max3: the spin pair up to 3 sequences (GDN_SPIN_MAX_B = 3), for the rule's edge at batch 3.
- spin_backoff (after the batch-1 timeline at 3892cea: with the pair the in_proj's increment rose 0.5 us a layer while
  the recurrence's fell 0.6): gdn_decode_b32_spin with the sleep between polls doubling from 32 ns to 512
  (gen_gdn_decode.generate(spin_backoff=512)) instead of 32 ns each. Prediction: batch 1 PDL 0-10 us less if the
  pollers' L2 traffic is what slows the in_proj, level if it is the recurrence's own work or state loads; bitwise.
  Measured at 703ac55 (step_ab_current_spin_backoff_current_again{,_b2}_703ac55.json): batch 1 PDL +4.6 / +7.8 us
  early / late against the two currents' mean, batch 2 level (between the two currents, 10 us apart). Rejected: the
  sleep delays the pollers' first read more than their traffic slows the in_proj.
- attn_trigger, attn_trigger_opre (after edf355c; the res_spin timeline at 5ac33ec: o_proj after attention takes
  4.6-4.7 us a layer, GDN's out_proj 3.9, for the same kernel and bytes). attention's cluster builds are launched
  plainly and never trigger (docs/notes/decode.md, "After f3e6613"), so o_proj's CTAs start only after attention has
  ended and stream its 8 MB after their wait and x. attn_trigger: the cluster builds (c4, c8) trigger their dependents
  at their start (gen_attn_decode.generate(trigger=True); still launched plainly, the same bits), so o_proj starts
  beside attention's walk (latency-bound: ~1 MB of a 1K cache at batch 1). attn_trigger_opre: also o_proj by the
  residual build requesting its strip before its wait (opre_linear_add; the res_pre build, rejected for GDN's out_proj
  at 4c3658a where the recurrence's state and the in_proj shared DRAM with it). Prediction, batch 1 PDL:
  attn_trigger 0-5 us less (the launch gap, ~0.5 us a layer, less the wait's release); attn_trigger_opre 15-25 us
  less (the strip landed during attention: o_proj ~2.5 us a layer shorter, 10 layers). Bitwise.
  Measured, ms with PDL early / late, every form bitwise: at 1956ea8 (step_ab_current_attn_trigger_attn_trigger_opre_
  current_again{,_b8}_1956ea8.json) batch 1 current 1.4114 / 1.4320 and 1.4095 / 1.4280, attn_trigger 1.4045 / 1.4287,
  attn_trigger_opre 1.4085 / 1.4300; batch 8 current 3.2823 / 3.3311 and 3.2710 / 3.3221, attn_trigger 3.2743 / 3.3205,
  attn_trigger_opre 3.2849 / 3.3317. At f38551d (step_ab_current_attn_trigger_current_again{,_b32}_f38551d.json) batch
  1 current 1.4128 / 1.4312 and 1.4135 / 1.4294, attn_trigger 1.4074 / 1.4273; batch 32 current 8.0520 / 8.1455 and
  8.0667 / 8.1471, attn_trigger 8.0468 / 8.1501. So attn_trigger 3-6 us less at batch 1 in both runs (the currents
  within 2-4 us of each other), 2-6 at batch 8 and -13 / +4 at batch 32 (within those currents' spread);
  attn_trigger_opre nothing. The timeline (timeline_b1_attn_trigger_f38551d.json) says why: with the trigger o_proj
  starts 4.3 us before attention's end and its increment falls 4.59 -> 3.87 us a layer, attention's rises 0.23; with
  its strip requested first it falls to 3.03, but attention's rises 1.5 (its page loads queue behind the 8 MB).
  attn_trigger is ready to promote (new PTX for the c4 / c8 builds: records and a decode record); opre rejected.
  Promoted at f6f3e85: the committed c4 / c8 builds trigger, so attn_trigger is now the current form and
  attn_notrigger (the builds as before, gen_attn_decode.generate(True, cluster=c)) is the peer that was current.
  Measured twice more, batch 1, ms plain / PDL early / late: at f6f3e85 (step_ab_current_attn_notrigger_current_again_
  f6f3e85.json) current 1.5888 / 1.4190 / 1.4354 and 1.5860 / 1.4094 / 1.4277, attn_notrigger 1.5846 / 1.4141 /
  1.4355 (between the currents); at e2292dd (..._b1_e2292dd.json) current 1.5723 / 1.4089 / 1.4272 and 1.5737 /
  1.4082 / 1.4277, attn_notrigger 1.5771 / 1.4134 / 1.4300 (the trigger 4.8 / 2.6 us less with PDL, 4 plainly).
- attn_trigger_long (after f6f3e85): the long builds (c4_long, c8_long; past 64 pages) with the same trigger at their
  start (gen_attn_decode.generate(True, cluster=c, long=True, trigger=True); still launched plainly, the same bits).
  Unlike long_trigger_end (a trigger after the wait of a PDL-launched build, neutral), this one lets o_proj start
  beside the walk and stream its 8 MB during it. Its dependents launch only once every CTA of the grid has started
  and triggered, so they cannot take SMs from unplaced attention CTAs. Prediction: early in the cache, as
  attn_trigger (0-6 us less a batch-1 step); late in long caches (attention DRAM-bound), level: o_proj's bytes move
  into the walk's DRAM time.
  Measured at e2292dd (step_ab_current_attn_trigger_long_current_again_{ctx131072,b8_ctx16384,b32_ctx32768}_e2292dd
  .json), ms with PDL early / late, every form bitwise: batch 1 at 131072 current 1.4056 / 2.0419 and 1.4128 / 2.0435,
  attn_trigger_long 1.4105 / 2.0340 (late 8.7 us less, the currents 1.6 apart; early between them); batch 8 at 16384
  current 3.2996 / 3.9209 and 3.2971 / 3.9212, attn_trigger_long 3.3052 / 3.9313 (6.9 / 10.3 us more, the currents
  within 0.3); batch 32 at 32768 current 8.0401 / 12.9911 and 8.0495 / 13.0014, attn_trigger_long 8.0410 / 12.9977
  (between them). Plainly all level. Mixed: not promoted (batch 8 pays more than batch 1 gains). Why batch 8 loses
  was not traced. A guess: its long build runs 2 splits of clusters of 4 per (sequence, kv head), 128 CTAs, so o_proj's
  CTAs start only as attention's CTAs end, and their 8 MB then compete with the slowest CTAs' page reads.
- bar_fenced, bar_lean_p2 (after 8180e50, with the router builds' grid barrier "lean" committed: gen_fp8_gemv._GBAR):
  the router-fused launch and the one-launch MoE block (fp8_gemv_n1024_k2048_moe_shared_router{,_down}) with the grid
  barrier as it was (bar_fenced: fence.acq_rel.gpu before the release atomic and after the acquire spin, three
  MEMBAR.ALL.GPU in the SASS against one) and with no 64-bit division for the target either (bar_lean_p2: each launch
  adds 256, CTA 0 bringing the other CTAs' 131 up to it; the runner's counter starts at zero). Why: the barrier is ~1 us
  of the router phase at M = 1 (experiments/proj/router/router_phase_diag_d5aa510.json) and sits on every MoE layer's
  critical path; the two fences are the release and acquire the atomic and the spin already have. Prediction, batch 1
  PDL: lean 4-12 us a step less than bar_fenced (0.1-0.3 us a layer), lean_p2 another 2-4; batch 2 (the router-fused
  launch) the same; bitwise.
  Measured at 7e704bc (step_ab_current_bar_fenced_bar_lean_p2_current_again_7e704bc.json; batch 2 not run: the
  loan's device time), batch 1, ms plain / PDL early / PDL late, every form bitwise: current (lean) 1.5654 / 1.3916 /
  1.4086 and 1.5793 / 1.3920 / 1.4113, bar_fenced 1.5808 / 1.4059 / 1.4262, bar_lean_p2 1.5667 / 1.4047 / 1.4244.
  So lean 14.1 / 16.3 us less than fenced with PDL (8.5 plainly): promoted, with records and a decode record in the
  same loan. lean_p2 13 us slower than lean, level with fenced; why was not found (the same PTX but the add's
  operand and the target's and / add in place of the division; ptxas rescheduled the router phase: 262 SASS lines
  differ). Rejected.
- split_lean (promoted after d0cfc39; the former build is now the form split_fenced), long_lean (after 01e2703): the
  same two fences gone from the other committed cross-CTA hand-offs whose atomic is acq_rel. split_lean: the split
  router (moe_router_norm_split_e256_k2048, from 31 tokens; gen_moe_router.generate_split(lean=True), now its default):
  thread 0's fence before its atom.acq_rel.gpu and the last CTA's after the count (SASS: one MEMBAR.ALL.GPU against
  three). long_lean: the long attention builds (c4_long, c8_long; past 64 pages; gen_attn_decode.generate(lean_split=
  True)): every thread's fence after its partial's stores and the last CTA's after its ticket (two MEMBAR.ALL.GPU
  against four). Predicted with PDL: split_lean at batch 32 6-16 us a step, long_lean 2-5 us a batch-1 step at long
  contexts; bitwise. Measured at d0cfc39 (one loan; ms plain / late plain / PDL / late PDL; every form bitwise):
  - batch 32 (step_ab_current_split_lean_cl_restrict_current_again_b32_d0cfc39.json): current 8.422 / 8.499 / 8.037 /
    8.130, split_lean 8.397 / 8.482 / 8.014 / 8.115, current_again 8.408 / 8.500 / 8.031 / 8.148;
  - batch 32 again (..._current_split_lean_current_again_b32_d0cfc39.json): 8.410 / 8.496 / 8.026 / 8.127, split_lean
    8.415 / 8.497 / 8.028 / 8.127, current_again 8.440 / 8.529 / 8.047 / 8.154;
  - batch 31 (..._b31_d0cfc39.json): 8.287 / 8.391 / 7.862 / 7.980, split_lean 8.246 / 8.352 / 7.837 / 7.985, current_
    again 8.286 / 8.390 / 7.874 / 8.006.
  split_lean at or below the nearer current in every column, 0-40 us (the currents 1-30 us apart): promoted.
  long_lean, batch 1 at 131072 positions (..._ctx131072_d0cfc39.json): current 1.563 / 2.182 / 1.394 / 2.020,
  long_lean 1.566 / 2.178 / 1.393 / 2.016, current_again 1.574 / 2.190 / 1.397 / 2.024; batch 8 at 16384
  (..._b8_ctx16384_d0cfc39.json): 3.638 / 4.274 / 3.302 / 3.930, long_lean 3.656 / 4.272 / 3.306 / 3.932,
  current_again 3.637 / 4.267 / 3.306 / 3.941. Level within the currents' spread: not promoted, kept as a candidate.
- cl_restrict (after 82dfe65; measured at d0cfc39, rejected): the cluster attention builds c4 / c8 with their partials'
  cluster barrier released by fence.release.sync_restrict::shared::cta.cluster and a relaxed arrive
  (gen_attn_decode.generate(cl_restrict=True), PTX 8.6) instead of barrier.cluster.arrive.release, which ptxas emits as
  MEMBAR.ALL.GPU (now FENCE.VIEW.ASYNC.S; no MEMBAR.ALL.GPU left in the builds). Predicted 1-3 us a batch-1 step, more
  at batch 32; bitwise. Measured (ms as above; step_ab_current_cl_restrict_current_again{,_b8}_d0cfc39.json and the
  batch-32 file above): batch 1 current 1.567 / 1.583 / 1.395 / 1.411, cl_restrict 1.584 / 1.598 / 1.397 / 1.412,
  current_again 1.570 / 1.583 / 1.392 / 1.411; batch 8 3.630 / 3.677 / 3.294 / 3.338, cl_restrict 3.633 / 3.679 /
  3.297 / 3.337, current_again 3.636 / 3.681 / 3.300 / 3.342; batch 32 level (above). Level with PDL everywhere and
  15 us slower plainly at batch 1: a MEMBAR.ALL.GPU with nothing global in flight costs little here, and the
  restricted fence's pairing with a cluster barrier is not spelled out by the ISA's examples. Rejected.
- res_spin_off, res_spin_x_first (after 703ac55, with the spin boundary gdn_decode -> out_proj as the current form:
  dops.RES_SPIN, fp8_gemv_n2048_k4096_res_spin, gdn_decode_b32_spin storing o strong): res_spin_off is the runner with
  RES_SPIN = False (out_proj waits for the recurrence's grid, as at 703ac55; the strong o stores stay). res_spin_x_first:
  the spin build requesting its strip only after x has been polled (pre_strips=0, the plain residual build's order).
  Prediction, batch 1 PDL: current 5-15 us less than res_spin_off if out_proj's strip streams before the recurrence
  ends (out_proj's increment 3.85 us a GDN layer at 3892cea, of which ~1.9 is its 8 MB read started after the wait);
  res_spin_x_first 0-10 us less (only the wait's release latency). Bitwise.
  Measured at db27dfd (step_ab_current_res_spin_off_res_spin_x_first_current_again{,_b2}_db27dfd.json; every one of
  the 512 threads of a CTA polling its own x vectors): batch 1 PDL current 1.4614 / 1.4543 ms, res_spin_off 1.4143,
  res_spin_x_first 1.4761; batch 2 1.8741 / 1.8744 against 1.8080. So polling cost ~2 us a GDN layer (x_first against
  off: the same order of loads), and the strip before x ~0.5 less than that. Not promoted in that form.
  res_spin_nogate (after db27dfd): that build (gen_fp8_gemv.generate(RES_SPIN, spin_gate=False)); the current build
  gates the polls: warp 0 alone polls 32 vectors of x (vote.any) while the other 15 warps wait at a barrier, then every
  thread loads and checks its own. res_spin_land: also waits for the strip's chunks to land before the gate. Prediction:
  the gate recovers most of the 2 us a layer if the cost was the pollers' issue slots and L2 traffic beside
  gdn_decode; current then 0-20 us under res_spin_off, res_spin_land up to 10 less again. Bitwise.
  Measured at 75785c5 (step_ab_current_res_spin_off_res_spin_nogate_res_spin_land_res_spin_x_first_current_again_
  75785c5.json, ..._b2_75785c5.json), batch 1 PDL early / late, ms: current (gated) 1.4214 / 1.4397 and 1.4201 / 1.4442,
  res_spin_off 1.4167 / 1.4343, res_spin_nogate 1.4584 / 1.4756, res_spin_land 1.4178 / 1.4356, res_spin_x_first
  1.4261 / 1.4429; batch 2 current 1.8319 / 1.8304, res_spin_off 1.8069, res_spin_land 1.8376. All bitwise. The gate
  took back ~38 of the 42 us, but no order beat the boundary off: landed first it is level at batch 1 and 30 us over
  at batch 2. Rejected: out_proj's chain after the recurrence is its 8 MB read, which earlier only takes DRAM time from
  the in_proj and the recurrence beside it; the poll saves the wait's release and costs about as much.
  Since then the boundary is a candidate (contracts.proj.RES_SPIN, not in CONTRACTS; the runner as at 703ac55), and
  the forms run it against the current form (the boundary off): res_spin (gated, the strip before the gate),
  res_spin_land, res_spin_nogate, res_spin_x_first (res_spin_runner; gdn_decode_b32_spin swapped for its
  spin_strong_out build). At edf355c (step_ab_current_res_spin_res_spin_land_current_again_edf355c.json), batch 1 PDL:
  current 1.4186 / 1.4364 and 1.4261 / 1.4393, res_spin 1.4287 / 1.4439, res_spin_land 1.4178 / 1.4363; bitwise.
  PYTHONPATH=src python3 experiments/decode/step_ab.py [FORM ...] [--batch=B] --out "$OUT"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
FORMS = ("current", "attn_gather", "router_prev", "gdn_prev", "fp8_prev", "all_prev", "shared_first", "pre_strips_prev",
         "moedown_s6", "expert_stats", "ks2_prev", "res_ks2", "pdl_s2", "carveout", "pre_all", "early",
         "early_again", "moe_prefetch", "moe_prefetch_lines", "pipe_prev", "l2_prefetch", "l2_prefetch_lines", "k4096_chunks_first",
         "red_swizzle", "land_split_prev", "router_bfly", "ba_unfused", "no_shared", "shared_merged", "router_smem", "gate_in_router",
         "router_fused", "router_unfused", "experts_group", "router_poll", "router_coop", "moedown_grp_off", "experts_group32_off", "dense32_off",
         "router_fused_rows8", "experts_group32_from9", "lm_head_off", "norm16", "ba16", "res16", "p2_early", "norm_prev", "attn_prev", "moedown_ids", "moedown_ids_raw", "qknorm_prev", "cluster", "cluster_c4", "cluster_c8", "cluster_prev", "cluster_push", "long_off", "long_splits_prev", "h_early", "h_early_prev", "top_early", "norm_w_early", "norm_w_early_carveout", "norm_w_pre", "norm_w_prev", "x_tpose", "moedown_stagger1", "moedown_stagger2", "moedown_stagger3", "moedown_stagger4", "moedown_stagger8",
         "res_stagger2", "normba_stagger2", "nreg104", "nreg104_nocarve", "carve_gdn", "nreg_prev", "res_pre", "gdn_early",
         "res_pre_gdn_early", "shared_grp", "shared_grp_off", "shared_grp32", "router_split4", "router_split2",
         "router_regs", "router_regs_off", "ba_first", "ba_first_off", "moedown_grp_from8", "moedown_grp_from9",
         *(f"moedown_grp_pdl_from{n}" for n in range(2, 8)), "act_trigger_prev", "norm_trigger_first", "res_pre_all", "embed_index", "sum_late", "sum_late_r16", "grp_ahead1", "grp_ahead1_he", "grp_ahead2_he", "grp_he", "ks2_t32", "res_p2_prev", "res32_he", "res32_he_prev", "grp_s4", "grp_s5", "ba_plain_off", "router_split16", "parked", "parked_inproj", "parked_wide", "pre2_inproj", "pre3_inproj", "state_pf_router", "state_pf_inproj", "state_pf_empty", "state_pf_lines", "moedown_rotate", "grp_transpose", "grp_transpose_rotate", "early_release", "early_release_all", "refill_last", "refill_last_grp", "nt_branch", "t32_swizzle", "nt_branch_swizzle", "gdn_spin", "inproj_strong", "gdn_spin_again", "gdn_spin_nowait", "gdn_spin_trace", "gdn_spin2", "gdn_spin2_trace", "gdn_spin_smem", "gdn_spin_smem_trace", "gdn_smem_carve", "spin_off", "spin_max3", "spin_backoff", "res_spin", "res_spin_x_first", "res_spin_nogate", "res_spin_land", "attn_trigger", "attn_trigger_opre", "attn_notrigger", "attn_trigger_long", "bar_fenced", "bar_lean_p2", "split_fenced", "long_lean", "cl_restrict", "router_split17", "current_again",
         "after_profile")
MAX_SHARED = 100  # CU_SHAREDMEM_CARVEOUT_MAX_SHARED (percent); -1: the driver's default
NREG = 104  # nreg104: GDN's in_proj and the residual out_proj / o_proj with .maxnreg (gen_fp8_gemv.generate(maxnreg))
NREG_KERNELS = ("fp8_gemv_n2048_k4096_res", "fp8_gemv_n12288_k2048_norm_ba")
CARVE_GDN = NREG_KERNELS + ("gdn_decode_b32_pdl", "gdn_decode_b32")  # nreg104, carve_gdn: the largest carveout on these
CARVE_FORMS = ("nreg104", "carve_gdn", "gdn_spin_smem", "gdn_spin_smem_trace", "gdn_smem_carve")


def stagger_ptx(ptx: str, per_cta: int) -> str:
    """The kernel with CTA c spinning per_cta * c cycles (%clock64) right after each griddepcontrol.wait."""
    from netra import paths

    spin = paths.load_module(HERE.parent / "proj" / "moedown_trace.py", "moedown_trace").spin
    out, n = [], 0
    for ln in ptx.splitlines():
        out.append(ln)
        if ln.split("//")[0].strip() == "griddepcontrol.wait;":
            out += spin(per_cta, f"STAGGER_SPIN{n}")
            n += 1
    assert n >= 1
    return "\n".join(out) + "\n"


STAGGER = {"moedown": "fp8_gemv_n2048_k4608_moedown", "res": "fp8_gemv_n2048_k4096_res",
           "normba": "fp8_gemv_n12288_k2048_norm_ba"}


def tag_gdn_inputs(runner) -> tuple:
    """gdn_spin's contract on a runner: every element of its in_proj outputs (qkvz, bb, aa) TAG (0xFFFF) before the
    first in_proj writes them; returns the three tensors."""
    from netra.decode import ops as dops

    ts = (runner.qkvz, runner.bb, runner.aa)
    dops.tag_(*ts)
    return ts


def spin_stamps(module) -> dict:
    """gdn_spin_trace: the traced module's gdn_stamps [launch][CTA][point] (ns), as us after each launch's first CTA
    start: per point, the median over launches of the median and of the latest CTA."""
    import statistics

    from cuda.bindings import driver as cu

    from netra import paths
    from netra.runtime import loader

    g = paths.generator("gdn", "gen_gdn_decode")
    dptr, size = loader.check(cu.cuModuleGetGlobal(module, b"gdn_stamps"), "gdn_stamps")
    t = torch.zeros(size // 8, dtype=torch.int64, device="cuda")
    loader.check(cu.cuMemcpyDtoD(t.data_ptr(), dptr, size), "gdn_stamps copy")
    torch.cuda.synchronize()
    st = t.view(g.TRACE_LAUNCHES, g.TRACE_CTAS, len(g.TRACE_POINTS)).cpu().double()
    st = st[(st > 0).all(-1).all(-1)]
    rel = (st - st[:, :, 0].min(dim=1).values[:, None, None]) / 1000.0
    starts = rel[:, :, 0].view(rel.shape[0], -1, 8)  # [launch][cluster of 8 CTAs: ctaid / 8][rank]
    med = lambda x: statistics.median(x.tolist())  # noqa: E731
    return {"launches": int(st.shape[0]), "ctas": int(st.shape[1]),
            "points": {p: {"median_cta_us": round(med(rel[:, :, k].median(dim=1).values), 3),
                           "latest_cta_us": round(med(rel[:, :, k].max(dim=1).values), 3)}
                       for k, p in enumerate(g.TRACE_POINTS)},
            "exit_after_z_us_median_cta": round(med((rel[:, :, -1] - rel[:, :, -2]).median(dim=1).values), 3),
            # each cluster's first CTA start, in order, and the spread of starts inside one cluster
            "cluster_first_start_us_sorted": [round(med(c), 3) for c in starts.min(dim=2).values.sort(dim=1).values.T],
            "cluster_start_spread_us_median": round(med((starts.max(dim=2).values - starts.min(dim=2).values)
                                                        .median(dim=1).values), 3)}


def rebind_all():
    """Every op binds its kernel again at its next call (after the loader was swapped: the swapped builds are taken;
    an op switched to its framework path stays there). Also timeline.py's."""
    from netra.ops import _dispatch

    for k in _dispatch.OPS.values():
        k._launch, k.launches_bound = None, False
        if k.go is not k._switched_off:
            k.go = k._bind_then_go


def time_step(packed, B: int, context: int, tokens, ref, row: dict, steps: int = 64, before=None, at=()):
    """One form's timing (this script's method; also l2_ahead.py and the router variants'): a runner captured plainly,
    then with PDL; its logits over ``tokens`` compared bitwise with ``ref`` (the first form's, returned), the median of
    ``steps`` replays into ``row``. ``before``: called before each runner is built."""
    import netra.ops as nops
    from netra.decode import main as dm
    from netra.decode import runner as rmod
    from netra.lifecycle import bench

    for pdl in (False, True):
        if before is not None:
            before()
        runner = rmod.DecodeRunner(packed, B, context, device="cuda")
        runner.capture(pdl=pdl)
        logits = [runner.step(t).clone() for t in tokens]
        ref = logits if ref is None else ref
        row["bitwise_equal_to_current" + (" (pdl)" if pdl else "")] = all(torch.equal(x, y) for x, y in zip(ref, logits))
        row["pdl_ms" if pdl else "plain_ms"] = dm._time_replays(runner, steps)
        # the same runner at the end of its context (positions context - steps .. context - 1: every page read)
        row["late_pdl_ms" if pdl else "late_plain_ms"] = dm._time_replays(runner, steps, start=context - steps - 3)
        for p in at:  # more windows: positions p + 3 .. p + steps + 2
            row[f"at_{p}_{'pdl' if pdl else 'plain'}_ms"] = dm._time_replays(runner, steps, start=p)
        del runner
        nops.set_pdl(False)
        bench.release()  # the next runner's timing waits for its scrub (netra.lifecycle.bench.settle, after d3acdef)
    return ref


def swapped_shape(form: str, sh):
    """The replaced Fp8Gemv that ``form`` runs in place of promoted ``sh`` (None: kept). The op's
    contract follows it (grid, threads, shared memory)."""
    import dataclasses

    if form == "ks2_prev" and sh.ksplit > 1:
        return dataclasses.replace(sh, ksplit=1)
    if form == "res_ks2" and sh.fuse == "res":
        return dataclasses.replace(sh, ksplit=2)
    if form == "pdl_s2" and sh.N * sh.K >= 8 << 20 and sh.fuse in ("", "norm", "res"):
        return dataclasses.replace(sh, stages=2, ksplit=2 if sh.K == 4096 else 1)
    if form == "ks2_t32" and sh.passes == 2:  # (the dense k-split builds were slower: ks2_t32_variant_dense_7bc544d.json)
        return dataclasses.replace(sh, ksplit=2, tokens=32, passes=1)
    if form == "res_p2_prev" and sh.fuse == "res" and sh.tokens == 32:
        return dataclasses.replace(sh, ksplit=1, tokens=16, passes=2)
    return None


def swap_shapes(form: str) -> tuple:
    """The promoted Fp8Gemv shapes that swapped_shape may replace for ``form``."""
    from netra.contracts.proj import DENSE32, FUSED, FUSED32, SHAPES

    return SHAPES + FUSED + (DENSE32 + FUSED32 if form in ("ks2_t32", "res_p2_prev") else ())


def previous_builds(form: str) -> dict[str, tuple[str, int]]:
    """kernel name -> (its previous PTX, dynamic smem) for the form's swapped kernels."""
    import dataclasses

    from netra import contracts, paths
    from netra.contracts.proj import EXPERTS, FUSED, MOE_DOWN, NORM_BA, SHAPES

    out = {}
    if form in ("router_prev", "all_prev"):
        g = paths.generator("proj", "gen_moe_router")
        out[g.NORM_NAME] = (g.generate(norm=True), 0)
    if form == "router_smem":  # the norm router with its rows bulk-copied into shared memory at the start
        g = paths.generator("proj", "gen_moe_router")
        out[g.NORM_NAME] = (g.generate(norm=True, pdl=True, smem_rows=True), g.SMEM_BYTES)
    if form == "router_regs":  # the norm router with its rows in registers before the wait (router_regs_variant.py)
        g = paths.generator("proj", "gen_moe_router")
        out[g.NORM_NAME] = (g.generate(norm=True, pdl=True, reg_rows=True, name=g.NORM_NAME), 0)
    if form in ("grp_ahead1", "grp_ahead1_he", "grp_ahead2_he", "grp_he"):  # the grouped moe_down's candidates
        from netra.contracts.proj import MOE_DOWN_GRP_CONTRACT as cg

        g = paths.generator("proj", "gen_moe_down_grp")
        ahead = 0 if form == "grp_he" else int(form[len("grp_ahead")])
        out[cg.name] = (g.down(l2_ahead=ahead, h_early=form.endswith("_he")), cg.dynamic_smem)
    if form in ("moedown_rotate", "grp_transpose_rotate"):  # the grouped moe_down with CTA s starting at task 16 s
        from netra.contracts.proj import MOE_DOWN_GRP_CONTRACT as cg

        g = paths.generator("proj", "gen_moe_down_grp")
        out[cg.name] = (g.down(rotate=True), cg.dynamic_smem)
    if form == "act_trigger_prev":  # moe_act triggering its dependents after its wait, as before 2bd29f9's successor
        g = paths.generator("proj", "gen_moe_down_grp")
        out[g.MOE_ACT_NAME] = (g.act(trigger_first=False), 0)
    if form == "router_bfly":  # the norm router choosing its top 8 by shfl.bfly argmax, as before 7f8a1fd; same contract
        g = paths.generator("proj", "gen_moe_router")
        out[g.NORM_NAME] = (g.generate(norm=True, pdl=True, select="bfly"), 0)
    if form in ("gdn_prev", "all_prev"):
        g = paths.generator("gdn", "gen_gdn_decode")
        out["gdn_decode_b32"] = (g.generate(stream_state=False), 0)
        out["gdn_decode_b32_pdl"] = (g.generate(pdl=True, name="gdn_decode_b32_pdl", stream_state=False), 0)
    if form in ("fp8_prev", "all_prev"):
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED + EXPERTS + (MOE_DOWN,):
            out[sh.name] = (g.generate(sh, coherent_x=False), contracts.get(sh.name).dynamic_smem)
    if form == "experts_group":  # the routed gate | up once per distinct expert, under the promoted name
        g = paths.generator("proj", "gen_fp8_gemv")
        grp = dataclasses.replace(EXPERTS[0], group=True)
        out[EXPERTS[0].name] = (g.generate(grp).replace(grp.name, EXPERTS[0].name), grp.smem)
    if form in ("moedown_ids", "moedown_ids_raw"):  # both moe_down builds reading the ids before the wait; same contracts
        from netra.contracts.proj import MOE_DOWNS

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in MOE_DOWNS:
            out[sh.name] = (g.generate(sh, ids_early=True, ids_checked=form == "moedown_ids"), sh.smem)
    if form in ("h_early", "h_early_prev"):  # the residual builds with / without h loaded at each strip's start
        from netra.contracts.proj import MOE_DOWNS

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in FUSED + MOE_DOWNS:
            if sh.name in ("fp8_gemv_n2048_k4096_res", "fp8_gemv_n2048_k4608_moedown", "fp8_gemv_n2048_k4608_moedown_s6"):
                out[sh.name] = (g.generate(sh, h_early=form == "h_early"), contracts.get(sh.name).dynamic_smem)
    if form in ("pre2_inproj", "pre3_inproj"):  # GDN's in_proj with 2 / 3 strips requested before the wait
        from netra.contracts.proj import NORM_BA

        g = paths.generator("proj", "gen_fp8_gemv")
        out[NORM_BA.name] = (g.generate(NORM_BA, pre_strips=2 if form == "pre2_inproj" else None),
                             contracts.get(NORM_BA.name).dynamic_smem)
    if form in ("parked", "parked_inproj", "parked_wide"):  # a diagnosis: the dense launches' weights as if parked
        from netra.contracts.proj import DENSE32, NORM_BA, PLAIN_BA, RES32

        g = paths.generator("proj", "gen_fp8_gemv")
        named = {s.name: s for s in SHAPES + FUSED}
        res16 = named["fp8_gemv_n2048_k4096_res"]
        for sh in {"parked_inproj": (NORM_BA,),
                   "parked": (NORM_BA, named["fp8_gemv_n9216_k2048_norm"], res16),  # batches 1..8
                   "parked_wide": PLAIN_BA + DENSE32 + (RES32, named["fp8_gemv_n9216_k2048"], res16)}[form]:  # 9..32
            out[sh.name] = (g.generate(sh, parked=True), contracts.get(sh.name).dynamic_smem)
    if form in ("grp_s4", "grp_s5"):  # the grouped gate | up builds with a deeper ring, under the promoted names
        from netra.contracts.proj import EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh, st in ((EXPERTS_SHARED_GROUP, int(form[-1])), (EXPERTS_SHARED_GROUP32, 4)):
            u = dataclasses.replace(sh, stages=st)
            out[sh.name] = (g.generate(u).replace(u.name, sh.name), u.smem)  # its .entry under the promoted name
    if form in ("early_release", "early_release_all"):  # each stage refilled once every warp has read it (one-chunk builds)
        from netra.contracts.proj import (DENSE32, EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, EXPERTS_SHARED_GROUP,
                                          EXPERTS_SHARED_GROUP32, FUSED, NORM_BA, PLAIN_BA, SHAPES)

        g = paths.generator("proj", "gen_fp8_gemv")
        shapes = (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32)
        if form == "early_release_all":  # and the other walks that take it: the router-fused and merged gate | up
            # launches of 1-4 tokens, the dense input projections (not the residual builds: they spill at 104 registers)
            shapes += (EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN, EXPERTS_SHARED, NORM_BA, *PLAIN_BA, *DENSE32, *FUSED, *SHAPES)
        for sh in shapes:
            if sh.NC == 1 and sh.ksplit == 1 and sh.passes == 1 and sh.fuse != "res":
                out[sh.name] = (g.generate(sh, early_release=True), contracts.get(sh.name).dynamic_smem)
    if form in ("refill_last", "refill_last_grp"):  # each strip's refill issued by the last warp, not thread 0
        from netra.contracts.proj import (DENSE32, EXPERTS_SHARED, EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32, FUSED,
                                          NORM_BA, PLAIN_BA, SHAPES)

        g = paths.generator("proj", "gen_fp8_gemv")
        shapes = (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32)
        if form == "refill_last":  # and every other one-pass build without a k split or a router phase
            shapes += (EXPERTS_SHARED, NORM_BA, *PLAIN_BA, *DENSE32, *FUSED, *SHAPES)
        for sh in shapes:
            if sh.ksplit == 1 and sh.passes == 1 and sh.fuse in ("", "norm", "res", "moe"):
                out[sh.name] = (g.generate(sh, refill_last=True), contracts.get(sh.name).dynamic_smem)
    if form in ("nt_branch", "t32_swizzle", "nt_branch_swizzle"):  # the 32-token grouped gate | up: a branch over the
        # n-tiles no token needs, not predicated mma; and / or the partials stored with rows swizzled by token
        from netra.contracts.proj import EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in (EXPERTS_GROUP32, EXPERTS_SHARED_GROUP32):
            out[sh.name] = (g.generate(sh, nt_branch=form != "t32_swizzle", red_swizzle=form != "nt_branch"),
                            contracts.get(sh.name).dynamic_smem)
    if form in ("grp_transpose", "grp_transpose_rotate"):  # the grouped gate | up builds' routed strips expert-fastest
        from netra.contracts.proj import EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in (EXPERTS_SHARED_GROUP, EXPERTS_SHARED_GROUP32):
            out[sh.name] = (g.generate(sh, grp_transpose=True), sh.smem)
    if form in ("res32_he", "res32_he_prev"):  # the k-split 32-token residual build with / without h loaded before its walk
        from netra.contracts.proj import RES32

        g = paths.generator("proj", "gen_fp8_gemv")
        out[RES32.name] = (g.generate(RES32, h_early=form == "res32_he"), contracts.get(RES32.name).dynamic_smem)
    if form == "top_early":  # moe_down's builds loading every chunk's expert weight with x; same contracts, same bits
        from netra.contracts.proj import MOE_DOWNS

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in MOE_DOWNS:
            out[sh.name] = (g.generate(sh, top_early=True), contracts.get(sh.name).dynamic_smem)
    if form in ("norm_w_early", "norm_w_early_carveout"):  # the router-fused launch with its norm weight copied in beside h (more shared memory)
        from netra.contracts.proj import EXPERTS_ROUTER

        g = paths.generator("proj", "gen_fp8_gemv")
        out[EXPERTS_ROUTER.name] = (g.generate(EXPERTS_ROUTER, norm_w_early=True), g.norm_w_early_smem(EXPERTS_ROUTER)[1])
    if form == "x_tpose":  # the batch-1 kernels with x staged by fragment lane; the same contracts, the same bits
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in paths.load_module(HERE.parent / "proj" / "x_tpose_variant.py", "x_tpose_variant").shapes():
            out[sh.name] = (g.generate(sh, x_tpose=True), contracts.get(sh.name).dynamic_smem)
    if "_stagger" in form:  # a committed batch-1 kernel (STAGGER), CTA c spinning N c cycles after the wait
        tag, n = form.split("_stagger")
        name = STAGGER[tag]
        out[name] = (stagger_ptx(paths.ptx_path("sm_90a", "proj", name).read_text(), int(n)),
                     contracts.get(name).dynamic_smem)
    if form in ("norm_w_pre", "norm_w_prev"):  # the router-fused launch with / without its norm weight requested
        from netra.contracts.proj import EXPERTS_ROUTER  # before the wait; the same contract

        g = paths.generator("proj", "gen_fp8_gemv")
        out[EXPERTS_ROUTER.name] = (g.generate(EXPERTS_ROUTER, norm_w_early="pre" if form == "norm_w_pre" else False),
                                    EXPERTS_ROUTER.smem)
    if form == "moedown_s6":
        g = paths.generator("proj", "gen_fp8_gemv")
        s6 = dataclasses.replace(MOE_DOWN, stages=6)
        out[MOE_DOWN.name] = (g.generate(s6).replace(s6.name, MOE_DOWN.name), s6.smem)  # its .entry under the promoted name
    if form in ("ks2_prev", "res_ks2", "pdl_s2", "ks2_t32", "res_p2_prev"):  # builds under their own names (main swaps the ops' contracts)
        g = paths.generator("proj", "gen_fp8_gemv")
        opts = {"pre_strips": None, "x_first_m16": False} if form == "pdl_s2" else {}
        for sh in swap_shapes(form):
            u = swapped_shape(form, sh)
            if u is not None:
                out[u.name] = (g.generate(u, **opts), u.smem)
    form = "early" if form == "early_again" else form  # the same swap, timed a second time
    if form in ("pre_all", "early"):  # the promoted shapes and contracts, another build option
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if form == "pre_all" and sh.N * sh.K >= 8 << 20:
                out[sh.name] = (g.generate(sh, pre_strips=None, x_first_m16=False), contracts.get(sh.name).dynamic_smem)
            if form == "early" and (sh.N * sh.K >= 8 << 20 or sh.fuse == "gate"):
                out[sh.name] = (g.generate(sh, early_trigger=True), contracts.get(sh.name).dynamic_smem)
    if form in ("l2_prefetch", "l2_prefetch_lines"):  # the promoted shapes and contracts; every later strip asked of L2 before the wait
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if g.prefetch_changes(sh):
                out[sh.name] = (g.generate(sh, l2_prefetch=True if form == "l2_prefetch" else "lines"),
                                contracts.get(sh.name).dynamic_smem)
    if form == "cluster_push":  # the cluster attention builds pushing their partials by st.async
        from netra.contracts.attn import ATTN_CLUSTER, SMEM

        g = paths.generator("attention", "gen_attn_decode")
        for c, k in ATTN_CLUSTER.items():
            out[k.name] = (g.generate(True, cluster=c, push=True), SMEM)
    if form == "norm_trigger_first":  # rmsnorm_h2048 triggering its dependents before its wait (norm_pdl.py)
        norm_pdl = paths.load_module(HERE.parent / "norm" / "norm_pdl.py", "norm_pdl")
        out["rmsnorm_h2048"] = (norm_pdl.trigger_first_build("rmsnorm_h2048"), 0)
    if form == "norm_prev":  # the two norm kernels without griddepcontrol (their ops' contracts lose pdl in main)
        norm_pdl = paths.load_module(HERE.parent / "norm" / "norm_pdl.py", "norm_pdl")
        for name in norm_pdl.LOADS:
            out[name] = (norm_pdl.plain_build(name), 0)
    if form == "p2_early":  # the two-pass residual build, the second pass's x loaded early; same contract
        from netra.contracts.proj import RES_P2

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in (RES_P2,):  # (the runner's above 16 rows when measured; RES32 since f851efc)
            out[sh.name] = (g.generate(sh, p2_early=True), contracts.get(sh.name).dynamic_smem)
    if form == "k4096_chunks_first":  # out_proj / o_proj (and the plain 2048 x 4096) with their strip before x at M <= 8
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if sh.K == 4096 and sh.ksplit == 1 and sh.fuse in ("", "res"):
                out[sh.name] = (g.generate(sh, pre_strips=1), contracts.get(sh.name).dynamic_smem)
    if form == "red_swizzle":  # the dense projections with their partials stored 2-way instead of 4-way conflicted
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if sh.fuse not in ("moe", "moedown"):
                out[sh.name] = (g.generate(sh, red_swizzle=True), contracts.get(sh.name).dynamic_smem)
    if form == "land_split_prev":  # each chunk of the 16-warp dense builds as one copy on one mbarrier (the first of its stage's)
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if sh.pieces > 1:
                out[sh.name] = (g.generate(sh, land_split=1), contracts.get(sh.name).dynamic_smem)
    if form in ("nreg104", "nreg104_nocarve", "nreg_prev"):  # the same contracts, the same bits; 104 registers a thread
        from netra.contracts.proj import NORM_BA  # (promoted after c4d8bee; nreg_prev: without the cap, as before)

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in FUSED + (NORM_BA,):
            if sh.name in NREG_KERNELS:
                out[sh.name] = (g.generate(sh, maxnreg=0 if form == "nreg_prev" else NREG),
                                contracts.get(sh.name).dynamic_smem)
        assert set(out) == set(NREG_KERNELS), sorted(out)
    if form in ("res_pre", "res_pre_gdn_early"):  # out_proj / o_proj's strip requested before the wait; same contract
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in FUSED:
            if sh.name == "fp8_gemv_n2048_k4096_res":
                out[sh.name] = (g.generate(sh, pre_strips=1), contracts.get(sh.name).dynamic_smem)
    if form == "res_pre_all":  # out_proj / o_proj's whole strip before the wait at every M, the two-pass build too
        from netra.contracts.proj import FUSED32

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in FUSED + FUSED32:
            if sh.name.startswith("fp8_gemv_n2048_k4096_res") and sh.ksplit == 1:  # (RES32, promoted later, not in this form)
                out[sh.name] = (g.generate(sh, pre_strips=1, x_first_m16=False), contracts.get(sh.name).dynamic_smem)
        assert set(out) == {"fp8_gemv_n2048_k4096_res", "fp8_gemv_n2048_k4096_res_p2"}, sorted(out)
    if form in ("sum_late", "sum_late_r16"):  # the plain dense builds' sums beside the next strip's mma, above 8 rows
        from netra.contracts.proj import DENSE32

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + DENSE32:
            if sh.fuse == "" and sh.ksplit == 1 and sh.passes == 1 and not sh.group:
                out[sh.name] = (g.generate(sh, sum_late="m16", sum_late_regs=16 if form == "sum_late_r16" else 1),
                                contracts.get(sh.name).dynamic_smem)
        assert {"fp8_gemv_n12288_k2048_t32", "fp8_gemv_n9216_k2048_t32", "fp8_gemv_n12288_k2048"} <= set(out), sorted(out)
    if form == "gdn_smem_carve":  # the smem build without spin in gdn_decode_b32_pdl's place (CARVE_FORMS)
        gg = paths.generator("gdn", "gen_gdn_decode")
        out["gdn_decode_b32_pdl"] = (gg.generate(pdl=True, name="gdn_decode_b32_pdl", smem_state=True), 0)
    if form.startswith("gdn_spin") or form == "inproj_strong":  # the in_proj's outputs stored strong; gdn_spin: gdn_decode polls them
        g = paths.generator("proj", "gen_fp8_gemv")
        out[NORM_BA.name] = (g.generate(NORM_BA, strong_out=True), contracts.get(NORM_BA.name).dynamic_smem)
        if form != "inproj_strong":
            gg = paths.generator("gdn", "gen_gdn_decode")
            out["gdn_decode_b32_pdl"] = (gg.generate(pdl=True, name="gdn_decode_b32_pdl", spin=True,
                                                     spin_exit_wait=form != "gdn_spin_nowait",
                                                     spin_trace=form.endswith("_trace"),
                                                     smem_state=form.startswith("gdn_spin_smem"),
                                                     spin_ba_late=form.startswith("gdn_spin2"),
                                                     spin_z_early=form.startswith("gdn_spin2")), 0)
    # the attention builds generated with options: (long builds?, gen_attn_decode.generate's options)
    attn_opts = {"attn_trigger": (False, {"trigger": True}),  # the cluster builds triggering at their start (promoted)
                 "attn_trigger_opre": (False, {"trigger": True}),
                 "attn_notrigger": (False, {}),  # the cluster builds as they were before that promotion
                 "cl_restrict": (False, {"trigger": True, "cl_restrict": True}),  # partials barrier, restricted fence
                 "attn_trigger_long": (True, {"trigger": True}),  # the long builds triggering at their start
                 "long_lean": (True, {"lean_split": True})}  # the long builds' hand-off without its two fences
    if form in attn_opts:
        from netra.contracts.attn import ATTN_CLUSTER, ATTN_LONG

        long, opts = attn_opts[form]
        ga = paths.generator("attention", "gen_attn_decode")
        for cl, c in (ATTN_LONG if long else ATTN_CLUSTER).items():
            out[c.name] = (ga.generate(True, cluster=cl, long=long, **opts), c.dynamic_smem)
    if form in ("bar_fenced", "bar_lean_p2"):  # the router builds' grid barrier as before / without its division
        from netra.contracts.proj import EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN

        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in (EXPERTS_ROUTER, EXPERTS_ROUTER_DOWN):
            out[sh.name] = (g.generate(sh, grid_bar=form[4:]), contracts.get(sh.name).dynamic_smem)
    if form == "split_fenced":  # the split router with its hand-off's two fences (the build before the lean promotion)
        gr = paths.generator("proj", "gen_moe_router")
        out[gr.SPLIT_NAME] = (gr.generate_split(lean=False), contracts.get(gr.SPLIT_NAME).dynamic_smem)
    if form.startswith("res_spin"):  # the producer of the out_proj spin candidate (res_spin_runner): o stored strong
        gg = paths.generator("gdn", "gen_gdn_decode")
        out["gdn_decode_b32_spin"] = (gg.generate(pdl=True, smem_state=True, spin=True, name="gdn_decode_b32_spin",
                                                  spin_strong_out=True), 0)
    if form == "spin_backoff":  # the promoted spin build with a growing sleep between polls
        gg = paths.generator("gdn", "gen_gdn_decode")
        out["gdn_decode_b32_spin"] = (gg.generate(pdl=True, smem_state=True, spin=True, name="gdn_decode_b32_spin",
                                                  spin_backoff=512), 0)
    if form in ("gdn_early", "res_pre_gdn_early"):  # gdn_decode's PDL build triggering its dependents at its start
        g = paths.generator("gdn", "gen_gdn_decode")
        out["gdn_decode_b32_pdl"] = (g.generate(pdl=True, name="gdn_decode_b32_pdl", early_trigger=True), 0)
    if form == "pre_strips_prev":
        g = paths.generator("proj", "gen_fp8_gemv")
        for sh in SHAPES + FUSED:
            if sh.N == 1024:
                out[sh.name] = (g.generate(sh, pre_strips=0), contracts.get(sh.name).dynamic_smem)
    return out


def moe_prefetcher(is_pdl, entry: str = "moe_prefetch"):
    """The moe_prefetch forms' launch: (idx, w13, w2) -> one launch of
    moe_prefetch.ptx on the current stream (by cuLaunchKernelEx with programmatic serialization while
    ``is_pdl()``), 32 pieces of 8 KB per CTA. Returns (hook, module): keep the module alive."""
    import ctypes

    from cuda.bindings import driver as cu

    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    module, fn = loader.load_text(entry, (HERE / f"{entry}.ptx").read_text())

    class Args(ctypes.Structure):
        _fields_ = [("ids", ctypes.c_uint64), ("w13", ctypes.c_uint64), ("w2", ctypes.c_uint64), ("pieces", ctypes.c_uint32)]

    args = Args()
    ptrs = loader.param_pointers(args)
    pdl_launch = rt_launch.pdl_launcher()

    def hook(idx, w13, w2):
        assert idx.dtype == torch.long and idx.is_contiguous(), (idx.dtype, idx.stride())
        assert w13.is_contiguous() and w13.numel() == 256 * (2 << 20) and w2.is_contiguous() and w2.numel() == 256 * (1 << 20), \
            ("packed expert stacks expected", w13.shape, w2.shape)
        args.ids, args.w13, args.w2, args.pieces = idx.data_ptr(), w13.data_ptr(), w2.data_ptr(), idx.numel() * 384
        grid, stream = -(-args.pieces // 32), torch.cuda.current_stream().cuda_stream
        if is_pdl():
            err = pdl_launch(fn, grid, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(ptrs), 0)
        else:
            err = int(cu.cuLaunchKernel(fn, grid, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(ptrs), 0)[0])
        assert err == 0, f"moe_prefetch launch: CUresult {err}"

    return hook, module


def state_prefetchers(dops, rmod, is_pdl, form: str):
    """The state_pf_* forms: wraps netra.decode.runner.DecodeRunner._mixer (to know the runner and the layer) and, for
    state_pf_router, netra.decode.ops.moe_decode, so one launch of gdn_state_prefetch.ptx asks L2 for a GDN layer's
    state pool before the MoE block of the layer before it (router) or before the layer's own mixer (inproj). Returns
    ({(owner, name): (real, replacement)}, module): the caller sets and restores them and keeps the module alive."""
    import ctypes

    from cuda.bindings import driver as cu

    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    entry = "gdn_state_prefetch_lines" if form == "state_pf_lines" else "gdn_state_prefetch"
    module, fn = loader.load_text(entry, (HERE / f"{entry}.ptx").read_text())

    class Args(ctypes.Structure):
        _fields_ = [("pool", ctypes.c_uint64), ("pieces", ctypes.c_uint32)]

    args = Args()
    ptrs = loader.param_pointers(args)
    pdl_launch, cur = rt_launch.pdl_launcher(), {}

    def prefetch(pool):
        assert pool.is_contiguous() and pool.dtype == torch.float32, (pool.dtype, pool.stride())
        args.pool, args.pieces = pool.data_ptr(), min(pool.numel() * 4 // 4096, 132 * 32)  # <= the pipe's first wave
        if form == "state_pf_empty":  # the control: the same launches (one CTA), nothing asked of L2
            args.pieces = 0
        grid, stream = max(1, -(-args.pieces // 32)), torch.cuda.current_stream().cuda_stream
        if is_pdl():
            err = pdl_launch(fn, grid, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(ptrs), 0)
        else:
            err = int(cu.cuLaunchKernel(fn, grid, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(ptrs), 0)[0])
        assert err == 0, f"gdn_state_prefetch launch: CUresult {err}"

    real_mixer, real_moe = rmod.DecodeRunner._mixer, dops.moe_decode

    def mixer(self, L, lw):
        cur["runner"], cur["L"] = self, L
        if form == "state_pf_inproj" and L in self.state_pool:
            prefetch(self.state_pool[L])
        return real_mixer(self, L, lw)

    def moe_decode(*a, **k):
        pools = cur["runner"].state_pool
        if cur["L"] + 1 in pools:
            prefetch(pools[cur["L"] + 1])
        return real_moe(*a, **k)

    swaps = {(rmod.DecodeRunner, "_mixer"): (real_mixer, mixer)}
    if form in ("state_pf_router", "state_pf_empty", "state_pf_lines"):
        swaps[(dops, "moe_decode")] = (real_moe, moe_decode)
    return swaps, module


def moe_prefetch_wrappers(dops, hook) -> dict:
    """Replacements for netra.decode.ops' moe_decode and fp8_linear_experts that launch ``hook(idx, w13,
    w2)`` right before the routed gate | up at batch <= 2, i.e. right after the router (moe_decode calls
    both by their module names). moe_decode's wrapper notes the layer's w2, which the experts op does
    not take. Returns {name: function} to set on dops (and to restore afterwards)."""
    real_moe, real_experts, layer = dops.moe_decode, dops.fp8_linear_experts, {}

    def moe_decode(x, router, w13, s13, w2, *rest, **kw):
        layer["w2"] = w2
        return real_moe(x, router, w13, s13, w2, *rest, **kw)

    def fp8_linear_experts(x, w13, s13, ids, out):
        if x.shape[0] <= 2:
            hook(ids, w13, layer["w2"])
        real_experts(x, w13, s13, ids, out)

    return {"moe_decode": moe_decode, "fp8_linear_experts": fp8_linear_experts}


def gate_in_router_moe(dops, dispatch):
    """The gate_in_router form's moe_decode (a candidate, CPU-built after 891fbf5): the router with the
    shared_expert_gate (moe_router_norm_gate_e256_k2048) and the routed + shared gate | up launch without its gate CTA
    (contracts.proj.EXPERTS_SHARED_NOGATE, 16 tokens per launch) at every batch, then moe_down. Both kernels are built
    here and launched by their contracts' guards, with programmatic serialization while netra.ops.set_pdl is on.
    Returns (moe_decode, modules to keep alive)."""
    from netra import paths
    from netra.contracts import proj as pc
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    gr, gf = paths.generator("proj", "gen_moe_router"), paths.generator("proj", "gen_fp8_gemv")
    cr, ce = pc.MOE_ROUTER_NORM_GATE, pc._contract(pc.EXPERTS_SHARED_NOGATE)
    mr, fr = loader.load_text(cr.name, gr.generate(norm=True, pdl=True, gate=True))
    me, fe = loader.load_text(ce.name, gf.generate(pc.EXPERTS_SHARED_NOGATE), dynamic_smem=ce.dynamic_smem)
    gos = {pdl: tuple(rt_launch.make_guard_and_launch(c, function_handle=int(f), device=0,
                                                      **({"launch": rt_launch.pdl_launcher()} if pdl else {}))
                      for c, f in ((cr, fr), (ce, fe)))
           for pdl in (False, True)}

    def moe_decode(x, router, w13, s13, w2, s2, shared_w13, shared_s13, shared_w2, shared_s2, shared_gate, top_k, out,
                   residual=None, norm_w=None, eps=1e-6):
        assert residual is not None and norm_w is not None, "the runner's form: x = rmsnorm(residual) by the router"
        B = x.shape[0]
        top = torch.empty(B, top_k, dtype=x.dtype, device=x.device)
        idx = torch.empty(B, top_k, dtype=torch.long, device=x.device)
        gu = torch.empty(B, top_k, s13.shape[1] * 128, dtype=x.dtype, device=x.device)
        sgu = torch.empty(B, shared_s13.shape[0] * 128, dtype=x.dtype, device=x.device)
        glogit = torch.empty(B, 1, dtype=x.dtype, device=x.device)
        go_r, go_e = gos[dispatch._PDL]
        reason = go_r(residual, router, top, idx, norm_w, x, eps, shared_gate, glogit)
        assert reason is None, reason
        for lo in range(0, B, 16):
            sl = slice(lo, lo + 16)
            reason = go_e(x[sl], w13, s13, gu[sl], idx[sl], shared_w13, shared_s13, sgu[sl])
            assert reason is None, reason
        dops.moe_down(gu.view(B, -1), w2, s2, idx, top, sgu, shared_w2, shared_s2, glogit, residual, out)

    return moe_decode, (mr, me)


ATTN_OUT = set()  # attn_trigger_opre: the data pointers of the runners' attention outputs (DecodeRunner.ao)


def opre_linear_add(dops, dispatch, real, keep: list):
    """attn_trigger_opre's fp8_linear_add: where x is a runner's attention output (o_proj; up to 16 rows), the residual
    build with its strip requested before griddepcontrol.wait (gen_fp8_gemv.generate(pre_strips=1), the res_pre form's
    build; the same arithmetic, bitwise), launched by the residual contract's guard, PDL while netra.ops.set_pdl is on;
    GDN's out_proj and more rows as before. The runners register ao at allocation (ATTN_OUT, by DecodeRunner._alloc
    wrapped here)."""
    from netra import contracts, paths
    from netra.contracts.proj import FUSED
    from netra.decode import runner as rmod
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    sh = next(s for s in FUSED if s.fuse == "res")
    c = contracts.get(sh.name)
    mod, f = loader.load_text(sh.name, paths.generator("proj", "gen_fp8_gemv").generate(sh, pre_strips=1),
                              dynamic_smem=c.dynamic_smem)
    keep.append(mod)
    gos = {pdl: rt_launch.make_guard_and_launch(c, function_handle=int(f), device=0,
                                                **({"launch": rt_launch.pdl_launcher()} if pdl else {}))
           for pdl in (False, True)}
    real_alloc = rmod.DecodeRunner._alloc

    def alloc(self):
        real_alloc(self)
        ATTN_OUT.add(self.ao.data_ptr())

    rmod.DecodeRunner._alloc = alloc  # (restored with the other _alloc swaps after the form)

    def fp8_linear_add(x, weight, scale, h, out):
        if x.data_ptr() in ATTN_OUT and x.shape[0] <= 16:
            reason = gos[dispatch._PDL](x, weight, scale, h, out)
            assert reason is None, reason
            return
        real(x, weight, scale, h, out)

    return fp8_linear_add


# the res_spin forms' builds of contracts.proj.RES_SPIN (gen_fp8_gemv.generate keywords)
RES_SPIN_FORMS = {"res_spin": {}, "res_spin_land": dict(spin_land=True), "res_spin_nogate": dict(spin_gate=False),
                  "res_spin_x_first": dict(pre_strips=0)}


def res_spin_runner(rmod, dops, dispatch, kw: dict, keep: list):
    """The res_spin forms' DecodeRunner._alloc and _mixer: the runner's spin path (up to dops.GDN_SPIN_MAX_B sequences
    under PDL) with the out_proj candidate contracts.proj.RES_SPIN (built with ``kw``, launched by its contract's guard,
    PDL while netra.ops.set_pdl is on) after gdn_decode_b32_spin (swapped for its spin_strong_out build by
    previous_builds). GDN layer g writes o into o_ring[g % R]; out_proj polls it and fills o_ring[(g + 1) % R] with TAG,
    the buffer the previous GDN layer's out_proj read (R = 2 for an even count of GDN layers, else one a layer)."""
    from netra import paths
    from netra.contracts.proj import RES_SPIN, _contract
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    c = _contract(RES_SPIN)
    mod, f = loader.load_text(c.name, paths.generator("proj", "gen_fp8_gemv").generate(RES_SPIN, **kw),
                              dynamic_smem=c.dynamic_smem)
    keep.append(mod)
    gos = {pdl: rt_launch.make_guard_and_launch(c, function_handle=int(f), device=0,
                                                **({"launch": rt_launch.pdl_launcher()} if pdl else {}))
           for pdl in (False, True)}
    real_alloc, real_mixer = rmod.DecodeRunner._alloc, rmod.DecodeRunner._mixer

    def alloc(self):
        real_alloc(self)
        cfg = self.cfg
        gdn = [L for L in range(cfg.num_hidden_layers) if not cfg.is_full(L)]
        self.gdn_index = {L: g for g, L in enumerate(gdn)}
        R = 2 if len(gdn) % 2 == 0 else len(gdn)
        self.o_ring = [torch.empty(self.B, cfg.value_dim, dtype=torch.bfloat16, device=self.device)
                       for _ in range(R)] if self.spin and R > 1 else []
        if self.o_ring:
            dops.tag_(*self.o_ring)

    def mixer(self, L: int, lw: dict):
        cfg, B, eps = self.cfg, self.B, self.cfg.rms_norm_eps
        if cfg.is_full(L) or not (self.o_ring and dops.BA_FUSED and dispatch._PDL and B <= dops.GDN_SPIN_MAX_B):
            return real_mixer(self, L, lw)
        g, R = self.gdn_index[L], len(self.o_ring)
        o = self.o_ring[g % R]
        dops.fp8_linear_norm_ba(self.h, lw["in_norm"], eps, *lw["qkvz"], self.qkvz_s, self.x, lw["b"], lw["a"],
                                self.bb_s, self.aa_s)
        dops.gdn_decode_spin(self.qkv_s, self.z_s, self.bb_s, self.aa_s, lw["conv"], lw["A_log"], lw["dt_bias"],
                             lw["gnorm"], self.conv_pool[L], self.state_pool[L], self.slots, cfg.linear_num_key_heads,
                             eps, o)
        reason = gos[dispatch._PDL](o, *lw["out"], self.h, self.mix, self.o_ring[(g + 1) % R])
        assert reason is None, reason

    return alloc, mixer


def router_fused_moe(dops, dispatch, real_moe, poll: bool = False):
    """The router_fused form's moe_decode (a candidate, CPU-built after 486cb0a): up to 8 tokens, the post-attention
    norm, the router and the routed + shared gate | up in one launch (contracts.proj.EXPERTS_ROUTER, built here and
    launched by its contract's guard, PDL while netra.ops.set_pdl is on; one barrier counter for every layer, zero
    before capture), then moe_down; above 8 tokens the current moe_decode. Returns (moe_decode, modules to keep)."""
    from netra import paths
    from netra.contracts import proj as pc
    from netra.runtime import launch as rt_launch
    from netra.runtime import loader

    sh = pc.EXPERTS_ROUTER_POLL if poll else pc.EXPERTS_ROUTER
    c = pc._contract(sh)
    mod, f = loader.load_text(c.name, paths.generator("proj", "gen_fp8_gemv").generate(sh), dynamic_smem=c.dynamic_smem)
    workspace = torch.zeros(8, pc.NUM_EXPERTS, dtype=torch.int64, device="cuda") if poll else None
    gos = {pdl: rt_launch.make_guard_and_launch(c, function_handle=int(f), device=0,
                                                **({"launch": rt_launch.pdl_launcher()} if pdl else {}))
           for pdl in (False, True)}
    bar = torch.zeros(1, dtype=torch.int64, device="cuda")

    def moe_decode(x, router, w13, s13, w2, s2, shared_w13, shared_s13, shared_w2, shared_s2, shared_gate, top_k, out,
                   residual=None, norm_w=None, eps=1e-6, bar_=None):  # (the runner's counter: this form keeps its own)
        B = x.shape[0]
        if B > 8 or residual is None or norm_w is None:
            return real_moe(x, router, w13, s13, w2, s2, shared_w13, shared_s13, shared_w2, shared_s2, shared_gate,
                            top_k, out, residual=residual, norm_w=norm_w, eps=eps, bar=bar_)
        top = torch.empty(B, top_k, dtype=x.dtype, device=x.device)
        idx = torch.empty(B, top_k, dtype=torch.long, device=x.device)
        logits = workspace if poll else torch.empty(B, router.shape[0], dtype=torch.float32, device=x.device)
        gu = torch.empty(B, top_k, s13.shape[1] * 128, dtype=x.dtype, device=x.device)
        sgu = torch.empty(B, shared_s13.shape[0] * 128, dtype=x.dtype, device=x.device)
        glogit = torch.empty(B, 1, dtype=x.dtype, device=x.device)
        reason = gos[dispatch._PDL](x, w13, s13, gu, idx, shared_w13, shared_s13, sgu, shared_gate, glogit, residual,
                                    norm_w, eps, router, top, logits, bar)
        assert reason is None, reason
        dops.moe_down(gu.view(B, -1), w2, s2, idx, top, sgu, shared_w2, shared_s2, glogit, residual, out)

    return moe_decode, (mod,)


def router_split_op(dops, dispatch, epc: int, real, keep: list):
    """router_split4 / router_split2: the MoE block's moe_router_norm launches
    gen_moe_router.generate_split(epc) (experiments/proj/router/router_split_variant.py: bitwise the promoted router,
    the experts split across CTAs, the last CTA of each token group selecting) with its own scratch and counters,
    under PDL capture with programmatic serialization as the promoted router's contract allows."""
    from netra import paths

    rsv = paths.load_module(HERE.parent / "proj" / "router" / "router_split_variant.py", "router_split_variant")
    module, go_plain, go_pdl = rsv.split_launchers(epc)
    keep.append(module)
    cnt = torch.zeros(rsv.GROUPS, dtype=torch.int64, device="cuda")  # every layer's launches on one counter set
    scratch = torch.empty(32, 256, dtype=torch.bfloat16, device="cuda")

    def moe_router_norm(h, norm_w, eps, router, x_out, top, idx):
        go = go_pdl if dispatch._PDL else go_plain
        if go(h, router, top, idx, norm_w, x_out, eps, scratch[:h.shape[0]], cnt) is not None:
            real(h, norm_w, eps, router, x_out, top, idx)

    return moe_router_norm


def expert_stats(dops, rmod, packed, B, context, tokens) -> dict:
    """Distinct experts among each layer's B x 8 pairs over the teacher-forced eager steps (the
    routed gate | up op's ids, read back with a sync: a diagnosis, never timed)."""
    real, seen = dops.fp8_linear_experts, []

    def spy(x, weight, scale, ids, out):
        real(x, weight, scale, ids, out)
        if ids.dim() == 2:  # gate | up: ids [M, k]
            seen.append(int(ids.unique().numel()))

    dops.fp8_linear_experts = spy
    try:
        runner = rmod.DecodeRunner(packed, B, context, device="cuda")
        per_step = []
        for t in tokens:
            seen.clear()
            runner.step(t)
            per_step.append(list(seen))
        del runner
    finally:
        dops.fp8_linear_experts = real
    flat = [n for step in per_step for n in step]
    return {"pairs_per_layer": B * 8, "distinct_experts_per_layer": per_step,
            "mean_distinct": sum(flat) / max(len(flat), 1), "min_distinct": min(flat, default=0)}


def main():
    import dataclasses

    from netra import contracts
    from netra.decode import main as dm
    from netra.decode import ops as dops
    from netra.decode import runner as rmod
    from netra.model import checkpoint as ck
    from netra.model.config import QWEN36_35B_A3B
    from netra.model.packed import pack
    from netra.ops import _dispatch
    from netra.runtime import loader

    out_dir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else str(HERE)
    B = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--batch=")), 1))
    context = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--context=")), 1024))
    steps = 64
    # positions as P:P:.. (scripts/h200.sh's exp: step turns commas into spaces)
    at = tuple(int(p) for a in sys.argv if a.startswith("--at=") for p in a.split("=", 1)[1].replace(",", ":").split(":"))
    cfg = QWEN36_35B_A3B
    packed = pack(ck.synthetic_checkpoint(cfg, seed=0, device="cuda"))
    tokens = torch.randint(0, cfg.vocab_size, (4, B), generator=torch.Generator().manual_seed(3)).to("cuda")
    real_load, real_attn = loader.load, dops.attention_decode_ctx
    real_moe, real_experts, real_gate = dops.moe_decode, dops.fp8_linear_experts, dops.fp8_linear_gate
    real_mixer = rmod.DecodeRunner._mixer
    real_alloc = rmod.DecodeRunner._alloc
    real_router_norm = dops.moe_router_norm
    real_pipe_b, real_pipe_plain_b = dops.GDN_PIPE_PDL_B, dops.GDN_PIPE_B
    real_ba_fused, real_shared_merged, real_router_fused = dops.BA_FUSED, dops.MOE_SHARED_MERGED, dops.MOE_ROUTER_FUSED
    real_ba_first = dops.BA_FIRST
    real_ba_plain = dops.BA_PLAIN
    real_shared_grp, real_shared_grp_rows = dops.MOE_SHARED_GROUP, dops.MOE_SHARED_GROUP_ROWS
    real_attn_kernel, real_attn_qknorm, real_attn_cluster = dops.ATTN_KERNEL, dops.ATTN_QKNORM, dops.ATTN_CLUSTER
    real_attn_long = dops.ATTN_LONG
    real_long_resident = dict(dops.ATTN_LONG_RESIDENT)
    real_grp_rows, real_grp32_rows, real_dense32_rows = dops.MOE_DOWN_GRP_ROWS, dops.EXPERTS_GROUP32_ROWS, dops.DENSE32_ROWS
    real_grp_pdl_rows = dops.MOE_DOWN_GRP_PDL_ROWS
    real_res32_rows = dops.RES32_ROWS
    real_rf_rows = dops.MOE_ROUTER_FUSED_ROWS
    real_regs_rows = dops.ROUTER_REGS_ROWS
    real_split_rows = dops.ROUTER_SPLIT_ROWS
    real_c8_max_b = dops.ATTN_C8_MAX_B
    real_spin_max_b = dops.GDN_SPIN_MAX_B
    real_linear_add = dops.fp8_linear_add
    router_op = _dispatch.OPS["moe_router_norm"]
    real_router_contract = router_op.contract
    down_op = _dispatch.OPS["moe_down"]
    real_down_contract = down_op.contract
    forms = [a for a in sys.argv[1:] if a in FORMS] or list(FORMS)

    carved_kernels = []

    from netra.runtime.loader import set_carveout as carveout

    def carved(k):
        if k not in carved_kernels:
            carveout(k.function, MAX_SHARED)
            carved_kernels.append(k)
        return k

    res = {"method": f"batch {B}, synthetic 40-layer checkpoint, context {context}; CUDA-graph replay of one step, "
                     f"CUDA events, median of {steps} (netra.decode.main._time_replays), plain and PDL capture; "
                     "logits of 4 teacher-forced plain steps compared bitwise with the current form's",
           "forms": {}}
    ref, keep, real_contracts = None, [], {}
    for form in forms:
        swaps, modules = {}, {}
        for name, (ptx, smem) in previous_builds(form).items():
            module, fn = loader.load_text(name, ptx, dynamic_smem=smem)
            keep.append(module)
            modules[name] = module
            swaps[name] = int(fn)
            if form in CARVE_FORMS and name in CARVE_GDN:
                carveout(fn, MAX_SHARED)
            elif name in contracts.REGISTRY and contracts.get(name).carveout >= 0:  # the replaced kernel's carveout
                carveout(fn, contracts.get(name).carveout)
        try:
            loader.load = lambda n, d, s=swaps: SimpleNamespace(handle=s[n]) if n in s else real_load(n, d)
            if form in CARVE_FORMS:  # the GDN layer's kernels at one carveout, so their CTAs can share an SM
                loader.load = lambda n, d, s=swaps: (SimpleNamespace(handle=s[n]) if n in s else
                                                     carved(real_load(n, d)) if n in CARVE_GDN else real_load(n, d))
            dops.MOE_SHARED_FIRST = form == "shared_first"
            dops.ATTN_KERNEL = real_attn_kernel and form != "attn_prev"
            dops.ATTN_QKNORM = real_attn_qknorm and form != "qknorm_prev"
            dops.ATTN_CLUSTER = (real_attn_cluster or form in ("cluster", "cluster_c4")) and form != "cluster_prev"
            dops.ATTN_C8_MAX_B = 0 if form == "cluster_c4" else 32 if form == "cluster_c8" else real_c8_max_b
            dops.ATTN_LONG = real_attn_long and form != "long_off"
            dops.ATTN_LONG_RESIDENT = ({c: 1 << 30 for c in real_long_resident} if form == "long_splits_prev"
                                       else dict(real_long_resident))
            dops.BA_FUSED = real_ba_fused and form != "ba_unfused"
            dops.GDN_SPIN_MAX_B = 0 if form == "spin_off" else 3 if form == "spin_max3" else real_spin_max_b
            dops.BA_FIRST = form == "ba_first" or (real_ba_first and form != "ba_first_off")
            dops.BA_PLAIN = real_ba_plain and form != "ba_plain_off"
            rmod.EMBED_INDEX = form == "embed_index"
            dops.GDN_PIPE_PDL_B = 1 << 30 if form == "pipe_prev" else real_pipe_b
            dops.GDN_PIPE_B = 1 << 30 if form == "pipe_prev" else real_pipe_plain_b
            if form in ("state_pf_router", "state_pf_inproj", "state_pf_empty", "state_pf_lines"):
                state_swaps, pf_module = state_prefetchers(dops, rmod, lambda: _dispatch._PDL, form)
                keep.append(pf_module)
                for (owner, attr), (_, fn) in state_swaps.items():
                    setattr(owner, attr, fn)
            if form in ("moe_prefetch", "moe_prefetch_lines"):
                hook, prefetch_module = moe_prefetcher(lambda: _dispatch._PDL, form)
                keep.append(prefetch_module)
                for name, fn in moe_prefetch_wrappers(dops, hook).items():
                    setattr(dops, name, fn)
            dops.MOE_SHARED_MERGED = real_shared_merged if form != "shared_merged" else not real_shared_merged
            # shared_grp: from 5 tokens the shared expert as the grouped gate | up's first distinct expert (one launch
            # fewer); shared_grp_off: the grouped gate | up, then the shared expert's own launch
            dops.MOE_SHARED_GROUP = form in ("shared_grp", "shared_grp32") or (real_shared_grp and form != "shared_grp_off")
            dops.MOE_SHARED_GROUP_ROWS = 32 if form == "shared_grp32" else real_shared_grp_rows  # (_t32 above 16)
            if form == "no_shared":  # a diagnosis: the shared expert's gate | up launch left out (wrong logits)
                dops.fp8_linear_gate = lambda *a, **k: None
            if form == "gate_in_router":
                cand_moe, mods = gate_in_router_moe(dops, _dispatch)
                keep.extend(mods)
                dops.moe_decode = cand_moe
            dops.MOE_ROUTER_FUSED = real_router_fused and form != "router_unfused"
            dops.MOE_DOWN_GRP_ROWS = 1 << 30 if form == "moedown_grp_off" else 8 if form == "moedown_grp_from8" else real_grp_rows
            dops.MOE_DOWN_GRP_PDL_ROWS = (1 << 30 if form == "moedown_grp_off" else 9 if form == "moedown_grp_from9"
                                          else 8 if form == "moedown_grp_from8"
                                          else int(form[len("moedown_grp_pdl_from"):]) if form.startswith("moedown_grp_pdl_from")
                                          else real_grp_pdl_rows)
            dops.EXPERTS_GROUP32_ROWS = (1 << 30 if form == "experts_group32_off" else 8 if form == "experts_group32_from9"
                                         else real_grp32_rows)
            dops.DENSE32_ROWS = 1 << 30 if form == "dense32_off" else real_dense32_rows
            dops.RES32_ROWS = 1 << 30 if form == "res16" else real_res32_rows
            dops.MOE_ROUTER_FUSED_ROWS = 8 if form == "router_fused_rows8" else real_rf_rows
            dops.ROUTER_REGS_ROWS = 0 if form == "router_regs_off" else real_regs_rows
            dops.ROUTER_SPLIT_ROWS = (13 if form == "router_split16" else 17 if form == "router_split17"
                                     else real_split_rows)
            if form == "lm_head_off":  # the LM head by cuBLAS and torch.argmax (its framework path)
                _dispatch.set_framework("lm_head_argmax", True)
            for op in (_dispatch.OPS["rmsnorm"], _dispatch.OPS["qk_rmsnorm"]):  # norm16: 16-row chunks, as before
                op.max_rows = 16 if form == "norm16" else max(op.contract.dims["M"])
            ba_op = _dispatch.OPS["bf16_linear2"]  # ba16: the same for GDN's b | a
            ba_op.max_rows = 16 if form == "ba16" else max(ba_op.contract.dims["M"])
            if form in ("router_fused", "router_poll"):
                cand_moe, mods = router_fused_moe(dops, _dispatch, real_moe, poll=form == "router_poll")
                keep.extend(mods)
                dops.moe_decode = cand_moe
            if form in ("router_split4", "router_split2"):  # moe_router_norm's launch swapped for the split candidate
                dops.moe_router_norm = router_split_op(dops, _dispatch, int(form[-1]), real_router_norm, keep)
            if form == "router_smem":  # the swapped build's shared memory at launch
                router_op.contract = dataclasses.replace(real_router_contract,
                                                         dynamic_smem=previous_builds(form)[real_router_contract.name][1])
            if form in ("router_prev", "all_prev"):
                router_op.contract = dataclasses.replace(real_router_contract, pdl="")
            if form in ("ks2_prev", "res_ks2", "pdl_s2", "ks2_t32", "res_p2_prev"):  # the swapped builds' contracts (grid, threads, smem)
                from netra.contracts.proj import _contract
                for sh in swap_shapes(form):
                    u = swapped_shape(form, sh)
                    if u is not None:
                        op = _dispatch.OPS[sh.name]
                        real_contracts[sh.name] = op.contract
                        op.contract = _contract(u)
            if form == "pdl_s2":
                for fn in swaps.values():
                    carveout(fn, MAX_SHARED)
            if form in ("carveout", "norm_w_early_carveout"):
                loader.load = lambda n, d: carved(real_load(n, d))
            if form == "norm_prev":  # the PDL engine launches the swapped plain norm builds plainly
                for opname, kname in (("rmsnorm", "rmsnorm_h2048"), ("qk_rmsnorm", "qk_rmsnorm_d256")):
                    nop = _dispatch.OPS[opname]
                    assert nop.contract.name == kname and nop.contract.pdl, (opname, nop.contract.name)
                    real_contracts[opname] = nop.contract
                    nop.contract = dataclasses.replace(nop.contract, pdl="")
            if form == "router_coop":  # the router-fused launch with the cooperative attribute (its contract's flag)
                from netra.contracts.proj import EXPERTS_ROUTER
                rop = _dispatch.OPS[EXPERTS_ROUTER.name]
                real_contracts[EXPERTS_ROUTER.name] = rop.contract
                rop.contract = dataclasses.replace(rop.contract, cooperative=not rop.contract.cooperative)
            if form == "experts_group":  # the swapped build's shared memory at launch
                from netra.contracts.proj import EXPERTS
                gop = _dispatch.OPS[EXPERTS[0].name]
                real_contracts[EXPERTS[0].name] = gop.contract
                gop.contract = dataclasses.replace(gop.contract, dynamic_smem=previous_builds(form)[EXPERTS[0].name][1])
            if form in ("norm_w_early", "norm_w_early_carveout"):  # the swapped build's shared memory at launch
                from netra.contracts.proj import EXPERTS_ROUTER
                nop = _dispatch.OPS[EXPERTS_ROUTER.name]
                real_contracts[EXPERTS_ROUTER.name] = nop.contract
                nop.contract = dataclasses.replace(nop.contract, dynamic_smem=previous_builds(form)[EXPERTS_ROUTER.name][1])
            if form in ("grp_s4", "grp_s5"):  # the swapped builds' shared memory at launch
                for name, (_, smem) in previous_builds(form).items():
                    gop = _dispatch.OPS[name]
                    real_contracts[name] = gop.contract
                    gop.contract = dataclasses.replace(gop.contract, dynamic_smem=smem)
            if form == "moedown_s6":  # the swapped build's shared memory at launch
                down_op.contract = dataclasses.replace(real_down_contract, dynamic_smem=previous_builds(form)[
                    real_down_contract.name][1])
            if form == "expert_stats":
                res["forms"][form] = expert_stats(dops, rmod, packed, B, context, tokens)
                print(form, res["forms"][form], flush=True)
                continue
            if form in ("attn_gather", "all_prev"):
                rmod.dops.attention_decode_ctx = lambda *a, pages_in_order=False: real_attn(*a, pages_in_order=False)
            row, tagged = {}, []
            if form == "attn_trigger_opre":  # o_proj (after attention) by the residual build requesting its strip first
                dops.fp8_linear_add = opre_linear_add(dops, _dispatch, real_linear_add, keep)
            if form.startswith("res_spin"):  # the out_proj spin candidate in the runner's spin path
                rmod.DecodeRunner._alloc, rmod.DecodeRunner._mixer = res_spin_runner(
                    rmod, dops, _dispatch, RES_SPIN_FORMS[form], keep)
            if form.startswith("gdn_spin"):  # the spin build's contract: its inputs hold TAG before the in_proj writes them

                def alloc_tagged(self, real=real_alloc, tagged=tagged):
                    real(self)
                    tagged.append(tag_gdn_inputs(self))

                rmod.DecodeRunner._alloc = alloc_tagged
            if form == "after_profile":  # torch.profiler over 4 eager steps first, as `netra decode` does
                profiled = rmod.DecodeRunner(packed, B, context, device="cuda")
                row["profiled_rows"] = len(dm.op_breakdown(profiled))
                del profiled
            ref = time_step(packed, B, context, tokens, ref, row, steps, before=rebind_all, at=at)
            if tagged:  # (plain runner, PDL runner): every element of qkvz, bb and aa TAG after the last step
                row["all_tag_after"] = [all(bool((t.view(torch.int16) == -1).all()) for t in ts) for ts in tagged]
            if form.endswith("_trace") and form.startswith("gdn_spin"):
                try:
                    row["stamps"] = spin_stamps(modules["gdn_decode_b32_pdl"])
                except Exception as exc:  # a diagnosis must not cost the forms after it
                    row["stamps"] = f"failed: {exc!r}"
        finally:
            if form in ("carveout", "norm_w_early_carveout") + CARVE_FORMS:
                for k in carved_kernels:
                    carveout(k.function, -1)
                carved_kernels.clear()
            loader.load, rmod.dops.attention_decode_ctx = real_load, real_attn
            router_op.contract = real_router_contract
            down_op.contract = real_down_contract
            for name, c in real_contracts.items():
                _dispatch.OPS[name].contract = c
            dops.MOE_SHARED_FIRST = False
            dops.ATTN_KERNEL = real_attn_kernel
            dops.ATTN_QKNORM = real_attn_qknorm
            dops.ATTN_CLUSTER = real_attn_cluster
            dops.ATTN_C8_MAX_B = real_c8_max_b
            dops.BA_FUSED = real_ba_fused
            dops.GDN_SPIN_MAX_B = real_spin_max_b
            dops.fp8_linear_add = real_linear_add
            dops.BA_FIRST = real_ba_first
            rmod.EMBED_INDEX = False
            dops.MOE_SHARED_MERGED = real_shared_merged
            dops.MOE_SHARED_GROUP, dops.MOE_SHARED_GROUP_ROWS = real_shared_grp, real_shared_grp_rows
            dops.MOE_ROUTER_FUSED = real_router_fused
            dops.MOE_DOWN_GRP_ROWS = real_grp_rows
            dops.MOE_DOWN_GRP_PDL_ROWS = real_grp_pdl_rows
            dops.EXPERTS_GROUP32_ROWS = real_grp32_rows
            dops.DENSE32_ROWS = real_dense32_rows
            dops.RES32_ROWS = real_res32_rows
            dops.MOE_ROUTER_FUSED_ROWS = real_rf_rows
            dops.ATTN_LONG = real_attn_long
            dops.ATTN_LONG_RESIDENT = dict(real_long_resident)
            dops.GDN_PIPE_PDL_B = real_pipe_b
            dops.GDN_PIPE_B = real_pipe_plain_b
            rmod.DecodeRunner._mixer = real_mixer
            rmod.DecodeRunner._alloc = real_alloc
            dops.moe_decode, dops.fp8_linear_experts = real_moe, real_experts
            dops.moe_router_norm = real_router_norm
            dops.fp8_linear_gate = real_gate
            _dispatch.set_framework("lm_head_argmax", False)
            for op in (_dispatch.OPS["rmsnorm"], _dispatch.OPS["qk_rmsnorm"], _dispatch.OPS["bf16_linear2"]):
                op.max_rows = max(op.contract.dims["M"])
            rebind_all()
        res["forms"][form] = row
        print(form, row, flush=True)
        name = (("step_ab" if forms == list(FORMS) else "step_ab_" + "_".join(forms)) + (f"_b{B}" if B != 1 else "")
                + (f"_ctx{context}" if context != 1024 else ""))
        json.dump(res, open(os.path.join(out_dir, name + ".json"), "w"), indent=1)
    del keep


if __name__ == "__main__":
    main()
