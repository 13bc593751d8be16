"""`python -m memory_sdk`: the same command as `memory-sdk`."""

from memory_sdk.cli import main

raise SystemExit(main())
