"""Matplotlib figures in, files out (Agg backend; never plt.show())."""
