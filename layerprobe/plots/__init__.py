"""Every figure: numbers in, matplotlib Figure objects out (no pyplot, so no global backend); runs/ saves them."""
