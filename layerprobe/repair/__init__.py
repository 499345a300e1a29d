"""Repairing a model after its blocks are removed, for `layerprobe heal` and `prune --curve --heal`: data.py (the
held-out and training text), loop.py (LoRA or tail training, held-out scores, resume state), replace.py (one linear
map per removed run, ReplaceMe), tail.py (the LM head and last blocks trainable)."""
