"""One module or package per command: validate -> load -> measure -> write."""
