"""`layerprobe prune`: remove one layer or a block at a time and measure the drop."""
