"""The kernel lifecycle: check (correctness, determinism, graph replay, sanitizer), bench
(CUDA-graph replay against peers and floors), records (results/sm_90a/<kernel>.json) and
the report."""
