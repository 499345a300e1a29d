"""Run folders: atomic files, manifests."""
