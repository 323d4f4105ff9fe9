"""Unit tests: pure functions, fakes and real CPU tensors; no shell needed."""
