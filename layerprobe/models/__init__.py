"""Everything that knows about checkpoints and architectures."""
