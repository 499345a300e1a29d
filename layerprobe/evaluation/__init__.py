"""Scoring a model and its pruned variants: task-free metrics, lm-eval tasks, SQuAD."""
