"""`amber-engine`, the headless command line: `main` parses and runs one command, `launch` is the
console entry point. One module per command group (convert, generate, sessions, cache, serve) plus
`common`; the groups import `common`, never `main`, so the package has no import cycle."""
from engine.cli.main import launch, main

__all__ = ["launch", "main"]
