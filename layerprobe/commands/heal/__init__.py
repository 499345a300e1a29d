"""`layerprobe heal`: LoRA healing after removal (run.py: the command; loop.py: training; outputs.py: the folder)."""
