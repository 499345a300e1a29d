"""This process's command line as the CLI parsed it, for the messages that name a command to run next (Ctrl-C)."""

from __future__ import annotations

COMMAND_LINE: dict = {}  # "words": the words after the program name; "resumes": whether that command has --resume
