"""Compute engines: one file per engine kind, each a pure cost model plus numpy semantics."""
