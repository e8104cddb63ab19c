"""The runtime: assemble PTX (build), load code objects into PyTorch's primary context and
check them (loader), and launch with prebuilt argument buffers on the caller's stream."""
