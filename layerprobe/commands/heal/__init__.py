"""`layerprobe heal`: repair after removal (run.py: the command; outputs.py: the folder; the repairs themselves live
in layerprobe/repair/)."""
