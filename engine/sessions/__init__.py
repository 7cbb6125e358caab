"""Sessions: `manager` (SessionManager, the local ChatEngine: API, open sessions, per-session locks,
streaming), `session` (one session's record), `persistence` (saves, loads, repair, reconcile/gc),
`writer` (the serial writer thread), `manifest` (the manifest dataclass: read, validate, write),
`refs` (block references), `budget` (the memory budget), `locks` (cross-process locks).
The locking rules: docs/DESIGN.md, "Locking"."""
