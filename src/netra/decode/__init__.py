"""The decode path: the decode ops (netra:: custom ops, framework path in PyTorch until
their kernels land) and the static-buffer decode runner built on them."""
