"""`layerprobe gradnorm`: per-layer gradient norms at init and in short training, per normalization placement."""
