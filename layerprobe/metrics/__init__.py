"""Pure tensor math: no loading, no IO."""
