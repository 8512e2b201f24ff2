"""Test doubles for the conformance runner: a tiny kernel suite and a misbehaving backend."""
