"""Probe corpora -> packed token batches."""
